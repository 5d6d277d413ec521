//! Host ELF files (shared libraries, executables): the facts a scanner needs, read through `object`
//! without copying: sections, the dynamic section's `DT_NEEDED`/`DT_SONAME`/`DT_RPATH`/`DT_RUNPATH`,
//! and the `.comment` strings that name the compilers.

use object::elf::{FileHeader32, FileHeader64, DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME, SHT_NOBITS};
use object::read::elf::{Dyn, FileHeader, SectionHeader};
use object::LittleEndian as LE;

use crate::error::{Error, Result};

/// One section header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section<'a> {
    pub name: &'a str,
    pub sh_type: u32,
    pub offset: u64,
    pub size: u64,
    pub addr: u64,
    /// The section's bytes (empty for `SHT_NOBITS`).
    pub data: &'a [u8],
}

/// What a host ELF says about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostElf<'a> {
    pub is_64: bool,
    pub machine: u16,
    /// ET_EXEC = 2, ET_DYN = 3, …
    pub e_type: u16,
    pub sections: Vec<Section<'a>>,
    pub needed: Vec<&'a str>,
    pub soname: Option<&'a str>,
    pub rpath: Vec<&'a str>,
    pub runpath: Vec<&'a str>,
    /// NUL-separated strings from `.comment` (e.g. `AMD clang version 18.0.0git (… roc-6.3.3 …)`).
    pub comments: Vec<&'a str>,
}

impl<'a> HostElf<'a> {
    /// Parse a little-endian ELF file (32- or 64-bit).
    pub fn parse(data: &'a [u8]) -> Result<HostElf<'a>> {
        match data.get(4) {
            Some(2) => parse_generic(FileHeader64::<LE>::parse(data).map_err(header_err)?, data, true),
            Some(1) => parse_generic(FileHeader32::<LE>::parse(data).map_err(header_err)?, data, false),
            _ => Err(Error::new(4, "ELF class", "1 (32-bit) or 2 (64-bit)")),
        }
    }

    pub fn section(&self, name: &str) -> Option<&Section<'a>> {
        self.sections.iter().find(|s| s.name == name)
    }
}

/// Most `DT_NEEDED` names plus RPATH/RUNPATH directories accepted from one file. Real libraries have tens;
/// without a cap, many dynamic entries (or many SHT_DYNAMIC headers) naming one long `a:a:…` string
/// multiply into billions of paths.
const MAX_DYNAMIC_STRINGS: usize = 1 << 16;

fn header_err(_: object::Error) -> Error {
    Error::new(0, "ELF header", "a little-endian ELF header")
}

fn parse_generic<'a, H: FileHeader<Endian = LE>>(header: &'a H, data: &'a [u8], is_64: bool) -> Result<HostElf<'a>> {
    let e = LE;
    let table = header
        .sections(e, data)
        .map_err(|_| Error::new(0, "ELF section header table", "a section header table inside the file"))?;
    let mut elf = HostElf { is_64, machine: header.e_machine(e).0, e_type: header.e_type(e).0, ..Default::default() };
    let mut seen_dynamic = false;
    for section in table.iter() {
        let name = table.section_name(e, section).ok().and_then(|n| std::str::from_utf8(n).ok()).unwrap_or("");
        let sh_type = section.sh_type(e).0;
        let offset: u64 = section.sh_offset(e).into();
        let size: u64 = section.sh_size(e).into();
        let bytes = if sh_type == SHT_NOBITS.0 {
            &[][..]
        } else {
            section
                .data(e, data)
                .map_err(|_| Error::new(offset, "ELF section bytes", "a section that lies inside the file"))?
        };
        elf.sections.push(Section { name, sh_type, offset, size, addr: section.sh_addr(e).into(), data: bytes });
        // One dynamic table, as the loader reads one (PT_DYNAMIC): more SHT_DYNAMIC headers naming the same
        // bytes would multiply the work.
        if seen_dynamic {
            continue;
        }
        if let Ok(Some((dynamic, link))) = section.dynamic(e, data) {
            seen_dynamic = true;
            let strings = table
                .strings(e, data, link)
                .map_err(|_| Error::new(offset, "ELF dynamic string table", "a string table linked from .dynamic"))?;
            for d in dynamic {
                let tag = d.d_tag(e);
                let val: u64 = d.d_val(e).into();
                let Some(s) = (|| std::str::from_utf8(strings.get(u32::try_from(val).ok()?).ok()?).ok())() else {
                    continue;
                };
                match tag {
                    t if t == DT_NEEDED => elf.needed.push(s),
                    t if t == DT_SONAME => elf.soname = Some(s),
                    t if t == DT_RPATH => elf.rpath.extend(s.split(':').filter(|p| !p.is_empty())),
                    t if t == DT_RUNPATH => elf.runpath.extend(s.split(':').filter(|p| !p.is_empty())),
                    _ => {}
                }
                if elf.needed.len() + elf.rpath.len() + elf.runpath.len() > MAX_DYNAMIC_STRINGS {
                    return Err(Error::new(
                        offset,
                        "ELF dynamic section",
                        "at most 65536 DT_NEEDED/RPATH/RUNPATH strings",
                    ));
                }
            }
        }
    }
    if let Some(comment) = elf.section(".comment") {
        let text = comment.data;
        elf.comments =
            text.split(|&b| b == 0).filter_map(|s| std::str::from_utf8(s).ok()).filter(|s| !s.is_empty()).collect();
        elf.comments.dedup();
    }
    Ok(elf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_test_binary() {
        // The running test executable is a real host ELF with a dynamic section.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let elf = HostElf::parse(&exe).unwrap();
        assert!(elf.is_64);
        assert!(elf.needed.iter().any(|n| n.starts_with("libc.so")), "{:?}", elf.needed);
        assert!(elf.section(".text").is_some());
        for n in [0, 4, 5, 16, 64, 100] {
            let _ = HostElf::parse(&exe[..n.min(exe.len())]);
        }
    }
}
