//! What the runner reads after a request besides the response: the server log's slice for the cell (copied into
//! the cell's directory and scanned in the same pass) and, with `--trace`, the kernels the server's processes
//! launched during the request's window.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{file_len, Runner, ServerLog};
use crate::commands::sweep::cells::{Cell, Target};
use crate::commands::sweep::executor::Executor;
use crate::commands::sweep::logs::{LogReader, LogScan};
use crate::commands::sweep::supervise::copy_slice;
use crate::commands::sweep::tracejoin;
use crate::run::format::record::{Record, RecordTrace};
use crate::run::format::run_dir::RunDir;

/// Largest external server log read from its start for backend facts; beyond it only each cell's window is read.
const EXTERNAL_LOG_SCAN_CAP: u64 = 64 << 20;
/// Longest wait for a server log to stop growing after a request (for the cell's slice).
const LOG_SETTLE: Duration = Duration::from_millis(300);

impl<E: Executor> Runner<'_, '_, E> {
    /// Copy what the server logged during the request into the cell's directory and read it: the bytes appended
    /// since the previous cell, in one pass that also writes the slice.
    pub(super) fn slice_log(&mut self, log: &ServerLog, cell: &Cell, rec: &mut Record) -> Result<LogScan> {
        let end = settle_log(&log.path);
        let slice_rel = RunDir::slice_file(&cell.dir);
        let slice_path = self.ctx.run_dir.join(&slice_rel);
        if let Some(dir) = slice_path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut slice = std::fs::File::create(&slice_path)?;
        let scan = match &log.rel {
            Some(rel) => {
                let reader = self.logs.entry(log.path.clone()).or_insert_with(|| LogReader::new(&log.path, rel));
                read_window(reader, log, end, &mut slice, &slice_path)?
            }
            None => {
                // llama-server logs its devices and offload at startup, before any cell's window, so an external
                // log is read from its start for them, citing the file itself; the reader then follows it from
                // cell to cell. A journal already long at the first cell is read only in each cell's window, citing
                // the slice.
                let whole = self.logs.contains_key(&log.path) || end <= EXTERNAL_LOG_SCAN_CAP;
                let scan = if whole {
                    let label = log.path.display().to_string();
                    let reader = self.logs.entry(log.path.clone()).or_insert_with(|| LogReader::new(&log.path, &label));
                    read_window(reader, log, end, &mut slice, &slice_path)
                } else {
                    LogReader::starting_at(&log.path, log.start, &slice_rel).advance(end, log.start, Some(&mut slice))
                };
                // An external log is not ours: one that cannot be read leaves the cell without log facts.
                match scan {
                    Ok(s) => s,
                    Err(_) => return Ok(LogScan::default()),
                }
            }
        };
        rec.log_slice = Some(slice_rel);
        Ok(scan)
    }

    /// `--trace`: the kernels the server's processes launched during the request's window, and the kernel's
    /// GPU-driver lines read since the previous request.
    pub(super) fn observe(&mut self, cell: &Cell, window: [u64; 2]) -> Option<RecordTrace> {
        let mut t = self.observe_traces(cell, window)?;
        if let Some(k) = &self.kernel {
            t.kernel = k.take_new();
        }
        Some(t)
    }

    fn observe_traces(&mut self, cell: &Cell, window: [u64; 2]) -> Option<RecordTrace> {
        match &cell.target {
            Target::Managed(_) => {
                let interval_ms = self.schedule.observer.as_ref()?.interval_ms;
                let st = self.current.as_mut()?.trace.as_mut()?;
                let run_dir = self.ctx.run_dir;
                let label = |p: &Path| p.strip_prefix(run_dir).unwrap_or(p).display().to_string();
                let mut t = tracejoin::observe(&mut st.dir, &st.rel, &label, window, interval_ms);
                t.observer_loaded = st.observer_loaded;
                t.vulkan_layer = self.schedule.observer.as_ref().map(|o| o.vulkan_manifest.is_some());
                Some(t)
            }
            Target::External(x) => {
                let dir = x.trace_dir.as_ref()?;
                let td = self.externals.get_mut(&x.name)?.trace.as_mut()?;
                let label = |p: &Path| p.display().to_string();
                // The external server's observer interval is read from its trace headers; without one, the
                // observer's default.
                let interval = td.interval_ms().unwrap_or(trace_format::env::DEFAULT_INTERVAL_MS);
                Some(tracejoin::observe(td, &dir.display().to_string(), &label, window, interval))
            }
        }
    }
}

/// Wait until a log stops growing (bounded), return its length.
fn settle_log(path: &Path) -> u64 {
    let deadline = Instant::now() + LOG_SETTLE;
    let mut last = file_len(path);
    loop {
        std::thread::sleep(Duration::from_millis(15));
        let now = file_len(path);
        if now == last || Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

/// Read a log up to `end` for the window starting at `log.start`, writing the window to `slice`. A reader already
/// past the window's start (it cannot be, as the runner reads) leaves the slice to a copy of its own.
fn read_window(
    reader: &mut LogReader,
    log: &ServerLog,
    end: u64,
    slice: &mut std::fs::File,
    slice_path: &Path,
) -> std::io::Result<LogScan> {
    if reader.position() <= log.start {
        return reader.advance(end, log.start, Some(slice));
    }
    copy_slice(&log.path, log.start, end, slice_path)?;
    reader.advance(end, log.start, None)
}
