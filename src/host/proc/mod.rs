//! Processes, for every command that starts or inspects one: what `/proc` says about a process ([`stat`]) and
//! one way to run a short external program under a deadline that covers its pipes ([`run`]).
//!
//! This is a ground-floor module: `doctor`'s tool probes, `disasm`'s disassemblers, `sweep`'s helper commands and
//! supervision, `trace`'s signal forwarding and `maps`' process table all use it, so a fix to how a pid is read
//! or how a hung tool is ended lands once.

pub mod run;
pub mod stat;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Instant;

/// How a child ended.
#[derive(Clone, Debug, PartialEq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Milliseconds from spawn to when the exit was observed.
    pub after_ms: f64,
}

impl ExitInfo {
    /// The exit of a child spawned at `spawned` (`None`: it ended but how was lost, e.g. reaped elsewhere).
    pub fn from_status(status: Option<ExitStatus>, spawned: Instant) -> Self {
        ExitInfo {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            after_ms: spawned.elapsed().as_secs_f64() * 1e3,
        }
    }

    pub fn signal_name(&self) -> Option<String> {
        self.signal.map(signal_name)
    }

    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (_, Some(s)) => format!("killed by {}", signal_name(s)),
            (Some(c), None) => format!("exited with code {c}"),
            (None, None) => "ended".into(),
        }
    }
}

/// `SIGSEGV` for 11, `signal 99` for a number without a name.
pub fn signal_name(sig: i32) -> String {
    match trace_format::record::signal_name(sig) {
        "" => format!("signal {sig}"),
        name => name.to_string(),
    }
}

/// The executable `name` in the directories of `path` (a `PATH` value): the first regular file with an execute bit.
pub fn which(name: &str, path: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}
