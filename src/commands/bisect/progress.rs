//! Progress on standard error while the search runs: steps done, the most steps left (⌈log2⌉ of the untested
//! builds), the mean time of a step so far and so an estimate of the time left. A bar on a terminal; one line per
//! finished step always (a log of the bisect for whoever reads standard error later).

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::output::messages;

pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    steps_done: u32,
}

impl Progress {
    pub fn new() -> Progress {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} bisect {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar, started: Instant::now(), steps_done: 0 }
    }

    /// A step begins.
    pub fn begin(&self, what: &str, steps_left: u32) {
        let estimate = self.mean_step().map(|m| format!(", about {} left", human(m * steps_left))).unwrap_or_default();
        self.bar.set_message(format!("{what} (step {}, at most {steps_left} more{estimate})", self.steps_done + 1));
    }

    /// A step is recorded.
    pub fn done(&mut self, line: &str, steps_left: u32) {
        self.steps_done += 1;
        let estimate = self.mean_step().map(|m| format!(", about {} left", human(m * steps_left))).unwrap_or_default();
        let line = format!("{line} — at most {steps_left} step(s) left{estimate}");
        self.bar.suspend(|| messages::note(line));
    }

    /// A line in the log of steps, between the finished steps' lines.
    pub fn note(&self, line: &str) {
        self.bar.suspend(|| messages::note(line));
    }

    fn mean_step(&self) -> Option<Duration> {
        (self.steps_done > 0).then(|| self.started.elapsed() / self.steps_done)
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s.div_ceil(60)),
        _ => format!("{:.1} h", s as f64 / 3600.0),
    }
}
