//! A run-time switch that pauses and resumes observation, for in-process A/B measurements of the
//! layer's cost (`bench/gpu/vk_decode_ab.cpp` finds it with `dlsym` and alternates decode rounds
//! observed and paused inside one process, where two separate runs differ by more than the effect).
//!
//! While paused, the hooks forward every call without following command buffers or counting
//! submissions: what remains is the loader–layer forwarding itself (one indirect call and a
//! dispatch-table lookup per call), which the A/B's plain arm therefore includes. A paused layer
//! counts nothing, so the switch is meant to be flipped between submissions of complete command
//! buffers (between `llama_decode` calls), not while one is being recorded. Nothing else uses it:
//! a process that never calls it observes as before.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

/// Kept with the other settings the hooks read at every call.
static PAUSED: &crate::flag::Lane = &crate::flag::PAUSED;

/// Whether observation is paused. One relaxed load, checked by the recording and submission hooks.
#[inline(always)]
pub fn paused() -> bool {
    PAUSED.load(Ordering::Relaxed) != 0
}

/// Resumes observation when `observe` is non-zero and pauses it when zero; returns whether it was
/// observing before (1) or paused (0). Safe to call from any thread at any time: it only stores a flag.
#[cfg_attr(not(test), no_mangle)]
pub extern "C" fn backscope_vk_set_observing(observe: c_int) -> c_int {
    let was_paused = PAUSED.swap(u8::from(observe == 0), Ordering::SeqCst) != 0;
    c_int::from(!was_paused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_reports_what_it_replaced() {
        assert!(!paused());
        assert_eq!(backscope_vk_set_observing(0), 1);
        assert!(paused());
        assert_eq!(backscope_vk_set_observing(0), 0);
        assert_eq!(backscope_vk_set_observing(1), 0);
        assert!(!paused());
    }
}
