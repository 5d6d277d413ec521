//! Stream capture and graph hooks of both runtimes (signatures from `cuda_runtime_api.h`, `cuda.h` and
//! `hip_runtime_api.h`). CUDA and HIP declare these functions alike and the capture bookkeeping (`crate::graphs`)
//! is the same for both, kept apart by family: each row serves the CUDA runtime's function, its `_ptsz` variant,
//! the driver's where a program may call it, and HIP's (`(hip)`), and one `missing` code serves them all (the three
//! runtimes' "not supported" are one number, [`NOT_SUPPORTED`]).
//!
//! Two functions changed their parameter lists between CUDA 11 and 12 (`cudaGraphInstantiate`,
//! `cudaGraphExecUpdate`); HIP kept CUDA 11's. Their hooks take the longer list and forward all of it: on x86-64
//! and AArch64 these arguments travel in registers, so a caller of the shorter form leaves unused registers that
//! the real function of that version ignores, and only the leading parameters, the same in every version, are
//! interpreted here.

#![allow(non_snake_case, clippy::missing_safety_doc)]
#![cfg_attr(test, allow(dead_code))]

use std::ffi::{c_int, c_void};

use super::hook;
use crate::ffi::{Handle, Status, NOT_SUPPORTED, SUCCESS};
use crate::graphs;
use crate::observe::{begin_capture, launch_graph, out_handle, set_exec_graph, Family, Stream};

hook! {
    fn cudaStreamBeginCapture(stream: Handle, mode: c_int) -> Status;
    also cudaStreamBeginCapture_ptsz(per_thread),
        hipStreamBeginCapture(hip), hipStreamBeginCapture_spt(hip, per_thread);
    missing = NOT_SUPPORTED;
    after |status, _ring, per_thread, family| {
        if status == SUCCESS {
            begin_capture(family, Stream::of(stream, per_thread), None);
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
    missing = NOT_SUPPORTED;
    after |status| {
        if status == SUCCESS {
            begin_capture(Family::Cuda, Stream::new(stream), Some(graph as usize));
        }
    }
}

hook! {
    /// With the driver's end of a capture the runtime began (`cudaStream_t` and `CUstream` are one handle): a
    /// program that mixes the two APIs ends it there.
    fn cudaStreamEndCapture(stream: Handle, graph: *mut Handle) -> Status;
    also cudaStreamEndCapture_ptsz(per_thread), cuStreamEndCapture, cuStreamEndCapture_ptsz(per_thread),
        hipStreamEndCapture(hip), hipStreamEndCapture_spt(hip, per_thread);
    missing = NOT_SUPPORTED;
    after |status, _ring, per_thread, family| {
        graphs::end_capture(family, Stream::of(stream, per_thread), out_handle(status, graph))
    }
}

hook! {
    /// A stream destroyed while its capture was recorded: the record expires. Observed after the call, and only if
    /// it succeeded (a failed destroy leaves the stream and its capture alive). `cuStreamDestroy` in `cuda.h` is
    /// `cuStreamDestroy_v2`.
    fn cudaStreamDestroy(stream: Handle) -> Status;
    also cuStreamDestroy_v2, hipStreamDestroy(hip);
    missing = NOT_SUPPORTED;
    after |status, _ring, _per_thread, family| {
        if status == SUCCESS {
            graphs::destroy_stream(family, Stream::new(stream));
        }
    }
}

hook! {
    /// CUDA 12+: `(exec*, graph, unsigned long long flags)`; CUDA 11 and HIP:
    /// `(exec*, graph, errorNode*, char* log, size_t logSize)`. See the module docs.
    fn cudaGraphInstantiate(exec: *mut Handle, graph: Handle, arg3: usize, arg4: usize, arg5: usize) -> Status;
    also hipGraphInstantiate(hip);
    missing = NOT_SUPPORTED;
    after |status, _ring, _per_thread, family| instantiated(family, status, exec, graph)
}

hook! {
    fn cudaGraphInstantiateWithFlags(exec: *mut Handle, graph: Handle, flags: u64) -> Status;
    also hipGraphInstantiateWithFlags(hip);
    missing = NOT_SUPPORTED;
    after |status, _ring, _per_thread, family| instantiated(family, status, exec, graph)
}

hook! {
    fn cudaGraphInstantiateWithParams(exec: *mut Handle, graph: Handle, params: *mut c_void) -> Status;
    also cudaGraphInstantiateWithParams_ptsz;
    missing = NOT_SUPPORTED;
    after |status| instantiated(Family::Cuda, status, exec, graph)
}

hook! {
    /// CUDA 12+: `(exec, graph, cudaGraphExecUpdateResultInfo*)`; CUDA 11 and HIP:
    /// `(exec, graph, errorNode*, updateResult*)`. See the module docs.
    fn cudaGraphExecUpdate(exec: Handle, graph: Handle, arg3: usize, arg4: usize) -> Status;
    also hipGraphExecUpdate(hip);
    missing = NOT_SUPPORTED;
    after |status, _ring, _per_thread, family| {
        if status == SUCCESS {
            set_exec_graph(family, exec as usize, graph as usize);
        }
    }
}

hook! {
    /// The driver's `cuGraphLaunch` has the same parameters and meaning: the observer does not export it,
    /// but wraps it when a lookup hands it out (`hooks::lookup`).
    fn cudaGraphLaunch(exec: Handle, stream: Handle) -> Status;
    also cudaGraphLaunch_ptsz(per_thread), hipGraphLaunch(hip), hipGraphLaunch_spt(hip, per_thread);
    looked_up cuGraphLaunch as CU_GRAPH_LAUNCH;
    missing = NOT_SUPPORTED;
    after |status, _ring, per_thread, family| {
        launch_graph(family, exec as usize, Stream::of(stream, per_thread), status)
    }
}

hook! {
    fn cudaGraphExecDestroy(exec: Handle) -> Status;
    also hipGraphExecDestroy(hip);
    missing = NOT_SUPPORTED;
    before graphs::destroy_exec(exec as usize)
}

hook! {
    fn cudaGraphDestroy(graph: Handle) -> Status;
    also hipGraphDestroy(hip);
    missing = NOT_SUPPORTED;
    before |family| graphs::destroy_graph(family, graph as usize)
}

/// An instantiation that returned `status` and wrote its exec through `exec`: from now on the exec runs `graph`.
fn instantiated(family: Family, status: Status, exec: *mut Handle, graph: Handle) {
    if let Some(exec) = out_handle(status, exec) {
        set_exec_graph(family, exec, graph as usize);
    }
}
