//! The report of one log: its layout (bump [`SCHEMA`] on any change a consumer could notice).

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::parser::Stats;
use crate::placement::Placement;
use crate::time::Clock;

use super::crash::{Crash, Phase};
use super::timeline::TimelineEntry;
use crate::facts::{Backend, Buffer, Device, Graph, Handled, Offload, Sourced, Timing};

/// Version of the [`Report`] layout; bump on any change a consumer could notice.
pub const SCHEMA: &str = "backscope.logs/3";

/// The analysis of one log.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub stats: Stats,
    /// What produced the log, from the lines seen: `ollama` (v0.30+, llama-server runners),
    /// `ollama-go-runner` (before v0.30), `ollama` when the era cannot be told, `llama.cpp`, `unknown`.
    pub flavor: &'static str,
    /// Events per kind (see [`EventKind::name`](crate::EventKind::name)).
    pub counts: BTreeMap<&'static str, u64>,
    /// Lines no rule recognised.
    pub other: LineSet,
    /// Lines cut at the line cap.
    pub truncated: LineSet,
    /// Lines whose timestamp could not be read.
    pub bad_timestamps: LineSet,
    /// The clock relative times are measured on (`None`: the log has no timestamps).
    pub clock: Option<Clock>,
    pub timeline: Vec<TimelineEntry>,
    /// Timeline entries left out between the first and the last ones kept.
    pub timeline_elided: u64,
    /// Where in `timeline` the left-out entries were (the number of entries before them).
    pub timeline_elided_at: Option<usize>,
    pub facts: Facts,
    /// The first `max_crashes` crashes, in detail.
    pub crashes: Vec<Crash>,
    /// Every crash the log shows, kept in `crashes` or not.
    pub crashes_total: u64,
    /// Crashes counted (and grouped by signature) but not kept in `crashes`: `crashes_total - crashes.len()`.
    pub crashes_dropped: u64,
    /// Crashes grouped by signature, most frequent first; every crash counts, kept in detail or not. At most
    /// `max_crashes` distinct signatures are listed.
    pub signatures: Vec<SignatureGroup>,
    /// Crashes whose signature is not in `signatures` because that many distinct signatures were listed.
    pub signatures_dropped: u64,
    /// The state of the last runner when the log ends.
    pub ending: Ending,
}

/// How the log ends: what a caller that saw the process die needs to place the death.
#[derive(Clone, Debug, Serialize)]
pub struct Ending {
    pub last_line: u64,
    /// llama-server's `cleaning up before exit` in the last runner lifetime.
    pub orderly_shutdown: Option<u64>,
    /// A llama-server task had started and not finished when the log ends.
    pub request_in_progress: Option<u64>,
    /// The phase a crash right at the end would be in (the crash rules without a stack).
    pub phase: Phase,
    pub phase_rule: String,
    pub phase_lines: Vec<u64>,
    /// Where the log shows the last runtime begin: a runner start or the model loader's first line (`None`: a
    /// fragment that starts after that, whose "no crash" covers only its own lines).
    pub start_line: Option<u64>,
}

/// A set of line numbers as ranges (bounded).
#[derive(Clone, Debug, Default, Serialize)]
pub struct LineSet {
    pub count: u64,
    /// Inclusive ranges `[first, last]`, in order.
    pub ranges: Vec<(u64, u64)>,
    /// Lines not in `ranges` because the range cap was reached.
    pub unlisted: u64,
}

impl LineSet {
    pub(super) fn add(&mut self, line: u64, cap: usize) {
        self.count += 1;
        if let Some(last) = self.ranges.last_mut() {
            if last.1 + 1 == line {
                last.1 = line;
                return;
            }
        }
        if self.ranges.len() < cap {
            self.ranges.push((line, line));
        } else {
            self.unlisted += 1;
        }
    }
}

/// What the log states about the runtime's setup (the last value wins where one is expected).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Facts {
    pub backends: Vec<Backend>,
    pub devices: Vec<Device>,
    pub inference_compute: Vec<BTreeMap<&'static str, String>>,
    pub offload: Option<Offload>,
    pub flash_attention: Option<Sourced<String>>,
    pub graph: Option<Graph>,
    pub buffers: Vec<Buffer>,
    pub runner_started_s: Vec<Sourced<f64>>,
    pub http_status: BTreeMap<u16, u64>,
    /// The last timings (oldest first).
    pub timings: VecDeque<Timing>,
    /// Where the model ran: backends and how each is known, dropped GPUs, CPU serving, contradictions.
    pub placement: Placement,
    /// Failures the runtime handled and went on from (an allocation it retried another way): no crash.
    pub handled: Vec<Handled>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SignatureGroup {
    pub id: String,
    pub text: String,
    pub count: u64,
    pub phases: Vec<Phase>,
    /// First line of each crash with this signature (bounded).
    pub crash_lines: Vec<u64>,
}
