//! The bisect rows and their parts, as both bisect stores (`crate::run::write::bisect`: the SQLite tables and the
//! PostgreSQL ones) write and read them, and the bisect ids.

use serde::{Deserialize, Serialize};

/// What one step found about a build. "Bad" means "has the property the bad end has".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Good,
    Bad,
    /// Not tested: the build cannot be had, or the test asked to skip it (exit 125, a cell that failed otherwise).
    Skip,
    /// Tested, but the measurements could not decide (a speed interval that straddles the threshold).
    Undecided,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Good => "good",
            Outcome::Bad => "bad",
            Outcome::Skip => "skip",
            Outcome::Undecided => "undecided",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        [Outcome::Good, Outcome::Bad, Outcome::Skip, Outcome::Undecided].into_iter().find(|o| o.as_str() == s)
    }

    /// Good or bad: the step narrowed the range.
    pub fn decided(self) -> bool {
        matches!(self, Outcome::Good | Outcome::Bad)
    }
}

/// Why a build was tested: one of the two ends (checked first), or a probe between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    GoodEnd,
    BadEnd,
    Probe,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::GoodEnd => "good_end",
            Role::BadEnd => "bad_end",
            Role::Probe => "probe",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Role> {
        [Role::GoodEnd, Role::BadEnd, Role::Probe].into_iter().find(|r| r.as_str() == s)
    }
}

/// Where a bisect stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Running,
    /// The search ended: a first bad build, a range only skipped builds separate, or a bad range.
    Finished,
    /// Stopped by a signal; `--resume` continues.
    Interrupted,
    /// Stopped by an error (an aborting test exit, a provider that failed); `--resume` continues.
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Finished => "finished",
            Status::Interrupted => "interrupted",
            Status::Failed => "failed",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Status> {
        [Status::Running, Status::Finished, Status::Interrupted, Status::Failed].into_iter().find(|x| x.as_str() == s)
    }
}

/// A sweep run a cell test made, and the records of it that decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunEvidence {
    pub run_id: String,
    pub run_dir: String,
    /// `result.json` paths relative to `run_dir`.
    pub records: Vec<String>,
    /// Log lines that decided (`--log`, a crash signature): file (absolute), 1-based line, text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<(String, u64, String)>,
}

/// An external test command's run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CommandEvidence {
    pub argv: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Its standard output and error, interleaved, in full.
    pub log: String,
    /// The end of that log.
    pub tail: String,
}

/// One try of a test on a build (`--repeat` tries several).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub outcome: Outcome,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunEvidence>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandEvidence>,
    /// Measurements that decided (a speed test: t/s of each side, the interval).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub measured: serde_json::Map<String, serde_json::Value>,
}

/// Everything a step rests on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// The build log of a build that could not be built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_log: Option<String>,
    /// The `bin/` directory the test ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bin_dir: Option<String>,
}

/// One stored step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub seq: u32,
    pub build: u32,
    pub role: Role,
    pub outcome: Outcome,
    pub reason: String,
    pub evidence: Evidence,
    /// Seconds spent building (none when the build was not prepared, e.g. a skipped end).
    pub build_secs: Option<f64>,
    pub from_cache: Option<bool>,
    pub test_secs: f64,
    pub recorded_at: String,
}

impl Step {
    /// A step not taken: what the search would know if `build` gave `outcome` (for weighing the next probe, and in
    /// tests). It has no evidence, no timings and the last sequence number.
    pub fn supposed(build: u32, role: Role, outcome: Outcome) -> Step {
        Step {
            seq: u32::MAX,
            build,
            role,
            outcome,
            reason: String::new(),
            evidence: Evidence::default(),
            build_secs: None,
            from_cache: None,
            test_secs: 0.0,
            recorded_at: String::new(),
        }
    }
}

/// One stored bisect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BisectRow {
    pub bisect_id: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    pub status: Status,
    pub good: u32,
    pub bad: u32,
    /// The build source as given (`pypi`, `git:DIR`, `dir:DIR`).
    pub builds: String,
    /// The test in words (`--crash --class crash`, `-- sh -c …`).
    pub test: String,
    /// The whole spec as the bisect command serialised it (replayed by `--resume`).
    pub spec_json: String,
    /// Every build the source listed from good to bad, both included, ascending.
    pub candidates: Vec<u32>,
    /// Once decided: what lies between the last good and first bad build upstream.
    pub upstream: Option<Upstream>,
    pub backscope_version: String,
    /// In a shared store, when another host of its role took the bisect over: from which host, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_over: Option<TakeOver>,
}

/// A bisect moved to another host by `--take-over`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeOver {
    /// The host that owned it before.
    pub from_host: String,
    /// When it was moved (UTC, as `utc_now` writes it).
    pub at: String,
}

/// The upstream range between the last good and the first bad build.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Upstream {
    pub last_good: u32,
    pub first_bad: u32,
    /// llama.cpp's tags, `bGOOD..bBAD`.
    pub tags: String,
    pub compare_url: String,
    /// The commits between them (hash and subject) where the build source has a git history.
    pub commits: Vec<String>,
}

impl Upstream {
    pub fn new(last_good: u32, first_bad: u32, commits: Vec<String>) -> Upstream {
        Upstream {
            last_good,
            first_bad,
            tags: format!("b{last_good}..b{first_bad}"),
            compare_url: format!("https://github.com/ggml-org/llama.cpp/compare/b{last_good}...b{first_bad}"),
            commits,
        }
    }
}

/// A new bisect id: `bisect-` and a run id's time and salt.
pub fn new_bisect_id() -> String {
    format!("bisect-{}", crate::run::format::ids::new_run_id())
}

/// Whether `id` has the shape [`new_bisect_id`] gives: `bisect-YYYYMMDD-HHMMSS-xxxx` (the salt in lowercase hex).
/// The id names a directory under the runs directory, so nothing else (a `/`, a `..`) may pass for one.
pub fn is_bisect_id(id: &str) -> bool {
    let Some(rest) = id.strip_prefix("bisect-") else { return false };
    let b = rest.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() == 20
        && digits(0..8)
        && b[8] == b'-'
        && digits(9..15)
        && b[15] == b'-'
        && b[16..].iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// Rows for the tests of the bisect store and of the verdict.
#[cfg(test)]
pub(crate) mod test_rows {
    use super::*;

    /// A running bisect over builds 100..=104.
    pub fn row(id: &str) -> BisectRow {
        BisectRow {
            bisect_id: id.into(),
            created_at: crate::run::format::ids::utc_now(),
            finished_at: None,
            status: Status::Running,
            good: 100,
            bad: 104,
            builds: "dir:/x".into(),
            test: "-- true".into(),
            spec_json: "{}".into(),
            candidates: vec![100, 101, 102, 103, 104],
            upstream: None,
            backscope_version: "t".into(),
            taken_over: None,
        }
    }
}
