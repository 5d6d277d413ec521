//! The submission ggml-vulkan makes token after token, in one pass over its command buffers: each buffer recorded
//! again with the same dispatches in the same order as at its last counted submission (a repeat:
//! [`super::submission::count`] adds one to its repeats) and whole in its black-box trail (the crash ring refers to it
//! by one entry: [`super::submission::remember`]).
//!
//! Why a pass of its own: the general path looks each buffer up once for counting, once for the crash ring and once
//! for the black box, each through code of its own. What a submission costs on a GPU host is the lines it touches,
//! of code as much as of data, each brought back after the driver's recording pushed it out of the core's caches: on
//! lavapipe with a 1 KiB simulated first-level cache (bench/vklayer_instructions.sh, `CACHE=1`) this pass touches 48
//! lines of code and 63 of data per submission where the general path touches 64 and 86 (BENCHMARKS.md, session 19).

use ash::vk;

use super::{get, CommandBuffer, SequenceHook};
use crate::locus::QueueRing;

/// Buffers a submission may carry for this path (ggml-vulkan submits one; more take the general path).
const MOST: usize = 4;

/// A submission's command buffers, each a repeat of the recording whose counts it keeps.
pub struct Repeats {
    /// The first `n` are the buffers' states; the rest repeat the first (an array of references with no `Option` to
    /// test on each pass over them).
    states: [&'static CommandBuffer; MOST],
    n: usize,
    /// Their dispatches.
    pub dispatches: u64,
}

impl Repeats {
    /// `buffers` when every one is followed, not begun for simultaneous use, a repeat of its kept recording (with
    /// its sequence known where `sequences`), has dispatches, and is whole in its trail; `None` otherwise (at most
    /// [`MOST`] buffers). Reads only: a `None` leaves everything for the general path.
    #[inline]
    pub fn find(mut buffers: impl Iterator<Item = vk::CommandBuffer>, sequences: bool) -> Option<Repeats> {
        let first = get(buffers.next()?)?;
        let mut found = Repeats { states: [first; MOST], n: 0, dispatches: 0 };
        for state in std::iter::once(Some(first)).chain(buffers.map(get)) {
            let state = state?;
            if found.n == MOST || state.simultaneous.get() {
                return None;
            }
            let kept = state.kept();
            if !kept.holds(state, sequences)
                || kept.dispatches == 0
                || state.progress.recorded() == 0
                || !state.trail_holds_all()
            {
                return None;
            }
            found.dispatches += kept.dispatches;
            found.states[found.n] = state;
            found.n += 1;
        }
        Some(found)
    }

    /// The buffers' states, in submission order.
    #[inline]
    pub fn states(&self) -> impl Iterator<Item = &'static CommandBuffer> + Clone + '_ {
        self.states[..self.n].iter().copied()
    }

    /// Counts the buffers as [`super::submission::count`] counts a repeat (`CommandBuffer::count_kept`), then
    /// remembers them in `ring` by reference as [`super::submission::remember`] does. Returns the submission's number
    /// in the ring (`None` without a ring: the queue is past the followed ones).
    #[inline]
    pub fn count_and_remember(&self, sequences: Option<SequenceHook>, ring: Option<&QueueRing>) -> Option<u64> {
        for state in self.states() {
            state.count_kept(false, sequences);
        }
        let ring = ring?;
        let submit = ring.begin_submit();
        let mut writer = ring.writer(submit);
        for state in self.states() {
            writer.push_reference(&state.progress, state.progress.generation(), state.progress.recorded());
        }
        Some(submit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::submission::{count, remember};
    use crate::commands::BUFFERS;
    use ash::vk::Handle;
    use std::sync::atomic::Ordering;

    /// A followed buffer (in `BUFFERS`, as `allocated` makes it) and its handle.
    fn followed() -> (&'static CommandBuffer, vk::CommandBuffer) {
        let s: &'static CommandBuffer = Box::leak(Box::new(CommandBuffer::for_test()));
        let cb = vk::CommandBuffer::from_raw(s as *const CommandBuffer as u64);
        assert!(BUFFERS.insert(cb.as_raw(), s as *const CommandBuffer as u64));
        (s, cb)
    }

    fn record(s: &CommandBuffer, label: bool) {
        s.begin(false);
        for x in 1..=5u32 {
            if label && x == 3 {
                s.begin_label(b"NODE x");
            }
            s.bind(u64::from(x % 2 + 1));
            s.record([x, 1, 1]);
        }
    }

    #[test]
    fn only_a_repeat_whole_in_its_trail_takes_the_one_pass_and_is_remembered_as_the_general_path_would() {
        let (s, cb) = followed();
        record(s, false);
        assert!(Repeats::find(std::iter::once(cb), false).is_none(), "never counted: the general path walks it");
        count(std::iter::once(cb), false, None);
        record(s, false);
        let found = Repeats::find(std::iter::once(cb), false).expect("the same recording again");
        assert_eq!(found.dispatches, 5);
        let repeats = s.repeats.load(Ordering::Relaxed);
        // The one pass and the general path remember the buffer in two rings: the same entries come back.
        let (one, general) = (
            crate::locus::queue_ring(0x7e57_0101, None).unwrap(),
            crate::locus::queue_ring(0x7e57_0102, None).unwrap(),
        );
        let submit = found.count_and_remember(None, Some(one)).unwrap();
        assert_eq!(s.repeats.load(Ordering::Relaxed), repeats + 1, "counted as one more repeat");
        assert_eq!(submit, remember(std::iter::once(cb), general));
        let read = |ring: &QueueRing| {
            let mut out = [format::record::QueueDispatch::default(); crate::locus::RING_DISPATCHES];
            let mut texts = [[0; crate::locus::LABEL_BYTES]; crate::locus::RING_DISPATCHES];
            let n = ring.read(&mut out, &mut texts);
            out[..n].iter().map(|d| (d.kernel, d.grid, d.count, d.submit)).collect::<Vec<_>>()
        };
        assert_eq!(read(one).len(), 5);
        assert_eq!(read(one), read(general));
        // Something else: another recording, a labelled one (the trail keeps no label), two threads' buffer.
        record(s, false);
        s.bind(9);
        s.record([1, 1, 1]);
        assert!(Repeats::find(std::iter::once(cb), false).is_none(), "another recording");
        count(std::iter::once(cb), false, None);
        record(s, true);
        count(std::iter::once(cb), false, None);
        record(s, true);
        assert!(Repeats::find(std::iter::once(cb), false).is_none(), "labelled: the ring copies its entries");
        s.begin(true);
        s.record([1, 1, 1]);
        assert!(Repeats::find(std::iter::once(cb), false).is_none(), "simultaneous use");
        assert!(Repeats::find(std::iter::once(vk::CommandBuffer::from_raw(0x7e57)), false).is_none(), "not followed");
        BUFFERS.remove(cb.as_raw());
    }
}
