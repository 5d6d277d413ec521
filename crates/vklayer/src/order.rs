//! The order of dispatches: which pipelines each submitted command buffer dispatched, in order.
//!
//! ggml-vulkan records one graph split into one command buffer, and a decode step repeats the same graph, so the
//! same sequence of pipelines is submitted again and again. Each distinct sequence — runs of (pipeline, dispatches in
//! a row) — is kept once, with an id in order of first submission; submissions count per id, and the writer writes
//! each sequence once (a `sequence` record) and the counts in windows. What is compared with another run is then a
//! few distinct sequences, not every submission.
//!
//! The cost is at submission, not per dispatch: a command buffer's entries are already in recording order (runs of
//! equal dispatches, `crate::commands`), and its sequence is looked up once per recording — one walk over its
//! entries to hash them and one lock-free probe — then cached on the buffer until it is recorded again. Only a
//! sequence never seen takes a lock, allocates and is compared run by run.
//!
//! Bounds: [`MAX_SEQUENCES`] distinct sequences, [`MAX_SEQUENCE_RUNS`] runs in one, [`MAX_TOTAL_RUNS`] runs in all
//! (8 bytes each: 8 MiB). A submitted buffer whose sequence is not kept (a bound was reached, or its order was lost
//! when it outgrew its entries) counts as sequence [`NOT_KEPT`].

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use format::spin::SpinLock;

pub use crate::commands::MAX_SEQUENCE_RUNS;
use crate::commands::{CommandBuffer, SequenceKey, SEQUENCE_UNKNOWN};

/// The sequence id of submissions whose order was not kept.
pub const NOT_KEPT: u32 = 0;
/// Distinct sequences kept (ids 1 to this).
pub const MAX_SEQUENCES: u32 = 4096;
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
    /// The runs' lengths added.
    dispatches: u64,
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

/// A submitted command buffer (`crate::commands::submission::count`'s hook): one submission of its sequence. Looked
/// up once per recording from the key counted with its dispatches, then cached on the buffer. A buffer without
/// dispatches counts nothing.
pub fn counted(state: &CommandBuffer, key: Option<&SequenceKey>) {
    let id = match state.sequence.load(Ordering::Relaxed) {
        SEQUENCE_UNKNOWN => {
            let Some(key) = key else { return };
            let id = look_up(state, key);
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

/// The sequence `key` stands for: found among the kept ones, kept now, [`NOT_KEPT`] or [`EMPTY`].
///
/// A sequence is found by its hash, its runs and its dispatches; it is compared run by run only when it is kept. Two
/// sequences that agree in all three are taken for one: with 64-bit hashes and at most [`MAX_SEQUENCES`] kept, the
/// chance of that is below 10^-12 per run.
fn look_up(state: &CommandBuffer, key: &SequenceKey) -> u32 {
    if key.runs() == 0 && key.ordered() {
        return EMPTY;
    }
    if !key.ordered() {
        return NOT_KEPT;
    }
    let (hash, len, dispatches) = (key.hash(), key.runs(), key.dispatches());
    if let Some(id) = find(hash, |k| k.runs.len() == len && k.dispatches == dispatches) {
        return id;
    }
    if FULL.load(Ordering::Relaxed) {
        return NOT_KEPT;
    }
    let mut runs = Vec::with_capacity(len);
    state.runs(MAX_SEQUENCE_RUNS, &mut |slot, n| runs.push((slot, n)));
    keep(hash, runs)
}

/// The kept sequence with `hash` for which `same` holds. Lock-free.
fn find(hash: u64, same: impl Fn(&Kept) -> bool) -> Option<u32> {
    let mut i = hash as usize & (SLOTS - 1);
    for _ in 0..SLOTS {
        match HASHES[i].load(Ordering::Acquire) {
            0 => return None,
            h if h == hash => {
                let id = SLOT_IDS[i].load(Ordering::Relaxed);
                if kept(id).is_some_and(&same) {
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
    if let Some(id) = find(hash, |k| *k.runs == *runs) {
        return id;
    }
    let next = KEPT_COUNT.load(Ordering::Relaxed) + 1;
    if next > MAX_SEQUENCES || *total + runs.len() > MAX_TOTAL_RUNS {
        FULL.store(true, Ordering::Relaxed);
        return NOT_KEPT;
    }
    *total += runs.len();
    let dispatches = runs.iter().map(|&(_, n)| u64::from(n)).sum();
    let kept = Box::new(Kept { runs: runs.into_boxed_slice(), dispatches, first_ns: format::clock::now_ns() });
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

    fn hash(runs: &[(u32, u32)]) -> u64 {
        runs.iter().fold(0, |h, &(s, n)| crate::commands::mix(h, s, n)).max(1)
    }

    #[test]
    fn an_empty_buffer_has_a_key_of_no_run() {
        let key = CommandBuffer::for_test().key_for_test();
        assert_eq!((key.runs(), key.dispatches(), key.ordered()), (0, 0, true));
    }

    #[test]
    fn equal_runs_hash_alike_and_order_changes_the_hash() {
        assert_eq!(hash(&[(1, 2), (3, 1)]), hash(&[(1, 2), (3, 1)]));
        assert_ne!(hash(&[(1, 2), (3, 1)]), hash(&[(3, 1), (1, 2)]));
        assert_ne!(hash(&[(1, 2)]), hash(&[(1, 3)]));
        assert_ne!(hash(&[]), 0);
    }

    /// The table is process-global: one test walks it through (kept ids are never reused).
    #[test]
    fn a_recording_is_found_once_kept_and_each_recording_is_looked_up_once() {
        let record = |pipelines: &[u32]| {
            let s = CommandBuffer::for_test();
            for &p in pipelines {
                s.bind(u64::from(p));
                s.record([1, 1, 1]);
            }
            s
        };
        let look = |s: &CommandBuffer| look_up(s, &s.key_for_test());
        let a = record(&[7, 7, 8, 9]);
        let first = look(&a);
        assert!(first != NOT_KEPT && first != EMPTY);
        assert_eq!(sequence(first).unwrap().0, &[(7, 2), (8, 1), (9, 1)]);
        assert_eq!(look(&record(&[7, 7, 8, 9])), first, "the same sequence recorded again");
        let other = look(&record(&[7, 8, 7, 9]));
        assert!(other != first && other != NOT_KEPT);
        assert_eq!(look(&record(&[])), EMPTY);
        assert!(kept_count() >= 2);
        // A submission counts once per buffer, from the key, and afterwards from the buffer's cache.
        let before = submissions(first);
        counted(&a, Some(&a.key_for_test()));
        counted(&a, None);
        assert_eq!(submissions(first), before + 2);
        // Forced collisions: sequences kept under one hash are told apart by their runs.
        let h = hash(&[(1, 1)]);
        let runs_x = vec![(100, 1)];
        let runs_y = vec![(101, 1)];
        let x = keep(h, runs_x.clone());
        let y = keep(h, runs_y.clone());
        assert!(x != y && x != NOT_KEPT && y != NOT_KEPT);
        assert_eq!(find(h, |k| *k.runs == *runs_y), Some(y));
        assert_eq!(find(h, |k| *k.runs == *runs_x), Some(x));
        assert_eq!(keep(h, runs_y), y, "kept once");
    }
}
