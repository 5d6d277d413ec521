//! A run's row in the store — when it started and ended, where it stands, its plan and host — as both stores
//! (`crate::run::write::sqlite`, `crate::run::write::pg`) and the `Store` that chooses between them write and read it.

use serde::{Deserialize, Serialize};

use crate::host::identity::HostIdentity;
use crate::run::format::record::RunSource;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRow {
    pub run_id: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    pub status: RunStatus,
    pub source: RunSource,
    pub run_dir: String,
    pub plan_json: String,
    pub cells_total: u64,
    pub backscope_version: String,
    /// The host that ran (or imported) the run; `None` for runs stored before hosts were recorded.
    pub host: Option<HostIdentity>,
    /// The database role that stored the row, in a PostgreSQL store; `None` for SQLite rows (a local file: its
    /// rows are this user's, or whoever could write the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<RunOwner>,
}

/// A PostgreSQL row's owner (`runs.owner_role`), and whether it is the role this connection runs as
/// (`current_user`): only that role's runs are this user's to resume or to reclaim leftovers of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOwner {
    pub role: String,
    pub is_current: bool,
}

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Finished,
    /// Stopped by Ctrl-C (or SIGTERM/SIGHUP) with cells left; `--resume` continues it.
    Interrupted,
}

impl RunStatus {
    /// The stored spelling (SQLite, PostgreSQL, `sweep report --json`, events).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Finished => "finished",
            RunStatus::Interrupted => "interrupted",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<RunStatus> {
        [RunStatus::Running, RunStatus::Finished, RunStatus::Interrupted].into_iter().find(|x| x.as_str() == s)
    }
}
