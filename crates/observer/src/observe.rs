//! What the hooks do after forwarding a call: count a launch, name an unknown kernel.

use std::ffi::{c_char, CStr};

use crate::ffi::{CuLaunchConfig, Handle, Status, SUCCESS};
pub use crate::ffi::{Family, Stream};
use crate::locus::Ring;
use crate::real::RealFn;
use crate::registry::{self, Api, NameSource, Shape};
use crate::{crash, graphs, state};

/// How to ask the runtime for the name of a launch key that was never registered.
#[derive(Clone, Copy, Debug)]
pub enum Namer {
    /// A CUDA host stub (or entry function): `cudaFuncGetName`.
    CudaStub,
    /// A `cudaKernel_t` (CUDA 12.4+ `__cudaLaunchKernel`), which is a `CUkernel`:
    /// `cuKernelGetName`, then `cudaFuncGetName`.
    CudaKernel,
    /// A `CUfunction`: `cuFuncGetName`, then `cuKernelGetName` (a `CUkernel` launched as a function).
    CuFunction,
    /// A HIP host stub: `hipKernelNameRefByPtr`.
    HipStub,
    /// A `hipFunction_t`: `hipKernelNameRef`.
    HipFunction,
}

impl Api {
    pub fn family(self) -> Family {
        match self {
            Api::Hip | Api::HipModule => Family::Hip,
            Api::Cuda | Api::Cu | Api::Overflow => Family::Cuda,
        }
    }
}

/// The API tag and namer of a host stub of `family`'s runtime: what `<<<>>>` launches and
/// `__cudaRegisterFunction` / `__hipRegisterFunction` name.
#[inline(always)]
pub fn stub(family: Family) -> (Api, Namer) {
    match family {
        Family::Cuda => (Api::Cuda, Namer::CudaStub),
        Family::Hip => (Api::Hip, Namer::HipStub),
    }
}

/// The API tag and namer of a function of a loaded module: the driver's `CUfunction`, HIP's `hipFunction_t`.
#[inline(always)]
pub fn module_function(family: Family) -> (Api, Namer) {
    match family {
        Family::Cuda => (Api::Cu, Namer::CuFunction),
        Family::Hip => (Api::HipModule, Namer::HipFunction),
    }
}

/// One kernel launch call that returned `status`, made by the thread whose crash-locus ring is `ring`.
#[inline]
pub fn launch(ring: Option<&Ring>, api: Api, namer: Namer, key: usize, shape: Shape, stream: Stream, status: Status) {
    if !crate::start::active() {
        return;
    }
    crash::arm_if_deferred();
    let Some(id) = slot_of(api, namer, key, stream) else { return };
    let failed = status != SUCCESS;
    if graphs::any_capture_active() && graphs::record_launch_if_capturing(api.family(), stream, id, &shape, failed) {
        return;
    }
    if let Some(slot) = registry::slot(id) {
        slot.record(&shape, 1, failed, false, format::runtime::thread_token());
    }
    if let Some(ring) = ring {
        ring.launch(id, &shape, failed);
    }
}

/// A second launch key for the kernel of `key` (`__cudaGetKernel`: kernel handle of a host stub).
pub fn alias(api: Api, namer: Namer, key: usize, alias: usize, stream: Stream) {
    if !crate::start::active() {
        return;
    }
    if let Some(id) = slot_of(api, namer, key, stream) {
        registry::alias(alias, id);
    }
}

/// The slot of launch key `key`: the registry's (the hot path), or one made for it now, named by
/// the runtime.
#[inline]
fn slot_of(api: Api, namer: Namer, key: usize, stream: Stream) -> Option<u32> {
    registry::lookup(key).or_else(|| name_unknown(api, namer, key, stream))
}

/// Registration of a kernel name under a launch key.
pub fn register(api: Api, key: usize, name: *const c_char, source: NameSource) {
    if name.is_null() || !crate::start::active() {
        return;
    }
    if state::panic_injected() {
        panic!("panic injected by BACKSCOPE_TEST_INJECT_PANIC");
    }
    // SAFETY: the runtimes pass NUL-terminated kernel names; the bytes are copied by the registry
    // (the caller's string may be freed later, e.g. when a library is unloaded).
    let name = unsafe { CStr::from_ptr(name) };
    registry::register(api, key, name.to_bytes(), source);
}

/// First launch of a key the registry does not know: ask the runtime for its name (outside the
/// registry lock, since the runtime takes its own locks), then register it so that the next
/// launch of this key takes the hot path.
#[cold]
#[inline(never)]
fn name_unknown(api: Api, namer: Namer, key: usize, stream: Stream) -> Option<u32> {
    let (name, source) = match runtime_name(namer, key, stream) {
        Some(name) => (name, NameSource::Runtime),
        None => (format!("?{}@{:#x}", api.as_str(), key).into_bytes(), NameSource::Synthetic),
    };
    registry::register_if_absent(api, key, &name, source)
}

type CudaFuncGetNameFn = unsafe extern "C" fn(*mut *const c_char, usize) -> Status;
type HipKernelNameRefByPtrFn = unsafe extern "C" fn(usize, Handle) -> *const c_char;
type HipKernelNameRefFn = unsafe extern "C" fn(usize) -> *const c_char;

// Signatures from cuda_runtime_api.h, cuda.h and hip_runtime_api.h; pointer arguments are declared
// as usize, which has the same ABI.
// SAFETY: `cudaError_t cudaFuncGetName(const char** name, const void* func)`.
static CUDA_FUNC_GET_NAME: RealFn<CudaFuncGetNameFn> = unsafe { RealFn::new(c"cudaFuncGetName") };
// SAFETY: `CUresult cuFuncGetName(const char** name, CUfunction hfunc)`.
static CU_FUNC_GET_NAME: RealFn<CudaFuncGetNameFn> = unsafe { RealFn::new(c"cuFuncGetName") };
// SAFETY: `CUresult cuKernelGetName(const char** name, CUkernel hfunc)`.
static CU_KERNEL_GET_NAME: RealFn<CudaFuncGetNameFn> = unsafe { RealFn::new(c"cuKernelGetName") };
static HIP_KERNEL_NAME_REF_BY_PTR: RealFn<HipKernelNameRefByPtrFn> =
    // SAFETY: `const char* hipKernelNameRefByPtr(const void* hostFunction, hipStream_t stream)`.
    unsafe { RealFn::new(c"hipKernelNameRefByPtr") };
// SAFETY: `const char* hipKernelNameRef(const hipFunction_t f)`.
static HIP_KERNEL_NAME_REF: RealFn<HipKernelNameRefFn> = unsafe { RealFn::new(c"hipKernelNameRef") };

fn runtime_name(namer: Namer, key: usize, stream: Stream) -> Option<Vec<u8>> {
    let by_out_param = |f: &RealFn<CudaFuncGetNameFn>| {
        let f = f.get()?;
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: the runtime's name query with a writable out-pointer and the key the launch
        // passed (of the kind this query takes, see `Namer`).
        let status = unsafe { f(&mut name, key) };
        copy_name(status, name)
    };
    match namer {
        Namer::CudaStub => by_out_param(&CUDA_FUNC_GET_NAME),
        Namer::CudaKernel => by_out_param(&CU_KERNEL_GET_NAME).or_else(|| by_out_param(&CUDA_FUNC_GET_NAME)),
        // A CUDA 12 `CUkernel` may be launched as a `CUfunction` (the static runtime in cuBLAS does):
        // the function query fails for it, the kernel query answers.
        Namer::CuFunction => by_out_param(&CU_FUNC_GET_NAME).or_else(|| by_out_param(&CU_KERNEL_GET_NAME)),
        Namer::HipStub => {
            let f = HIP_KERNEL_NAME_REF_BY_PTR.get()?;
            // SAFETY: a host stub pointer and the launch's stream, as hipKernelNameRefByPtr takes.
            copy_name(SUCCESS, unsafe { f(key, stream.0 as Handle) })
        }
        Namer::HipFunction => {
            let f = HIP_KERNEL_NAME_REF.get()?;
            // SAFETY: a hipFunction_t, as hipKernelNameRef takes.
            copy_name(SUCCESS, unsafe { f(key) })
        }
    }
}

fn copy_name(status: Status, name: *const c_char) -> Option<Vec<u8>> {
    if status != SUCCESS || name.is_null() {
        return None;
    }
    // SAFETY: on success the runtimes return a NUL-terminated name owned by the runtime.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    (!bytes.is_empty()).then(|| bytes.to_vec())
}

/// A null out-pointer or a failed call yields nothing to record.
pub fn out_handle(status: Status, out: *const Handle) -> Option<usize> {
    if status != SUCCESS || out.is_null() {
        return None;
    }
    // SAFETY: the runtime succeeded and wrote the handle through the caller's non-null pointer.
    let handle = unsafe { *out } as usize;
    (handle != 0).then_some(handle)
}

/// Shape and stream of a `CUlaunchConfig` (`cuLaunchKernelEx`, hooked or handed out by a lookup), if
/// the pointer is usable.
#[inline]
pub fn from_cu_config(config: *const CuLaunchConfig) -> Option<(Shape, Handle)> {
    // SAFETY: the caller passed this configuration to the driver, which read it during the call; it
    // is the caller's and still alive until the hook or wrapper returns. Null is rejected.
    let c = unsafe { config.as_ref() }?;
    Some((Shape { grid: [c.grid_x, c.grid_y, c.grid_z], block: [c.block_x, c.block_y, c.block_z] }, c.stream))
}

/// Grid of a HIP "extended" module launch, which takes global work sizes in threads: converted to
/// blocks (rounded up) so that shapes compare across entry points.
pub fn blocks_from_global(global: [u32; 3], local: [u32; 3]) -> [u32; 3] {
    let mut grid = [0; 3];
    for i in 0..3 {
        grid[i] = if local[i] == 0 { 0 } else { global[i].div_ceil(local[i]) };
    }
    grid
}

// Graph bookkeeping that can be the first thing a process does under the observer (a capture begun
// before any launch): these start the observer, then hand over to `crate::graphs`, which only
// works while it runs.

/// `cudaStreamBeginCapture` and friends: see [`graphs::begin_capture`].
pub fn begin_capture(family: Family, stream: Stream, into_graph: Option<usize>) {
    if crate::start::active() {
        graphs::begin_capture(family, stream, into_graph);
    }
}

/// A graph was instantiated into an exec: see [`graphs::set_exec_graph`].
pub fn set_exec_graph(family: Family, exec: usize, graph: usize) {
    if crate::start::active() {
        graphs::set_exec_graph(family, exec, graph);
    }
}

/// `cudaGraphLaunch` and friends: see [`graphs::launch_graph`].
pub fn launch_graph(family: Family, exec: usize, stream: Stream, status: Status) {
    if crate::start::active() {
        graphs::launch_graph(family, exec, stream, status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_work_size_becomes_blocks() {
        assert_eq!(blocks_from_global([256, 3, 1], [64, 2, 1]), [4, 2, 1]);
        assert_eq!(blocks_from_global([1, 1, 1], [0, 1, 1]), [0, 1, 1]);
    }

    #[test]
    fn per_thread_stream_zero_is_normalised() {
        assert_eq!(Stream::per_thread(std::ptr::null_mut()), Stream(2));
        assert_eq!(Stream::per_thread(0x1000 as Handle), Stream(0x1000));
        assert_eq!(Stream::new(std::ptr::null_mut()), Stream(0));
    }
}
