//! The timeline: one entry per line that is not part of a stack trace, the first ones kept as entries and the last
//! ones as raw lines in a ring until the report is assembled, and the bracket of a time a line inherits.

use serde::Serialize;

use crate::event::lossy;
use crate::time::Timestamp;

use super::summary::summary;
use super::text::clip;

/// One line of the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct TimelineEntry {
    pub line: u64,
    pub offset: u64,
    /// Seconds since the log's first timestamp.
    pub t: Option<f64>,
    /// `t` is the time of an earlier line (this one has no timestamp of its own).
    pub t_inherited: bool,
    /// When `t_inherited`: the line was written between these two times (see [`TimeBounds`]).
    pub t_bounds: Option<TimeBounds>,
    pub kind: &'static str,
    pub summary: String,
    /// The line as written (lossy UTF-8, escape sequences kept; escape before display).
    pub raw: String,
    #[serde(skip)]
    pub(super) time: Option<Timestamp>,
    /// The next timestamp after this line, when its own time is inherited.
    #[serde(skip)]
    pub(super) next_time: Option<Timestamp>,
}

/// The time of a line without a timestamp of its own, as a bracket in seconds since the log's first
/// timestamp: `.0` is the time of the last earlier timestamped line, `.1` that of the next later one (`None`:
/// no timestamp follows, the line was written at or after `.0`). Serialised as `[lo, hi]`, `hi` null when none.
pub type TimeBounds = (f64, Option<f64>);

/// The bracket of an inherited time: `[time, next]` relative to `origin`.
pub(super) fn bounds(
    origin: Option<Timestamp>,
    time: Option<Timestamp>,
    next: Option<Timestamp>,
) -> Option<TimeBounds> {
    let rel = |t: Timestamp| -> Option<f64> {
        let o = origin?;
        (t.clock == o.clock).then(|| (t.micros - o.micros) as f64 / 1e6)
    };
    Some((rel(time?)?, next.and_then(rel)))
}

/// Bytes of the contiguous ring that hold a tail entry's line; a longer line is kept whole beside it.
pub(super) const TAIL_STRIDE: usize = 512;

/// A timeline entry kept as its raw line until the report is assembled.
#[derive(Debug, Default)]
pub(super) struct TailSlot {
    pub(super) line: u64,
    pub(super) offset: u64,
    pub(super) time: Option<Timestamp>,
    pub(super) inherited: bool,
    pub(super) next_time: Option<Timestamp>,
    /// The line's length; up to [`TAIL_STRIDE`] bytes it is in the ring, a longer one in `long`.
    pub(super) len: usize,
    pub(super) long: Vec<u8>,
}

/// The last timeline entries, their lines in one contiguous ring of fixed strides (written in order, so the copy of
/// each line streams through the cache instead of touching one heap buffer per entry).
#[derive(Debug, Default)]
pub(super) struct Tail {
    pub(super) slots: Vec<TailSlot>,
    pub(super) bytes: Vec<u8>,
    /// Where the next entry goes, and how many are kept.
    pub(super) next: usize,
    pub(super) len: usize,
}

impl Tail {
    /// Keep `raw` as the newest entry of at most `cap`; returns whether the oldest one was dropped for it.
    pub(super) fn push(&mut self, cap: usize, raw: &[u8], head: TailSlot) -> bool {
        if self.slots.len() < cap {
            self.slots.resize_with(cap, TailSlot::default);
            self.bytes.resize(cap * TAIL_STRIDE, 0);
        }
        let i = self.next;
        let slot = &mut self.slots[i];
        let long = std::mem::take(&mut slot.long);
        *slot = TailSlot { long, ..head };
        slot.len = raw.len();
        if raw.len() <= TAIL_STRIDE {
            self.bytes[i * TAIL_STRIDE..i * TAIL_STRIDE + raw.len()].copy_from_slice(raw);
        } else {
            slot.long.clear();
            slot.long.extend_from_slice(raw);
        }
        self.next = (i + 1) % cap;
        let dropped = self.len == cap;
        self.len = (self.len + 1).min(cap);
        dropped
    }

    /// Ring positions of the last `n` entries, oldest first.
    pub(super) fn last(&self, n: usize) -> impl Iterator<Item = usize> + '_ {
        let cap = self.slots.len().max(1);
        let n = n.min(self.len);
        (self.len - n..self.len).map(move |k| (self.next + cap - self.len + k) % cap)
    }

    pub(super) fn raw(&self, i: usize) -> &[u8] {
        let slot = &self.slots[i];
        if slot.len <= TAIL_STRIDE {
            &self.bytes[i * TAIL_STRIDE..i * TAIL_STRIDE + slot.len]
        } else {
            &slot.long
        }
    }

    /// The kept entries, oldest first, as timeline entries.
    pub(super) fn entries(&self) -> Vec<TimelineEntry> {
        let (mut scratch, mut json) = (Vec::new(), Vec::new());
        self.last(self.len).map(|i| self.slots[i].entry(self.raw(i), &mut scratch, &mut json)).collect()
    }
}

impl TailSlot {
    /// Re-read the line (classification does not depend on earlier lines for timeline kinds).
    pub(super) fn entry(&self, raw: &[u8], scratch: &mut Vec<u8>, json: &mut Vec<u8>) -> TimelineEntry {
        let text: &[u8] = if raw.contains(&0x1b) {
            crate::parser::strip_ansi(raw, scratch);
            scratch
        } else {
            raw
        };
        let stripped = crate::prefix::strip(text).message;
        let message: &[u8] =
            if stripped.first() == Some(&b'{') && crate::jsonline::decode(stripped, json) { json } else { stripped };
        let kind = crate::classify::classify(message, &mut crate::classify::Context::default()).kind;
        TimelineEntry {
            line: self.line,
            offset: self.offset,
            t: None,
            t_inherited: self.inherited,
            t_bounds: None,
            kind: kind.name(),
            summary: summary(&kind, message.starts_with(b"time=")),
            raw: clip(lossy(raw).into_owned()),
            time: self.time,
            next_time: self.next_time,
        }
    }
}
