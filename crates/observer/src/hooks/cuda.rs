//! CUDA runtime and driver hooks (signatures from `cuda_runtime_api.h`, `crt/host_runtime.h` and
//! `cuda.h`, CUDA 11 - 13). These cannot be exercised on a machine without the CUDA runtime; the hooks that
//! HIP declares alike share their rows with HIP's (`hooks::runtime`), so that the GPU machine validates both.
//! Here are CUDA's own.
//!
//! Launch paths seen in ggml builds (`docs/trace-format.md` lists them with the API tags):
//! * nvcc <= 12.3 `<<<>>>` stubs call `cudaLaunchKernel(host_stub, …)`;
//! * nvcc 12.4+ / 13 stubs call `__cudaGetKernel(&kernel, host_stub)` once, then
//!   `__cudaLaunchKernel(kernel, …)`: the `cudaKernel_t` is aliased to the host stub's slot;
//! * PDL launches on Hopper use `cudaLaunchKernelExC`; some ops `cudaLaunchCooperativeKernel`;
//! * the `_ptsz` variants are what `--default-stream per-thread` code calls;
//! * driver-API users launch `CUfunction`s with `cuLaunchKernel(Ex)`, named by
//!   `cuModuleGetFunction` or, failing that, `cuFuncGetName`.
//!
//! Stream capture and graphs are `hooks::capture`'s, with HIP's.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
#![cfg_attr(test, allow(dead_code))]

use std::ffi::c_void;

use super::{hook, shape};
use crate::ffi::{
    CuLaunchConfig, CudaLaunchConfig, Dim3, Handle, Status, CUDA_ERROR_NOT_SUPPORTED, CU_ERROR_NOT_SUPPORTED,
};
use crate::observe::{alias, from_cu_config, launch, out_handle, Namer, Stream};
use crate::registry::{Api, Shape};

hook! {
    /// CUDA 12.4+ `<<<>>>` lowering: the kernel handle of a host stub (`cudaGetKernel`: of an entry function).
    fn __cudaGetKernel(kernel: *mut Handle, host_function: *const c_void) -> Status;
    also cudaGetKernel;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status| {
        if let Some(kernel) = out_handle(status, kernel) {
            alias(Api::Cuda, Namer::CudaStub, host_function as usize, kernel, Stream(0));
        }
    }
}

hook! {
    /// nvcc 12.4+ `<<<>>>`: a `cudaKernel_t` from `__cudaGetKernel`.
    fn __cudaLaunchKernel(
        kernel: Handle,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: Handle,
    ) -> Status;
    also __cudaLaunchKernel_ptsz(per_thread);
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status, ring, per_thread| {
        launch(ring, Api::Cuda, Namer::CudaKernel, kernel as usize, shape(grid, block),
            Stream::of(stream, per_thread), status)
    }
}

/// Shape and stream of a `cudaLaunchConfig_t`, if the pointer is usable.
fn from_cuda_config(config: *const CudaLaunchConfig) -> Option<(Shape, Handle)> {
    // SAFETY: the caller passed this configuration to the runtime, which read it during the call;
    // it is the caller's and still alive until our hook returns. Null is rejected.
    let config = unsafe { config.as_ref() }?;
    Some((shape(config.grid, config.block), config.stream))
}

hook! {
    fn cudaLaunchKernelExC(config: *const CudaLaunchConfig, function: *const c_void, args: *mut *mut c_void) -> Status;
    also cudaLaunchKernelExC_ptsz(per_thread);
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status, ring, per_thread| {
        if let Some((shape, stream)) = from_cuda_config(config) {
            launch(ring, Api::Cuda, Namer::CudaStub, function as usize, shape, Stream::of(stream, per_thread), status);
        }
    }
}

hook! {
    fn cuLaunchKernelEx(config: *const CuLaunchConfig, function: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) -> Status;
    also cuLaunchKernelEx_ptsz(per_thread);
    looked_up cuLaunchKernelEx as CU_LAUNCH_KERNEL_EX;
    missing = CU_ERROR_NOT_SUPPORTED;
    after |status, ring, per_thread| {
        if let Some((shape, stream)) = from_cu_config(config) {
            launch(ring, Api::Cu, Namer::CuFunction, function as usize, shape, Stream::of(stream, per_thread), status);
        }
    }
}
