//! SPIR-V shaders embedded in a host ELF file the way ggml-vulkan embeds them: its build generates one
//! `unsigned char NAME_data[]` array per shader with an `NAME_len` beside it (`vulkan-shaders-gen`,
//! `ggml-vulkan-shaders.hpp`), so the symbol table names every shader and says where its bytes are.
//! A stripped library has no `.symtab` (the arrays are not exported), and then no shader has a name.
//!
//! Only `NAME_data` symbols whose `NAME_len` also exists and whose bytes start with the SPIR-V magic
//! are taken; their bytes are borrowed from the file.

use object::elf::{FileHeader64, SHT_NOBITS, SHT_SYMTAB};
use object::read::elf::{FileHeader, SectionHeader, Sym};
use object::LittleEndian as LE;

use crate::error::{Error, Result};

/// The first word of a SPIR-V module, little-endian.
const SPIRV_MAGIC: [u8; 4] = [0x03, 0x02, 0x23, 0x07];
/// Most symbols read from one table: the ggml-vulkan of llama.cpp 11434 has about 30,000 and 1,205
/// shaders; a hostile table can only make the scan longer, never the result larger than this.
pub const MAX_SYMBOLS: usize = 1 << 22;
/// Most shaders returned.
pub const MAX_SHADERS: usize = 1 << 16;

/// One embedded shader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddedShader<'a> {
    /// The array's name without `_data` (`mul_mat_vec_q4_k_f32_f32`).
    pub name: &'a str,
    /// Where its bytes start in the file.
    pub offset: u64,
    pub code: &'a [u8],
}

/// The embedded shaders of a 64-bit little-endian ELF file; empty when it has no symbol table.
pub fn embedded_shaders(data: &[u8]) -> Result<Vec<EmbeddedShader<'_>>> {
    let e = LE;
    let header = FileHeader64::<LE>::parse(data)
        .map_err(|_| Error::new(0, "ELF header", "a 64-bit little-endian ELF header"))?;
    let sections = header
        .sections(e, data)
        .map_err(|_| Error::new(0, "ELF section header table", "a section header table inside the file"))?;
    let symbols = sections
        .symbols(e, data, SHT_SYMTAB)
        .map_err(|_| Error::new(0, "ELF symbol table", "a symbol table and string table inside the file"))?;
    let mut lengths = std::collections::HashSet::new();
    let mut arrays = Vec::new();
    for symbol in symbols.iter().take(MAX_SYMBOLS) {
        let Ok(name) = symbol.name(e, symbols.strings()) else { continue };
        let Ok(name) = std::str::from_utf8(name) else { continue };
        if let Some(base) = name.strip_suffix("_len") {
            lengths.insert(base);
        } else if let Some(base) = name.strip_suffix("_data") {
            arrays.push((base, symbol));
        }
    }
    let mut shaders = Vec::new();
    for (name, symbol) in arrays {
        if !lengths.contains(name) || shaders.len() >= MAX_SHADERS {
            continue;
        }
        let Some(index) = symbol.st_shndx(e).index() else { continue };
        let Ok(section) = sections.section(object::SectionIndex(usize::from(index))) else { continue };
        if section.sh_type(e) == SHT_NOBITS {
            continue;
        }
        let (address, size): (u64, u64) = (symbol.st_value(e), symbol.st_size(e));
        let (start, offset): (u64, u64) = (section.sh_addr(e), section.sh_offset(e));
        let Some(file_offset) = address.checked_sub(start).and_then(|d| d.checked_add(offset)) else { continue };
        let code = usize::try_from(file_offset)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(at, len)| data.get(at..at.checked_add(len)?));
        if let Some(code) = code.filter(|c| c.starts_with(&SPIRV_MAGIC)) {
            shaders.push(EmbeddedShader { name, offset: file_offset, code });
        }
    }
    shaders.sort_by_key(|s| s.offset);
    Ok(shaders)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_elf_is_an_error_and_a_symbolless_one_has_no_shaders() {
        assert!(embedded_shaders(b"not an elf file at all").is_err());
        // The test binary is a real ELF; it embeds no SPIR-V.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(embedded_shaders(&exe).unwrap(), []);
        for n in [0, 16, 64, 4096] {
            let _ = embedded_shaders(&exe[..n.min(exe.len())]);
        }
    }
}
