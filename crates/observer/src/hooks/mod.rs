//! The exported entry points. Each one:
//!
//! 1. finds the real function (lazily, `crate::real`); if there is none, returns the runtime's
//!    "not supported" code (or null / nothing) without forwarding;
//! 2. marks the thread as inside a hook, so that nested hooks only forward;
//! 3. calls the real function with the caller's arguments, unchanged;
//! 4. observes (count, register, capture bookkeeping) inside `catch_unwind`; a panic disables the
//!    observer and never reaches the C caller;
//! 5. returns the real function's result.
//!
//! Exports are `cfg_attr(not(test), no_mangle)`: the crate's own unit-test binary does not
//! interpose on anything.

use std::ffi::CStr;

pub mod cuda;
pub mod hip;
pub mod lookup;

/// `concat!(name, "\0")` as a `CStr`, at compile time.
pub const fn c_name(with_nul: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(with_nul.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("hook names are NUL-terminated identifiers"),
    }
}

/// Defines a hook named like the runtime function it wraps.
///
/// * `-> T; missing = E; after |status| OBSERVE` — call, then observe with the result.
/// * `-> T; missing = E; after |status, ring| OBSERVE` — the same, with the thread's crash-locus ring
///   (`Option<&Ring>`) for a launch to be remembered in.
/// * `-> T; missing = E; before OBSERVE` — observe, then call (destroy functions: the handle must
///   leave our tables before the runtime can hand the same address out again).
/// * `; after OBSERVE` — a `void` function.
macro_rules! hook {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
     missing = $missing:expr; after |$result:pat_param| $observe:expr) => {
        $crate::hooks::hook! {
            $(#[$meta])* fn $name($($arg: $ty),*) -> $ret; missing = $missing; after |$result, _ring| $observe
        }
    };
    ($(#[$meta:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
     missing = $missing:expr; after |$result:pat_param, $ring:ident| $observe:expr) => {
        $(#[$meta])*
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            static REAL: $crate::real::RealFn<unsafe extern "C" fn($($ty),*) -> $ret> =
                // SAFETY: the hook's own parameter list is the runtime header's declaration of
                // this function, so the real function found under the same name has this type.
                unsafe { $crate::real::RealFn::new($crate::hooks::c_name(concat!(stringify!($name), "\0"))) };
            static CALL: &str = stringify!($name);
            let Some(real) = REAL.get() else { return $missing };
            let scope = $crate::sync::HookScope::enter();
            let ring = scope.as_ref().and_then(|s| s.call_begins(&CALL));
            // SAFETY: forwards the caller's arguments, unchanged, to the real function.
            let result = unsafe { real($($arg),*) };
            if let Some(ring) = ring {
                ring.call_ends();
            }
            if scope.is_some() {
                let $result = result;
                #[allow(unused_variables)]
                let $ring = ring;
                $crate::state::guarded(|| $observe);
            }
            drop(scope);
            result
        }
    };
    ($(#[$meta:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
     missing = $missing:expr; before $observe:expr) => {
        $(#[$meta])*
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            static REAL: $crate::real::RealFn<unsafe extern "C" fn($($ty),*) -> $ret> =
                // SAFETY: as above: the parameter list is the runtime's declaration.
                unsafe { $crate::real::RealFn::new($crate::hooks::c_name(concat!(stringify!($name), "\0"))) };
            static CALL: &str = stringify!($name);
            let Some(real) = REAL.get() else { return $missing };
            let scope = $crate::sync::HookScope::enter();
            if scope.is_some() {
                $crate::state::guarded(|| $observe);
            }
            let ring = scope.as_ref().and_then(|s| s.call_begins(&CALL));
            // SAFETY: forwards the caller's arguments, unchanged, to the real function.
            let result = unsafe { real($($arg),*) };
            if let Some(ring) = ring {
                ring.call_ends();
            }
            drop(scope);
            result
        }
    };
    ($(#[$meta:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?); after $observe:expr) => {
        $(#[$meta])*
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) {
            static REAL: $crate::real::RealFn<unsafe extern "C" fn($($ty),*)> =
                // SAFETY: as above: the parameter list is the runtime's declaration.
                unsafe { $crate::real::RealFn::new($crate::hooks::c_name(concat!(stringify!($name), "\0"))) };
            static CALL: &str = stringify!($name);
            // Nothing to forward to: the registration has no effect, as without the observer.
            let Some(real) = REAL.get() else { return };
            let scope = $crate::sync::HookScope::enter();
            let ring = scope.as_ref().and_then(|s| s.call_begins(&CALL));
            // SAFETY: forwards the caller's arguments, unchanged, to the real function.
            unsafe { real($($arg),*) };
            if let Some(ring) = ring {
                ring.call_ends();
            }
            if scope.is_some() {
                $crate::state::guarded(|| $observe);
            }
            drop(scope);
        }
    };
}

pub(crate) use hook;

use crate::ffi::Dim3;
use crate::registry::Shape;

pub(crate) fn shape(grid: Dim3, block: Dim3) -> Shape {
    Shape { grid: [grid.x, grid.y, grid.z], block: [block.x, block.y, block.z] }
}

#[cfg(test)]
mod tests {
    #[test]
    fn c_names_are_nul_terminated() {
        assert_eq!(super::c_name("hipLaunchKernel\0").to_bytes(), b"hipLaunchKernel");
    }
}
