//! glibc's own `dlsym`, found once with `dlvsym(RTLD_NEXT, "dlsym", <glibc version>)`, which does not go through the
//! observer's interposed `dlsym` (`crate::dl`): the observer's own lookups call it directly, so they neither recurse
//! nor get wrappers.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Address of glibc's `dlsym`; 0 until resolved.
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// glibc versions of `dlsym`: 2.34 moved it from libdl into libc; 2.2.5 is the x86-64 baseline
/// (libdl before 2.34), 2.17 the AArch64 one.
const DLSYM_VERSIONS: [&std::ffi::CStr; 3] = [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"];

/// Finds glibc's `dlsym` (once; later calls read the cache). Returns 0 if no version is found.
pub extern "C" fn resolve_real_dlsym() -> usize {
    let cached = REAL_DLSYM.load(Ordering::Acquire);
    if cached != 0 {
        return cached;
    }
    let found = DLSYM_VERSIONS
        .iter()
        // SAFETY: dlvsym with RTLD_NEXT and NUL-terminated strings; it is not interposed.
        .map(|version| unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) } as usize)
        .find(|&addr| addr != 0)
        .unwrap_or(0);
    REAL_DLSYM.store(found, Ordering::Release);
    found
}

/// glibc's `dlsym`, called from this library: `RTLD_NEXT` means "after the observer".
pub fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    match resolve_real_dlsym() {
        0 => std::ptr::null_mut(),
        addr => {
            // SAFETY: `addr` is glibc's dlsym, found by its versioned name; it has this signature.
            let f: DlsymFn = unsafe { std::mem::transmute::<usize, DlsymFn>(addr) };
            // SAFETY: the caller passes a handle and a NUL-terminated name, as dlsym requires.
            unsafe { f(handle, name) }
        }
    }
}
