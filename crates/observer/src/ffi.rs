//! C types and constants of the CUDA and HIP APIs that the hooks need, declared here instead of
//! taken from the vendors' headers (the crate depends on `libc` alone).

use std::ffi::{c_int, c_uint, c_void};

/// `dim3` / `uint3` of both runtimes: passed by value to the launch functions.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

/// Any opaque runtime handle: streams, graphs, graph execs, modules, functions, kernels.
pub type Handle = *mut c_void;

/// `hipError_t`, `cudaError_t` and `CUresult` are C enums: `int` in the ABI.
pub type Status = c_int;

pub const SUCCESS: Status = 0;

/// What a hook returns when the real function cannot be found (no runtime loaded, or a runtime too
/// old to have the entry point): the runtimes' own "not supported" codes, so a caller treats it as
/// an unsupported feature rather than as success. All three happen to be 801:
/// `hipErrorNotSupported`, `cudaErrorNotSupported` and `CUDA_ERROR_NOT_SUPPORTED`.
pub const HIP_ERROR_NOT_SUPPORTED: Status = 801;
pub const CUDA_ERROR_NOT_SUPPORTED: Status = 801;
pub const CU_ERROR_NOT_SUPPORTED: Status = 801;
/// The one number of all three, for a hook that serves functions of more than one (`hooks::capture`).
pub const NOT_SUPPORTED: Status = 801;
const _: () = assert!(
    NOT_SUPPORTED == HIP_ERROR_NOT_SUPPORTED
        && NOT_SUPPORTED == CUDA_ERROR_NOT_SUPPORTED
        && NOT_SUPPORTED == CU_ERROR_NOT_SUPPORTED
);

/// `cudaStreamCaptureStatusNone` and `hipStreamCaptureStatusNone`: the stream is not capturing.
pub const STREAM_CAPTURE_STATUS_NONE: c_int = 0;
/// `cudaStreamCaptureStatusActive` and `hipStreamCaptureStatusActive`. (2, `…Invalidated`, is a
/// capture broken by an error that still waits for its `EndCapture`.)
pub const STREAM_CAPTURE_STATUS_ACTIVE: c_int = 1;

/// `cudaStreamPerThread` and `hipStreamPerThread`: the handle that the `_ptsz`/`_spt` variants
/// mean when they are given stream 0.
pub const STREAM_PER_THREAD: usize = 2;

/// `cudaLaunchConfig_t` (argument of `cudaLaunchKernelExC`).
#[repr(C)]
pub struct CudaLaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub dynamic_smem_bytes: usize,
    pub stream: Handle,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

/// `CUlaunchConfig` (argument of `cuLaunchKernelEx`).
#[repr(C)]
pub struct CuLaunchConfig {
    pub grid_x: c_uint,
    pub grid_y: c_uint,
    pub grid_z: c_uint,
    pub block_x: c_uint,
    pub block_y: c_uint,
    pub block_z: c_uint,
    pub shared_mem_bytes: c_uint,
    pub stream: Handle,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    // Layouts from cuda_runtime_api.h / driver_types.h (CUDA 12-13) and cuda.h.
    #[test]
    fn launch_config_layouts_match_the_headers() {
        assert_eq!(size_of::<Dim3>(), 12);
        assert_eq!(offset_of!(CudaLaunchConfig, dynamic_smem_bytes), 24);
        assert_eq!(offset_of!(CudaLaunchConfig, stream), 32);
        assert_eq!(offset_of!(CudaLaunchConfig, num_attrs), 48);
        assert_eq!(offset_of!(CuLaunchConfig, shared_mem_bytes), 24);
        assert_eq!(offset_of!(CuLaunchConfig, stream), 32);
        assert_eq!(offset_of!(CuLaunchConfig, num_attrs), 48);
    }
}

/// Family of runtimes whose streams, graphs and captures belong together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Cuda,
    Hip,
}

/// A stream handle as the capture bookkeeping keys it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stream(pub usize);

impl Stream {
    pub fn new(handle: Handle) -> Stream {
        Stream(handle as usize)
    }

    /// For `_ptsz`/`_spt` entry points, where stream 0 means the per-thread default stream.
    pub fn per_thread(handle: Handle) -> Stream {
        match handle as usize {
            0 => Stream(STREAM_PER_THREAD),
            other => Stream(other),
        }
    }

    /// [`Stream::per_thread`] for the per-thread variant of an entry point, [`Stream::new`] otherwise.
    #[inline(always)]
    pub fn of(handle: Handle, per_thread: bool) -> Stream {
        if per_thread {
            Stream::per_thread(handle)
        } else {
            Stream::new(handle)
        }
    }
}
