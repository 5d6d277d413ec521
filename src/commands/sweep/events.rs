//! What a running sweep tells the outside while it runs: [`Event`]s delivered to [`Sink`]s. The sweep itself never
//! prints; the progress bar and the `--json` event stream are sinks.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::evidence::Claim;
use crate::run::format::record::Record;

/// One event. Serialised as one JSON object per line with an `event` tag (`--json`).
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    RunStarted { run_id: &'a str, run_dir: &'a str, db: &'a str, cells_total: u64, cells_done: u64, resumed: bool },
    ServerStarting { endpoint: &'a str, argv: &'a [String], port: u16, log: &'a str },
    ServerReady { endpoint: &'a str, pid: u32, port: u16, after_ms: f64 },
    ServerFailed { endpoint: &'a str, pid: Option<u32>, class: &'a str, message: &'a str },
    ServerStopped { endpoint: &'a str, pid: u32, how: &'a str },
    CellStarted { seq: u64, cell_key: &'a str, pid: Option<u32> },
    FirstToken { seq: u64, cell_key: &'a str, ttft_ms: f64, pid: Option<u32> },
    CellFinished { record: &'a Record },
    RunFinished { run_id: &'a str, status: &'a str, cells_ok: u64, cells_failed: u64, claims: &'a [Claim] },
}

pub trait Sink {
    fn event(&mut self, e: &Event<'_>);
}

/// `--json`: one line per event on standard output, flushed at once so a reader can react (tests kill a server on
/// `first_token`). A closed stdout does not stop the sweep: the records still go to the database.
pub struct JsonLines<W: Write> {
    out: W,
    broken: bool,
}

impl<W: Write> JsonLines<W> {
    pub fn new(out: W) -> Self {
        JsonLines { out, broken: false }
    }
}

impl<W: Write> Sink for JsonLines<W> {
    fn event(&mut self, e: &Event<'_>) {
        if self.broken {
            return;
        }
        let Ok(line) = serde_json::to_string(e) else { return };
        if writeln!(self.out, "{line}").and_then(|_| self.out.flush()).is_err() {
            self.broken = true;
        }
    }
}

/// The progress bar on standard error: position, ETA, current cell and the last outcome. Hidden when standard error
/// is not a terminal (CI logs, pipes) or with `--quiet`.
pub struct Progress {
    bar: ProgressBar,
    last: String,
}

impl Progress {
    pub fn new(total: u64, done: u64, visible: bool) -> Self {
        let bar = if visible && std::io::stderr().is_terminal() {
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} ETA {eta} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_position(done);
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress { bar, last: String::new() }
    }

    fn show(&self, now: &str) {
        // Standard error, as every message: names from the spec and records are written visibly, never obeyed.
        let message = if self.last.is_empty() { now.to_string() } else { format!("{now} | last: {}", self.last) };
        self.bar.set_message(crate::output::escape::message(&message));
    }
}

impl Sink for Progress {
    fn event(&mut self, e: &Event<'_>) {
        match e {
            Event::CellStarted { cell_key, .. } => self.show(cell_key),
            Event::ServerStarting { endpoint, port, .. } => self.show(&format!("starting {endpoint} on port {port}")),
            Event::FirstToken { cell_key, ttft_ms, .. } => {
                self.show(&format!("{cell_key} (first token {ttft_ms:.0} ms)"))
            }
            Event::CellFinished { record } => {
                self.last = format!("{} {}", record.endpoint, record.outcome());
                self.bar.inc(1);
            }
            Event::RunFinished { .. } => self.bar.finish_and_clear(),
            _ => {}
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// Several sinks at once.
#[derive(Default)]
pub struct Sinks(pub Vec<Box<dyn Sink>>);

impl Sink for Sinks {
    fn event(&mut self, e: &Event<'_>) {
        for s in &mut self.0 {
            s.event(e);
        }
    }
}

/// Records every event as JSON (unit tests of the runner).
#[cfg(test)]
#[derive(Default)]
pub struct Collect(pub Vec<serde_json::Value>);

#[cfg(test)]
impl Sink for Collect {
    fn event(&mut self, e: &Event<'_>) {
        self.0.push(serde_json::to_value(e).unwrap_or_default());
    }
}
