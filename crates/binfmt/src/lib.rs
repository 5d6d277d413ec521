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
//! - [`spirv`]: SPIR-V shaders embedded in a host library as named arrays (ggml-vulkan).
//!
//! Every decoder borrows from the input (typically a memory map), returns [`Error`] values that name the
//! offset, the field and what was expected, never panics on hostile bytes, and never sizes an
//! allocation from an unchecked length: decompression goes through [`Limits`].

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod amdgpu;
pub mod bundle;
mod bundle_layout;
pub mod ccob;
pub mod cuda;
pub mod elf;
mod error;
pub mod read;
pub mod sniff;
pub mod spirv;

pub use error::{Error, Result};

/// Caps on work and memory that hostile input could otherwise inflate.
///
/// Each cap holds on its own; the scanner (`backscope scan`) adds the budgets that span many decoder calls
/// (bytes in flight across threads, kernels per file, dependency probes, demangled bytes) in one place of
/// its own and keeps these inside it. When a cap is hit the decoder returns an [`Error`] whose `expected`
/// text is one of the `EXPECT_*` constants below, so a caller can tell a budget hit from malformed bytes
/// and name the limit ([`Limits::explain`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest decompressed payload accepted, in bytes.
    pub max_decompressed: u64,
    /// Largest accepted ratio of decompressed to compressed size. zstd and LZ4 on real GPU code reach
    /// about 10×; a header that claims far more is lying or hostile.
    pub max_ratio: u64,
    /// Most entries accepted in one table (fatbin containers, fatbin entries).
    pub max_entries: u64,
    /// Most entries in one offload bundle. clang writes one per offload target plus the host entry: the
    /// real bundles seen have up to 28 (JAX's ROCm plugin: 27 targets). Each entry becomes a record, so a
    /// bundle of a million empty entries would otherwise become a million records.
    pub max_bundle_entries: u64,
    /// Most kernels decoded from one code object (all its metadata notes together) or one cubin. The most
    /// in a real file is 14,075 (rocBLAS `TensileLibrary_gfx90a.co`); a metadata note can hold one kernel
    /// map per byte, and every kernel becomes a record of about 200 bytes.
    pub max_kernels: u64,
}

/// `expected` of the error for a decompressed size above [`Limits::max_decompressed`].
pub const EXPECT_DECOMPRESSED_CAP: &str = "a decompressed size within Limits::max_decompressed";
/// `expected` of the error for a decompressed size above [`Limits::max_ratio`] times the compressed size.
pub const EXPECT_RATIO_CAP: &str = "a decompressed size consistent with the compressed size (Limits::max_ratio)";
/// `expected` of the error for a bundle with more than [`Limits::max_bundle_entries`] entries.
pub const EXPECT_BUNDLE_ENTRIES_CAP: &str = "no more entries than Limits::max_bundle_entries";
/// `expected` of the error for more kernels than the decoder was allowed to decode ([`Limits::max_kernels`]
/// or the smaller number a caller passed).
pub const EXPECT_KERNELS_CAP: &str = "no more kernels than the cap the decoder was given";
/// `expected` of the error for more fatbin containers or entries than [`Limits::max_entries`].
pub const EXPECT_ENTRIES_CAP: &str = "no more than Limits::max_entries of them";
/// `expected` of the error for an output buffer the allocator refused (a memory limit such as `ulimit -v`).
pub const EXPECT_ALLOCATION: &str = "an output buffer of the announced size that the process can allocate";

impl Limits {
    /// The defaults, usable in constants.
    pub const DEFAULT: Limits = Limits {
        max_decompressed: 1 << 30,
        max_ratio: 256,
        max_entries: 1 << 20,
        max_bundle_entries: 1 << 12,
        max_kernels: 1 << 18,
    };

    /// Check a claimed decompressed size against the caps before anything is allocated.
    pub fn check_decompressed(&self, claimed: u64, compressed: u64, at: u64, field: &'static str) -> Result<()> {
        if claimed > self.max_decompressed {
            return Err(Error::new(at, field, EXPECT_DECOMPRESSED_CAP));
        }
        if claimed > compressed.saturating_mul(self.max_ratio).max(4096) {
            return Err(Error::new(at, field, EXPECT_RATIO_CAP));
        }
        Ok(())
    }

    /// For an error that a cap of these limits caused, the cap in words with its value (for a person:
    /// "limit: 4096 entries per bundle (Limits::max_bundle_entries)"); `None` for any other error.
    /// [`EXPECT_KERNELS_CAP`] is left to the caller, which knows what it allowed.
    pub fn explain(&self, e: &Error) -> Option<String> {
        Some(match e.expected {
            EXPECT_DECOMPRESSED_CAP => {
                format!("limit: {} bytes per decompressed payload (Limits::max_decompressed)", self.max_decompressed)
            }
            EXPECT_RATIO_CAP => {
                format!("limit: {} times the compressed size, at least 4096 bytes (Limits::max_ratio)", self.max_ratio)
            }
            EXPECT_BUNDLE_ENTRIES_CAP => {
                format!("limit: {} entries per bundle (Limits::max_bundle_entries)", self.max_bundle_entries)
            }
            EXPECT_ENTRIES_CAP => format!("limit: {} per table (Limits::max_entries)", self.max_entries),
            EXPECT_ALLOCATION => "the allocation failed: the process is out of memory or address space".to_string(),
            _ => return None,
        })
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}
