//! The segments of a rotating trace (`BACKSCOPE_TRACE_ROTATE`, format version 4): one process's trace split into
//! segment files, each beginning with its own header (`segment`, `segments_kept`, `previous`) and every
//! definition written before it, each but the newest ending with a `rotated` record naming the next; the oldest are
//! deleted as new ones begin. Every segment reads alone; [`join`] makes the segments of one process (same pid,
//! start time, writer and executable) one [`TraceFile`], whose counts are those since the first segment read
//! ([`Segments::since_ns`]) when earlier ones were rotated away.
//!
//! [`join`]: crate::join_segments
//! [`TraceFile`]: crate::TraceFile

use std::path::{Path, PathBuf};

/// One segment read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Its number, from 0.
    pub index: u32,
    pub path: Option<PathBuf>,
    /// When it ended (its `rotated` record's `at_ns`); `None` for the one being written.
    pub rotated_at_ns: Option<u64>,
}

/// The segments of a rotating trace read as one [`TraceFile`](crate::TraceFile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segments {
    /// The segments read, oldest first.
    pub present: Vec<Segment>,
    /// Segments the trace keeps (`segments_kept`), and each one's budget.
    pub kept: u32,
    pub segment_max_bytes: u64,
    /// Start of the first window of the oldest segment read: its windows and those after it count everything from
    /// then on (but what a missing segment between them held). `None` when it has no window.
    pub since_ns: Option<u64>,
    /// The newest segment read ends with a `rotated` record naming this file, which was not read (it was being
    /// created, or is missing).
    pub continues_in: Option<String>,
}

impl Segments {
    /// The oldest segment's number: as many earlier ones were rotated away.
    pub fn first_index(&self) -> u32 {
        self.present.first().map_or(0, |s| s.index)
    }

    /// The newest segment's number.
    pub fn newest_index(&self) -> u32 {
        self.present.last().map_or(0, |s| s.index)
    }

    /// Runs of segment numbers between the oldest and the newest read that were not read (first, last).
    pub fn missing(&self) -> Vec<(u32, u32)> {
        self.present
            .windows(2)
            .filter(|w| w[1].index > w[0].index.saturating_add(1))
            .map(|w| (w[0].index + 1, w[1].index - 1))
            .collect()
    }

    /// The file of the segment open at `at_ns` (the first one not rotated by then).
    pub fn file_at(&self, at_ns: u64) -> Option<&Path> {
        self.present.iter().find(|s| s.rotated_at_ns.is_none_or(|end| at_ns <= end)).and_then(|s| s.path.as_deref())
    }

    /// "segments 4–6 of a trace that keeps 3 (segments 0–3 rotated away)", for people.
    pub fn describe(&self) -> String {
        let span = |(a, b): (u32, u32)| if a == b { format!("{a}") } else { format!("{a}–{b}") };
        let mut text = format!(
            "segment{} {} of a trace that keeps {}",
            if self.present.len() == 1 { "" } else { "s" },
            span((self.first_index(), self.newest_index())),
            self.kept
        );
        let mut gone = Vec::new();
        if self.first_index() > 0 {
            gone.push(span((0, self.first_index() - 1)));
        }
        gone.extend(self.missing().into_iter().map(span));
        if !gone.is_empty() {
            text.push_str(&format!(" (segment{} {} rotated away or missing)", plural(&gone), gone.join(", ")));
        }
        if let Some(next) = &self.continues_in {
            text.push_str(&format!("; it continues in {next}, not read"));
        }
        text
    }
}

fn plural(gone: &[String]) -> &'static str {
    if gone.len() == 1 && !gone[0].contains('–') {
        ""
    } else {
        "s"
    }
}
