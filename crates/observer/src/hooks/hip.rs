//! HIP runtime hooks (signatures from `hip_runtime_api.h`, HIP 5.2 - 6.x).
//!
//! hipcc-built code registers every kernel at static initialisation
//! (`__hipRegisterFatBinary`, `__hipRegisterFunction` with the kernel's host handle) and launches
//! `<<<>>>` through `hipLaunchKernel` with that handle. rocBLAS/Tensile load code objects and
//! launch `hipFunction_t`s from `hipModuleGetFunction` through the module launch functions.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
#![cfg_attr(test, allow(dead_code))]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr;

use super::{hook, shape};
use crate::ffi::{Dim3, Handle, Status, HIP_ERROR_NOT_SUPPORTED};
use crate::observe::{blocks_from_global, launch, out_handle, register, Namer, Stream};
use crate::registry::{Api, NameSource, Shape};

hook! {
    fn __hipRegisterFatBinary(data: *const c_void) -> *mut *mut c_void;
    missing = ptr::null_mut();
    after |_module| {
        // Registration is the first sign of a HIP program: start the observer (and its writer).
        crate::start::active();
    }
}

hook! {
    fn __hipRegisterFunction(
        modules: *mut *mut c_void,
        host_function: *const c_void,
        device_function: *mut c_char,
        device_name: *const c_char,
        thread_limit: c_uint,
        tid: *mut c_void,
        bid: *mut c_void,
        block_dim: *mut Dim3,
        grid_dim: *mut Dim3,
        warp_size: *mut c_int,
    );
    after register(
        Api::Hip,
        host_function as usize,
        if device_name.is_null() { device_function } else { device_name },
        NameSource::Register,
    )
}

hook! {
    fn hipLaunchKernel(
        function_address: *const c_void,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem_bytes: usize,
        stream: Handle,
    ) -> Status;
    also hipLaunchKernel_spt(per_thread);
    missing = HIP_ERROR_NOT_SUPPORTED;
    after |status, ring, per_thread| {
        launch(ring, Api::Hip, Namer::HipStub, function_address as usize, shape(grid, block),
            Stream::of(stream, per_thread), status)
    }
}

hook! {
    fn hipExtLaunchKernel(
        function_address: *const c_void,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem_bytes: usize,
        stream: Handle,
        start_event: Handle,
        stop_event: Handle,
        flags: c_int,
    ) -> Status;
    missing = HIP_ERROR_NOT_SUPPORTED;
    after |status, ring| launch(ring, Api::Hip, Namer::HipStub, function_address as usize, shape(grid, block), Stream::new(stream), status)
}

hook! {
    fn hipLaunchCooperativeKernel(
        function: *const c_void,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem_bytes: c_uint,
        stream: Handle,
    ) -> Status;
    also hipLaunchCooperativeKernel_spt(per_thread);
    missing = HIP_ERROR_NOT_SUPPORTED;
    after |status, ring, per_thread| {
        launch(ring, Api::Hip, Namer::HipStub, function as usize, shape(grid, block),
            Stream::of(stream, per_thread), status)
    }
}

hook! {
    fn hipModuleGetFunction(function: *mut Handle, module: Handle, name: *const c_char) -> Status;
    missing = HIP_ERROR_NOT_SUPPORTED;
    after |status| {
        if let Some(function) = out_handle(status, function) {
            register(Api::HipModule, function, name, NameSource::GetFunction);
        }
    }
}

hook! {
    fn hipModuleLaunchKernel(
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
    looked_up hipModuleLaunchKernel(hip) as HIP_MODULE_LAUNCH_KERNEL;
    missing = HIP_ERROR_NOT_SUPPORTED;
    after |status, ring| {
        let shape = Shape { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z] };
        launch(ring, Api::HipModule, Namer::HipFunction, function as usize, shape, Stream::new(stream), status)
    }
}

hook! {
    /// Takes global work sizes (threads), not blocks: the recorded grid is converted to blocks.
    fn hipExtModuleLaunchKernel(
        function: Handle,
        global_x: u32,
        global_y: u32,
        global_z: u32,
        local_x: u32,
        local_y: u32,
        local_z: u32,
        shared_mem_bytes: usize,
        stream: Handle,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
        start_event: Handle,
        stop_event: Handle,
        flags: u32,
    ) -> Status;
    looked_up hipExtModuleLaunchKernel(hip) as HIP_EXT_MODULE_LAUNCH_KERNEL;
    missing = HIP_ERROR_NOT_SUPPORTED;
    after |status, ring| {
        let block = [local_x, local_y, local_z];
        let shape = Shape { grid: blocks_from_global([global_x, global_y, global_z], block), block };
        launch(ring, Api::HipModule, Namer::HipFunction, function as usize, shape, Stream::new(stream), status)
    }
}
