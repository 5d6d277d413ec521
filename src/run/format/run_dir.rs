//! A run directory: the files one run leaves behind, every name of them given here and nowhere else. A sweep writes
//! `run.json` and `env.json` when it starts, one folder per cell under `cells/` (its `result.json` and the slice of
//! the server log written while it ran), each server start's log under `servers/` and, traced, its trace directory
//! under `traces/`, the kernel's GPU-driver lines, the ledger of the processes it started (`groups/`) and, when it
//! ends, `claims.json`. An import writes the inputs it read (`input/`) and its records in `records.jsonl`. A
//! PostgreSQL store that lost its server keeps the run's records in a local SQLite file beside the directory.
//!
//! Records name their files relative to the run directory, so that a run directory copied elsewhere still reads:
//! the relative names come from the associated functions ([`RunDir::cell_dir`], [`RunDir::server_log`], …), the
//! paths on disk from the methods.

use std::path::{Path, PathBuf};

use crate::run::format::paths::sanitize;

/// The directory of one run, by its path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// The run's id, creation time, store, command line, plan and host, written when a sweep starts.
    pub const RUN_JSON: &'static str = "run.json";
    /// The environment snapshot a sweep takes when it starts.
    pub const ENV_JSON: &'static str = "env.json";
    /// The sweep's own claims, written when it ends.
    pub const CLAIMS_JSON: &'static str = "claims.json";
    /// An import's records, one JSON object per line, in order.
    pub const RECORDS_JSONL: &'static str = "records.jsonl";
    /// The kernel's GPU-driver lines while a traced sweep ran.
    pub const KERNEL_LOG: &'static str = crate::observe::kernel_log::record::FILE_NAME;
    /// The folders that hold one folder per record, named by its position in the plan (`00042-vk-ngl1-e1r2`), each
    /// with its `result.json`: a sweep's `cells/`, and `records/` of earlier imports.
    pub const RECORD_DIRS: [&'static str; 2] = [CELLS, "records"];

    pub fn new(root: impl Into<PathBuf>) -> RunDir {
        RunDir { root: root.into() }
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.root
    }

    pub fn run_json_path(&self) -> PathBuf {
        self.root.join(Self::RUN_JSON)
    }

    pub fn env_json_path(&self) -> PathBuf {
        self.root.join(Self::ENV_JSON)
    }

    pub fn claims_path(&self) -> PathBuf {
        self.root.join(Self::CLAIMS_JSON)
    }

    /// An import's records ([`Self::RECORDS_JSONL`]).
    pub fn records_path(&self) -> PathBuf {
        self.root.join(Self::RECORDS_JSONL)
    }

    /// Where an import writes its records before renaming them into place.
    pub fn records_tmp_path(&self) -> PathBuf {
        self.root.join(format!(".{}.tmp", Self::RECORDS_JSONL))
    }

    /// The kernel's GPU-driver lines ([`Self::KERNEL_LOG`]).
    pub fn kernel_log_path(&self) -> PathBuf {
        self.root.join(Self::KERNEL_LOG)
    }

    /// The bytes an import read, each under its own name.
    pub fn input_dir(&self) -> PathBuf {
        self.root.join("input")
    }

    /// The log of every server start ([`Self::server_log`]).
    pub fn servers_dir(&self) -> PathBuf {
        self.root.join(SERVERS)
    }

    /// The trace directory of every traced server start ([`Self::trace_dir`]).
    pub fn traces_dir(&self) -> PathBuf {
        self.root.join(TRACES)
    }

    /// The ledger of the process groups the run's children started, one file each.
    pub fn groups_dir(&self) -> PathBuf {
        self.root.join("groups")
    }

    /// The log of the server start whose trace directory is `trace_dir` (`servers/sNNN-NAME.log` beside
    /// `traces/sNNN-NAME`).
    pub fn server_log_of_trace(&self, trace_dir: &Path) -> Option<PathBuf> {
        trace_dir.file_name().map(|name| self.servers_dir().join(name).with_extension("log"))
    }

    /// Where a PostgreSQL store keeps the run's records after its server went away: `RUN_DIR.local.db`, beside the
    /// directory.
    pub fn local_db_path(&self) -> PathBuf {
        PathBuf::from(format!("{}.local.db", self.root.to_string_lossy().trim_end_matches('/')))
    }

    /// The folder of a sweep's cell, relative: `cells/` and the cell's position in the plan, endpoint (made
    /// file-name-safe), num_gpu, epoch and repetition (`cells/00007-vulkan-ngl-1-e1r1`).
    pub fn cell_dir(seq: u64, endpoint: &str, num_gpu: i64, epoch: u32, repetition: u32) -> String {
        format!("{CELLS}/{seq:05}-{}-ngl{num_gpu}-e{epoch}r{repetition}", sanitize(endpoint))
    }

    /// A record's file in the folder `dir` (relative, as [`Self::cell_dir`] gives it).
    pub fn result_file(dir: &str) -> String {
        format!("{dir}/{RESULT_JSON}")
    }

    /// What the server logged while the cell of folder `dir` ran, relative.
    pub fn slice_file(dir: &str) -> String {
        format!("{dir}/server.log")
    }

    /// The log of the run's `start`-th server start, relative; `stem` names the endpoint (file-name-safe).
    pub fn server_log(start: u32, stem: &str) -> String {
        format!("{SERVERS}/s{start:03}-{stem}.log")
    }

    /// The trace directory of the run's `start`-th server start, relative, named like its log.
    pub fn trace_dir(start: u32, stem: &str) -> String {
        format!("{TRACES}/s{start:03}-{stem}")
    }

    /// The record file of the record folder `name` under `records_dir` (one of [`Self::RECORD_DIRS`]), relative.
    pub fn record_file(records_dir: &str, name: &str) -> String {
        Self::result_file(&format!("{records_dir}/{name}"))
    }
}

impl AsRef<Path> for RunDir {
    fn as_ref(&self) -> &Path {
        &self.root
    }
}

const CELLS: &str = "cells";
const SERVERS: &str = "servers";
const TRACES: &str = "traces";
const RESULT_JSON: &str = "result.json";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_ones_runs_on_disk_have() {
        let d = RunDir::new("/runs/r1");
        assert_eq!(d.run_json_path(), Path::new("/runs/r1/run.json"));
        assert_eq!(d.records_path(), Path::new("/runs/r1/records.jsonl"));
        assert_eq!(d.records_tmp_path(), Path::new("/runs/r1/.records.jsonl.tmp"));
        assert_eq!(d.kernel_log_path(), Path::new("/runs/r1/kernel-log.jsonl"));
        assert_eq!(RunDir::new("/runs/r1/").local_db_path(), Path::new("/runs/r1.local.db"));
        assert_eq!(RunDir::cell_dir(7, "vulkan", -1, 1, 1), "cells/00007-vulkan-ngl-1-e1r1");
        assert_eq!(RunDir::cell_dir(3, "rocm gfx/906", 99, 2, 3), "cells/00003-rocm_gfx_906-ngl99-e2r3");
        assert_eq!(RunDir::result_file("cells/00007-vulkan-ngl-1-e1r1"), "cells/00007-vulkan-ngl-1-e1r1/result.json");
        assert_eq!(RunDir::server_log(3, "ls"), "servers/s003-ls.log");
        assert_eq!(RunDir::trace_dir(1, "vk"), "traces/s001-vk");
        assert_eq!(
            d.server_log_of_trace(&d.path().join(RunDir::trace_dir(1, "vk"))),
            Some(PathBuf::from("/runs/r1/servers/s001-vk.log"))
        );
    }
}
