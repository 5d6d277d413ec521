//! NVIDIA cubins (ELF64, e_machine 190 = EM_CUDA): target SM, toolkit notes, kernels and their
//! resources from the `.nv.info` attribute sections (formats.md §5).
//!
//! The ELF structure is read with `object`'s low-level ELF API, which borrows from the input and reads
//! at any alignment, so a cubin can be parsed in place inside a fatbin payload. Offsets in [`Error`]s
//! are relative to the cubin slice given to [`Cubin::parse`].

use std::collections::HashMap;
use std::iter::FusedIterator;

use object::elf::{FileHeader64, SectionHeader64, SHT_SYMTAB, STT_FUNC};
use object::read::elf::{FileHeader as _, SectionHeader as _, SectionTable, Sym as _};
use object::LittleEndian;

use crate::error::{Error, Result};
use crate::read;
use crate::sniff::{ELF_MAGIC, EM_CUDA};
use crate::{Limits, EXPECT_KERNELS_CAP};

type Header = FileHeader64<LittleEndian>;
const LE: LittleEndian = LittleEndian;

/// `st_other` bit that marks a kernel entry point (STO_CUDA_ENTRY).
pub const STO_CUDA_ENTRY: u8 = 0x10;
/// `.note.nv.cuinfo` note type.
pub const NT_CUDA_CUINFO: u32 = 1000;
/// `.note.nv.tkinfo` note type.
pub const NT_CUDA_TKINFO: u32 = 2000;
/// First ELF ABI version with the "V2" e_flags layout (SM in bits 8–15).
pub const ABI_VERSION_V2: u8 = 8;

/// `.nv.info` record formats (EIFMT_*).
pub mod eifmt {
    /// No value.
    pub const NVAL: u8 = 1;
    /// Byte value in the 16-bit field.
    pub const BVAL: u8 = 2;
    /// Half-word value in the 16-bit field.
    pub const HVAL: u8 = 3;
    /// The 16-bit field is the length of a payload that follows.
    pub const SVAL: u8 = 4;
}

/// `.nv.info` attribute ids (EIATTR_*) that this decoder interprets.
pub mod eiattr {
    pub const CTAIDZ_USED: u8 = 0x04;
    pub const MAX_THREADS: u8 = 0x05;
    pub const PARAM_CBANK: u8 = 0x0a;
    pub const REQNTID: u8 = 0x10;
    pub const FRAME_SIZE: u8 = 0x11;
    pub const MIN_STACK_SIZE: u8 = 0x12;
    pub const KPARAM_INFO: u8 = 0x17;
    pub const CBANK_PARAM_SIZE: u8 = 0x19;
    pub const MAXREG_COUNT: u8 = 0x1b;
    pub const EXIT_INSTR_OFFSETS: u8 = 0x1c;
    pub const CRS_STACK_SIZE: u8 = 0x1e;
    pub const MAX_STACK_SIZE: u8 = 0x23;
    pub const REGCOUNT: u8 = 0x2f;
    pub const CUDA_API_VERSION: u8 = 0x37;
    pub const NUM_BARRIERS: u8 = 0x4c;
}

/// One `.nv.info` record: u8 format, u8 attribute, u16 value-or-size, then for SVAL a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InfoRecord<'a> {
    /// Offset of the record within the slice given to [`InfoRecords::new`].
    pub offset: u64,
    /// EIFMT_* (1 NVAL, 2 BVAL, 3 HVAL, 4 SVAL).
    pub format: u8,
    /// EIATTR_* id.
    pub attr: u8,
    /// The 16-bit field: the value for BVAL/HVAL, the payload length for SVAL.
    pub value: u16,
    /// SVAL payload (empty for other formats).
    pub payload: &'a [u8],
}

impl InfoRecord<'_> {
    /// The `i`-th little-endian u32 of the payload.
    pub fn payload_u32(&self, i: usize) -> Option<u32> {
        let start = i.checked_mul(4)?;
        let bytes: [u8; 4] = self.payload.get(start..start.checked_add(4)?)?.try_into().ok()?;
        Some(u32::from_le_bytes(bytes))
    }

    /// A global `.nv.info` SVAL {u32 symbol index, u32 value}.
    pub fn symbol_value(&self) -> Option<(u32, u32)> {
        if self.format != eifmt::SVAL {
            return None;
        }
        Some((self.payload_u32(0)?, self.payload_u32(1)?))
    }

    /// The scalar value: the 16-bit field for BVAL/HVAL, the first payload u32 for SVAL.
    pub fn scalar(&self) -> Option<u32> {
        match self.format {
            eifmt::BVAL | eifmt::HVAL => Some(u32::from(self.value)),
            eifmt::SVAL => self.payload_u32(0),
            _ => None,
        }
    }
}

/// Iterator over the records of a `.nv.info` / `.nv.info.<k>` section. Stops after the first error;
/// each record moves at least 4 bytes forward, so the walk ends.
#[derive(Clone, Debug)]
pub struct InfoRecords<'a> {
    data: &'a [u8],
    pos: u64,
    done: bool,
}

impl<'a> InfoRecords<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        InfoRecords { data, pos: 0, done: false }
    }

    fn parse_next(&mut self) -> Result<Option<InfoRecord<'a>>> {
        let p = self.pos;
        if p >= self.data.len() as u64 {
            return Ok(None);
        }
        let format = read::u8_at(self.data, p, "nv.info record format")?;
        let attr = read::u8_at(self.data, p + 1, "nv.info record attribute")?;
        let value = read::u16_at(self.data, p + 2, "nv.info record value")?;
        let payload = match format {
            eifmt::NVAL | eifmt::BVAL | eifmt::HVAL => &[][..],
            eifmt::SVAL => {
                read::slice_at(self.data, p + 4, u64::from(value), "nv.info record payload").map_err(|_| {
                    Error::new(p + 2, "nv.info record payload size", "a payload that ends inside the section")
                })?
            }
            _ => return Err(Error::new(p, "nv.info record format", "1 (NVAL), 2 (BVAL), 3 (HVAL) or 4 (SVAL)")),
        };
        self.pos = p + 4 + payload.len() as u64;
        Ok(Some(InfoRecord { offset: p, format, attr, value, payload }))
    }
}

impl<'a> Iterator for InfoRecords<'a> {
    type Item = Result<InfoRecord<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let step = self.parse_next();
        read::fused_step(&mut self.done, step)
    }
}

impl FusedIterator for InfoRecords<'_> {}

/// Target facts decoded from `e_flags`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Real SM, e.g. 86, 90, 120.
    pub sm: u32,
    /// Virtual (PTX) SM from bits 16–23, only in the old (ABI version < 8) layout.
    pub virtual_sm: Option<u32>,
    /// The old layout's "a" bit (0x800, e.g. sm_90a); `None` in the new layout, where the bit is not reliable.
    pub accelerated: Option<bool>,
}

/// Decode `e_flags` by ELF ABI version: version ≥ 8 puts the SM in bits 8–15; older ones in bits 0–7,
/// with the virtual SM in bits 16–23.
pub fn decode_e_flags(abi_version: u8, e_flags: u32) -> Target {
    if abi_version >= ABI_VERSION_V2 {
        Target { sm: (e_flags >> 8) & 0xff, virtual_sm: None, accelerated: None }
    } else {
        let virt = (e_flags >> 16) & 0xff;
        Target { sm: e_flags & 0xff, virtual_sm: (virt != 0).then_some(virt), accelerated: Some(e_flags & 0x800 != 0) }
    }
}

/// A parsed cubin: header facts and the section table; kernels are decoded on demand by [`Cubin::kernels`].
#[derive(Clone, Copy, Debug)]
pub struct Cubin<'a> {
    data: &'a [u8],
    sections: SectionTable<'a, Header>,
    shoff: u64,
    /// ELF e_type: 2 (EXEC) for linked cubins, 1 (REL) for relocatable ones.
    pub e_type: u16,
    /// EI_OSABI: 0x33 (ABI v7) or 0x41 (ABI v8) in real files.
    pub os_abi: u8,
    /// EI_ABIVERSION: 7 or 8.
    pub abi_version: u8,
    pub e_flags: u32,
    /// Real SM, from `e_flags`.
    pub sm: u32,
    /// Virtual SM (old layout only).
    pub virtual_sm: Option<u32>,
    /// The "a" (arch-specific) bit, old layout only.
    pub accelerated: Option<bool>,
    /// CUDA API version as major*10+minor (0x81 = 129 = 12.9): EIATTR_CUDA_API_VERSION of the first
    /// kernel, else the `.note.nv.cuinfo` (v2) note.
    pub cuda_api_version: Option<u32>,
    /// Toolkit string from `.note.nv.tkinfo`, e.g. "Cuda compilation tools, release 13.4, V13.4.46".
    pub toolkit: Option<&'a str>,
}

/// One kernel (STT_FUNC symbol with `st_other & 0x10`) and its resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CubinKernel<'a> {
    /// Mangled name.
    pub name: &'a str,
    /// Index of the kernel symbol in `.symtab`.
    pub symbol_index: u32,
    /// Size of `.text.<name>` in bytes (0 if the section is missing).
    pub code_size: u64,
    /// Registers per thread: EIATTR_REGCOUNT from the global `.nv.info`, else `.text.<name>` sh_info
    /// bits 24–31 (filled only for sm < 90).
    pub registers: Option<u32>,
    /// Static shared memory: sh_size of `.nv.shared.<name>` (0 when there is none).
    pub static_shared: u64,
    /// EIATTR_FRAME_SIZE: per-thread local frame in bytes (nonzero means spills or local arrays).
    pub frame_size: Option<u32>,
    /// EIATTR_MIN_STACK_SIZE.
    pub min_stack_size: Option<u32>,
    /// EIATTR_MAX_STACK_SIZE.
    pub max_stack_size: Option<u32>,
    /// EIATTR_MAX_THREADS (`__launch_bounds__`), else EIATTR_REQNTID.
    pub max_threads: Option<[u32; 3]>,
    /// EIATTR_CBANK_PARAM_SIZE: parameter bytes.
    pub param_size: Option<u32>,
    /// EIATTR_MAXREG_COUNT as stored (255 means no limit).
    pub max_reg_count: Option<u32>,
    /// Named barriers: EIATTR_NUM_BARRIERS (ABI v8), or `.text.<name>` sh_flags bits 20–26 (older ABI).
    /// `None` for ABI v8 kernels without the attribute.
    pub num_barriers: Option<u32>,
    /// EIATTR_CUDA_API_VERSION of this kernel.
    pub cuda_api_version: Option<u32>,
}

fn obj_err(at: u64, field: &'static str, expected: &'static str) -> impl FnOnce(object::read::Error) -> Error {
    move |_| Error::new(at, field, expected)
}

impl<'a> Cubin<'a> {
    /// Parse the ELF header and section table. Fails unless the input is a little-endian ELF64 with
    /// e_machine 190 and a readable section table.
    pub fn parse(data: &'a [u8]) -> Result<Cubin<'a>> {
        if !data.starts_with(ELF_MAGIC) {
            return Err(Error::new(0, "cubin ELF magic", "7f 45 4c 46"));
        }
        if read::u8_at(data, 4, "cubin ELF class")? != 2 {
            return Err(Error::new(4, "cubin ELF class", "2 (ELF64)"));
        }
        if read::u8_at(data, 5, "cubin ELF data encoding")? != 1 {
            return Err(Error::new(5, "cubin ELF data encoding", "1 (little-endian)"));
        }
        let header = Header::parse(data).map_err(obj_err(0, "cubin ELF header", "a complete ELF64 header"))?;
        let machine = header.e_machine(LE).0;
        if machine != EM_CUDA {
            return Err(Error::new(18, "cubin e_machine", "190 (EM_CUDA)"));
        }
        let shoff = header.e_shoff(LE);
        let sections = header.sections(LE, data).map_err(obj_err(
            shoff,
            "cubin section headers",
            "a section table inside the cubin",
        ))?;
        let ident = header.e_ident();
        let e_flags = header.e_flags(LE).0;
        let abi_version = ident.abi_version;
        let target = decode_e_flags(abi_version, e_flags);
        let mut cubin = Cubin {
            data,
            sections,
            shoff,
            e_type: header.e_type(LE).0,
            os_abi: ident.os_abi.0,
            abi_version,
            e_flags,
            sm: target.sm,
            virtual_sm: target.virtual_sm,
            accelerated: target.accelerated,
            cuda_api_version: None,
            toolkit: None,
        };
        cubin.read_notes();
        cubin.cuda_api_version = cubin.first_kernel_api_version().or_else(|| cubin.cuinfo_api_version());
        Ok(cubin)
    }

    /// The cubin bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Number of section headers.
    pub fn section_count(&self) -> usize {
        self.sections.len()
    }

    /// Name, sh_type and sh_size of every section, in table order (unreadable names are skipped).
    pub fn sections(&self) -> impl Iterator<Item = (&'a [u8], u32, u64)> + '_ {
        self.sections
            .iter()
            .filter_map(move |sh| Some((self.sections.section_name(LE, sh).ok()?, sh.sh_type(LE).0, sh.sh_size(LE))))
    }

    /// Contents of the first section with exactly this name (empty for NOBITS).
    pub fn section_data(&self, name: &[u8]) -> Option<Result<&'a [u8]>> {
        let (_, sh) = self.sections.section_by_name(LE, name)?;
        Some(section_bytes(sh, self.data))
    }

    fn notes_of(&self, name: &[u8], n_type: u32) -> Option<&'a [u8]> {
        let (_, sh) = self.sections.section_by_name(LE, name)?;
        let mut notes = sh.notes(LE, self.data).ok()??;
        while let Ok(Some(note)) = notes.next() {
            if note.n_type(LE).0 == n_type && note.name() == b"NVIDIA Corp" {
                return Some(note.desc());
            }
        }
        None
    }

    /// Toolkit string from `.note.nv.tkinfo`: u32 ×6 header (the fourth is the offset of the toolkit
    /// version string), then a NUL-separated string table. Malformed notes are ignored.
    fn read_notes(&mut self) {
        if let Some(desc) = self.notes_of(b".note.nv.tkinfo", NT_CUDA_TKINFO) {
            self.toolkit = (|| {
                let strings = desc.get(24..)?;
                let off = usize::try_from(read::u32_at(desc, 12, "tkinfo").ok()?).ok()?;
                let s = strings.get(off..)?;
                let s = s.get(..s.iter().position(|&b| b == 0)?)?;
                std::str::from_utf8(s).ok().filter(|s| !s.is_empty())
            })();
        }
    }

    /// `.note.nv.cuinfo` version 2: u16 2, u16 SM, u32 CUDA API version.
    fn cuinfo_api_version(&self) -> Option<u32> {
        let desc = self.notes_of(b".note.nv.cuinfo", NT_CUDA_CUINFO)?;
        if read::u16_at(desc, 0, "cuinfo").ok()? != 2 {
            return None;
        }
        read::u32_at(desc, 4, "cuinfo").ok()
    }

    fn first_kernel_api_version(&self) -> Option<u32> {
        for sh in self.sections.iter() {
            let Ok(name) = self.sections.section_name(LE, sh) else { continue };
            if !name.starts_with(b".nv.info.") {
                continue;
            }
            let bytes = section_bytes(sh, self.data).ok()?;
            for rec in InfoRecords::new(bytes) {
                let rec = rec.ok()?;
                if rec.attr == eiattr::CUDA_API_VERSION {
                    return rec.scalar();
                }
            }
        }
        None
    }

    /// Every kernel with its resources, in symbol-table order. The length is bounded by the number of
    /// symbols in the data, and by [`Limits::DEFAULT`]'s `max_kernels`; see [`Cubin::kernels_with_limit`].
    pub fn kernels(&self) -> Result<Vec<CubinKernel<'a>>> {
        self.kernels_with_limit(Limits::DEFAULT.max_kernels)
    }

    /// [`Cubin::kernels`], failing with [`EXPECT_KERNELS_CAP`] at the first kernel symbol past
    /// `max_kernels` (a decompressed cubin of 1 GiB could hold 44 million symbols).
    pub fn kernels_with_limit(&self, max_kernels: u64) -> Result<Vec<CubinKernel<'a>>> {
        let data = self.data;
        let symtab_at =
            self.sections.iter().find(|sh| sh.sh_type(LE) == SHT_SYMTAB).map_or(self.shoff, |sh| sh.sh_offset(LE));
        let symbols = self.sections.symbols(LE, data, SHT_SYMTAB).map_err(obj_err(
            symtab_at,
            "cubin symbol table",
            "a symbol table and string table inside the cubin",
        ))?;
        let mut kernels: Vec<CubinKernel<'a>> = Vec::new();
        let mut by_name: HashMap<&'a [u8], usize> = HashMap::new();
        let mut by_symbol: HashMap<u32, usize> = HashMap::new();
        for (index, sym) in symbols.enumerate() {
            if sym.st_type() != STT_FUNC || sym.st_other().0 & STO_CUDA_ENTRY == 0 {
                continue;
            }
            // Offset of this symbol's st_name field, for errors.
            let sym_at = symtab_at.saturating_add((index.0 as u64).saturating_mul(24));
            if kernels.len() as u64 >= max_kernels {
                return Err(Error::new(sym_at, "cubin kernel symbols", EXPECT_KERNELS_CAP));
            }
            let name_bytes = symbols.symbol_name(LE, sym).map_err(obj_err(
                sym_at,
                "cubin kernel symbol name",
                "a name inside the string table",
            ))?;
            let name = std::str::from_utf8(name_bytes)
                .map_err(|_| Error::new(sym_at, "cubin kernel symbol name", "a UTF-8 (mangled ASCII) name"))?;
            let symbol_index = u32::try_from(index.0)
                .map_err(|_| Error::new(sym_at, "cubin symbol index", "an index that fits in 32 bits"))?;
            let k = kernels.len();
            by_name.entry(name_bytes).or_insert(k);
            by_symbol.insert(symbol_index, k);
            kernels.push(CubinKernel {
                name,
                symbol_index,
                code_size: 0,
                registers: None,
                static_shared: 0,
                frame_size: None,
                min_stack_size: None,
                max_stack_size: None,
                max_threads: None,
                param_size: None,
                max_reg_count: None,
                num_barriers: None,
                cuda_api_version: None,
            });
        }
        if kernels.is_empty() {
            return Ok(kernels);
        }

        // Facts that combine several sections are gathered first and merged after the walk, so the
        // result does not depend on section order.
        let n = kernels.len();
        let mut global_regs: Vec<Option<u32>> = vec![None; n];
        let mut text_regs: Vec<Option<u32>> = vec![None; n];
        let mut text_barriers: Vec<Option<u32>> = vec![None; n];
        let mut reqntid: Vec<Option<[u32; 3]>> = vec![None; n];
        for (i, sh) in self.sections.iter().enumerate() {
            let header_at = self.shoff.saturating_add((i as u64).saturating_mul(64));
            let name = self.sections.section_name(LE, sh).map_err(obj_err(
                header_at,
                "cubin section name",
                "a name inside the section string table",
            ))?;
            let sh_offset = sh.sh_offset(LE);
            if name == b".nv.info" {
                let bytes = section_bytes(sh, data)?;
                for rec in InfoRecords::new(bytes) {
                    let rec = rec.map_err(|e| e.at_base(sh_offset))?;
                    let Some((sym, value)) = rec.symbol_value() else { continue };
                    let Some(&k) = by_symbol.get(&sym) else { continue };
                    let Some(kernel) = kernels.get_mut(k) else { continue };
                    match rec.attr {
                        eiattr::REGCOUNT => set(&mut global_regs, k, Some(value)),
                        eiattr::FRAME_SIZE => kernel.frame_size = Some(value),
                        eiattr::MIN_STACK_SIZE => kernel.min_stack_size = Some(value),
                        eiattr::MAX_STACK_SIZE => kernel.max_stack_size = Some(value),
                        _ => {}
                    }
                }
            } else if let Some(k) = suffix_kernel(name, b".nv.info.", &by_name) {
                let bytes = section_bytes(sh, data)?;
                let Some(kernel) = kernels.get_mut(k) else { continue };
                for rec in InfoRecords::new(bytes) {
                    let rec = rec.map_err(|e| e.at_base(sh_offset))?;
                    match rec.attr {
                        eiattr::MAX_THREADS => kernel.max_threads = three_u32(&rec).or(kernel.max_threads),
                        eiattr::REQNTID => set(&mut reqntid, k, three_u32(&rec)),
                        eiattr::CBANK_PARAM_SIZE => kernel.param_size = rec.scalar(),
                        eiattr::MAXREG_COUNT => kernel.max_reg_count = rec.scalar(),
                        eiattr::NUM_BARRIERS => kernel.num_barriers = rec.scalar(),
                        eiattr::CUDA_API_VERSION => kernel.cuda_api_version = rec.scalar(),
                        _ => {}
                    }
                }
            } else if let Some(k) = suffix_kernel(name, b".nv.shared.", &by_name) {
                if let Some(kernel) = kernels.get_mut(k) {
                    kernel.static_shared = sh.sh_size(LE);
                }
            } else if let Some(k) = suffix_kernel(name, b".text.", &by_name) {
                if let Some(kernel) = kernels.get_mut(k) {
                    kernel.code_size = sh.sh_size(LE);
                }
                let regs = sh.sh_info(LE) >> 24;
                set(&mut text_regs, k, (regs != 0).then_some(regs));
                set(&mut text_barriers, k, Some(((sh.sh_flags(LE).0 >> 20) & 0x7f) as u32));
            }
        }
        let old_abi = self.abi_version < ABI_VERSION_V2;
        let sm_has_text_regs = self.sm < 90;
        for (k, kernel) in kernels.iter_mut().enumerate() {
            let text_reg = if sm_has_text_regs { text_regs.get(k).copied().flatten() } else { None };
            kernel.registers = global_regs.get(k).copied().flatten().or(text_reg);
            if kernel.max_threads.is_none() {
                kernel.max_threads = reqntid.get(k).copied().flatten();
            }
            if old_abi && kernel.num_barriers.is_none() {
                kernel.num_barriers = text_barriers.get(k).copied().flatten();
            }
        }
        Ok(kernels)
    }
}

/// The kernel whose name is `name` minus `prefix` (exact match after the prefix).
fn suffix_kernel(name: &[u8], prefix: &[u8], by_name: &HashMap<&[u8], usize>) -> Option<usize> {
    let rest = name.strip_prefix(prefix)?;
    by_name.get(rest).copied()
}

fn set<T>(slots: &mut [Option<T>], k: usize, value: Option<T>) {
    if let Some(slot) = slots.get_mut(k) {
        *slot = value;
    }
}

fn three_u32(rec: &InfoRecord<'_>) -> Option<[u32; 3]> {
    Some([rec.payload_u32(0)?, rec.payload_u32(1)?, rec.payload_u32(2)?])
}

fn section_bytes<'a>(sh: &SectionHeader64<LittleEndian>, data: &'a [u8]) -> Result<&'a [u8]> {
    sh.data(LE, data)
        .map_err(|_| Error::new(sh.sh_offset(LE), "cubin section offset/size", "a section inside the cubin"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHT_PROGBITS: u32 = 1;
    const SHT_STRTAB: u32 = 3;
    const SHT_NOTE: u32 = 7;
    const SHT_NOBITS: u32 = 8;
    const SHT_CUDA_INFO: u32 = 0x7000_0000;

    struct Sec {
        name: &'static str,
        ty: u32,
        flags: u64,
        data: Vec<u8>,
        /// sh_size for NOBITS sections.
        size: u64,
        link: u32,
        info: u32,
        align: u64,
        entsize: u64,
    }

    fn sec(name: &'static str, ty: u32, data: Vec<u8>) -> Sec {
        let size = data.len() as u64;
        Sec { name, ty, flags: 0, data, size, link: 0, info: 0, align: 4, entsize: 0 }
    }

    /// A little-endian ELF64 with the given sections (index 0 is the null section, the section name
    /// table is added last).
    fn build_elf(machine: u16, abi_version: u8, e_flags: u32, mut secs: Vec<Sec>) -> Vec<u8> {
        let mut shstrtab = vec![0u8];
        let mut names = Vec::new();
        secs.push(sec(".shstrtab", SHT_STRTAB, Vec::new()));
        for s in &secs {
            names.push(shstrtab.len() as u32);
            shstrtab.extend_from_slice(s.name.as_bytes());
            shstrtab.push(0);
        }
        let last = secs.len() - 1;
        secs[last].size = shstrtab.len() as u64;
        secs[last].data = shstrtab;
        let mut out = vec![0u8; 64];
        let mut offsets = Vec::new();
        for s in &secs {
            while !out.len().is_multiple_of(8) {
                out.push(0);
            }
            offsets.push(out.len() as u64);
            if s.ty != SHT_NOBITS {
                out.extend_from_slice(&s.data);
            }
        }
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        let shoff = out.len() as u64;
        out.extend_from_slice(&[0u8; 64]); // null section
        for (i, s) in secs.iter().enumerate() {
            let mut h = Vec::new();
            h.extend_from_slice(&names[i].to_le_bytes());
            h.extend_from_slice(&s.ty.to_le_bytes());
            h.extend_from_slice(&s.flags.to_le_bytes());
            h.extend_from_slice(&0u64.to_le_bytes());
            h.extend_from_slice(&offsets[i].to_le_bytes());
            h.extend_from_slice(&s.size.to_le_bytes());
            h.extend_from_slice(&s.link.to_le_bytes());
            h.extend_from_slice(&s.info.to_le_bytes());
            h.extend_from_slice(&s.align.to_le_bytes());
            h.extend_from_slice(&s.entsize.to_le_bytes());
            out.extend_from_slice(&h);
        }
        let shnum = secs.len() as u16 + 1;
        out[0..4].copy_from_slice(ELF_MAGIC);
        out[4] = 2;
        out[5] = 1;
        out[6] = 1;
        out[7] = if abi_version >= 8 { 0x41 } else { 0x33 };
        out[8] = abi_version;
        out[16..18].copy_from_slice(&2u16.to_le_bytes());
        out[18..20].copy_from_slice(&machine.to_le_bytes());
        out[20..24].copy_from_slice(&1u32.to_le_bytes());
        out[40..48].copy_from_slice(&shoff.to_le_bytes());
        out[48..52].copy_from_slice(&e_flags.to_le_bytes());
        out[52..54].copy_from_slice(&64u16.to_le_bytes());
        out[58..60].copy_from_slice(&64u16.to_le_bytes());
        out[60..62].copy_from_slice(&shnum.to_le_bytes());
        out[62..64].copy_from_slice(&(shnum - 1).to_le_bytes());
        out
    }

    fn sval(attr: u8, words: &[u32]) -> Vec<u8> {
        let mut r = vec![eifmt::SVAL, attr];
        r.extend_from_slice(&((words.len() * 4) as u16).to_le_bytes());
        for w in words {
            r.extend_from_slice(&w.to_le_bytes());
        }
        r
    }

    fn hval(format: u8, attr: u8, value: u16) -> Vec<u8> {
        let mut r = vec![format, attr];
        r.extend_from_slice(&value.to_le_bytes());
        r
    }

    fn sym(name: u32, info: u8, other: u8, shndx: u16) -> Vec<u8> {
        let mut s = Vec::new();
        s.extend_from_slice(&name.to_le_bytes());
        s.push(info);
        s.push(other);
        s.extend_from_slice(&shndx.to_le_bytes());
        s.extend_from_slice(&[0u8; 16]);
        s
    }

    /// Sections: 1 .strtab, 2 .symtab, 3 .nv.info, 4 .nv.info.k, 5 .text.k, 6 .nv.shared.k,
    /// 7 .nv.shared.reserved.0, 8 .nv.merc.nv.info.k, 9 .text.k2, 10 .nv.info.k2, 11 .text.d, 12 .shstrtab.
    /// Symbols: 1 k (kernel), 2 d (device function, st_other 0), 3 k2 (kernel).
    fn sample(abi_version: u8, e_flags: u32, global_regs_for_k2: bool) -> Vec<u8> {
        let strtab = b"\0k\0d\0k2\0".to_vec();
        let mut symtab = sym(0, 0, 0, 0);
        symtab.extend(sym(1, 0x12, STO_CUDA_ENTRY, 5));
        symtab.extend(sym(3, 0x22, 0, 11));
        symtab.extend(sym(5, 0x12, STO_CUDA_ENTRY, 9));
        let mut global = sval(eiattr::REGCOUNT, &[1, 40]);
        global.extend(sval(eiattr::FRAME_SIZE, &[1, 16]));
        global.extend(sval(eiattr::MAX_STACK_SIZE, &[1, 32]));
        global.extend(sval(eiattr::MIN_STACK_SIZE, &[1, 8]));
        global.extend(hval(eifmt::NVAL, 0x99, 0));
        global.extend(sval(eiattr::REGCOUNT, &[2, 99])); // the device function: not a kernel
        global.extend(sval(0x7e, &[1, 2, 3])); // unknown SVAL, skipped by its size
        if global_regs_for_k2 {
            global.extend(sval(eiattr::REGCOUNT, &[3, 12]));
        }
        let mut info_k = sval(eiattr::CUDA_API_VERSION, &[0x81]);
        info_k.extend(sval(eiattr::MAX_THREADS, &[128, 1, 1]));
        info_k.extend(hval(eifmt::HVAL, eiattr::CBANK_PARAM_SIZE, 24));
        info_k.extend(hval(eifmt::HVAL, eiattr::MAXREG_COUNT, 255));
        info_k.extend(hval(eifmt::BVAL, eiattr::NUM_BARRIERS, 1));
        info_k.extend(hval(eifmt::HVAL, 0x44, 7));
        let info_k2 = sval(eiattr::REQNTID, &[64, 2, 1]);
        let mut secs = vec![
            sec(".strtab", SHT_STRTAB, strtab),
            Sec { link: 1, info: 1, entsize: 24, align: 8, ..sec(".symtab", SHT_SYMTAB.0, symtab) },
            Sec { link: 2, ..sec(".nv.info", SHT_CUDA_INFO, global) },
            Sec { link: 2, info: 5, ..sec(".nv.info.k", SHT_CUDA_INFO, info_k) },
            Sec { flags: 0x6 | (3 << 20), info: (20 << 24) | 1, ..sec(".text.k", SHT_PROGBITS, vec![0; 256]) },
            Sec { size: 1024, ..sec(".nv.shared.k", SHT_NOBITS, Vec::new()) },
            Sec { size: 64, ..sec(".nv.shared.reserved.0", SHT_NOBITS, Vec::new()) },
            sec(".nv.merc.nv.info.k", 0x7000_0083, hval(eifmt::HVAL, eiattr::CBANK_PARAM_SIZE, 999)),
            Sec { flags: 0x6, info: (33 << 24) | 3, ..sec(".text.k2", SHT_PROGBITS, vec![0; 128]) },
            Sec { link: 2, info: 9, ..sec(".nv.info.k2", SHT_CUDA_INFO, info_k2) },
            sec(".text.d", SHT_PROGBITS, vec![0; 64]),
        ];
        if abi_version >= 8 {
            secs.push(sec(".nv.capmerc.text.k", 0x7000_0016, vec![0; 8]));
        }
        build_elf(EM_CUDA, abi_version, e_flags, secs)
    }

    #[test]
    fn kernels_and_resources_old_abi() {
        let elf = sample(7, 0x0056_0556, false);
        let cubin = Cubin::parse(&elf).unwrap();
        assert_eq!((cubin.sm, cubin.virtual_sm, cubin.accelerated), (86, Some(86), Some(false)));
        assert_eq!((cubin.os_abi, cubin.abi_version, cubin.e_type), (0x33, 7, 2));
        assert_eq!(cubin.cuda_api_version, Some(0x81));
        assert_eq!(cubin.toolkit, None);
        let ks = cubin.kernels().unwrap();
        assert_eq!(ks.len(), 2);
        let k = &ks[0];
        assert_eq!((k.name, k.symbol_index, k.code_size), ("k", 1, 256));
        assert_eq!(k.registers, Some(40), "the global REGCOUNT wins over .text sh_info");
        assert_eq!((k.frame_size, k.min_stack_size, k.max_stack_size), (Some(16), Some(8), Some(32)));
        assert_eq!(k.static_shared, 1024);
        assert_eq!(k.max_threads, Some([128, 1, 1]));
        assert_eq!((k.param_size, k.max_reg_count), (Some(24), Some(255)));
        assert_eq!(k.num_barriers, Some(1), "EIATTR_NUM_BARRIERS wins");
        assert_eq!(k.cuda_api_version, Some(0x81));
        let k2 = &ks[1];
        assert_eq!((k2.name, k2.symbol_index, k2.code_size), ("k2", 3, 128));
        assert_eq!(k2.registers, Some(33), "sh_info fallback for sm < 90");
        assert_eq!(k2.static_shared, 0, ".nv.shared.reserved.0 is not a kernel's");
        assert_eq!(k2.max_threads, Some([64, 2, 1]), "REQNTID");
        assert_eq!(k2.num_barriers, Some(0), "from .text sh_flags bits 20-26");
        assert_eq!((k2.frame_size, k2.param_size), (None, None));
    }

    #[test]
    fn kernel_count_is_capped() {
        let elf = sample(7, 0x0056_0556, false);
        let cubin = Cubin::parse(&elf).unwrap();
        assert_eq!(cubin.kernels_with_limit(2).unwrap().len(), 2);
        let err = cubin.kernels_with_limit(1).unwrap_err();
        assert_eq!((err.field, err.expected), ("cubin kernel symbols", EXPECT_KERNELS_CAP));
        // The second kernel is symbol 3 of the table.
        let symtab = cubin.sections.iter().find(|sh| sh.sh_type(LE) == SHT_SYMTAB).unwrap().sh_offset(LE);
        assert_eq!(err.offset, symtab + 3 * 24);
    }

    #[test]
    fn kernels_new_abi_and_sm90_without_text_registers() {
        let elf = sample(8, 0x0600_5a04, false);
        let cubin = Cubin::parse(&elf).unwrap();
        assert_eq!((cubin.sm, cubin.virtual_sm, cubin.accelerated, cubin.os_abi), (90, None, None, 0x41));
        let ks = cubin.kernels().unwrap();
        assert_eq!(ks[1].registers, None, "sh_info registers are not used for sm >= 90");
        assert_eq!(ks[1].num_barriers, None, "ABI v8 without EIATTR_NUM_BARRIERS");
        assert_eq!(ks[0].param_size, Some(24), "the mercury copy is ignored");
        let elf = sample(8, 0x0600_5a04, true);
        assert_eq!(Cubin::parse(&elf).unwrap().kernels().unwrap()[1].registers, Some(12));
    }

    #[test]
    fn e_flags_layouts() {
        let t = |abi, flags| {
            let t = decode_e_flags(abi, flags);
            (t.sm, t.virtual_sm, t.accelerated)
        };
        assert_eq!(t(7, 0x0056_0556), (86, Some(86), Some(false)));
        assert_eq!(t(7, 0x005a_0d5a), (90, Some(90), Some(true)));
        assert_eq!(t(7, 0x0000_0532), (50, None, Some(false)));
        assert_eq!(t(8, 0x0600_7802), (120, None, None));
        assert_eq!(t(8, 0x0600_5a04), (90, None, None));
        assert_eq!(t(8, 0x0600_4b04), (75, None, None));
        assert_eq!(t(8, 0x0600_6402), (100, None, None));
    }

    fn note(n_type: u32, desc: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend_from_slice(&12u32.to_le_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        n.extend_from_slice(&n_type.to_le_bytes());
        n.extend_from_slice(b"NVIDIA Corp\0");
        n.extend_from_slice(desc);
        while !n.len().is_multiple_of(4) {
            n.push(0);
        }
        n
    }

    #[test]
    fn notes_give_toolkit_and_api_version() {
        let mut tk = Vec::new();
        for w in [2u32, 0, 1, 7, 0x36, 0x60] {
            tk.extend_from_slice(&w.to_le_bytes());
        }
        tk.extend_from_slice(b"\0ptxas\0Cuda compilation tools, release 13.4, V13.4.46\0");
        let cuinfo = [2u8, 0, 0x78, 0, 0x86, 0, 0, 0];
        let secs = vec![
            sec(".note.nv.tkinfo", SHT_NOTE, note(NT_CUDA_TKINFO, &tk)),
            sec(".note.nv.cuinfo", SHT_NOTE, note(NT_CUDA_CUINFO, &cuinfo)),
        ];
        let elf = build_elf(EM_CUDA, 8, 0x0600_7802, secs);
        let cubin = Cubin::parse(&elf).unwrap();
        assert_eq!(cubin.toolkit, Some("Cuda compilation tools, release 13.4, V13.4.46"));
        assert_eq!(cubin.cuda_api_version, Some(0x86));
        assert_eq!(cubin.kernels().unwrap(), []);
        // cuinfo version 1 (CUDA 12.9) has no API version; a tkinfo offset past the end gives no toolkit.
        let mut bad_tk = tk.clone();
        bad_tk[12..16].copy_from_slice(&1000u32.to_le_bytes());
        let secs = vec![
            sec(".note.nv.tkinfo", SHT_NOTE, note(NT_CUDA_TKINFO, &bad_tk)),
            sec(".note.nv.cuinfo", SHT_NOTE, note(NT_CUDA_CUINFO, &[1, 0, 0x78, 0, 1, 0, 0, 0, 1, 0, 0, 0])),
        ];
        let elf = build_elf(EM_CUDA, 8, 0x0600_7802, secs);
        let cubin = Cubin::parse(&elf).unwrap();
        assert_eq!((cubin.toolkit, cubin.cuda_api_version), (None, None));
        // A truncated note is ignored, not fatal.
        let secs = vec![sec(".note.nv.tkinfo", SHT_NOTE, note(NT_CUDA_TKINFO, &tk)[..20].to_vec())];
        assert_eq!(Cubin::parse(&build_elf(EM_CUDA, 8, 0, secs)).unwrap().toolkit, None);
    }

    #[test]
    fn non_elf_and_wrong_elf_are_errors() {
        let err = Cubin::parse(b"<\n//\n.version 8.4").unwrap_err();
        assert_eq!((err.offset, err.field), (0, "cubin ELF magic"));
        assert_eq!(Cubin::parse(b"").unwrap_err().offset, 0);
        // Truncated header.
        let elf = sample(7, 0x0056_0556, false);
        assert_eq!(Cubin::parse(&elf[..6]).unwrap_err().field, "cubin ELF header");
        assert_eq!(Cubin::parse(&elf[..40]).unwrap_err().field, "cubin ELF header");
        // ELF32, big-endian, x86-64.
        let mut e32 = elf.clone();
        e32[4] = 1;
        assert_eq!(Cubin::parse(&e32).unwrap_err().offset, 4);
        let mut be = elf.clone();
        be[5] = 2;
        assert_eq!(Cubin::parse(&be).unwrap_err().offset, 5);
        let x86 = build_elf(62, 0, 0, Vec::new());
        let err = Cubin::parse(&x86).unwrap_err();
        assert_eq!((err.offset, err.field), (18, "cubin e_machine"));
        // Section table past the end; truncated file.
        let mut far = elf.clone();
        far[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(Cubin::parse(&far).unwrap_err().field, "cubin section headers");
        assert!(Cubin::parse(&elf[..elf.len() - 1]).is_err());
    }

    #[test]
    fn bad_sections_make_kernels_fail_not_panic() {
        let elf = sample(7, 0x0056_0556, false);
        let cubin = Cubin::parse(&elf).unwrap();
        let shoff = u64::from_le_bytes(elf[40..48].try_into().unwrap()) as usize;
        // .nv.info (section 3): an SVAL whose size runs past the section end.
        let info_off = u64::from_le_bytes(elf[shoff + 3 * 64 + 24..shoff + 3 * 64 + 32].try_into().unwrap());
        let mut bad = elf.clone();
        bad[info_off as usize + 2..info_off as usize + 4].copy_from_slice(&0xfff0u16.to_le_bytes());
        let err = Cubin::parse(&bad).unwrap().kernels().unwrap_err();
        assert_eq!((err.offset, err.field), (info_off + 2, "nv.info record payload size"));
        // .symtab (section 2) with a size past the end of the file.
        let mut bad = elf.clone();
        let size_at = shoff + 2 * 64 + 32;
        bad[size_at..size_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(Cubin::parse(&bad).unwrap().kernels().unwrap_err().field, "cubin symbol table");
        // Section .nv.info.k (4) with data past the end.
        let mut bad = elf.clone();
        let off_at = shoff + 4 * 64 + 24;
        bad[off_at..off_at + 8].copy_from_slice(&(elf.len() as u64).to_le_bytes());
        assert_eq!(Cubin::parse(&bad).unwrap().kernels().unwrap_err().field, "cubin section offset/size");
        assert_eq!(cubin.kernels().unwrap().len(), 2);
    }

    #[test]
    fn info_records() {
        let mut data = hval(eifmt::NVAL, 0x04, 0);
        data.extend(hval(eifmt::BVAL, eiattr::NUM_BARRIERS, 3));
        data.extend(sval(eiattr::REGCOUNT, &[7, 32]));
        data.extend(hval(eifmt::HVAL, 0x6d, 0x1234));
        let recs: Vec<_> = InfoRecords::new(&data).collect::<Result<_>>().unwrap();
        assert_eq!(recs.len(), 4);
        assert_eq!((recs[0].format, recs[0].attr, recs[0].scalar()), (eifmt::NVAL, 0x04, None));
        assert_eq!(recs[1].scalar(), Some(3));
        assert_eq!((recs[2].offset, recs[2].symbol_value(), recs[2].scalar()), (8, Some((7, 32)), Some(7)));
        assert_eq!(recs[2].payload_u32(2), None);
        assert_eq!(recs[1].symbol_value(), None);
        assert_eq!((recs[3].offset, recs[3].value), (20, 0x1234));
        assert_eq!(InfoRecords::new(&[]).count(), 0);
    }

    #[test]
    fn bad_info_records_error_and_fuse() {
        // Truncated record.
        let mut it = InfoRecords::new(&[4, 0x2f, 8]);
        assert_eq!(it.next().unwrap().unwrap_err().offset, 2);
        assert!(it.next().is_none());
        // SVAL payload past the end (and the largest size).
        for size in [9u16, u16::MAX] {
            let mut data = vec![4, 0x2f];
            data.extend_from_slice(&size.to_le_bytes());
            data.extend_from_slice(&[0; 8]);
            let mut it = InfoRecords::new(&data);
            let err = it.next().unwrap().unwrap_err();
            assert_eq!((err.offset, err.field), (2, "nv.info record payload size"));
            assert!(it.next().is_none());
        }
        // Unknown format: its size is unknown, so the walk stops.
        let mut data = hval(eifmt::HVAL, 0x19, 8);
        data.extend([0, 0x19, 0, 0, 1, 1, 0, 0]);
        let results: Vec<_> = InfoRecords::new(&data).collect();
        assert_eq!(results.len(), 2);
        assert_eq!(results[1].unwrap_err().offset, 4);
        // A zero-length SVAL still moves forward.
        assert_eq!(InfoRecords::new(&[4, 1, 0, 0, 4, 1, 0, 0]).count(), 2);
    }
}
