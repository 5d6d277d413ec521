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

pub mod capture;
pub mod cuda;
pub mod hip;
pub mod lookup;
pub mod runtime;

/// `concat!(name, "\0")` as a `CStr`, at compile time.
pub const fn c_name(with_nul: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(with_nul.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("hook names are NUL-terminated identifiers"),
    }
}

/// The table of hooked functions: each row writes one runtime function's C signature once and makes from it
/// the exported hook of every name that shares it, the typed [`RealFn`](crate::real::RealFn) each hook
/// forwards to, and (with `looked_up`) the wrappers that `hooks::lookup` hands out when a lookup returns that
/// function by pointer.
///
/// ```text
/// /// docs
/// fn name(arg: Type, …) -> Ret;                    // the signature (no `-> Ret`: a `void` function)
/// also other_name, name_ptsz(per_thread), …;       // optional: more exports of this signature and meaning
/// looked_up lookup_name as WRAPPERS, …;            // optional: lookup wrappers, a `real::Wrappers` static each
/// missing = E;                                     // returned when no runtime defines the function
/// MODE
/// ```
///
/// An export's flags say which one was called: `(per_thread)`, the `_ptsz`/`_spt` stream variant; `(hip)`, a HIP
/// function (the family is CUDA's otherwise: the first name of a row that binds `family` is a CUDA function);
/// `(hip, per_thread)`. A looked-up name takes `(hip)` likewise.
///
/// MODE is what the hook does around forwarding the call:
/// * `after |status, ring, per_thread, family| OBSERVE` — call, then observe with the result, the thread's
///   crash-locus ring (`Option<&Ring>`) for a launch to be remembered in, whether this is the per-thread stream
///   variant, and the runtime family (the trailing ones may be left out);
/// * `before |family| OBSERVE` or `before OBSERVE` — observe, then call (destroy functions: the handle must leave
///   our tables before the runtime can hand the same address out again);
/// * `after |family| OBSERVE` or `after OBSERVE` — a `void` function: call, then observe;
/// * `then |status| MAP` — lookup functions: call, then `MAP` with the result, outside any hook scope (the
///   mapping is done inside another hook too: it changes nothing but an address).
///
/// Every variant costs the same as a hook written by hand: an export's flags are constants of its function,
/// and a lookup wrapper reads its real address from its own slot.
macro_rules! hook {
    // ---- A row: the signature, then its clauses one by one into [exports] [lookup] [missing], then the mode ----
    ($(#[$meta:meta])* fn $name:ident $params:tt $(-> $ret:ty)?; $($clauses:tt)*) => {
        $crate::hooks::hook!(@clauses [[$(#[$meta])*] $params [$($ret)?]] [($name)] [] []; $($clauses)*);
    };
    (@clauses $sig:tt [$($export:tt)*] $lookup:tt $missing:tt;
     also $($alias:ident $(($($flag:ident),+))?),+; $($rest:tt)*) => {
        $crate::hooks::hook!(@clauses $sig [$($export)* $(($alias $($($flag)+)?))+] $lookup $missing; $($rest)*);
    };
    (@clauses $sig:tt $exports:tt $lookup:tt $missing:tt;
     looked_up $($looked_up:ident $(($($flag:ident),+))? as $wrappers:ident),+; $($rest:tt)*) => {
        $crate::hooks::hook!(@clauses $sig $exports [$(($looked_up [$($($flag)+)?] $wrappers))+] $missing; $($rest)*);
    };
    (@clauses $sig:tt $exports:tt $lookup:tt $missing:tt; missing = $value:expr; $($rest:tt)*) => {
        $crate::hooks::hook!(@clauses $sig $exports $lookup [$value]; $($rest)*);
    };
    (@clauses [$meta:tt $params:tt []] $exports:tt $lookup:tt $missing:tt; after |$family:pat_param| $observe:expr) => {
        $crate::hooks::hook!(@row $exports $lookup { $meta $params [] $missing void [$family] $observe });
    };
    (@clauses [$meta:tt $params:tt $ret:tt] $exports:tt $lookup:tt $missing:tt;
     after |$status:pat_param $(, $ring:pat_param $(, $pt:pat_param $(, $family:pat_param)?)?)?| $observe:expr) => {
        $crate::hooks::hook!(@row $exports $lookup
            { $meta $params $ret $missing after [$status, $($ring)?, $($($pt)?)?, $($($($family)?)?)?] $observe });
    };
    (@clauses [$meta:tt $params:tt $ret:tt] $exports:tt $lookup:tt $missing:tt;
     before |$family:pat_param| $observe:expr) => {
        $crate::hooks::hook!(@row $exports $lookup { $meta $params $ret $missing before [$family] $observe });
    };
    (@clauses [$meta:tt $params:tt $ret:tt] $exports:tt $lookup:tt $missing:tt; before $observe:expr) => {
        $crate::hooks::hook!(@row $exports $lookup { $meta $params $ret $missing before [] $observe });
    };
    (@clauses [$meta:tt $params:tt $ret:tt] $exports:tt $lookup:tt $missing:tt; after $observe:expr) => {
        $crate::hooks::hook!(@row $exports $lookup { $meta $params $ret $missing void [] $observe });
    };
    (@clauses [$meta:tt $params:tt $ret:tt] $exports:tt $lookup:tt $missing:tt;
     then |$status:pat_param| $observe:expr) => {
        $crate::hooks::hook!(@row $exports $lookup { $meta $params $ret $missing then [$status] $observe });
    };

    // ---- What a row makes: an exported hook per name, and the lookup wrappers ----
    (@row [$(($export:ident $($flag:ident)*))+] [$(($looked_up:ident $looked_up_flags:tt $wrappers:ident))*]
     $spec:tt) => {
        $($crate::hooks::hook!(@export $export [$($flag)*] $spec);)+
        $($crate::hooks::hook!(@wrappers $looked_up $looked_up_flags $wrappers $spec);)*
    };
    (@per_thread) => { false };
    (@per_thread per_thread) => { true };
    (@per_thread hip) => { false };
    (@per_thread hip per_thread) => { true };
    (@family) => { $crate::ffi::Family::Cuda };
    (@family per_thread) => { $crate::ffi::Family::Cuda };
    (@family hip $($per_thread:ident)?) => { $crate::ffi::Family::Hip };
    (@export $name:ident [$($flag:ident)*]
     { [$(#[$meta:meta])*] ($($arg:ident: $ty:ty),* $(,)?) [$($ret:ty)?] [$($missing:expr)?]
       $mode:ident $bind:tt $observe:expr }) => {
        $(#[$meta])*
        #[cfg_attr(not(test), no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            static REAL: $crate::real::RealFn<unsafe extern "C" fn($($ty),*) $(-> $ret)?> =
                // SAFETY: the hook's own parameter list is the runtime header's declaration of
                // this function, so the real function found under the same name has this type.
                unsafe { $crate::real::RealFn::new($crate::hooks::c_name(concat!(stringify!($name), "\0"))) };
            // Nothing to forward to: the runtime's "not supported" (a registration then has no effect,
            // as without the observer).
            let Some(real) = REAL.get() else { return $($missing)? };
            $crate::hooks::hook!(@call $mode real ($($arg),*) stringify!($name),
                $crate::hooks::hook!(@per_thread $($flag)*), $crate::hooks::hook!(@family $($flag)*); $bind $observe)
        }
    };
    (@wrappers $looked_up:ident [$($flag:ident)*] $wrappers:ident
     { $meta:tt ($($arg:ident: $ty:ty),* $(,)?) [$ret:ty] $missing:tt $mode:ident $bind:tt $observe:expr }) => {
        pub(crate) static $wrappers: $crate::real::Wrappers<unsafe extern "C" fn($($ty),*) -> $ret> = {
            #[allow(clippy::too_many_arguments)]
            unsafe extern "C" fn wrapper<const PER_THREAD: bool, const SLOT: usize>($($arg: $ty),*) -> $ret {
                let real: unsafe extern "C" fn($($ty),*) -> $ret =
                    // SAFETY: the wrapper is handed out only after `SLOT` was bound to the address a lookup
                    // returned for this function, whose C signature is this wrapper's.
                    unsafe { std::mem::transmute::<usize, _>($wrappers.target(PER_THREAD, SLOT)) };
                $crate::hooks::hook!(@call $mode real ($($arg),*) stringify!($looked_up),
                    PER_THREAD, $crate::hooks::hook!(@family $($flag)*); $bind $observe)
            }
            $crate::real::Wrappers::new([
                [wrapper::<false, 0>, wrapper::<false, 1>, wrapper::<false, 2>, wrapper::<false, 3>],
                [wrapper::<true, 0>, wrapper::<true, 1>, wrapper::<true, 2>, wrapper::<true, 3>],
            ])
        };
    };

    // ---- The call itself, `real` found: forward the caller's arguments, unchanged, and observe ----
    (@call after $real:ident ($($arg:ident),*) $call:expr, $per_thread:expr, $family:expr;
     [$status:pat_param, $($ring:pat_param)?, $($pt:pat_param)?, $($fam:pat_param)?] $observe:expr) => {{
        static CALL: &str = $call;
        let scope = $crate::sync::HookScope::enter();
        let ring = scope.as_ref().and_then(|s| s.call_begins(&CALL));
        // SAFETY: forwards the caller's arguments, unchanged, to the real function.
        let result = unsafe { $real($($arg),*) };
        if let Some(ring) = ring {
            ring.call_ends();
        }
        if scope.is_some() {
            let $status = result;
            let $crate::hooks::hook!(@or_ignore $($ring)?) = ring;
            let $crate::hooks::hook!(@or_ignore $($pt)?): bool = $per_thread;
            let $crate::hooks::hook!(@or_ignore $($fam)?): $crate::ffi::Family = $family;
            $crate::state::guarded(|| $observe);
        }
        drop(scope);
        result
    }};
    (@call before $real:ident ($($arg:ident),*) $call:expr, $per_thread:expr, $family:expr;
     [$($fam:pat_param)?] $observe:expr) => {{
        static CALL: &str = $call;
        let scope = $crate::sync::HookScope::enter();
        if scope.is_some() {
            let $crate::hooks::hook!(@or_ignore $($fam)?): $crate::ffi::Family = $family;
            $crate::state::guarded(|| $observe);
        }
        let ring = scope.as_ref().and_then(|s| s.call_begins(&CALL));
        // SAFETY: forwards the caller's arguments, unchanged, to the real function.
        let result = unsafe { $real($($arg),*) };
        if let Some(ring) = ring {
            ring.call_ends();
        }
        drop(scope);
        result
    }};
    (@call void $real:ident ($($arg:ident),*) $call:expr, $per_thread:expr, $family:expr;
     [$($fam:pat_param)?] $observe:expr) => {{
        static CALL: &str = $call;
        let scope = $crate::sync::HookScope::enter();
        let ring = scope.as_ref().and_then(|s| s.call_begins(&CALL));
        // SAFETY: forwards the caller's arguments, unchanged, to the real function.
        unsafe { $real($($arg),*) };
        if let Some(ring) = ring {
            ring.call_ends();
        }
        if scope.is_some() {
            let $crate::hooks::hook!(@or_ignore $($fam)?): $crate::ffi::Family = $family;
            $crate::state::guarded(|| $observe);
        }
        drop(scope);
    }};
    (@call then $real:ident ($($arg:ident),*) $call:expr, $per_thread:expr, $family:expr;
     [$status:pat_param] $observe:expr) => {{
        // SAFETY: forwards the caller's arguments, unchanged, to the real function.
        let result = unsafe { $real($($arg),*) };
        let $status = result;
        $observe;
        result
    }};
    (@or_ignore) => { _ };
    (@or_ignore $name:pat_param) => { $name };
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
