//! The lookup functions through which libraries reach launch functions by pointer, and what they hand out:
//! `cuGetProcAddress(_v2)`, `cudaGetDriverEntryPoint(ByVersion)` and `hipGetProcAddress` (signatures from
//! `cuda.h`, `cuda_runtime_api.h` and `hip_runtime_api.h`), and `dlsym` on a library handle (`crate::dl`).
//! Each lookup hook forwards unchanged and then, if the lookup succeeded, hands the caller a wrapper for a
//! launch function ([`map_out`]); every other result is returned as the runtime gave it. The mapping is done
//! also inside another hook: it changes nothing but the address, and a wrapper called there only forwards.
//!
//! Parameter lists that changed between versions take the longer form and forward all of it, as in
//! `hooks::cuda`: `cuGetProcAddress` gained a fifth parameter in CUDA 12 (`_v2`), and
//! `cudaGetDriverEntryPoint` a fourth.
//!
//! Vendor BLAS libraries reach the driver through function pointers, which symbol interposition never
//! sees: cuBLAS and cuBLASLt link the CUDA runtime statically, and it asks `cuGetProcAddress` for
//! every driver function, `cuLaunchKernel` and `cuLaunchKernelEx` included. When a lookup returns one of
//! the launch functions that the hook table marks `looked_up`, [`on_lookup`] hands back a wrapper bound to
//! exactly the address the lookup returned (a version or per-thread-stream variant may differ from the
//! exported symbol): it forwards every call to that address with the caller's arguments and counts the
//! launch as the exported hooks do. Every other lookup is returned unchanged, and so is a launch function
//! when no wrapper is free ([`SLOTS`](crate::real::SLOTS) per function and stream variant), or when the
//! address is the observer's own already.
//!
//! A wrapper called inside one of the observer's hooks (the CUDA runtime's `cudaLaunchKernel` reaching
//! the driver through its own pointer table) only forwards, like a nested hook, so no launch is counted
//! twice. Lookup functions returned by a lookup (`cuGetProcAddress` asked for itself) are wrapped too, so
//! that what they return is handled the same way.

#![allow(non_snake_case, clippy::missing_safety_doc)]
#![cfg_attr(test, allow(dead_code))]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use super::{capture, cuda, hip, hook, runtime};
use crate::ffi::{Status, CUDA_ERROR_NOT_SUPPORTED, NOT_SUPPORTED, SUCCESS};

hook! {
    /// CUDA 11.3's four parameters, and `cuGetProcAddress_v2`'s five (CUDA 12): the fifth is forwarded as the
    /// caller left it, and the four-parameter function ignores it. HIP's takes the five.
    fn cuGetProcAddress(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        version: c_int,
        flags: u64,
        status: *mut c_int,
    ) -> Status;
    also cuGetProcAddress_v2, hipGetProcAddress(hip);
    looked_up cuGetProcAddress as CU_GET_PROC_ADDRESS, hipGetProcAddress(hip) as HIP_GET_PROC_ADDRESS;
    missing = NOT_SUPPORTED;
    then |result| map_out(result, symbol, pfn, flags)
}

hook! {
    fn cudaGetDriverEntryPoint(
        symbol: *const c_char,
        function: *mut *mut c_void,
        flags: u64,
        status: *mut c_int,
    ) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    then |result| map_out(result, symbol, function, flags)
}

hook! {
    fn cudaGetDriverEntryPointByVersion(
        symbol: *const c_char,
        function: *mut *mut c_void,
        version: c_uint,
        flags: u64,
        status: *mut c_int,
    ) -> Status;
    missing = CUDA_ERROR_NOT_SUPPORTED;
    then |result| map_out(result, symbol, function, flags)
}

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

/// What a lookup returned for `symbol` (NUL-terminated), and what to hand the caller instead: a
/// wrapper for a launch or lookup function, the same address for anything else.
pub(crate) fn on_lookup(symbol: *const c_char, real: usize, flags: u64) -> usize {
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

/// The wrapper of `entry` (stream variant `ptsz`) bound to `real`, or `real` when none is free. HIP's launch
/// functions and the lookup functions have no stream variant.
fn wrap(entry: Entry, ptsz: bool, real: usize) -> usize {
    let wrapper = match entry {
        Entry::CuLaunchKernel => runtime::CU_LAUNCH_KERNEL.bind(ptsz, real),
        Entry::CuLaunchKernelEx => cuda::CU_LAUNCH_KERNEL_EX.bind(ptsz, real),
        Entry::CuGraphLaunch => capture::CU_GRAPH_LAUNCH.bind(ptsz, real),
        Entry::HipModuleLaunchKernel => runtime::HIP_MODULE_LAUNCH_KERNEL.bind(false, real),
        Entry::HipExtModuleLaunchKernel => hip::HIP_EXT_MODULE_LAUNCH_KERNEL.bind(false, real),
        Entry::CuGetProcAddress => CU_GET_PROC_ADDRESS.bind(false, real),
        Entry::HipGetProcAddress => HIP_GET_PROC_ADDRESS.bind(false, real),
    };
    wrapper.unwrap_or(real)
}

/// After a successful lookup that wrote its result through `out`: hands the caller the wrapper for it.
pub(crate) fn map_out(status: Status, symbol: *const c_char, out: *mut *mut c_void, flags: u64) {
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

#[cfg(test)]
mod tests {
    use std::ffi::c_uint;

    use super::*;
    use crate::ffi::Handle;

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
}
