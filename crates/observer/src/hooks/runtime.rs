//! Registration and launch hooks that the CUDA and HIP runtimes declare alike (signatures from
//! `crt/host_runtime.h`, `cuda_runtime_api.h`, `cuda.h` and `hip_runtime_api.h`): each row serves the CUDA
//! function, its `_ptsz` variants and HIP's (`(hip)`), and records the API tag of the family that was called
//! ([`stub`], [`module_function`]). One `missing` code serves them all: the runtimes' "not supported" are one
//! number, [`NOT_SUPPORTED`]. What only one runtime has is in `hooks::cuda` and `hooks::hip`.
//!
//! Where the two headers differ only in a pointer's constness or an integer's type, a row takes CUDA's
//! declaration: on x86-64 and AArch64 both travel in the same register, forwarded unchanged, and the hooks read
//! none of those arguments.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
#![cfg_attr(test, allow(dead_code))]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr;

use super::{hook, shape};
use crate::ffi::{Dim3, Handle, Status, NOT_SUPPORTED};
use crate::observe::{launch, module_function, out_handle, register, stub, Stream};
use crate::registry::{NameSource, Shape};

hook! {
    /// Registration is the first sign of a CUDA or HIP program: start the observer (and its writer).
    /// HIP's argument is `const void*`.
    fn __cudaRegisterFatBinary(fat_cubin: *mut c_void) -> *mut *mut c_void;
    also __hipRegisterFatBinary(hip);
    missing = ptr::null_mut();
    after |_handle| {
        crate::start::active();
    }
}

hook! {
    /// HIP's `host_function` is `const void*` and its `thread_limit` an `unsigned int`.
    fn __cudaRegisterFunction(
        fat_cubin_handle: *mut *mut c_void,
        host_function: *const c_char,
        device_function: *mut c_char,
        device_name: *const c_char,
        thread_limit: c_int,
        tid: *mut c_void,
        bid: *mut c_void,
        block_dim: *mut Dim3,
        grid_dim: *mut Dim3,
        warp_size: *mut c_int,
    );
    also __hipRegisterFunction(hip);
    after |family| register(
        stub(family).0,
        host_function as usize,
        if device_name.is_null() { device_function } else { device_name },
        NameSource::Register,
    )
}

hook! {
    /// `<<<>>>` up to nvcc 12.3 and with hipcc, and the cooperative launches; the `_ptsz`/`_spt` variants for
    /// per-thread default streams. HIP's cooperative launch takes its shared memory as an `unsigned int`: it
    /// arrives in the register of `shared_mem`, whose low half is the value, and is forwarded unchanged.
    fn cudaLaunchKernel(
        function: *const c_void,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: Handle,
    ) -> Status;
    also cudaLaunchKernel_ptsz(per_thread), cudaLaunchCooperativeKernel, cudaLaunchCooperativeKernel_ptsz(per_thread),
        hipLaunchKernel(hip), hipLaunchKernel_spt(hip, per_thread),
        hipLaunchCooperativeKernel(hip), hipLaunchCooperativeKernel_spt(hip, per_thread);
    missing = NOT_SUPPORTED;
    after |status, ring, per_thread, family| {
        let (api, namer) = stub(family);
        launch(ring, api, namer, function as usize, shape(grid, block), Stream::of(stream, per_thread), status)
    }
}

hook! {
    /// A module's function by name: the driver API's `CUfunction`, HIP's `hipFunction_t` (rocBLAS/Tensile).
    fn cuModuleGetFunction(function: *mut Handle, module: Handle, name: *const c_char) -> Status;
    also hipModuleGetFunction(hip);
    missing = NOT_SUPPORTED;
    after |status, _ring, _per_thread, family| {
        if let Some(function) = out_handle(status, function) {
            register(module_function(family).0, function, name, NameSource::GetFunction);
        }
    }
}

hook! {
    /// Also handed out by lookups (`hooks::lookup`): cuBLAS reaches `cuLaunchKernel` through `cuGetProcAddress`.
    fn cuLaunchKernel(
        function: Handle,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream: Handle,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> Status;
    also cuLaunchKernel_ptsz(per_thread), hipModuleLaunchKernel(hip);
    looked_up cuLaunchKernel as CU_LAUNCH_KERNEL, hipModuleLaunchKernel(hip) as HIP_MODULE_LAUNCH_KERNEL;
    missing = NOT_SUPPORTED;
    after |status, ring, per_thread, family| {
        let (api, namer) = module_function(family);
        let shape = Shape { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z] };
        launch(ring, api, namer, function as usize, shape, Stream::of(stream, per_thread), status)
    }
}
