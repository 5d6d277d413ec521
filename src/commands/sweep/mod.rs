//! `backscope sweep`: crash-isolated matched runs of one model across endpoints and num_gpu values.
//!
//! Data flows one way, each step in its own module:
//!
//! 1. `spec` reads a TOML spec file and `flags` merges the command line's flags onto it, relative paths made
//!    absolute as each is read (`crate::run::format::paths`);
//! 2. `plan` resolves that into a `plan::Plan` — endpoints with their programs and APIs, models, prompt texts,
//!    settings — which is stored with the run, so `--resume` replays it;
//! 3. `cells` expands the plan into the cells of a `cells::Schedule`, each with its key, directory, and the
//!    server launch (`presets`) or external endpoint it needs — or `dryrun` prints them;
//! 4. `runner` walks the cells through an `executor::Executor` (processes, `supervise`; HTTP, `http` and
//!    `api`), reading server logs (`logs`) and kernel traces (`tracejoin`) and telling `events` sinks
//!    (progress bar, `--json`) as it goes;
//! 5. the run floor's `crate::run::write::store` commits each cell's `crate::run::format::record::Record` to
//!    SQLite and the run directory (files written whole and durably, `crate::run::write::durable`);
//! 6. `view` shows the run analysis's one aggregation of the records (`crate::run_analysis`, the groups and claims
//!    `backscope report` shows in full) as the table and claims a sweep prints when it ends and `sweep report`
//!    prints again.
//!
//! `command` holds the command bodies: a run, and `export`, `import` (llama-bench) and `report` on the database.

mod api;
mod cells;
mod command;
mod dryrun;
mod envsnap;
mod events;
mod executor;
mod flags;
mod http;
mod import;
mod logs;
mod plan;
mod presets;
mod runner;
mod spec;
mod supervise;
mod tracejoin;
mod view;

#[cfg(test)]
mod ollama_docs;

pub use command::{
    read_stored_plan, run, ExportOptions, ImportOptions, ReportOptions, Resume, RunOptions, SweepCommand,
};
pub use flags::{FlagError, SweepFlags};
pub use plan::{MAX_TEMPERATURE, MAX_TIMEOUT_S};
pub use spec::TimeoutSpec;
pub use supervise::watchdog_main;
