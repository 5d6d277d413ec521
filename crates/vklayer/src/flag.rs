//! A yes-or-no setting worked out once and then read with one relaxed byte load: the recording hooks ask some at
//! every call (whether a profile is impersonated, where the black box puts its markers), and the settings they come
//! from (`OnceLock`s behind environment variables and files) cost more to ask each time.

use std::sync::atomic::{AtomicU8, Ordering};

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
}
