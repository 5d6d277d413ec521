//! What a submission does with its command buffers' recordings: counts their dispatches into the pipelines' counters
//! (by the counts kept from a buffer's last walk when it recorded the same dispatches again), and remembers their last
//! dispatches in the queue's crash ring.

use std::sync::atomic::Ordering;

use ash::vk;
use ash::vk::Handle;

use super::pending::{add, Pending};
use super::{get, CommandBuffer, Counted, SequenceHook, SequenceKey, EXECUTE, MAX_NESTING, SEQUENCE_UNKNOWN};
use crate::labels::Label;
use crate::locus;
use crate::pipelines::OVERFLOW;

/// What one submission carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub dispatches: u64,
}

/// Counts the dispatches recorded in `buffers` (a submission's command buffers) into the pipelines'
/// counters; with `errors`, into their error counters instead (the submission failed, and they were
/// counted already).
///
/// With `sequences`, each buffer's sequence of pipelines is joined and hashed in the same walk, when the buffer was
/// not submitted since it was recorded, and handed to the hook with the buffer.
pub fn count(buffers: impl Iterator<Item = vk::CommandBuffer>, errors: bool, sequences: Option<SequenceHook>) -> Tally {
    let mut tally = Tally::default();
    // Buffers begun for simultaneous use count here: two threads may walk one at once.
    let mut shared = Pending::new();
    for cb in buffers {
        if let Some(state) = get(cb) {
            count_one(state, errors, sequences, &mut tally, &mut shared);
        }
    }
    shared.flush(errors);
    tally
}

/// [`count`] for one submitted buffer: from the counts its last walk kept when they are this recording's, else by a
/// walk (whose counts are kept, unless the buffer was begun for simultaneous use: those count into `shared`).
pub(super) fn count_one(
    state: &CommandBuffer,
    errors: bool,
    sequences: Option<SequenceHook>,
    tally: &mut Tally,
    shared: &mut Pending,
) {
    if state.simultaneous.get() {
        walk(state, errors, sequences, tally, shared);
        return;
    }
    // A buffer not begun for simultaneous use is submitted by one thread at a time, this one now: nobody else writes
    // the kept counts.
    if state.kept().holds(state, sequences.is_some()) {
        tally.dispatches += state.count_kept(errors, sequences);
        return;
    }
    let _folding = state.folding.lock();
    // SAFETY: under `folding`.
    let counted = unsafe { state.counted() };
    // The old recording's repeats go to the counters before its counts are replaced.
    counted.fold(state.repeats.load(Ordering::Relaxed));
    counted.pending.clear();
    let before = tally.dispatches;
    walk(state, errors, sequences, tally, &mut counted.pending);
    counted.pending.add_all(errors);
    counted.valid = !counted.pending.collided && state.walk_reusable();
    state.kept_generation.set(state.progress.generation());
    counted.recorded = state.progress.recorded();
    counted.dispatches = tally.dispatches - before;
    counted.sequence = state.sequence.load(Ordering::Relaxed);
    counted.removals = state.progress.removals_at_begin();
}

impl CommandBuffer {
    /// The key a submission of this buffer computes ([`count`]), for unit tests elsewhere in the crate.
    #[cfg(test)]
    pub(crate) fn key_for_test(&self) -> SequenceKey {
        let mut key = SequenceKey::new();
        let mut tally = Tally::default();
        count_buffer::<true>(self, false, 0, &mut tally, &mut Pending::new(), &mut key);
        key.finish(tally.dispatches);
        key
    }

    /// Counts this recording by the counts kept from its last walk (the caller checked that they hold): one more
    /// repeat, folded later (with `errors`, the kept counts go to the error counters at once), and the sequence's
    /// count through `sequences`. Its dispatches. For a buffer one thread submits at a time (see [`Counted`]).
    pub(super) fn count_kept(&self, errors: bool, sequences: Option<SequenceHook>) -> u64 {
        let kept = self.kept();
        // The next recording is compared with this one.
        self.kept_generation.set(self.progress.generation());
        if errors {
            kept.pending.add_all(true);
        } else {
            // One more repeat, folded later. Before the sequence's count below (the writer reads sequences first).
            self.repeats.store(self.repeats.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
        }
        if let Some(hook) = sequences {
            if self.sequence.load(Ordering::Relaxed) == SEQUENCE_UNKNOWN {
                self.sequence.store(kept.sequence, Ordering::Relaxed);
            }
            hook(self, None);
        }
        kept.dispatches
    }

    /// Whether the recording now, of `n` dispatches, is the one the kept counts are of: the same generation (submitted
    /// again without being recorded again), or the next one with the same trail, dispatch for dispatch (pipeline
    /// handle and workgroup counts, compared whole: ggml-vulkan records the same graph again token after token). What
    /// a hash of each dispatch, updated in the dispatch hook, told before: comparing at submission costs the hook
    /// nothing, and tells equal trails exactly.
    fn recorded_as_kept(&self, n: u32) -> bool {
        let generation = self.progress.generation();
        let kept = self.kept_generation.get();
        kept == generation || (kept.wrapping_add(1) == generation && self.progress.same_as_previous(n))
    }

    /// Whether a walk over this recording gives counts another recording with the same dispatches can reuse: every
    /// dispatch is in the trail (no secondary executed), none was lost, and the order is kept (not merged).
    fn walk_reusable(&self) -> bool {
        !self.executes.get() && !self.merged.get() && self.lost.get() == 0
    }
}

impl Counted {
    /// Whether these are the counts of `state`'s recording now: the kept walk was complete, and the buffer recorded
    /// the same dispatches in the same order since it was begun; with `sequences`, its sequence is known.
    #[inline]
    pub(super) fn holds(&self, state: &CommandBuffer, sequences: bool) -> bool {
        self.valid
            && self.recorded == state.progress.recorded()
            && self.removals == state.progress.removals_at_begin()
            && state.walk_reusable()
            && !(sequences
                && self.sequence == SEQUENCE_UNKNOWN
                && state.sequence.load(Ordering::Relaxed) == SEQUENCE_UNKNOWN)
            && state.recorded_as_kept(self.recorded)
    }
}

/// Counts one submitted buffer's entries into `pending`, and hands its sequence to the hook: with its key, hashed in
/// the same walk, when the buffer's sequence was not looked up since it was recorded.
fn walk(
    state: &CommandBuffer,
    errors: bool,
    sequences: Option<SequenceHook>,
    tally: &mut Tally,
    pending: &mut Pending,
) {
    let Some(hook) = sequences else {
        count_buffer::<false>(state, errors, 0, tally, pending, &mut SequenceKey::new());
        return;
    };
    if state.sequence.load(Ordering::Relaxed) != SEQUENCE_UNKNOWN {
        count_buffer::<false>(state, errors, 0, tally, pending, &mut SequenceKey::new());
        hook(state, None);
        return;
    }
    let mut key = SequenceKey::new();
    let before = tally.dispatches;
    count_buffer::<true>(state, errors, 0, tally, pending, &mut key);
    key.finish(tally.dispatches - before);
    hook(state, Some(&key));
}

/// Counts `state`'s dispatches (a secondary's where it is executed) into `pending` and `tally`; with `KEYED`, joins
/// and hashes its runs into `key` in the same walk.
fn count_buffer<const KEYED: bool>(
    state: &CommandBuffer,
    errors: bool,
    depth: u32,
    tally: &mut Tally,
    pending: &mut Pending,
    key: &mut SequenceKey,
) {
    state.materialize();
    // SAFETY: called from a submission hook: the application may not record into or reset a buffer
    // it is submitting.
    let entries = unsafe { state.entries() };
    if KEYED {
        key.ordered &= !state.merged.get() && state.lost.get() == 0;
    }
    // The walk's running values stay in locals (registers), not behind the references, and are handed back around a
    // secondary's walk and at the end.
    let mut k = *key;
    let mut dispatches = tally.dispatches;
    for e in entries.iter() {
        if e.slot == EXECUTE {
            let secondary = vk::CommandBuffer::from_raw(u64::from(e.grid[0]) | (u64::from(e.grid[1]) << 32));
            if let Some(s) = get(secondary).filter(|_| depth < MAX_NESTING) {
                (tally.dispatches, *key) = (dispatches, k);
                for _ in 0..e.count {
                    count_buffer::<KEYED>(s, errors, depth + 1, tally, pending, key);
                }
                (dispatches, k) = (tally.dispatches, *key);
            }
            continue;
        }
        pending.add(e.slot, e.grid, u64::from(e.count), errors);
        dispatches += u64::from(e.count);
        if KEYED {
            k.push(e.slot, e.count);
        }
    }
    let lost = state.lost.get();
    if lost > 0 {
        add(OVERFLOW, [0; 3], lost, errors);
        dispatches += lost;
    }
    (tally.dispatches, *key) = (dispatches, k);
}

/// Remembers the last dispatches of a submission's command buffers in its queue's ring (the crash
/// locus): a buffer whose black-box trail holds all its dispatches by one reference entry, others by a copy of their
/// last [`locus::RING_DISPATCHES`] entries at most, so that a submission costs the same however many dispatches its
/// buffers hold. A secondary buffer executed among them contributes its own last entries.
pub fn remember(buffers: impl Iterator<Item = vk::CommandBuffer>, ring: &locus::QueueRing) -> u64 {
    let submit = ring.begin_submit();
    let mut writer = ring.writer(submit);
    for cb in buffers {
        if let Some(state) = get(cb) {
            let recorded = state.progress.recorded();
            if state.trail_holds_all() {
                if recorded > 0 {
                    writer.push_reference(&state.progress, state.progress.generation(), recorded);
                }
            } else {
                remember_buffer(state, &mut writer, 0);
            }
        }
    }
    submit
}

impl CommandBuffer {
    /// Whether the black box's trail of this recording names every dispatch as the entries do: no debug label (the
    /// trail keeps none), no secondary buffer executed, none lost or merged, at most [`crate::progress::TRAIL`].
    pub(super) fn trail_holds_all(&self) -> bool {
        !self.labelled.get() && self.walk_reusable() && self.progress.recorded() as usize <= crate::progress::TRAIL
    }
}

pub(super) fn remember_buffer(state: &CommandBuffer, ring: &mut locus::RingWriter<'_>, depth: u32) {
    state.materialize();
    // SAFETY: called from a submission hook, like `count_buffer`.
    let entries = unsafe { state.entries() };
    // SAFETY: as above.
    let labels = unsafe { state.labels() };
    let tail = &entries[entries.len().saturating_sub(locus::RING_DISPATCHES)..];
    // The writer's position in a local between entries (not through `ring`, which a nested call also moves).
    let mut w = *ring;
    for e in tail {
        if e.slot == EXECUTE {
            let secondary = vk::CommandBuffer::from_raw(u64::from(e.grid[0]) | (u64::from(e.grid[1]) << 32));
            if let Some(s) = get(secondary).filter(|_| depth < MAX_NESTING) {
                remember_buffer(s, &mut w, depth + 1);
            }
            continue;
        }
        if e.label == Label::NONE {
            w.push(e.slot, e.grid, e.count);
        } else {
            w.push_labelled(e.slot, e.grid, e.count, labels.words(e.label));
        }
    }
    let lost = state.lost.get();
    if lost > 0 {
        w.push(OVERFLOW, [0; 3], u32::try_from(lost).unwrap_or(u32::MAX));
    }
    *ring = w;
}
