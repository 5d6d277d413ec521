//! The order of dispatches: which pipelines each submitted command buffer dispatched, in order.
//!
//! ggml-vulkan records one graph split into one command buffer, and a decode step repeats the same graph, so the
//! same sequence of pipelines is submitted again and again. Each distinct sequence — runs of (pipeline, dispatches in
//! a row) — is kept once, with an id in order of first submission; submissions count per id, and the writer writes
//! each sequence once (a `sequence` record) and the counts in windows. What is compared with another run is then a
//! few distinct sequences, not every submission.
//!
//! The cost is at submission, not per dispatch: a command buffer's entries are already in recording order (runs of
//! equal dispatches, `crate::commands`), and its sequence is looked up once per recording — a walk over its entries
//! to hash them, one lock-free probe, and a second walk to compare with the kept sequence of that hash — then cached
//! on the buffer until it is recorded again. Only a sequence never seen takes a lock and allocates.
//!
//! Bounds: [`MAX_SEQUENCES`] distinct sequences, [`MAX_SEQUENCE_RUNS`] runs in one, [`MAX_TOTAL_RUNS`] runs in all
//! (8 bytes each: 8 MiB). A submitted buffer whose sequence is not kept (a bound was reached, or its order was lost
//! when it outgrew its entries) counts as sequence [`NOT_KEPT`].

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use ash::vk;
use format::spin::SpinLock;

use crate::commands::{self, SEQUENCE_UNKNOWN};

/// The sequence id of submissions whose order was not kept.
pub const NOT_KEPT: u32 = 0;
/// Distinct sequences kept (ids 1 to this).
pub const MAX_SEQUENCES: u32 = 4096;
/// Runs one kept sequence may have (a command buffer keeps 65,536 entries).
pub const MAX_SEQUENCE_RUNS: usize = 1 << 16;
/// Runs of all kept sequences together.
pub const MAX_TOTAL_RUNS: usize = 1 << 20;

/// A buffer's cached lookup that found no dispatch at all: it counts as no sequence.
const EMPTY: u32 = SEQUENCE_UNKNOWN - 1;
/// Hash slots: twice the sequences, so that probes stay short and a free slot always exists.
const SLOTS: usize = 2 * MAX_SEQUENCES as usize;
const _: () = assert!(SLOTS.is_power_of_two() && (MAX_SEQUENCES as usize) < SLOTS);

/// A kept sequence. Never freed: the writer and later lookups read it without a lock.
struct Kept {
    runs: Box<[(u32, u32)]>,
    first_ns: u64,
}

/// Hash of the sequence in each slot (0: free), published with `Release` after its id.
static HASHES: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static SLOT_IDS: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];
/// By id; index 0 (not kept) stays null.
static KEPT: [AtomicPtr<Kept>; MAX_SEQUENCES as usize + 1] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_SEQUENCES as usize + 1];
/// Submissions per id.
static COUNTS: [AtomicU64; MAX_SEQUENCES as usize + 1] = [const { AtomicU64::new(0) }; MAX_SEQUENCES as usize + 1];
/// Sequences kept: ids 1 to this are published.
static KEPT_COUNT: AtomicU32 = AtomicU32::new(0);
/// A sequence was not kept because the table or the run budget was full (the writer's warning).
static FULL: AtomicBool = AtomicBool::new(false);
/// Whether order is recorded in this process (`BACKSCOPE_VK_ORDER` is not `0`).
static RECORDING: AtomicBool = AtomicBool::new(false);
/// Serialises keeping a new sequence; holds the runs kept so far.
static KEEPING: SpinLock<usize> = SpinLock::new(0);

/// Start-up: whether to record order.
pub fn init(recording: bool) {
    RECORDING.store(recording, Ordering::Relaxed);
}

/// Whether order is recorded (the trace header's `max_sequences`).
pub fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// Counts the submission of `buffers` (the command buffers of a `vkQueueSubmit*` that carried dispatches): one
/// submission of each buffer's sequence. A buffer without dispatches counts nothing.
pub fn count_submission(buffers: impl Iterator<Item = vk::CommandBuffer>) {
    if !recording() {
        return;
    }
    for cb in buffers {
        let Some(state) = commands::get(cb) else { continue };
        let id = match state.sequence.load(Ordering::Relaxed) {
            SEQUENCE_UNKNOWN => {
                let id = look_up(state);
                state.sequence.store(id, Ordering::Relaxed);
                id
            }
            cached => cached,
        };
        if id != EMPTY {
            // Release: the writer that reads this count (Acquire) sees the dispatches counted before it.
            COUNTS[id as usize].fetch_add(1, Ordering::Release);
        }
    }
}

/// The sequence `state` dispatches: found among the kept ones, kept now, [`NOT_KEPT`] or [`EMPTY`].
fn look_up(state: &commands::CommandBuffer) -> u32 {
    let mut hash = Hasher::new();
    let walked = state.runs(MAX_SEQUENCE_RUNS, &mut |slot, n| hash.add(slot, n));
    if walked.runs == 0 && walked.ordered {
        return EMPTY;
    }
    if !walked.ordered {
        return NOT_KEPT;
    }
    let (hash, len) = (hash.finish(), walked.runs);
    let same = |kept: &[(u32, u32)]| {
        let mut i = 0;
        let mut equal = kept.len() == len;
        state.runs(MAX_SEQUENCE_RUNS, &mut |slot, n| {
            equal &= kept.get(i) == Some(&(slot, n));
            i += 1;
        });
        equal
    };
    if let Some(id) = find(hash, same) {
        return id;
    }
    if FULL.load(Ordering::Relaxed) {
        return NOT_KEPT;
    }
    let mut runs = Vec::with_capacity(len);
    state.runs(MAX_SEQUENCE_RUNS, &mut |slot, n| runs.push((slot, n)));
    keep(hash, runs)
}

/// A 64-bit hash of a sequence's runs (FxHash's mix, one word per run); equal hashes are compared run by run.
struct Hasher(u64);

impl Hasher {
    fn new() -> Hasher {
        Hasher(0)
    }

    #[inline(always)]
    fn add(&mut self, slot: u32, n: u32) {
        let word = u64::from(slot) << 32 | u64::from(n);
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    /// Never 0, which marks a free slot.
    fn finish(&self) -> u64 {
        self.0.max(1)
    }
}

/// The kept sequence with `hash` for which `same` holds. Lock-free.
fn find(hash: u64, same: impl Fn(&[(u32, u32)]) -> bool) -> Option<u32> {
    let mut i = hash as usize & (SLOTS - 1);
    for _ in 0..SLOTS {
        match HASHES[i].load(Ordering::Acquire) {
            0 => return None,
            h if h == hash => {
                let id = SLOT_IDS[i].load(Ordering::Relaxed);
                if kept(id).is_some_and(|k| same(&k.runs)) {
                    return Some(id);
                }
            }
            _ => {}
        }
        i = (i + 1) & (SLOTS - 1);
    }
    None
}

fn kept(id: u32) -> Option<&'static Kept> {
    let p = KEPT.get(id as usize)?.load(Ordering::Acquire);
    // SAFETY: a published pointer to a leaked, never-freed, never-changed `Kept`.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Keeps `runs` (hash `hash`) as a new sequence, unless another thread kept it first or a bound is reached.
#[cold]
fn keep(hash: u64, runs: Vec<(u32, u32)>) -> u32 {
    let mut total = KEEPING.lock();
    if let Some(id) = find(hash, |k| k == runs.as_slice()) {
        return id;
    }
    let next = KEPT_COUNT.load(Ordering::Relaxed) + 1;
    if next > MAX_SEQUENCES || *total + runs.len() > MAX_TOTAL_RUNS {
        FULL.store(true, Ordering::Relaxed);
        return NOT_KEPT;
    }
    *total += runs.len();
    let kept = Box::new(Kept { runs: runs.into_boxed_slice(), first_ns: format::clock::now_ns() });
    KEPT[next as usize].store(Box::into_raw(kept), Ordering::Release);
    let mut i = hash as usize & (SLOTS - 1);
    while HASHES[i].load(Ordering::Relaxed) != 0 {
        i = (i + 1) & (SLOTS - 1);
    }
    SLOT_IDS[i].store(next, Ordering::Relaxed);
    HASHES[i].store(hash, Ordering::Release);
    KEPT_COUNT.store(next, Ordering::Release);
    next
}

/// Sequences kept so far: ids 1 to this have runs.
pub fn kept_count() -> u32 {
    KEPT_COUNT.load(Ordering::Acquire)
}

/// Sequence `id`'s runs of (pipeline slot, dispatches in a row) and when it was first submitted.
pub fn sequence(id: u32) -> Option<(&'static [(u32, u32)], u64)> {
    kept(id).map(|k| (&*k.runs, k.first_ns))
}

/// Submissions of sequence `id` so far (0: those not kept).
pub fn submissions(id: u32) -> u64 {
    COUNTS.get(id as usize).map_or(0, |c| c.load(Ordering::Acquire))
}

/// Some sequence was not kept because a bound was reached.
pub fn full() -> bool {
    FULL.load(Ordering::Relaxed)
}

/// In a forked child: a parent thread may have held the lock.
pub const FORK: format::fork::ForkHandlers = format::fork::ForkHandlers::child(force_unlock_in_child);

fn force_unlock_in_child() {
    KEEPING.release_for_fork();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_runs_hash_alike_and_order_changes_the_hash() {
        let hash = |runs: &[(u32, u32)]| {
            let mut h = Hasher::new();
            runs.iter().for_each(|&(s, n)| h.add(s, n));
            h.finish()
        };
        assert_eq!(hash(&[(1, 2), (3, 1)]), hash(&[(1, 2), (3, 1)]));
        assert_ne!(hash(&[(1, 2), (3, 1)]), hash(&[(3, 1), (1, 2)]));
        assert_ne!(hash(&[(1, 2)]), hash(&[(1, 3)]));
        assert_ne!(hash(&[]), 0);
    }

    /// The table is process-global: one test walks it through (kept ids are never reused).
    #[test]
    fn a_recording_is_found_once_kept_and_each_recording_is_looked_up_once() {
        let record = |pipelines: &[u32]| {
            let s = commands::CommandBuffer::for_test();
            for &p in pipelines {
                s.bind(p);
                s.record([1, 1, 1]);
            }
            s
        };
        let a = record(&[7, 7, 8, 9]);
        let first = look_up(&a);
        assert!(first != NOT_KEPT && first != EMPTY);
        assert_eq!(sequence(first).unwrap().0, &[(7, 2), (8, 1), (9, 1)]);
        assert_eq!(look_up(&record(&[7, 7, 8, 9])), first, "the same sequence recorded again");
        let other = look_up(&record(&[7, 8, 7, 9]));
        assert!(other != first && other != NOT_KEPT);
        assert_eq!(look_up(&record(&[])), EMPTY);
        assert!(kept_count() >= 2);
        // Forced collisions: sequences kept under one hash are told apart by their runs.
        let mut h = Hasher::new();
        h.add(1, 1);
        let runs_x = vec![(100, 1)];
        let runs_y = vec![(101, 1)];
        let x = keep(h.finish(), runs_x.clone());
        let y = keep(h.finish(), runs_y.clone());
        assert!(x != y && x != NOT_KEPT && y != NOT_KEPT);
        assert_eq!(find(h.finish(), |k| k == runs_y.as_slice()), Some(y));
        assert_eq!(find(h.finish(), |k| k == runs_x.as_slice()), Some(x));
        assert_eq!(keep(h.finish(), runs_y), y, "kept once");
    }
}
