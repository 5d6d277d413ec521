//! The lookup functions through which libraries reach launch functions by pointer:
//! `cuGetProcAddress(_v2)`, `cudaGetDriverEntryPoint(ByVersion)` and `hipGetProcAddress` (signatures from
//! `cuda.h`, `cuda_runtime_api.h` and `hip_runtime_api.h`). Each forwards unchanged and then, if the lookup
//! succeeded, hands the caller a wrapper for a launch function (`crate::procs`); every other result is
//! returned as the runtime gave it. The mapping is done also inside another hook: it changes nothing but
//! the address, and a wrapper called there only forwards.
//!
//! Parameter lists that changed between versions take the longer form and forward all of it, as in
//! `hooks::cuda`: `cuGetProcAddress` gained a fifth parameter in CUDA 12 (`_v2`), and
//! `cudaGetDriverEntryPoint` a fourth.

#![allow(non_snake_case, clippy::missing_safety_doc)]
#![cfg_attr(test, allow(dead_code))]

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::ffi::{Status, CUDA_ERROR_NOT_SUPPORTED, CU_ERROR_NOT_SUPPORTED, HIP_ERROR_NOT_SUPPORTED};
use crate::procs::map_out;
use crate::real::RealFn;

/// Defines a lookup hook: forward, then `map_out` with the named symbol, result and flags arguments.
macro_rules! lookup_hook {
    ($name:ident($symbol:ident, $out:ident, $($arg:ident: $ty:ty),*); flags = $flags:ident; missing = $missing:expr) => {
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($symbol: *const c_char, $out: *mut *mut c_void, $($arg: $ty),*) -> Status {
            static REAL: RealFn<unsafe extern "C" fn(*const c_char, *mut *mut c_void, $($ty),*) -> Status> =
                // SAFETY: the hook's parameter list is the runtime header's declaration (the longest one).
                unsafe { RealFn::new(crate::hooks::c_name(concat!(stringify!($name), "\0"))) };
            let Some(real) = REAL.get() else { return $missing };
            // SAFETY: forwards the caller's arguments, unchanged, to the real function.
            let result = unsafe { real($symbol, $out, $($arg),*) };
            map_out(result, $symbol, $out, $flags);
            result
        }
    };
}

lookup_hook!(cuGetProcAddress(symbol, pfn, version: c_int, flags: u64, status: *mut c_int); flags = flags;
    missing = CU_ERROR_NOT_SUPPORTED);
lookup_hook!(cuGetProcAddress_v2(symbol, pfn, version: c_int, flags: u64, status: *mut c_int); flags = flags;
    missing = CU_ERROR_NOT_SUPPORTED);
lookup_hook!(cudaGetDriverEntryPoint(symbol, function, flags: u64, status: *mut c_int); flags = flags;
    missing = CUDA_ERROR_NOT_SUPPORTED);
lookup_hook!(cudaGetDriverEntryPointByVersion(symbol, function, version: c_uint, flags: u64, status: *mut c_int);
    flags = flags; missing = CUDA_ERROR_NOT_SUPPORTED);
lookup_hook!(hipGetProcAddress(symbol, pfn, version: c_int, flags: u64, status: *mut c_int); flags = flags;
    missing = HIP_ERROR_NOT_SUPPORTED);
