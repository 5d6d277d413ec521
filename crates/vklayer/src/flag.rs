//! The yes-or-no settings the recording hooks ask at every call, in one cache line ([`HOT`]): whether the layer
//! observes, whether it is paused, whether a profile is impersonated, where the black box puts its markers. A hook
//! runs between two of the driver's calls, whose code and data push the layer's out of the core's first-level caches;
//! one line of settings instead of five statics wherever the linker put them is four fewer lines to bring back per
//! call. Each field's meaning belongs to the module that sets it (named on the field).
//!
//! Settings worked out once ([`OnceFlag`]) come from `OnceLock`s behind environment variables and files, which cost
//! more to ask each time.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// See the module documentation.
#[repr(C, align(64))]
pub struct Hot {
    /// `crate::state`'s life cycle (not started, on, off).
    pub state: AtomicU8,
    /// `crate::switch`: observation paused.
    pub paused: AtomicBool,
    /// `crate::impersonate::impersonating`.
    pub impersonating: OnceFlag,
    /// `crate::progress::markers_per_dispatch`.
    pub markers_per_dispatch: OnceFlag,
    /// `crate::progress::markers_at_barriers`.
    pub markers_at_barriers: OnceFlag,
}

pub static HOT: Hot = Hot {
    // Not started (`crate::state` reads 0 as that).
    state: AtomicU8::new(0),
    paused: AtomicBool::new(false),
    impersonating: OnceFlag::new(),
    markers_per_dispatch: OnceFlag::new(),
    markers_at_barriers: OnceFlag::new(),
};

/// 0: not worked out yet, 1: no, 2: yes.
pub struct OnceFlag(AtomicU8);

impl OnceFlag {
    pub const fn new() -> OnceFlag {
        OnceFlag(AtomicU8::new(0))
    }

    /// The answer, from `work_out` the first time (two threads asking first may both call it: it must give the same
    /// answer every time).
    #[inline(always)]
    pub fn get(&self, work_out: fn() -> bool) -> bool {
        match self.0.load(Ordering::Relaxed) {
            1 => false,
            2 => true,
            _ => self.first(work_out),
        }
    }

    /// Whether the answer was worked out as yes; "no" while it is not worked out. For the bind and dispatch hooks,
    /// which run only after `crate::start::start` worked out every flag they read (a command buffer needs a device,
    /// a device an instance, and the first instance starts the layer): one load and one compare, without the branch
    /// to the first asking that `get` keeps beside every use.
    #[inline(always)]
    pub fn worked_out_yes(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 2
    }

    #[cold]
    #[inline(never)]
    fn first(&self, work_out: fn() -> bool) -> bool {
        let yes = work_out();
        self.0.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
        yes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    static CALLS: AtomicU32 = AtomicU32::new(0);

    fn yes_once() -> bool {
        CALLS.fetch_add(1, Ordering::Relaxed) == 0
    }

    #[test]
    fn the_answer_is_worked_out_once_and_kept() {
        let flag = OnceFlag::new();
        assert!(flag.get(yes_once));
        assert!(flag.get(yes_once), "kept, although the function would now say no");
        assert_eq!(CALLS.load(Ordering::Relaxed), 1);
        assert!(!OnceFlag::new().get(|| false));
    }

    #[test]
    fn not_worked_out_reads_as_no() {
        let flag = OnceFlag::new();
        assert!(!flag.worked_out_yes());
        assert!(flag.get(|| true));
        assert!(flag.worked_out_yes());
        let no = OnceFlag::new();
        assert!(!no.get(|| false));
        assert!(!no.worked_out_yes());
    }
}
