//! What a byte slice is, from its first bytes. Never by file extension: Tensile `.co` files are plain
//! ELF, offload bundles or compressed bundles depending on the ROCm release.

use crate::read;

pub const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
pub const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
pub const CCOB_MAGIC: &[u8; 4] = b"CCOB";
/// CUDA fatbin container (`.nv_fatbin`), u32 0xBA55ED50 little-endian.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// LLVM "offload binary" (clang-offload-packager); recognised but not decoded yet.
pub const OFFLOAD_BINARY_MAGIC: u32 = 0x10FF_10AD;

pub const EM_X86_64: u16 = 62;
pub const EM_CUDA: u16 = 190;
pub const EM_AMDGPU: u16 = 224;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An ELF file with the given e_machine and ELF class (true = 64-bit).
    Elf {
        machine: u16,
        is_64: bool,
    },
    OffloadBundle,
    CompressedBundle,
    CudaFatbin,
    OffloadBinary,
    Unknown,
}

impl Kind {
    pub fn is_amdgpu_code_object(self) -> bool {
        matches!(self, Kind::Elf { machine: EM_AMDGPU, .. })
    }
    pub fn is_cubin(self) -> bool {
        matches!(self, Kind::Elf { machine: EM_CUDA, .. })
    }
}

pub fn sniff(data: &[u8]) -> Kind {
    if data.starts_with(ELF_MAGIC) {
        let is_64 = data.get(4) == Some(&2);
        // e_machine is at offset 18 in both ELF classes; little-endian is all that GPU toolchains emit.
        return match read::u16_at(data, 18, "e_machine") {
            Ok(machine) => Kind::Elf { machine, is_64 },
            Err(_) => Kind::Unknown,
        };
    }
    if data.starts_with(BUNDLE_MAGIC) {
        return Kind::OffloadBundle;
    }
    if data.starts_with(CCOB_MAGIC) {
        return Kind::CompressedBundle;
    }
    match read::u32_at(data, 0, "magic") {
        Ok(FATBIN_MAGIC) => Kind::CudaFatbin,
        Ok(OFFLOAD_BINARY_MAGIC) => Kind::OffloadBinary,
        _ => Kind::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_by_magic() {
        assert_eq!(sniff(b"__CLANG_OFFLOAD_BUNDLE__\0\0"), Kind::OffloadBundle);
        assert_eq!(sniff(b"CCOB\x03\x00\x01\x00"), Kind::CompressedBundle);
        assert_eq!(sniff(&[0x50, 0xed, 0x55, 0xba, 1, 0]), Kind::CudaFatbin);
        assert_eq!(sniff(b"\x7fELF"), Kind::Unknown, "truncated ELF header");
        let mut elf = [0u8; 20];
        elf[..4].copy_from_slice(ELF_MAGIC);
        elf[4] = 2;
        elf[18] = 224;
        assert_eq!(sniff(&elf), Kind::Elf { machine: EM_AMDGPU, is_64: true });
        assert_eq!(sniff(b""), Kind::Unknown);
    }
}
