//! Kernel lines joined to a traced run: grouped into incidents, each stated as a claim and tied to the traced process
//! the kernel names and to that process's failure records (crash, device loss, hang) nearest in time.
//!
//! An incident is what the driver prints about one failure: a trigger (a ring timeout, a GPU page fault, an NVIDIA Xid,
//! an Intel hang) with the lines around it — the process it names, the resets, the coredump — within [`GAP_USEC`] of
//! each other. amdgpu names the process on a line of its own after the timeout; NVIDIA and Intel name it in the
//! trigger. A trigger after a finished reset, or a second ring timeout, or a line naming another process starts a new
//! incident (as `backscope logs` separates them in a paste).
//!
//! Confidence: the kernel naming a traced pid is the kernel's own word (Confirmed); an incident that names no process
//! is tied to a failure only by time (Inferred), or to nothing (Unresolved: whose job it was is not known); one naming
//! another process is kept and said, never joined to the traced command's records.

use logs::event::GpuDriverEvent as G;

use super::record::KernelLine;
use super::stored::KernelLog;
use crate::evidence::{Claim, Confidence, Source};

/// Longest pause between two lines of one incident (an amdgpu reset and its coredump take seconds).
pub const GAP_USEC: u64 = 30_000_000;
/// An incident that names no process is tied to a failure record at most this far apart.
pub const BY_TIME_USEC: u64 = 60_000_000;
/// Lines cited per incident.
const CITED: usize = 6;

/// A failure record of the traced run, for the join: whose, when, in words, and the id of its claim.
#[derive(Clone, Debug)]
pub struct Failure {
    pub pid: u32,
    /// CLOCK_MONOTONIC ns.
    pub at_ns: u64,
    /// `its VK_ERROR_DEVICE_LOST (vkWaitForFences)`, `its crash (SIGSEGV)`, `the hang the layer saw`.
    pub what: String,
    pub claim: String,
}

/// Lines of one failure, as the driver printed them.
#[derive(Clone, Debug, Default)]
pub struct Incident<'a> {
    pub lines: Vec<&'a KernelLine>,
    /// The process it names (the first pid any of its lines names).
    pub pid: Option<u32>,
    pub process: Option<&'a str>,
}

impl<'a> Incident<'a> {
    fn trigger(&self) -> Option<&'a KernelLine> {
        self.lines.iter().copied().find(|l| l.is_trigger())
    }

    fn has(&self, e: G) -> Option<&'a KernelLine> {
        self.lines.iter().copied().find(|l| l.event == e)
    }

    /// Whether `l` belongs to this incident.
    fn accepts(&self, l: &KernelLine) -> bool {
        let Some(last) = self.lines.last() else { return true };
        if l.usec.saturating_sub(last.usec) > GAP_USEC {
            return false;
        }
        if matches!((self.pid, l.pid), (Some(a), Some(b)) if a != b) {
            return false;
        }
        if !l.is_trigger() {
            return true;
        }
        let reset_done = self.has(G::ResetSucceeded).or(self.has(G::ResetFailed)).is_some();
        match self.trigger() {
            None => !reset_done,
            // Page faults and Xids come in bursts; a second ring timeout is a second hang.
            Some(t) => t.event == l.event && l.event != G::RingTimeout && !reset_done,
        }
    }

    fn add(&mut self, l: &'a KernelLine) {
        if self.pid.is_none() && l.pid.is_some() {
            self.pid = l.pid;
            self.process = l.process.as_deref();
        }
        self.lines.push(l);
    }

    /// The kernel's time of the incident (its trigger's, else its first line's), µs since boot.
    pub fn usec(&self) -> u64 {
        self.trigger().or(self.lines.first().copied()).map_or(0, |l| l.usec)
    }

    /// `a GPU job timed out on ring gfx_0.0.0`, `NVIDIA Xid 31 (3 lines)`, …
    pub fn what(&self) -> String {
        let Some(first) = self.trigger().or(self.lines.first().copied()) else { return String::new() };
        let repeats = self.lines.iter().filter(|l| l.event == first.event).count();
        let ring = first.ring.as_deref().map(|r| format!(" on ring {r}")).unwrap_or_default();
        let what = match first.event {
            G::RingTimeout => format!("a GPU job timeout{ring}"),
            G::PageFault => "a GPU page fault".to_string(),
            G::Xid => {
                let mut codes: Vec<u32> = Vec::new();
                for c in self.lines.iter().filter_map(|l| l.code) {
                    if !codes.contains(&c) {
                        codes.push(c);
                    }
                }
                let codes: Vec<String> = codes.iter().map(u32::to_string).collect();
                format!("NVIDIA Xid {}", codes.join(", "))
            }
            G::Hang => "a GPU hang".to_string(),
            G::ResetBegin | G::ResetSucceeded => format!("a GPU reset{ring}"),
            G::ResetFailed => format!("a failed GPU reset{ring}"),
            G::Coredump => "a device coredump".to_string(),
            G::Process => "a GPU job".to_string(),
        };
        if repeats > 1 {
            format!("{what} ({repeats} lines)")
        } else {
            what
        }
    }

    /// What followed the trigger: `the GPU was reset`, `a device coredump was written`.
    pub fn after(&self) -> Vec<&'static str> {
        let first = self.trigger().or(self.lines.first().copied()).map(|l| l.event);
        let mut out = Vec::new();
        match (self.has(G::ResetFailed), self.has(G::ResetSucceeded), self.has(G::ResetBegin)) {
            (Some(_), _, _) if first != Some(G::ResetFailed) => out.push("the GPU reset failed"),
            (None, Some(_), _) => out.push("the GPU was reset"),
            (None, None, Some(_)) if first != Some(G::ResetBegin) => out.push("a GPU reset began"),
            _ => {}
        }
        if self.has(G::Coredump).is_some() && first != Some(G::Coredump) {
            out.push("a device coredump was written");
        }
        out
    }

    /// The incident's lines as sources (the first [`CITED`]).
    pub fn sources(&self) -> Vec<Source> {
        self.lines
            .iter()
            .take(CITED)
            .map(|l| Source::LogLine {
                path: l.file.clone(),
                line: l.line,
                text: l.dmesg().chars().take(300).collect(),
            })
            .collect()
    }
}

/// The incidents of `lines` (in the order the kernel wrote them).
pub fn incidents(lines: &[KernelLine]) -> Vec<Incident<'_>> {
    let mut sorted: Vec<&KernelLine> = lines.iter().collect();
    sorted.sort_by_key(|l| l.seq);
    let mut out: Vec<Incident<'_>> = Vec::new();
    for l in sorted {
        if !out.last().is_some_and(|i| i.accepts(l)) {
            out.push(Incident::default());
        }
        if let Some(i) = out.last_mut() {
            i.add(l);
        }
    }
    out
}

/// `1.204 s before`, `0.020 s after`, `at the same moment as`: when a kernel time (µs) was against a CLOCK_MONOTONIC
/// instant (ns).
pub fn relative(usec: u64, at_ns: u64) -> String {
    let at = at_ns / 1000;
    let (d, side) = if at >= usec { (at - usec, "before") } else { (usec - at, "after") };
    if d < 1000 {
        return "within a millisecond of".to_string();
    }
    format!("{:.3} s {side}", d as f64 / 1e6)
}

/// An incident joined to the run: the traced process it names, and the failure record it goes with.
#[derive(Clone, Debug)]
pub struct Joined<'a> {
    pub incident: Incident<'a>,
    /// The pid it names, when that is a traced process, with its executable.
    pub traced: Option<(u32, String)>,
    /// The failure record it goes with (an index into the failures given to [`join`]).
    pub failure: Option<usize>,
    pub confidence: Confidence,
}

/// Joins `lines` to a run whose processes are `traced` (pid, executable) and whose failure records are `failures`.
pub fn join<'a>(lines: &'a [KernelLine], traced: &[(u32, String)], failures: &[Failure]) -> Vec<Joined<'a>> {
    incidents(lines)
        .into_iter()
        .map(|incident| {
            let t = incident.usec();
            let distance = |f: &Failure| (f.at_ns / 1000).abs_diff(t);
            let nearest = |pid: Option<u32>| {
                failures
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| pid.is_none_or(|p| f.pid == p))
                    .min_by_key(|(_, f)| distance(f))
                    .map(|(i, _)| i)
            };
            let (traced, failure, confidence) = match incident.pid {
                Some(pid) => match traced.iter().find(|(p, _)| *p == pid) {
                    Some((p, exe)) => (Some((*p, exe.clone())), nearest(Some(pid)), Confidence::Confirmed),
                    None => (None, None, Confidence::Confirmed),
                },
                None => match nearest(None).filter(|&i| distance(&failures[i]) <= BY_TIME_USEC) {
                    Some(i) => (None, Some(i), Confidence::Inferred),
                    None => (None, None, Confidence::Unresolved),
                },
            };
            Joined { incident, traced, failure, confidence }
        })
        .collect()
}

impl Joined<'_> {
    /// The claim: what the kernel reported, whose it was, and when against the failure record it goes with.
    /// `last_work` gives a pid's last trace window with work before an instant (ns), when the traces have windows.
    pub fn claim(&self, id: String, failures: &[Failure], last_work: &dyn Fn(u32, u64) -> Option<[u64; 2]>) -> Claim {
        let i = &self.incident;
        let t = i.usec();
        let when = format!("at {}.{:06} s (kernel time)", t / 1_000_000, t % 1_000_000);
        let named = match (i.pid, i.process) {
            (Some(pid), Some(p)) => format!("pid {pid} ({p})"),
            (Some(pid), None) => format!("pid {pid}"),
            (None, _) => String::new(),
        };
        let whose = match (&self.traced, i.pid) {
            (Some((_, exe)), _) => format!(" naming {named}, a traced process ({exe}),"),
            (None, Some(_)) => format!(
                " naming {named}, which is not a traced process (kept, not joined to the traced command's records),"
            ),
            (None, None) => " naming no process,".to_string(),
        };
        let mut parts = vec![format!("The kernel's GPU driver reported {}{whose} {when}", i.what())];
        if let Some(f) = self.failure.and_then(|k| failures.get(k)) {
            let by = if self.traced.is_some() { "" } else { " (joined by time only)" };
            parts.push(format!("{} pid {}'s {} ({}){by}", relative(t, f.at_ns), f.pid, f.what, f.claim));
        } else if self.traced.is_none() && i.pid.is_none() {
            parts.push("no failure record of the traced command is near it, so whose job it was is not known".into());
        }
        if let Some((pid, _)) = &self.traced {
            if let Some([w0, w1]) = last_work(*pid, t * 1000) {
                let ms = |ns: u64| (t * 1000).saturating_sub(ns) as f64 / 1e6;
                parts.push(if t * 1000 <= w1 {
                    "while the trace window of its last observed GPU work was open".to_string()
                } else {
                    format!(
                        "{:.0}–{:.0} ms after its last observed GPU work (the trace window that held it)",
                        ms(w1),
                        ms(w0)
                    )
                });
            }
        }
        parts.extend(i.after().into_iter().map(str::to_string));
        Claim::new(id, self.confidence, parts.join("; ")).with_sources(i.sources())
    }

    /// What to add to the claim of failure record `k`: a phrase naming this incident's claim, and its sources.
    pub fn note_for(&self, k: usize, claim_id: &str, failures: &[Failure]) -> Option<(String, Vec<Source>)> {
        if self.failure != Some(k) {
            return None;
        }
        let f = failures.get(k)?;
        let t = self.incident.usec();
        let whose = if self.traced.is_some() { " naming this process" } else { " naming no process" };
        let after = self.incident.after();
        let after = if after.is_empty() { String::new() } else { format!("; {}", after.join(", ")) };
        Some((
            format!(
                "; the kernel's side ({claim_id}): {}{whose}, {} it{after}",
                self.incident.what(),
                relative(t, f.at_ns)
            ),
            self.incident.sources(),
        ))
    }
}

/// The Limited claim about the capture itself: the kernel log could not be read, records were overwritten before
/// they were read, lines were left out over the caps, reading stopped, or the file was cut.
pub fn limits_claim(log: &KernelLog, id: &str) -> Option<Claim> {
    let mut said = Vec::new();
    if let Some(how) = &log.read_after {
        said.push(format!(
            "backscope did not run beside the traced processes: their kernel lines were {how}, so they are the \
             kernel's lines of that span, not of one command's run"
        ));
    }
    if let Some(why) = &log.unreadable {
        said.push(format!(
            "the kernel log was not read ({why}), so GPU-driver lines (ring timeouts, resets, Xids) are not joined to \
             this run"
        ));
    }
    if let Some(why) = &log.read_error {
        said.push(format!("reading the kernel log stopped before the run ended ({why})"));
    }
    if let Some(end) = &log.end {
        if end.lost > 0 || end.overwritten {
            let n = if end.lost > 0 { format!("{} ", end.lost) } else { String::new() };
            said.push(format!(
                "{n}kernel log records were overwritten before backscope read them: GPU-driver lines among them are \
                 missing"
            ));
        }
        if end.over_cap > 0 {
            said.push(format!("{} more GPU-driver lines were left out over the cap on lines kept", end.over_cap));
        }
    } else if log.unreadable.is_none() {
        said.push(
            "the kernel log capture has no end (backscope was stopped): lines after the last one are missing".into(),
        );
    }
    said.extend(log.problems.iter().cloned());
    let what = match &log.read_after {
        Some(_) => "the kernel's lines, read after the fact for the traces' span",
        None => "kernel-log.jsonl: the GPU-driver lines kept while the command ran",
    };
    (!said.is_empty()).then(|| {
        Claim::new(id, Confidence::Limited, format!("Kernel log: {}", said.join("; "))).with_source(Source::file(
            log.file.clone(),
            None,
            None,
            what,
        ))
    })
}

#[cfg(test)]
mod tests;
