//! Zero-copy readers for the GPU binary formats found inside ML runtime libraries.
//!
//! - [`bundle`]: clang offload bundles (`__CLANG_OFFLOAD_BUNDLE__`), the unit of `.hip_fatbin` sections.
//! - [`ccob`]: compressed offload bundles (`CCOB` v1/v2/v3, zlib or zstd).
//! - [`amdgpu`]: AMDGPU code objects: target from `e_flags`, code object version, kernels from the
//!   `NT_AMDGPU_METADATA` MessagePack note.
//! - [`cuda`]: CUDA fatbin containers (`.nv_fatbin`), their cubin/PTX entries (LZ4/zstd), cubin kernels
//!   and resources from `.nv.info`.
//! - [`elf`]: the host-library facts a scanner needs (sections, `DT_NEEDED`, RPATH/RUNPATH, SONAME).
//! - [`sniff`]: what a byte slice is, from its magic.
//!
//! Every decoder borrows from the input (typically a memory map), returns [`Error`] values that name the
//! offset, the field and what was expected, never panics on hostile bytes, and never sizes an
//! allocation from an unchecked length: decompression goes through [`Limits`].

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod amdgpu;
pub mod bundle;
pub mod ccob;
pub mod cuda;
pub mod elf;
mod error;
pub mod read;
pub mod sniff;

pub use error::{Error, Result};

/// Caps on work and memory that hostile input could otherwise inflate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest decompressed payload accepted, in bytes.
    pub max_decompressed: u64,
    /// Largest accepted ratio of decompressed to compressed size. zstd and LZ4 on real GPU code reach
    /// about 10×; a header that claims far more is lying or hostile.
    pub max_ratio: u64,
    /// Most entries accepted in one table (bundle entries, fatbin entries, kernels in a note).
    pub max_entries: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_decompressed: 1 << 30, max_ratio: 256, max_entries: 1 << 20 }
    }
}

impl Limits {
    /// Check a claimed decompressed size against the caps before anything is allocated.
    pub fn check_decompressed(&self, claimed: u64, compressed: u64, at: u64, field: &'static str) -> Result<()> {
        if claimed > self.max_decompressed {
            return Err(Error::new(at, field, "a decompressed size within the configured cap (1 GiB by default)"));
        }
        if claimed > compressed.saturating_mul(self.max_ratio).max(4096) {
            return Err(Error::new(at, field, "a decompressed size consistent with the compressed size"));
        }
        Ok(())
    }
}
