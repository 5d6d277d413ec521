//! Finding the real runtime functions behind the hooks.
//!
//! Each hooked or called runtime function has a [`RealFn`] that caches its address in an atomic.
//! Resolution happens at the first call, not at load time, because ggml backends (and the
//! runtimes they link) are `dlopen`ed long after the observer is preloaded.
//!
//! Order of the search:
//! Lookups use glibc's `dlsym` directly (`crate::glibc_dlsym::real_dlsym`), never the observer's own.
//!
//! 1. `dlsym(RTLD_NEXT)`: the object after this one in the global lookup order, the classic
//!    interposition lookup.
//! 2. `dlsym(RTLD_DEFAULT)`: the global scope, minus our own definition.
//! 3. Every loaded object, through a `dlopen(RTLD_NOLOAD)` handle: a runtime that arrived as a
//!    dependency of a library `dlopen`ed with `RTLD_LOCAL` (what ggml's backend loader does) is in
//!    no global scope, so 1 and 2 miss it, yet the backend's calls still reach our hook first
//!    because the global scope is searched before the backend's local one.
//!
//! A miss is cached together with the loader's object-count generation and retried only after
//! something new was loaded, so a hook for an absent runtime stays cheap.
//!
//! A function that a lookup hands out by pointer (`hooks::lookup`) has its real address already: a
//! [`Wrappers`] binds it to a wrapper of its own.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

const UNRESOLVED: usize = 0;
const MISSING: usize = 1;

/// The cached address of one real C function of type `F` (an `unsafe extern "C" fn` pointer).
pub struct RealFn<F> {
    name: &'static CStr,
    addr: AtomicUsize,
    missing_at_generation: AtomicUsize,
    _signature: PhantomData<F>,
}

impl<F: Copy> RealFn<F> {
    /// # Safety
    /// `F` must be the exact C signature of the function called `name` in the runtimes, because
    /// [`RealFn::get`] turns the found address into an `F`.
    pub const unsafe fn new(name: &'static CStr) -> Self {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
        RealFn {
            name,
            addr: AtomicUsize::new(UNRESOLVED),
            missing_at_generation: AtomicUsize::new(0),
            _signature: PhantomData,
        }
    }

    /// The real function, or `None` if no loaded object defines it.
    #[inline(always)]
    pub fn get(&self) -> Option<F> {
        let addr = self.addr.load(Ordering::Acquire);
        if addr > MISSING {
            // SAFETY: `addr` is a non-null code address that dlsym returned for `self.name`, whose
            // signature is `F` (the obligation of `RealFn::new`); `F` is pointer-sized (checked in
            // `new`).
            Some(unsafe { std::mem::transmute_copy::<usize, F>(&addr) })
        } else {
            self.resolve_slow(addr)
        }
    }

    #[cold]
    #[inline(never)]
    fn resolve_slow(&self, cached: usize) -> Option<F> {
        // No panic may escape into the C caller: any failure here reads as "missing".
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let generation = loaded_objects_generation();
            if cached == MISSING && generation == self.missing_at_generation.load(Ordering::Relaxed) {
                return None;
            }
            match find_symbol(self.name) {
                0 => {
                    self.missing_at_generation.store(generation, Ordering::Relaxed);
                    self.addr.store(MISSING, Ordering::Release);
                    None
                }
                addr => {
                    self.addr.store(addr, Ordering::Release);
                    Some(addr)
                }
            }
        }))
        .ok()
        .flatten()?;
        // SAFETY: as in `get`: a non-null address of the function named `self.name`, of type `F`.
        Some(unsafe { std::mem::transmute_copy::<usize, F>(&found) })
    }

    /// Forgets a cached result (tests only: lets one process resolve again).
    #[cfg(test)]
    pub fn reset(&self) {
        self.addr.store(UNRESOLVED, Ordering::Release);
    }
}

/// The address of the real definition of `name` outside this library, or 0.
fn find_symbol(name: &CStr) -> usize {
    for handle in [libc::RTLD_NEXT, libc::RTLD_DEFAULT] {
        // glibc's dlsym, not the observer's: RTLD_NEXT means "after the observer", and no wrapper.
        let addr = crate::glibc_dlsym::real_dlsym(handle, name.as_ptr()) as usize;
        if addr != 0 && !is_ours(addr) {
            return addr;
        }
    }
    search_loaded_objects(name)
}

fn search_loaded_objects(name: &CStr) -> usize {
    let own = own_path();
    for object in loaded_object_names() {
        if own.as_deref() == Some(object.as_c_str()) {
            continue;
        }
        // SAFETY: `object` is a NUL-terminated path of an object that is loaded; RTLD_NOLOAD only
        // takes a reference to it (never loads anything), and the reference is dropped below.
        let handle = unsafe { libc::dlopen(object.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            continue;
        }
        // A live handle from dlopen and a NUL-terminated name; glibc's dlsym, so no wrapper comes back.
        let addr = crate::glibc_dlsym::real_dlsym(handle, name.as_ptr()) as usize;
        // SAFETY: `handle` came from the successful dlopen above and is closed once; the object
        // stays loaded because its original loader still holds a reference.
        unsafe { libc::dlclose(handle) };
        if addr != 0 && !is_ours(addr) {
            return addr;
        }
    }
    0
}

/// Paths of the loaded objects, in load order, collected first and opened afterwards: calling
/// `dlopen` from inside the `dl_iterate_phdr` callback would nest loader locks.
fn loaded_object_names() -> Vec<CString> {
    unsafe extern "C" fn collect(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: `data` is the `&mut Vec<CString>` passed below, alive for the whole iteration;
        // `info` is valid for the duration of the callback.
        let (names, info) = unsafe { (&mut *(data as *mut Vec<CString>), &*info) };
        if !info.dlpi_name.is_null() {
            // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) };
            // The empty name is the main program (searching it means the global scope, done
            // already); the vDSO has no file.
            if !name.is_empty() && !name.to_bytes().starts_with(b"linux-vdso") {
                names.push(name.to_owned());
            }
        }
        0
    }
    let mut names: Vec<CString> = Vec::new();
    // SAFETY: the callback matches the expected signature and only touches `names`.
    unsafe { libc::dl_iterate_phdr(Some(collect), &mut names as *mut Vec<CString> as *mut c_void) };
    names
}

/// A number that changes whenever an object is loaded or unloaded.
fn loaded_objects_generation() -> usize {
    unsafe extern "C" fn read(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: `data` is the `&mut usize` passed below; `info` is valid during the callback.
        unsafe {
            let info = &*info;
            *(data as *mut usize) = (info.dlpi_adds as usize).wrapping_add((info.dlpi_subs as usize) << 32);
        }
        1 // the counters are the same in every entry: stop after the first
    }
    let mut generation = 0usize;
    // SAFETY: the callback matches the expected signature and only writes `generation`.
    unsafe { libc::dl_iterate_phdr(Some(read), &mut generation as *mut usize as *mut c_void) };
    generation
}

fn own_info() -> Option<libc::Dl_info> {
    // SAFETY: Dl_info is plain old data; dladdr fills it for an address inside a loaded object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = own_info as fn() -> Option<libc::Dl_info> as *const c_void;
    // SAFETY: `here` is the address of a function of this library; `info` is writable.
    (unsafe { libc::dladdr(here, &mut info) } != 0).then_some(info)
}

/// Base address of this library (the observer `.so`).
fn own_base() -> usize {
    static BASE: AtomicUsize = AtomicUsize::new(0);
    let cached = BASE.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    let base = own_info().map_or(0, |info| info.dli_fbase as usize);
    BASE.store(base, Ordering::Relaxed);
    base
}

/// Path of this library as the loader knows it.
pub fn own_path() -> Option<CString> {
    let info = own_info()?;
    if info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    Some(unsafe { CStr::from_ptr(info.dli_fname as *const c_char) }.to_owned())
}

pub fn is_ours(addr: usize) -> bool {
    // SAFETY: Dl_info is plain old data.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only inspects the loader's tables for `addr`.
    let found = unsafe { libc::dladdr(addr as *const c_void, &mut info) } != 0;
    found && info.dli_fbase as usize == own_base()
}

/// Distinct addresses wrapped per function and stream variant (one driver normally gives one or two).
pub const SLOTS: usize = 4;

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

/// The wrappers a lookup hands out for one function (made by its row of the `hooks::hook!` table): per stream
/// variant (`[legacy, per-thread]`), [`SLOTS`] functions of type `F`, each forwarding to the address bound to its
/// own slot, so that a call costs one load more than calling that address.
pub struct Wrappers<F> {
    targets: [Targets; 2],
    functions: [[F; SLOTS]; 2],
}

impl<F: Copy> Wrappers<F> {
    /// `functions[v][s]` must forward to `self.target(v == 1, s)`, as the table's wrappers do.
    pub const fn new(functions: [[F; SLOTS]; 2]) -> Wrappers<F> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
        Wrappers { targets: [Targets::new(), Targets::new()], functions }
    }

    /// The address the wrapper of `slot` forwards to (read by that wrapper on each call).
    #[inline(always)]
    pub fn target(&self, per_thread: bool, slot: usize) -> usize {
        self.targets[usize::from(per_thread)].get(slot)
    }

    /// The wrapper bound to `real` (binding a free slot if needed), as an address; `None` when all are taken.
    pub fn bind(&self, per_thread: bool, real: usize) -> Option<usize> {
        let v = usize::from(per_thread);
        let slot = self.targets[v].slot_for(real)?;
        // SAFETY: `F` is a function pointer type, pointer-sized (checked in `new`): its bits are the address.
        Some(unsafe { std::mem::transmute_copy::<F, usize>(&self.functions[v][slot]) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type StrlenFn = unsafe extern "C" fn(*const c_char) -> usize;

    #[test]
    fn resolves_a_libc_function_and_calls_it() {
        // SAFETY: strlen has this signature.
        static STRLEN: RealFn<StrlenFn> = unsafe { RealFn::new(c"strlen") };
        let strlen = STRLEN.get().expect("libc's strlen is loaded");
        // SAFETY: a NUL-terminated string.
        assert_eq!(unsafe { strlen(c"backscope".as_ptr()) }, 9);
        STRLEN.reset();
    }

    #[test]
    fn a_missing_function_is_none_and_stays_cheap() {
        // SAFETY: never called.
        static ABSENT: RealFn<StrlenFn> = unsafe { RealFn::new(c"backscope_no_such_function_anywhere") };
        assert!(ABSENT.get().is_none());
        assert_eq!(ABSENT.addr.load(Ordering::Relaxed), MISSING);
        assert!(ABSENT.get().is_none());
    }

    #[test]
    fn loaded_objects_include_libc() {
        let names = loaded_object_names();
        assert!(names.iter().any(|n| n.to_bytes().windows(4).any(|w| w == b"libc")), "{names:?}");
        assert_ne!(loaded_objects_generation(), 0);
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
