//! What `backscope report` shows, in the form `--json` prints (`backscope.report/1`): the run, its statistics, the
//! timelines, the claims and the rules the numbers rest on. The views (`document`, `bundle`) read it; `mod.rs` builds
//! it. Kept apart from `mod.rs` so that the views never reach back up into the command.

use serde::Serialize;

use super::input::RunMeta;
use super::timeline::CellTimeline;
use crate::evidence::Claim;
use crate::run_analysis::aggregate::RunStats;
use crate::run_analysis::stats;

/// JSON schema of `backscope report --json`.
pub const SCHEMA: &str = "backscope.report/1";

/// The thresholds and methods the numbers rest on, in the JSON for whoever reads it later.
#[derive(Clone, Debug, Serialize)]
pub struct Rules {
    pub outlier: &'static str,
    pub outlier_threshold: f64,
    pub outlier_min_n: usize,
    pub crash_timing: &'static str,
    pub cv_deterministic: f64,
    pub verdict_min_n: usize,
    pub ratio: &'static str,
    pub ratio_level: f64,
    pub cold: &'static str,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            outlier: "modified z-score 0.6745 (x - median) / MAD (Iglewicz and Hoaglin 1993); MAD = 0: (x - median) / (1.253314 MeanAD)",
            outlier_threshold: stats::OUTLIER_THRESHOLD,
            outlier_min_n: stats::MIN_OUTLIER_N,
            crash_timing: "coefficient of variation of the times to failure (sample sd / mean)",
            cv_deterministic: stats::CV_DETERMINISTIC,
            verdict_min_n: stats::MIN_VERDICT_N,
            ratio: "Welch's t interval on the logarithms, as a ratio of geometric means",
            ratio_level: 0.95,
            cold: "the first request of a server process, or the first after the endpoint switched model or num_gpu",
        }
    }
}

/// A run's report: what `backscope report` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ReportView {
    pub schema: &'static str,
    pub run: RunMeta,
    #[serde(flatten)]
    pub stats: RunStats,
    pub timelines: Vec<CellTimeline>,
    pub claims: Vec<Claim>,
    pub rules: Rules,
    /// What could not be read or was not believed, each naming its file and field; the rest of the report stands.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}
