//! Every limit on what one scan may spend, in one place.
//!
//! Each decoder bounds its own work ([`binfmt::Limits`]: payload sizes, entries per bundle, kernels per code
//! object). The budgets here ([`ScanLimits`], and [`DECOMPRESSED_IN_FLIGHT`] for the whole process) span
//! many decoder calls: what hostile input could multiply even when every field is in bounds. Hitting one
//! is never fatal: it becomes a [`Problem`](super::Problem) that names the file, the offset where known,
//! and the limit, and the scan goes on with what it has. The defaults sit far
//! above anything real inputs need; the real maxima quoted below are from the fixtures of
//! `scripts/fixtures.sh` (ROCm, CUDA and rocBLAS libraries of 5 MB to 400 MB).

use std::sync::{Condvar, Mutex, PoisonError};

/// The budgets of one scan, with the decoders' own caps inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanLimits {
    /// Caps of each decoder call.
    pub decode: binfmt::Limits,
    /// Kernels decoded per file, over all its code objects, cubins and PTX entries (each becomes a record of
    /// about 200 bytes, more with `--kernels`). The real maximum is 43,450 (a rocBLAS library).
    pub kernels_per_file: u64,
    /// Candidate paths examined while resolving one file's `DT_NEEDED` chain. Each name is looked up in
    /// every RPATH, RUNPATH and library directory, so names × directories multiply (30,000 × 30,000 fit
    /// in a 1 MB file). Real libraries need a few hundred.
    pub dependency_probes_per_file: u64,
    /// `DT_NEEDED` names resolved per file, its whole chain included. The real maximum is 19.
    pub dependencies_per_file: u64,
    /// Candidate paths looked up on disk in the whole scan (lookups of the same path are remembered and
    /// counted once).
    pub dependency_probes_per_scan: u64,
    /// Bytes of candidate paths examined while resolving one file's chain, and of its search directories
    /// after `$ORIGIN` expansion. Counting lookups is not enough: `$ORIGIN` makes a 7-byte RPATH entry a
    /// path as long as the library's directory, so 500 of them in one entry became 10 KB per candidate
    /// (a 117 KB library cost 453 MB). Real chains examine a few hundred paths of about 60 bytes.
    pub dependency_path_bytes_per_file: u64,
    /// Bytes of the distinct paths looked up on disk in the whole scan: the memo of their answers keeps each
    /// one, so this bounds its memory.
    pub dependency_path_bytes_per_scan: u64,
    /// Bytes of one demangled kernel name. Back-references let a 236-byte name demangle to 27 MB; the
    /// longest real one is 843 bytes.
    pub demangled_bytes_per_name: usize,
    /// Bytes of all demangled names of a scan together, each distinct name counted once (the 64,055
    /// distinct mangled and unmangled kernel names of all the fixtures take 22 MB; names that are not
    /// Itanium-mangled are shown as they are and do not count).
    pub demangled_bytes_total: usize,
}

impl ScanLimits {
    /// The defaults, usable in constants.
    pub const DEFAULT: ScanLimits = ScanLimits {
        decode: binfmt::Limits::DEFAULT,
        kernels_per_file: 1 << 19,
        dependency_probes_per_file: 1 << 18,
        dependencies_per_file: 1 << 12,
        dependency_probes_per_scan: 1 << 20,
        dependency_path_bytes_per_file: 32 << 20,
        dependency_path_bytes_per_scan: 64 << 20,
        demangled_bytes_per_name: crate::gpu::kernels::MAX_DEMANGLED_BYTES,
        demangled_bytes_total: 1 << 28,
    };
}

impl Default for ScanLimits {
    fn default() -> Self {
        ScanLimits::DEFAULT
    }
}

/// Bytes of decompressed payloads (and zstd decoder windows) held at once by the whole process, across all
/// threads and scans. Without it every rayon thread could hold a full-size payload: 8 GiB on an 8-thread
/// machine. One full-size payload (`binfmt::Limits::max_decompressed`) with its window fits; several smaller
/// ones decode side by side.
pub const DECOMPRESSED_IN_FLIGHT: u64 = 3 << 29;

/// The process-wide budget of [`DECOMPRESSED_IN_FLIGHT`] bytes: one process, one budget.
pub static DECOMPRESSION: MemoryBudget = MemoryBudget::new(DECOMPRESSED_IN_FLIGHT);

/// A counting semaphore over bytes. A thread that asks for more than is free waits until other threads
/// give theirs back. That cannot deadlock as used here: a thread holds at most one reservation, never
/// waits for anything else while it holds it, and decoding under a reservation is bounded work.
#[derive(Debug)]
pub struct MemoryBudget {
    capacity: u64,
    in_use: Mutex<u64>,
    released: Condvar,
}

/// Bytes taken from a [`MemoryBudget`], given back when dropped.
#[derive(Debug)]
pub struct Reservation<'a> {
    budget: &'a MemoryBudget,
    bytes: u64,
}

impl MemoryBudget {
    pub const fn new(capacity: u64) -> Self {
        MemoryBudget { capacity, in_use: Mutex::new(0), released: Condvar::new() }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Take `bytes`, waiting until they are free; `None` if they exceed the whole capacity (they would
    /// never be).
    pub fn reserve(&self, bytes: u64) -> Option<Reservation<'_>> {
        if bytes > self.capacity {
            return None;
        }
        // The lock guards one integer and nothing panics while it is held; a poisoned lock is still right.
        let mut in_use = self.in_use.lock().unwrap_or_else(PoisonError::into_inner);
        while *in_use + bytes > self.capacity {
            in_use = self.released.wait(in_use).unwrap_or_else(PoisonError::into_inner);
        }
        *in_use += bytes;
        Some(Reservation { budget: self, bytes })
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut in_use = self.budget.in_use.lock().unwrap_or_else(PoisonError::into_inner);
        *in_use -= self.bytes;
        self.budget.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn reservations_never_exceed_the_capacity() {
        let budget = MemoryBudget::new(100);
        assert!(budget.reserve(101).is_none());
        let held = AtomicU64::new(0);
        let peak = AtomicU64::new(0);
        std::thread::scope(|s| {
            for i in 0..8u64 {
                let (budget, held, peak) = (&budget, &held, &peak);
                s.spawn(move || {
                    for _ in 0..200 {
                        let bytes = 30 + i * 5;
                        let _r = budget.reserve(bytes).unwrap();
                        let now = held.fetch_add(bytes, Ordering::SeqCst) + bytes;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        held.fetch_sub(bytes, Ordering::SeqCst);
                    }
                });
            }
        });
        assert!(peak.load(Ordering::SeqCst) <= 100, "peak {}", peak.load(Ordering::SeqCst));
        assert!(peak.load(Ordering::SeqCst) >= 60, "two reservations fit side by side");
        assert_eq!(*budget.in_use.lock().unwrap(), 0);
    }

    #[test]
    fn defaults_hold_one_full_size_payload_with_its_window() {
        let l = ScanLimits::DEFAULT;
        let worst = l.decode.max_decompressed + l.decode.max_decompressed.min(128 << 20);
        assert!(worst <= DECOMPRESSED_IN_FLIGHT);
        assert_eq!(DECOMPRESSION.capacity(), DECOMPRESSED_IN_FLIGHT);
    }
}
