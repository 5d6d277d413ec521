//! `dlsym`: the observer's own lookups, and the interposed `dlsym` through which vendor libraries
//! reach the driver.
//!
//! cuBLAS and cuBLASLt carry a static CUDA runtime that `dlopen`s `libcuda.so.1` and asks
//! `dlsym(handle, "cuGetProcAddress_v2")` for the driver's entry point table; rocBLAS can do the same
//! with `hipGetProcAddress`. Symbol interposition never sees those calls, so the observer exports a
//! `dlsym` of its own. It must not change what any lookup returns except the launch entry points of
//! [`crate::hooks::lookup`], and must keep glibc's meaning of `RTLD_NEXT`: "the next object after the
//! caller's", which glibc finds from the return address of the `dlsym` call. So:
//!
//! * a lookup in `RTLD_DEFAULT` or `RTLD_NEXT` jumps straight into glibc's `dlsym` (a tail jump, so the
//!   return address glibc reads is the caller's). These pseudo-handles search the global scope, where
//!   the observer's exported hooks come first anyway;
//! * a lookup in a real handle (the caller's address does not matter to glibc then) goes through
//!   [`crate::hooks::lookup::on_lookup`], which hands back a wrapper for a launch entry point and the real
//!   address for everything else.
//!
//! The real `dlsym` is found with `dlvsym(RTLD_NEXT, "dlsym", <glibc version>)`, which does not go
//! through the interposed `dlsym`; the observer's own lookups call it directly ([`crate::glibc_dlsym::real_dlsym`]), so
//! they neither recurse nor get wrappers. The interposed `dlsym` exists on x86-64 only (its first
//! instructions are assembly); elsewhere the observer sees only the lookups that reach its exports.

use std::ffi::{c_char, c_void};

#[cfg(all(target_arch = "x86_64", not(test)))]
use crate::glibc_dlsym::REAL_DLSYM;
use crate::glibc_dlsym::{real_dlsym, resolve_real_dlsym};

/// A lookup in a real handle: glibc's answer, or a wrapper for a launch entry point.
#[cfg_attr(any(test, not(target_arch = "x86_64")), allow(dead_code))]
extern "C" fn dlsym_in_handle(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let found = real_dlsym(handle, name);
    if found.is_null() || name.is_null() {
        return found;
    }
    std::panic::catch_unwind(|| crate::hooks::lookup::on_lookup(name, found as usize, 0) as *mut c_void)
        .unwrap_or(found)
}

/// The interposed `dlsym` (module docs). `RTLD_DEFAULT` is 0 and `RTLD_NEXT` is -1 in glibc.
///
/// # Safety
/// As glibc's `dlsym`: a handle from `dlopen` or a pseudo-handle, and a NUL-terminated name.
#[cfg(all(target_arch = "x86_64", not(test)))]
#[no_mangle]
#[unsafe(naked)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    std::arch::naked_asm!(
        "test rdi, rdi",
        "je 2f",
        "cmp rdi, -1",
        "je 2f",
        // A real handle: the caller's address does not matter to glibc.
        "jmp {in_handle}",
        "2:",
        // A pseudo-handle: tail-jump into glibc's dlsym, so that it sees the caller's return address.
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        // First use: find glibc's dlsym, keeping the arguments (the stack is 16-byte aligned at the call).
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "ret",
        in_handle = sym dlsym_in_handle,
        real = sym REAL_DLSYM,
        resolve = sym resolve_real_dlsym,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibcs_dlsym_is_found_and_looks_up_in_the_global_scope() {
        assert_ne!(resolve_real_dlsym(), 0);
        let strlen = real_dlsym(libc::RTLD_DEFAULT, c"strlen".as_ptr());
        assert!(!strlen.is_null());
        // SAFETY: dlopen of libc, already loaded, only takes a reference.
        let libc_handle = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        assert!(!libc_handle.is_null());
        assert_eq!(dlsym_in_handle(libc_handle, c"strlen".as_ptr()), strlen, "not a launch entry point: unchanged");
        assert!(dlsym_in_handle(libc_handle, c"no_such_symbol_anywhere".as_ptr()).is_null());
        // SAFETY: drops the reference taken above.
        unsafe { libc::dlclose(libc_handle) };
    }
}
