//! The trace clock: `CLOCK_MONOTONIC` in nanoseconds. Every timestamp of a trace is on it, and a
//! harness in another process (`sweep --trace` timing a request) reads the same clock, so windows
//! join to requests without conversion. Rust's `Instant` uses this clock too but does not expose
//! its value. `clock_gettime` is async-signal-safe, so the crash path may read it.

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
compile_error!("the trace clock is written for 64-bit Linux, where time_t and long are 64 bits");

/// `struct timespec` on 64-bit Linux.
#[repr(C)]
struct Timespec {
    tv_sec: std::ffi::c_long,
    tv_nsec: std::ffi::c_long,
}

/// `CLOCK_MONOTONIC` in `<linux/time.h>`.
const CLOCK_MONOTONIC: std::ffi::c_int = 1;

extern "C" {
    /// POSIX `clock_gettime`, from the C library std links already.
    fn clock_gettime(clock: std::ffi::c_int, now: *mut Timespec) -> std::ffi::c_int;
}

/// Name of the clock in the trace header's `clock` field.
pub const NAME: &str = "monotonic";

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn now_ns() -> u64 {
    let mut now = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer; CLOCK_MONOTONIC always
    // exists on Linux, so it cannot fail.
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(now.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn agrees_with_std_instant_and_advances() {
        // std's Instant is CLOCK_MONOTONIC on Linux: an interval measured by both agrees.
        let (a, start) = (super::now_ns(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (b, elapsed) = (super::now_ns(), start.elapsed().as_nanos() as u64);
        assert!(a > 0 && b > a);
        assert!((b - a).abs_diff(elapsed) < 5_000_000, "{} vs {elapsed}", b - a);
    }
}
