//! Launch entry points handed out by lookups: `cuGetProcAddress(_v2)`, `cudaGetDriverEntryPoint(ByVersion)`,
//! `hipGetProcAddress`, and `dlsym` on a library handle (`crate::dl`).
//!
//! Vendor BLAS libraries reach the driver through function pointers, which symbol interposition never
//! sees: cuBLAS and cuBLASLt link the CUDA runtime statically, and it asks `cuGetProcAddress` for
//! every driver function, `cuLaunchKernel` and `cuLaunchKernelEx` included. When a lookup returns one of
//! the launch functions below, [`on_lookup`] hands back a wrapper bound to exactly the address the
//! lookup returned (a version or per-thread-stream variant may differ from the exported symbol): it
//! forwards every call to that address with the caller's arguments and counts the launch as the
//! exported hooks do. Every other lookup is returned unchanged, and so is a launch function when no
//! wrapper is free ([`SLOTS`] per function and stream variant), or when the address is the observer's
//! own already.
//!
//! A wrapper called inside one of the observer's hooks (the CUDA runtime's `cudaLaunchKernel` reaching
//! the driver through its own pointer table) only forwards, like a nested hook, so no launch is counted
//! twice. Lookup functions returned by a lookup (`cuGetProcAddress` asked for itself) are wrapped too, so
//! that what they return is handled the same way.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ffi::{CuLaunchConfig, Handle, Status, SUCCESS};
use crate::observe::{blocks_from_global, from_cu_config, launch, Family, Namer, Stream};
use crate::registry::{Api, Shape};
use crate::state;
use crate::sync::HookScope;

/// Distinct addresses wrapped per function and stream variant (one driver normally gives one or two).
pub const SLOTS: usize = 4;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` (cuda.h) and `cudaEnablePerThreadDefaultStream`
/// (cuda_runtime_api.h): the `_ptsz` variant, where stream 0 is the per-thread default stream.
pub const PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// The functions a lookup may hand out that are wrapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    CuLaunchKernel,
    CuLaunchKernelEx,
    CuGraphLaunch,
    HipModuleLaunchKernel,
    HipExtModuleLaunchKernel,
    CuGetProcAddress,
    HipGetProcAddress,
}

/// What the looked-up `symbol` is, and whether it is the per-thread-stream variant (asked for by name,
/// or by `flags` for the lookups that take them).
fn classify(symbol: &[u8], flags: u64) -> Option<(Entry, bool)> {
    let (base, ptsz) = match symbol.strip_suffix(b"_ptsz") {
        Some(base) => (base, true),
        None => (symbol, flags & PER_THREAD_DEFAULT_STREAM != 0),
    };
    let entry = match base {
        b"cuLaunchKernel" => Entry::CuLaunchKernel,
        b"cuLaunchKernelEx" => Entry::CuLaunchKernelEx,
        b"cuGraphLaunch" => Entry::CuGraphLaunch,
        b"cuGetProcAddress" | b"cuGetProcAddress_v2" => return Some((Entry::CuGetProcAddress, false)),
        b"hipModuleLaunchKernel" => return Some((Entry::HipModuleLaunchKernel, false)),
        b"hipExtModuleLaunchKernel" => return Some((Entry::HipExtModuleLaunchKernel, false)),
        b"hipGetProcAddress" => return Some((Entry::HipGetProcAddress, false)),
        _ => return None,
    };
    Some((entry, ptsz))
}

/// The addresses the wrappers of one function and stream variant forward to; 0: slot free.
struct Targets([AtomicUsize; SLOTS]);

impl Targets {
    const fn new() -> Targets {
        Targets([const { AtomicUsize::new(0) }; SLOTS])
    }

    /// The slot bound to `real`, binding a free one if needed.
    fn slot_for(&self, real: usize) -> Option<usize> {
        for (i, target) in self.0.iter().enumerate() {
            match target.compare_exchange(0, real, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(i),
                Err(bound) if bound == real => return Some(i),
                Err(_) => {}
            }
        }
        None
    }

    fn get(&self, slot: usize) -> usize {
        self.0[slot].load(Ordering::Acquire)
    }
}

/// What a lookup returned for `symbol` (NUL-terminated), and what to hand the caller instead: a
/// wrapper for a launch or lookup function, the same address for anything else.
pub fn on_lookup(symbol: *const c_char, real: usize, flags: u64) -> usize {
    if symbol.is_null() || real == 0 {
        return real;
    }
    // SAFETY: lookup functions take NUL-terminated symbol names, and the call just succeeded with it.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    if !(name.starts_with(b"cu") || name.starts_with(b"hip")) {
        return real;
    }
    let Some((entry, ptsz)) = classify(name, flags) else { return real };
    if crate::real::is_ours(real) {
        return real;
    }
    wrap(entry, ptsz, real)
}

/// The wrapper of `entry` (stream variant `ptsz`) bound to `real`, or `real` when none is free.
fn wrap(entry: Entry, ptsz: bool, real: usize) -> usize {
    let v = usize::from(ptsz);
    let wrapper = match entry {
        Entry::CuLaunchKernel => CU_LAUNCH_KERNEL[v].slot_for(real).map(|s| CU_LAUNCH_KERNEL_FNS[v][s] as usize),
        Entry::CuLaunchKernelEx => {
            CU_LAUNCH_KERNEL_EX[v].slot_for(real).map(|s| CU_LAUNCH_KERNEL_EX_FNS[v][s] as usize)
        }
        Entry::CuGraphLaunch => CU_GRAPH_LAUNCH[v].slot_for(real).map(|s| CU_GRAPH_LAUNCH_FNS[v][s] as usize),
        Entry::HipModuleLaunchKernel => {
            HIP_MODULE_LAUNCH_KERNEL[0].slot_for(real).map(|s| HIP_MODULE_LAUNCH_KERNEL_FNS[0][s] as usize)
        }
        Entry::HipExtModuleLaunchKernel => {
            HIP_EXT_MODULE_LAUNCH_KERNEL[0].slot_for(real).map(|s| HIP_EXT_MODULE_LAUNCH_KERNEL_FNS[0][s] as usize)
        }
        Entry::CuGetProcAddress => CU_GET_PROC_ADDRESS.slot_for(real).map(|s| CU_GET_PROC_ADDRESS_FNS[s] as usize),
        Entry::HipGetProcAddress => HIP_GET_PROC_ADDRESS.slot_for(real).map(|s| HIP_GET_PROC_ADDRESS_FNS[s] as usize),
    };
    wrapper.unwrap_or(real)
}

/// After a successful lookup that wrote its result through `out`: hands the caller the wrapper for it.
pub fn map_out(status: Status, symbol: *const c_char, out: *mut *mut c_void, flags: u64) {
    if status != SUCCESS || out.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: the lookup succeeded and wrote the function through the caller's non-null pointer,
        // which the caller reads after the call returns; replacing it is what the caller receives.
        unsafe {
            let found = *out as usize;
            if found != 0 {
                *out = on_lookup(symbol, found, flags) as *mut c_void;
            }
        }
    });
}

fn stream(handle: Handle, ptsz: bool) -> Stream {
    if ptsz {
        Stream::per_thread(handle)
    } else {
        Stream::new(handle)
    }
}

/// Defines the wrappers of one launch function: `$wrapper::<PTSZ, SLOT>` forwards to the address bound to
/// `SLOT` of `$targets[PTSZ]`, then observes as the exported hook of the same function does (only when not
/// nested in another hook); `$fns` lists them for handing out.
macro_rules! launch_wrappers {
    ($wrapper:ident, $targets:ident, $fns:ident, $call:literal,
     fn($($arg:ident: $ty:ty),* $(,)?) -> Status, |$status:ident, $ring:ident, $ptsz:ident| $observe:expr) => {
        static $targets: [Targets; 2] = [Targets::new(), Targets::new()];

        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $wrapper<const PTSZ: bool, const SLOT: usize>($($arg: $ty),*) -> Status {
            static CALL: &str = $call;
            let target = $targets[usize::from(PTSZ)].get(SLOT);
            // SAFETY: the wrapper is handed out only after `SLOT` was bound to the address a lookup
            // returned for this function, whose C signature is this wrapper's.
            let real: unsafe extern "C" fn($($ty),*) -> Status = unsafe { std::mem::transmute::<usize, _>(target) };
            let scope = HookScope::enter();
            let ring = scope.as_ref().and_then(|s| s.call_begins(&CALL));
            // SAFETY: forwards the caller's arguments, unchanged, to the function the caller looked up.
            let result = unsafe { real($($arg),*) };
            if let Some(ring) = ring {
                ring.call_ends();
            }
            if scope.is_some() {
                let $status = result;
                let $ring = ring;
                let $ptsz = PTSZ;
                state::guarded(|| $observe);
            }
            drop(scope);
            result
        }

        const $fns: [[unsafe extern "C" fn($($ty),*) -> Status; SLOTS]; 2] = [
            [$wrapper::<false, 0>, $wrapper::<false, 1>, $wrapper::<false, 2>, $wrapper::<false, 3>],
            [$wrapper::<true, 0>, $wrapper::<true, 1>, $wrapper::<true, 2>, $wrapper::<true, 3>],
        ];
    };
}

launch_wrappers! {
    cu_launch_kernel, CU_LAUNCH_KERNEL, CU_LAUNCH_KERNEL_FNS, "cuLaunchKernel",
    fn(
        function: Handle,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream_handle: Handle,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> Status,
    |status, ring, ptsz| {
        let shape = Shape { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z] };
        launch(ring, Api::Cu, Namer::CuFunction, function as usize, shape, stream(stream_handle, ptsz), status)
    }
}

launch_wrappers! {
    cu_launch_kernel_ex, CU_LAUNCH_KERNEL_EX, CU_LAUNCH_KERNEL_EX_FNS, "cuLaunchKernelEx",
    fn(config: *const CuLaunchConfig, function: Handle, params: *mut *mut c_void, extra: *mut *mut c_void) -> Status,
    |status, ring, ptsz| {
        if let Some((shape, stream_handle)) = from_cu_config(config) {
            launch(ring, Api::Cu, Namer::CuFunction, function as usize, shape, stream(stream_handle, ptsz), status);
        }
    }
}

launch_wrappers! {
    cu_graph_launch, CU_GRAPH_LAUNCH, CU_GRAPH_LAUNCH_FNS, "cuGraphLaunch",
    fn(exec: Handle, stream_handle: Handle) -> Status,
    |status, _ring, ptsz| crate::observe::launch_graph(Family::Cuda, exec as usize, stream(stream_handle, ptsz), status)
}

launch_wrappers! {
    hip_module_launch_kernel, HIP_MODULE_LAUNCH_KERNEL, HIP_MODULE_LAUNCH_KERNEL_FNS, "hipModuleLaunchKernel",
    fn(
        function: Handle,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream_handle: Handle,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> Status,
    |status, ring, _ptsz| {
        let shape = Shape { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z] };
        launch(ring, Api::HipModule, Namer::HipFunction, function as usize, shape, Stream::new(stream_handle), status)
    }
}

launch_wrappers! {
    hip_ext_module_launch_kernel, HIP_EXT_MODULE_LAUNCH_KERNEL, HIP_EXT_MODULE_LAUNCH_KERNEL_FNS,
    "hipExtModuleLaunchKernel",
    fn(
        function: Handle,
        global_x: u32,
        global_y: u32,
        global_z: u32,
        local_x: u32,
        local_y: u32,
        local_z: u32,
        shared_mem_bytes: usize,
        stream_handle: Handle,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
        start_event: Handle,
        stop_event: Handle,
        flags: u32,
    ) -> Status,
    |status, ring, _ptsz| {
        let block = [local_x, local_y, local_z];
        let shape = Shape { grid: blocks_from_global([global_x, global_y, global_z], block), block };
        launch(ring, Api::HipModule, Namer::HipFunction, function as usize, shape, Stream::new(stream_handle), status)
    }
}

/// `cuGetProcAddress` (CUDA 11.3: four parameters) and `cuGetProcAddress_v2` (CUDA 12: a fifth, the
/// query result), and `hipGetProcAddress` (five). One signature with five parameters serves all: the
/// fifth is passed on as the caller left it, and a four-parameter function ignores it (on x86-64 and
/// AArch64 it travels in a register).
type ProcAddressFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> Status;

static CU_GET_PROC_ADDRESS: Targets = Targets::new();
static HIP_GET_PROC_ADDRESS: Targets = Targets::new();

unsafe extern "C" fn cu_get_proc_address<const SLOT: usize>(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> Status {
    // SAFETY: bound to the address a lookup returned for `cuGetProcAddress(_v2)`, of this signature.
    let real: ProcAddressFn = unsafe { std::mem::transmute::<usize, ProcAddressFn>(CU_GET_PROC_ADDRESS.get(SLOT)) };
    // SAFETY: forwards the caller's arguments, unchanged.
    let result = unsafe { real(symbol, pfn, version, flags, status) };
    map_out(result, symbol, pfn, flags);
    result
}

unsafe extern "C" fn hip_get_proc_address<const SLOT: usize>(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> Status {
    // SAFETY: bound to the address a lookup returned for `hipGetProcAddress`, of this signature.
    let real: ProcAddressFn = unsafe { std::mem::transmute::<usize, ProcAddressFn>(HIP_GET_PROC_ADDRESS.get(SLOT)) };
    // SAFETY: forwards the caller's arguments, unchanged.
    let result = unsafe { real(symbol, pfn, version, flags, status) };
    map_out(result, symbol, pfn, flags);
    result
}

const CU_GET_PROC_ADDRESS_FNS: [ProcAddressFn; SLOTS] =
    [cu_get_proc_address::<0>, cu_get_proc_address::<1>, cu_get_proc_address::<2>, cu_get_proc_address::<3>];
const HIP_GET_PROC_ADDRESS_FNS: [ProcAddressFn; SLOTS] =
    [hip_get_proc_address::<0>, hip_get_proc_address::<1>, hip_get_proc_address::<2>, hip_get_proc_address::<3>];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_and_lookup_functions_are_recognised_by_name_and_stream_variant() {
        assert_eq!(classify(b"cuLaunchKernel", 0), Some((Entry::CuLaunchKernel, false)));
        assert_eq!(classify(b"cuLaunchKernel", PER_THREAD_DEFAULT_STREAM), Some((Entry::CuLaunchKernel, true)));
        assert_eq!(classify(b"cuLaunchKernel_ptsz", 0), Some((Entry::CuLaunchKernel, true)));
        assert_eq!(classify(b"cuLaunchKernelEx_ptsz", 0), Some((Entry::CuLaunchKernelEx, true)));
        assert_eq!(classify(b"cuGraphLaunch", 1), Some((Entry::CuGraphLaunch, false)), "1 is the legacy stream");
        assert_eq!(classify(b"cuGetProcAddress_v2", 0), Some((Entry::CuGetProcAddress, false)));
        assert_eq!(classify(b"hipExtModuleLaunchKernel", 0), Some((Entry::HipExtModuleLaunchKernel, false)));
        for other in
            [&b"cuMemAlloc_v2"[..], b"cuLaunchCooperativeKernel", b"cuLaunchKernelExtra", b"hipLaunchKernel", b""]
        {
            assert_eq!(classify(other, 0), None, "{}", String::from_utf8_lossy(other));
        }
    }

    extern "C" fn fake_launch(
        _f: Handle,
        gx: c_uint,
        _gy: c_uint,
        _gz: c_uint,
        _bx: c_uint,
        _by: c_uint,
        _bz: c_uint,
        _shared: c_uint,
        _stream: Handle,
        _params: *mut *mut c_void,
        _extra: *mut *mut c_void,
    ) -> Status {
        gx as Status + 1
    }

    #[test]
    fn a_launch_function_gets_a_wrapper_that_forwards_and_others_pass_unchanged() {
        // (`on_lookup` leaves the observer's own functions alone, and in this test binary `fake_launch`
        // is one; `wrap` is what it calls for anyone else's.)
        let real = fake_launch as *const () as usize;
        assert_eq!(on_lookup(c"cuLaunchKernel".as_ptr(), real, 0), real);
        let wrapped = wrap(Entry::CuLaunchKernel, false, real);
        assert_ne!(wrapped, real);
        assert_eq!(wrap(Entry::CuLaunchKernel, false, real), wrapped, "the same address, the same wrapper");
        assert_ne!(wrap(Entry::CuLaunchKernel, true, real), wrapped);
        // SAFETY: the wrapper has cuLaunchKernel's signature and forwards to `fake_launch`.
        let f: unsafe extern "C" fn(
            Handle,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            Handle,
            *mut *mut c_void,
            *mut *mut c_void,
        ) -> Status = unsafe { std::mem::transmute::<usize, _>(wrapped) };
        let null = std::ptr::null_mut();
        // SAFETY: arguments that fake_launch ignores.
        assert_eq!(unsafe { f(null, 41, 1, 1, 1, 1, 1, 0, null, std::ptr::null_mut(), std::ptr::null_mut()) }, 42);
        assert_eq!(on_lookup(c"cuMemAlloc_v2".as_ptr(), real, 0), real);
        assert_eq!(on_lookup(c"cuLaunchKernel".as_ptr(), 0, 0), 0);
    }

    #[test]
    fn when_the_wrappers_run_out_the_real_address_is_returned() {
        let targets = Targets::new();
        for i in 0..SLOTS {
            assert_eq!(targets.slot_for(0x1000 + i), Some(i));
        }
        assert_eq!(targets.slot_for(0x1000 + 2), Some(2));
        assert_eq!(targets.slot_for(0x9999), None);
    }
}
