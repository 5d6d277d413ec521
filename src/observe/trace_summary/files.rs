//! The files of a summary: one row per traced process, the segments of a rotating trace, and the files that could
//! not be read.

use serde::Serialize;

use crate::trace::{TraceError, TraceFile};

#[derive(Clone, Debug, Serialize)]
pub struct ProcessSummary {
    pub pid: u32,
    pub exe: String,
    pub file: String,
    pub launches: u64,
    pub graph_launches: u64,
    pub complete: bool,
    /// Why the observer stopped writing this trace early; its counts are lower bounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
    /// The segments of a rotating trace (`BACKSCOPE_TRACE_ROTATE`) read as this process's trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<SegmentsSummary>,
    pub warnings: Vec<String>,
}

/// Which segments of a rotating trace were read: `file` is the newest's; counts are those since `since_ns` when
/// earlier segments were rotated away.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentsSummary {
    /// Segment numbers read, oldest first, and their files.
    pub present: Vec<u32>,
    pub files: Vec<String>,
    /// Segments the trace keeps.
    pub kept: u32,
    /// Earlier segments not read (numbers 0 to `rotated_away` - 1): deleted by the rotation.
    pub rotated_away: u32,
    /// Runs of segment numbers between those read that are missing, `[first, last]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<[u32; 2]>,
    /// Start of the first window read (CLOCK_MONOTONIC ns): the counts are those since then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_ns: Option<u64>,
    /// The newest segment read names a next one that was not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continues_in: Option<String>,
    /// All of it, for people.
    pub statement: String,
}

impl SegmentsSummary {
    pub(super) fn of(trace: &TraceFile) -> Option<SegmentsSummary> {
        let s = trace.segments.as_ref()?;
        Some(SegmentsSummary {
            present: s.present.iter().map(|p| p.index).collect(),
            files: s.present.iter().filter_map(|p| p.path.as_ref()).map(|p| p.display().to_string()).collect(),
            kept: s.kept,
            rotated_away: s.first_index(),
            missing: s.missing().into_iter().map(|(a, b)| [a, b]).collect(),
            since_ns: s.since_ns,
            continues_in: s.continues_in.clone(),
            statement: s.describe(),
        })
    }
}

/// A trace file left out: where, and what was wrong.
#[derive(Clone, Debug, Serialize)]
pub struct TraceProblem {
    pub file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub message: String,
}

impl From<&TraceError> for TraceProblem {
    fn from(e: &TraceError) -> TraceProblem {
        TraceProblem {
            file: e.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            line: e.line,
            message: e.message.clone(),
        }
    }
}

impl std::fmt::Display for TraceProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}
