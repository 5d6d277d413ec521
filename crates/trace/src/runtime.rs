//! What both observer libraries (the CUDA/HIP observer and the Vulkan layer) do the same way around their work:
//! say something on stderr (once, for the reason they stop), turn a panic into that line, stay loaded for the life
//! of the process, and name threads without touching thread-local storage.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

/// Writes `bytes` to fd 2 whole (retrying after interruptions); a closed stderr just drops them.
pub fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice to fd 2.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            // SAFETY: reads this thread's errno.
            if n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// The one line an observer library writes on stderr for each thing it has to say, prefixed with its name and
/// the process id (`backscope-observer[123]: …`); the reason it stops observing is said once.
#[derive(Debug)]
pub struct Reporter {
    name: &'static str,
    stopped: AtomicBool,
}

impl Reporter {
    pub const fn new(name: &'static str) -> Reporter {
        Reporter { name, stopped: AtomicBool::new(false) }
    }

    /// One line on stderr.
    pub fn note(&self, what: fmt::Arguments<'_>) {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        write_stderr(format!("{}[{pid}]: {what}\n", self.name).as_bytes());
    }

    /// The line saying why observation stops; only the first call of a process image writes it.
    pub fn stop_once(&self, why: fmt::Arguments<'_>) {
        if !self.stopped.swap(true, Ordering::AcqRel) {
            self.note(why);
        }
    }
}

/// The message of a panic payload (`panic!("…")` with or without arguments); empty for any other payload.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Keeps the library that holds `address` (the address of a function of it) loaded until the process ends: its writer thread
/// and exit flush run its code, whoever `dlclose`s it (the Vulkan loader unloads a layer with its last instance).
/// Takes the dynamic loader's lock: never call it while a thread may wait inside a library constructor.
pub fn pin_in_memory(address: usize) {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only looks the address up (it never reads through it) and fills `info`.
    let found = unsafe { libc::dladdr(address as *const libc::c_void, &mut info) };
    if found != 0 && !info.dli_fname.is_null() {
        // SAFETY: RTLD_NOLOAD|RTLD_NODELETE on an object already loaded only marks it as never to be unloaded; the
        // extra reference is deliberately kept.
        unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
    }
}

/// The kernel thread id of the calling thread (async-signal-safe).
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    (unsafe { libc::syscall(libc::SYS_gettid) }) as u32
}

/// A number that no other running thread has: `pthread_self()`, which on Linux is the address of the thread's
/// control block, read from the thread pointer without touching TLS tables (a TLS lookup from a shared library is
/// a call into the dynamic loader). Never 0. A thread that starts after another ended may get the same number;
/// thread exit and creation order all memory accesses of the old thread before those of the new one.
#[inline(always)]
pub fn thread_token() -> usize {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as usize }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_payloads_give_their_message() {
        let text = std::panic::catch_unwind(|| panic!("static text")).unwrap_err();
        assert_eq!(panic_text(text.as_ref()), "static text");
        let formatted = std::panic::catch_unwind(|| panic!("slot {}", 7)).unwrap_err();
        assert_eq!(panic_text(formatted.as_ref()), "slot 7");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(7u32)).unwrap_err();
        assert_eq!(panic_text(other.as_ref()), "");
    }

    #[test]
    fn thread_ids_and_tokens_tell_live_threads_apart() {
        let (tid, token) = (gettid(), thread_token());
        assert_ne!(tid, 0);
        let other = std::thread::spawn(|| (gettid(), thread_token())).join().unwrap();
        assert_ne!(other.0, tid);
        assert_ne!(token, 0);
    }
}
