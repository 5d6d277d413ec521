//! Reading a directory of traces: every trace file in it, the segments of each rotating trace joined.

use std::path::Path;

use crate::join::join;
use crate::reader::{TraceError, TraceFile};

/// The most trace files read from one directory ([`read_dir`]): a trace is one process's, and a server under test
/// starts a handful.
pub const MAX_DIR_TRACE_FILES: usize = 4096;

/// The traces of one directory: those that could be read, ordered by pid and path, and the files
/// that could not.
#[derive(Clone, Debug, Default)]
pub struct DirTraces {
    pub traces: Vec<TraceFile>,
    pub problems: Vec<TraceError>,
}

/// Reads every `trace-*.jsonl` file of a directory, each with all its windows ([`TraceFile::read`]). A file
/// that cannot be read or parsed is reported in [`DirTraces::problems`] and the others are kept; only a
/// directory that cannot be listed is an error.
pub fn read_dir(dir: &Path) -> std::io::Result<DirTraces> {
    read_dir_with(dir, TraceFile::read)
}

/// [`read_dir`] with each file's windows folded into one as it is read ([`TraceFile::read_folded`]): what
/// `backscope trace --read` and `predict --trace` summarise over [`Range::All`], in memory that follows the
/// kernel table, not the files.
///
/// [`Range::All`]: crate::Range::All
pub fn read_dir_folded(dir: &Path) -> std::io::Result<DirTraces> {
    read_dir_with(dir, TraceFile::read_folded)
}

fn read_dir_with(dir: &Path, read: fn(&Path) -> Result<TraceFile, TraceError>) -> std::io::Result<DirTraces> {
    let listing = |e: std::io::Error| std::io::Error::new(e.kind(), format!("listing {}: {e}", dir.display()));
    let mut out = DirTraces::default();
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(listing)? {
        let path = entry.map_err(listing)?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if format::naming::is_trace_file_name(name) {
            paths.push(path);
        }
    }
    paths.sort();
    if paths.len() > MAX_DIR_TRACE_FILES {
        // One trace per traced process: a directory with more is not one run's, and each file read costs its kernel
        // table in memory (100,000 small files took 727 MB). The first by name are read; the rest are one problem.
        let left = paths.len() - MAX_DIR_TRACE_FILES;
        paths.truncate(MAX_DIR_TRACE_FILES);
        out.problems.push(TraceError {
            path: Some(dir.to_path_buf()),
            line: None,
            message: format!(
                "{left} more trace files not read: at most {MAX_DIR_TRACE_FILES} of one directory are (one per traced \
                 process)"
            ),
        });
    }
    let mut traces = Vec::new();
    for path in paths {
        match read(&path) {
            Ok(trace) => traces.push(trace),
            Err(problem) => out.problems.push(problem),
        }
    }
    // The segments of one rotating trace are one process's.
    let (joined, problems) = join(traces);
    out.traces = joined;
    out.problems.extend(problems);
    out.traces.sort_by(|a, b| (a.pid(), &a.path).cmp(&(b.pid(), &b.path)));
    Ok(out)
}
