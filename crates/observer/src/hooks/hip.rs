//! HIP runtime hooks (signatures from `hip_runtime_api.h`, HIP 5.2 - 6.x).
//!
//! hipcc-built code registers every kernel at static initialisation
//! (`__hipRegisterFatBinary`, `__hipRegisterFunction` with the kernel's host handle) and launches
//! `<<<>>>` through `hipLaunchKernel` with that handle. rocBLAS/Tensile load code objects and
//! launch `hipFunction_t`s from `hipModuleGetFunction` through the module launch functions.
//!
//! The hooks of these, declared as CUDA declares its own, are `hooks::runtime`'s; here are HIP's own.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
#![cfg_attr(test, allow(dead_code))]

use std::ffi::{c_int, c_void};

use super::{hook, shape};
use crate::ffi::{Dim3, Handle, Status, HIP_ERROR_NOT_SUPPORTED};
use crate::observe::{blocks_from_global, launch, Namer, Stream};
use crate::registry::{Api, Shape};

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
