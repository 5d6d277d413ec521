//! CUDA runtime and driver hooks (signatures from `cuda_runtime_api.h`, `crt/host_runtime.h` and
//! `cuda.h`, CUDA 11 - 13). These cannot be exercised on a machine without the CUDA runtime; they
//! mirror the HIP hooks one for one so that the GPU machine can validate them.
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
//! Two functions changed their parameter lists between CUDA 11 and 12 (`cudaGraphInstantiate`,
//! `cudaGraphExecUpdate`). Their hooks take the longer list and forward all of it: on x86-64 and
//! AArch64 these arguments travel in registers, so a caller of the shorter form leaves unused
//! registers that the real function of that version ignores, and only the leading parameters,
//! the same in both versions, are interpreted here.

#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]
#![cfg_attr(test, allow(dead_code))]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr;

use super::{hook, shape};
use crate::ffi::{
    CuLaunchConfig, CudaLaunchConfig, Dim3, Handle, Status, CUDA_ERROR_NOT_SUPPORTED, CU_ERROR_NOT_SUPPORTED, SUCCESS,
};
use crate::graphs;
use crate::observe::{alias, from_cu_config, launch, out_handle, register, Family, Namer, Stream};
use crate::registry::{Api, NameSource, Shape};

hook! {
    fn __cudaRegisterFatBinary(fat_cubin: *mut c_void) -> *mut *mut c_void;
    missing = ptr::null_mut();
    after |_handle| {
        crate::start::active();
    }
}

hook! {
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
    after register(
        Api::Cuda,
        host_function as usize,
        if device_name.is_null() { device_function } else { device_name },
        NameSource::Register,
    )
}

hook! {
    /// CUDA 12.4+ `<<<>>>` lowering: the kernel handle of a host stub.
    fn __cudaGetKernel(kernel: *mut Handle, host_function: *const c_void) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status| {
        if let Some(kernel) = out_handle(status, kernel) {
            alias(Api::Cuda, Namer::CudaStub, host_function as usize, kernel, Stream(0));
        }
    }
}

hook! {
    fn cudaGetKernel(kernel: *mut Handle, entry_function: *const c_void) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status| {
        if let Some(kernel) = out_handle(status, kernel) {
            alias(Api::Cuda, Namer::CudaStub, entry_function as usize, kernel, Stream(0));
        }
    }
}

hook! {
    /// `<<<>>>` up to nvcc 12.3, and the cooperative launch; the `_ptsz` variants for per-thread default streams.
    fn cudaLaunchKernel(
        function: *const c_void,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: Handle,
    ) -> Status;
    also cudaLaunchKernel_ptsz(per_thread), cudaLaunchCooperativeKernel, cudaLaunchCooperativeKernel_ptsz(per_thread);
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status, ring, per_thread| {
        launch(ring, Api::Cuda, Namer::CudaStub, function as usize, shape(grid, block),
            Stream::of(stream, per_thread), status)
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
    fn cuModuleGetFunction(function: *mut Handle, module: Handle, name: *const c_char) -> Status;
    missing = CU_ERROR_NOT_SUPPORTED;
    after |status| {
        if let Some(function) = out_handle(status, function) {
            register(Api::Cu, function, name, NameSource::GetFunction);
        }
    }
}

hook! {
    /// Also handed out by lookups (`hooks::lookup`): cuBLAS reaches it through `cuGetProcAddress`.
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
    also cuLaunchKernel_ptsz(per_thread);
    looked_up cuLaunchKernel as CU_LAUNCH_KERNEL;
    missing = CU_ERROR_NOT_SUPPORTED;
    after |status, ring, per_thread| {
        let shape = Shape { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z] };
        launch(ring, Api::Cu, Namer::CuFunction, function as usize, shape, Stream::of(stream, per_thread), status)
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

hook! {
    fn cudaStreamBeginCapture(stream: Handle, mode: c_int) -> Status;
    also cudaStreamBeginCapture_ptsz(per_thread);
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status, _ring, per_thread| {
        if status == SUCCESS {
            crate::observe::begin_capture(Family::Cuda, Stream::of(stream, per_thread), None);
        }
    }
}

hook! {
    /// CUDA 12.3+: capture into an existing graph, whose kernels the capture adds to.
    fn cudaStreamBeginCaptureToGraph(
        stream: Handle,
        graph: Handle,
        dependencies: *const Handle,
        dependency_data: *const c_void,
        num_dependencies: usize,
        mode: c_int,
    ) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status| {
        if status == SUCCESS {
            crate::observe::begin_capture(Family::Cuda, Stream::new(stream), Some(graph as usize));
        }
    }
}

hook! {
    fn cudaStreamEndCapture(stream: Handle, graph: *mut Handle) -> Status;
    also cudaStreamEndCapture_ptsz(per_thread);
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status, _ring, per_thread| {
        graphs::end_capture(Family::Cuda, Stream::of(stream, per_thread), out_handle(status, graph))
    }
}

hook! {
    /// The driver's end of a capture the runtime began (`cudaStream_t` and `CUstream` are one
    /// handle): a program that mixes the two APIs ends it here.
    fn cuStreamEndCapture(stream: Handle, graph: *mut Handle) -> Status;
    also cuStreamEndCapture_ptsz(per_thread);
    missing = CU_ERROR_NOT_SUPPORTED;
    after |status, _ring, per_thread| {
        graphs::end_capture(Family::Cuda, Stream::of(stream, per_thread), out_handle(status, graph))
    }
}

hook! {
    /// A stream destroyed while its capture was recorded: the record expires. Observed after the
    /// call, and only if it succeeded (a failed destroy leaves the stream and its capture alive).
    fn cudaStreamDestroy(stream: Handle) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status| {
        if status == SUCCESS {
            graphs::destroy_stream(Family::Cuda, Stream::new(stream));
        }
    }
}

hook! {
    /// `cuStreamDestroy` in `cuda.h` is this symbol.
    fn cuStreamDestroy_v2(stream: Handle) -> Status;
    missing = CU_ERROR_NOT_SUPPORTED;
    after |status| {
        if status == SUCCESS {
            graphs::destroy_stream(Family::Cuda, Stream::new(stream));
        }
    }
}

hook! {
    /// CUDA 12+: `(exec*, graph, unsigned long long flags)`; CUDA 11:
    /// `(exec*, graph, cudaGraphNode_t* errorNode, char* log, size_t logSize)`. See the module docs.
    fn cudaGraphInstantiate(exec: *mut Handle, graph: Handle, arg3: usize, arg4: usize, arg5: usize) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status| {
        if let Some(exec) = out_handle(status, exec) {
            crate::observe::set_exec_graph(Family::Cuda, exec, graph as usize);
        }
    }
}

hook! {
    fn cudaGraphInstantiateWithFlags(exec: *mut Handle, graph: Handle, flags: u64) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status| {
        if let Some(exec) = out_handle(status, exec) {
            crate::observe::set_exec_graph(Family::Cuda, exec, graph as usize);
        }
    }
}

hook! {
    fn cudaGraphInstantiateWithParams(exec: *mut Handle, graph: Handle, params: *mut c_void) -> Status;
    also cudaGraphInstantiateWithParams_ptsz;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status| {
        if let Some(exec) = out_handle(status, exec) {
            crate::observe::set_exec_graph(Family::Cuda, exec, graph as usize);
        }
    }
}

hook! {
    /// CUDA 12+: `(exec, graph, cudaGraphExecUpdateResultInfo*)`; CUDA 11:
    /// `(exec, graph, cudaGraphNode_t* errorNode, cudaGraphExecUpdateResult*)`. See the module docs.
    fn cudaGraphExecUpdate(exec: Handle, graph: Handle, arg3: usize, arg4: usize) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status| {
        if status == SUCCESS {
            crate::observe::set_exec_graph(Family::Cuda, exec as usize, graph as usize);
        }
    }
}

hook! {
    /// The driver's `cuGraphLaunch` has the same parameters and meaning: the observer does not export it,
    /// but wraps it when a lookup hands it out (`hooks::lookup`).
    fn cudaGraphLaunch(exec: Handle, stream: Handle) -> Status;
    also cudaGraphLaunch_ptsz(per_thread);
    looked_up cuGraphLaunch as CU_GRAPH_LAUNCH;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    after |status, _ring, per_thread| {
        crate::observe::launch_graph(Family::Cuda, exec as usize, Stream::of(stream, per_thread), status)
    }
}

hook! {
    fn cudaGraphExecDestroy(exec: Handle) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    before graphs::destroy_exec(exec as usize)
}

hook! {
    fn cudaGraphDestroy(graph: Handle) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    before graphs::destroy_graph(Family::Cuda, graph as usize)
}
