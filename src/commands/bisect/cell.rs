//! The cell tests (crash, kernel, log; speed is in [`super::speed`]): a cell is run by `backscope sweep` as a child
//! process (never the sweep's internals), with one managed llama-server from the build's `bin/`, recording into
//! the bisect's own database; its records are then read back through the run format's read-only view and
//! classified here.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::check::{run_logged, tail, BuildTest, Target};
use super::options::{CellSpec, TestSpec};
use crate::run::format::bisect::{Attempt, Outcome, RunEvidence};
use crate::run::format::record::Record;
use crate::run::format::target::DbValue;

/// How to run a cell's sweep.
#[derive(Clone, Debug)]
pub struct Sweeper {
    /// The backscope executable.
    pub exe: PathBuf,
    /// The store the cells' sweeps record into: a file by its absolute path, or a PostgreSQL value as given.
    pub db: DbValue,
    pub runs_dir: PathBuf,
    /// The bisect's own directory (the sweeps' events and standard error go here).
    pub dir: PathBuf,
    pub limit: Duration,
    pub stop: Arc<AtomicBool>,
    pub cell: CellSpec,
}

/// A finished sweep: its run and records.
#[derive(Debug)]
pub struct SweepRun {
    pub run_id: String,
    pub run_dir: PathBuf,
    pub records: Vec<Record>,
}

/// Largest events file read for the run id (the `run_started` event is its first line).
const EVENTS_READ: u64 = 1 << 20;

impl Sweeper {
    /// The sweep arguments every cell shares: model, num_gpu, prompt, tokens, epochs, database, runs.
    fn common(&self, argv: &mut Vec<String>) {
        let c = &self.cell;
        argv.extend(["--model".into(), c.model.clone()]);
        if let Some(n) = c.num_gpu {
            argv.push(format!("--num-gpu={n}"));
        }
        if let Some(n) = c.num_predict {
            argv.push(format!("--num-predict={n}"));
        }
        if let Some(n) = c.prompt_tokens {
            argv.push(format!("--prompt-tokens={n}"));
        }
        argv.extend(["--db".into(), self.db.display().to_string()]);
        argv.extend(["--runs-dir".into(), self.runs_dir.display().to_string()]);
        argv.push("--json".into());
    }

    fn server(&self, name: &str) -> String {
        let args = &self.cell.server_args;
        if args.is_empty() {
            format!("{name}=llama-server")
        } else {
            format!("{name}=llama-server:{}", args.join(","))
        }
    }

    /// `backscope sweep` of one cell on one build (`trace`: with `--trace`).
    pub fn single(&self, bin_dir: &Path, trace: bool) -> Vec<String> {
        let mut argv = vec![self.exe.display().to_string(), "sweep".into(), "--server".into(), self.server("bisect")];
        argv.extend(["--llama-bin".into(), bin_dir.display().to_string()]);
        argv.extend(self.cell.env.iter().flat_map(|e| ["--env".to_string(), format!("bisect:{e}")]));
        if let Some(e) = self.cell.epochs {
            argv.push(format!("--epochs={e}"));
        }
        if trace {
            argv.push("--trace".into());
        }
        self.common(&mut argv);
        argv
    }

    /// `backscope sweep` of the same cell on the good end (`good`) and a candidate (`candidate`), interleaved over
    /// `epochs` passes so that drift favours neither.
    pub fn pair(&self, good_bin: &Path, bin_dir: &Path, epochs: u32) -> Vec<String> {
        let mut argv = vec![self.exe.display().to_string(), "sweep".into()];
        for (name, dir) in [("good", good_bin), ("candidate", bin_dir)] {
            argv.extend(["--server".into(), self.server(name)]);
            argv.extend(["--program".into(), format!("{name}={}", dir.join("llama-server").display())]);
            argv.extend(self.cell.env.iter().flat_map(|e| ["--env".to_string(), format!("{name}:{e}")]));
        }
        argv.push(format!("--epochs={epochs}"));
        self.common(&mut argv);
        argv
    }

    /// Run a sweep, wait for it, and read its records. `name` names its log files.
    pub fn run(&self, argv: &[String], name: &str) -> Result<SweepRun> {
        let events = self.dir.join(format!("{name}.events.jsonl"));
        let stderr = self.dir.join(format!("{name}.stderr.log"));
        let ran = run_logged(argv, &[], &events, &stderr, self.limit, &self.stop)?;
        let started = run_started(&events);
        let failed = ran.timed_out || !matches!(ran.exit.code, Some(0) | Some(1));
        let Some((run_id, run_dir)) = started.filter(|_| !failed) else {
            let why = if ran.timed_out { "ran past --test-timeout".to_string() } else { ran.exit.describe() };
            bail!(
                "the cell's sweep {why} (`{}`); its standard error ({}) ends:\n{}",
                argv.join(" "),
                stderr.display(),
                tail(&stderr, 2000).trim_end()
            );
        };
        let db = crate::run::read::db::SweepDb::open(&self.db)?;
        let records = db.records(&run_id)?;
        Ok(SweepRun { run_id, run_dir: PathBuf::from(run_dir), records })
    }
}

/// The run id and directory of the sweep's `run_started` event.
fn run_started(events: &Path) -> Option<(String, String)> {
    let input = crate::host::inputs::open_input(events).ok()?;
    for line in BufReader::new(input.file.take(EVENTS_READ)).lines() {
        let v: serde_json::Value = serde_json::from_str(&line.ok()?).ok()?;
        if v["event"] == "run_started" {
            return Some((v["run_id"].as_str()?.to_string(), v["run_dir"].as_str()?.to_string()));
        }
    }
    None
}

/// A classification: the outcome, why, the records that decided and the log lines that did.
#[derive(Debug, PartialEq)]
pub struct Classified {
    pub outcome: Outcome,
    pub reason: String,
    pub records: Vec<String>,
    pub lines: Vec<(String, u64, String)>,
}

impl Classified {
    fn new(outcome: Outcome, reason: impl Into<String>, records: Vec<String>) -> Classified {
        Classified { outcome, reason: reason.into(), records, lines: vec![] }
    }
}

fn files(rs: &[&Record]) -> Vec<String> {
    rs.iter().take(8).map(|r| r.file.clone()).collect()
}

/// `--crash [--class C] [--signature S]`: bad when a cell failed so (any class without a filter). A cell that
/// failed otherwise than the filter asks cannot say whether the asked failure would have come: skip.
pub fn classify_crash(records: &[Record], class: Option<&str>, signature: Option<&str>, run_dir: &Path) -> Classified {
    if records.is_empty() {
        return Classified::new(Outcome::Skip, "the sweep recorded no cell", vec![]);
    }
    let failed: Vec<&Record> = records.iter().filter(|r| !r.is_ok()).collect();
    if failed.is_empty() {
        return Classified::new(
            Outcome::Good,
            format!("every cell succeeded ({})", records.len()),
            files(&[&records[0]]),
        );
    }
    let class_ok = |r: &Record| class.is_none_or(|c| r.error_class.is_some_and(|e| e.as_str() == c));
    let mut lines = Vec::new();
    let matching: Vec<&Record> = failed
        .iter()
        .copied()
        .filter(|r| class_ok(r))
        .filter(|r| {
            let Some(sig) = signature else { return true };
            let Some(sc) = crate::run_analysis::forensics::slice_crash(r, run_dir) else { return false };
            let c = sc.crash();
            let hit = c.signature.id.starts_with(sig) || c.signature.text.contains(sig);
            if hit && c.line > 0 {
                let text = sc.report.timeline.iter().find(|e| e.line == c.line).map(|e| e.raw.clone());
                lines.push((sc.log.display().to_string(), c.line, text.unwrap_or_default()));
            }
            hit
        })
        .collect();
    if let Some(first) = matching.first() {
        // The line of the server log the sweep found naming each failure (a crash, a load error, a bad flag).
        let named = matching.iter().filter_map(|r| r.failure_line.as_ref()).take(3);
        let mut seen_lines: Vec<(String, u64, String)> =
            named.map(|l| (run_dir.join(&l.file).display().to_string(), l.line, l.text.clone())).collect();
        seen_lines.retain(|l| !lines.iter().any(|x: &(String, u64, String)| x.0 == l.0 && x.1 == l.1));
        lines.extend(seen_lines);
        let mut c = Classified::new(
            Outcome::Bad,
            format!("{} of {} cell(s) failed: {}", matching.len(), records.len(), first.outcome()),
            files(&matching),
        );
        c.lines = lines;
        return c;
    }
    let seen: Vec<String> = failed.iter().map(|r| r.outcome()).collect();
    Classified::new(
        Outcome::Skip,
        format!("the cell failed otherwise than asked ({}): cannot tell", seen.join(", ")),
        files(&failed),
    )
}

/// `--kernel FAMILY [--absent]`: whether the family was launched in the successful cells' traces.
pub fn classify_kernel(records: &[Record], family: &str, absent: bool) -> Classified {
    let ok: Vec<&Record> = records.iter().filter(|r| r.is_ok()).collect();
    if ok.is_empty() {
        let seen: Vec<String> = records.iter().map(|r| r.outcome()).collect();
        return Classified::new(
            Outcome::Skip,
            format!("no cell succeeded ({})", seen.join(", ")),
            files(&records.iter().collect::<Vec<_>>()),
        );
    }
    let traces: Vec<_> = ok.iter().filter_map(|r| r.trace.as_ref()).collect();
    let total: u64 = traces.iter().map(|t| t.total_launches).sum();
    // No launch at all is an observation (everything ran on the CPU) only where something was watching: the
    // observer mapped into the server (CUDA, HIP) or the Vulkan layer enabled for it.
    let watched =
        |t: &&crate::run::format::record::RecordTrace| t.observer_loaded == Some(true) || t.vulkan_layer == Some(true);
    if traces.len() < ok.len() || (total == 0 && !traces.iter().all(watched)) {
        return Classified::new(
            Outcome::Skip,
            "no trace could see kernel launches (neither the observer nor the Vulkan layer was loaded)",
            files(&ok),
        );
    }
    let launches: u64 = traces
        .iter()
        .flat_map(|t| t.families.iter())
        .filter(|(f, _)| f.eq_ignore_ascii_case(family))
        .map(|(_, n)| n)
        .sum();
    let runs = launches > 0;
    let outcome = if runs != absent { Outcome::Bad } else { Outcome::Good };
    let reason = if runs {
        format!("{family} launched {launches} time(s) in {} cell(s) ({total} launches in all)", ok.len())
    } else {
        format!("{family} not launched in {} cell(s) ({total} launches in all)", ok.len())
    };
    Classified::new(outcome, reason, files(&ok))
}

/// Largest server log read for `--log`.
const LOG_READ: u64 = 64 << 20;

/// `--log REGEX`: bad when a server log of the cells (the whole log of each server started) has a matching line.
pub fn classify_log(records: &[Record], re: &regex_lite::Regex, run_dir: &Path) -> Classified {
    let mut logs: Vec<&str> = records.iter().filter_map(|r| r.server.as_ref().map(|s| s.log.as_str())).collect();
    logs.dedup();
    if logs.is_empty() {
        return Classified::new(
            Outcome::Skip,
            "no server log was recorded",
            files(&records.iter().collect::<Vec<_>>()),
        );
    }
    let all = files(&records.iter().collect::<Vec<_>>());
    let mut read = 0;
    for log in logs {
        let path = run_dir.join(log);
        let Ok(text) = crate::host::inputs::read_text_limited(&path, LOG_READ) else { continue };
        read += 1;
        let hits: Vec<(String, u64, String)> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| re.is_match(l))
            .take(3)
            .map(|(i, l)| (path.display().to_string(), i as u64 + 1, l.chars().take(300).collect()))
            .collect();
        if let Some((_, line, _)) = hits.first() {
            let mut c = Classified::new(Outcome::Bad, format!("{log}:{line} matches /{}/", re.as_str()), all);
            c.lines = hits;
            return c;
        }
    }
    if read == 0 {
        return Classified::new(Outcome::Skip, "the server logs could not be read", all);
    }
    Classified::new(Outcome::Good, format!("no line of {read} server log(s) matches /{}/", re.as_str()), all)
}

/// The crash, kernel and log tests: one sweep of the cell per try.
pub struct CellTest {
    pub sweeper: Sweeper,
    pub test: TestSpec,
}

impl BuildTest for CellTest {
    fn test(&mut self, t: &Target<'_>) -> Result<Attempt> {
        let trace = matches!(self.test, TestSpec::Kernel { .. });
        let argv = self.sweeper.single(t.bin_dir, trace);
        let name = format!("step{:03}-{}-try{}", t.seq + 1, t.build, t.attempt);
        let run = self.sweeper.run(&argv, &name)?;
        let c = match &self.test {
            TestSpec::Crash { class, signature } => {
                classify_crash(&run.records, class.as_deref(), signature.as_deref(), &run.run_dir)
            }
            TestSpec::Kernel { family, absent } => classify_kernel(&run.records, family, *absent),
            TestSpec::Log { regex } => {
                let re = regex_lite::Regex::new(regex).with_context(|| format!("--log {regex}"))?;
                classify_log(&run.records, &re, &run.run_dir)
            }
            TestSpec::Slower { .. } | TestSpec::External { .. } => bail!("not a cell test: {}", self.test.describe()),
        };
        let evidence = RunEvidence {
            run_id: run.run_id,
            run_dir: run.run_dir.display().to_string(),
            records: c.records,
            lines: c.lines,
        };
        Ok(Attempt {
            outcome: c.outcome,
            reason: c.reason,
            runs: vec![evidence],
            command: None,
            measured: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::format::record::{ErrorClass, RecordTrace, ServerRef, Status};

    fn rec(ok: bool, class: Option<ErrorClass>) -> Record {
        Record {
            file: "cells/00000/result.json".into(),
            status: if ok { Status::Ok } else { Status::Fail },
            error_class: class,
            signal: class.filter(|c| *c == ErrorClass::Crash).map(|_| "SIGSEGV".into()),
            ..Default::default()
        }
    }

    #[test]
    fn crashes_are_bad_other_failures_under_a_filter_skip() {
        let dir = Path::new("/nonexistent");
        assert_eq!(classify_crash(&[], None, None, dir).outcome, Outcome::Skip);
        assert_eq!(classify_crash(&[rec(true, None)], None, None, dir).outcome, Outcome::Good);
        let crashed = [rec(true, None), rec(false, Some(ErrorClass::Crash))];
        let c = classify_crash(&crashed, None, None, dir);
        assert_eq!((c.outcome, c.reason.as_str()), (Outcome::Bad, "1 of 2 cell(s) failed: crash SIGSEGV"));
        assert_eq!(classify_crash(&crashed, Some("crash"), None, dir).outcome, Outcome::Bad);
        let exited = [rec(false, Some(ErrorClass::ServerExit))];
        assert_eq!(classify_crash(&exited, Some("crash"), None, dir).outcome, Outcome::Skip);
        assert_eq!(classify_crash(&exited, None, None, dir).outcome, Outcome::Bad);
        assert_eq!(classify_crash(&crashed, None, Some("sig-x"), dir).outcome, Outcome::Skip, "no log: no signature");
        let mut named = rec(false, Some(ErrorClass::Crash));
        named.failure_line =
            Some(crate::run::format::record::LogRef { file: "servers/s1.log".into(), line: 7, text: "SEGV".into() });
        let c = classify_crash(&[named], Some("crash"), None, Path::new("/runs/r1"));
        assert_eq!(
            c.lines,
            [("/runs/r1/servers/s1.log".to_string(), 7, "SEGV".to_string())],
            "the line the sweep named"
        );
    }

    #[test]
    fn kernels_count_only_in_traced_successful_cells() {
        let mut r = rec(true, None);
        assert_eq!(classify_kernel(&[r.clone()], "MMVQ", false).outcome, Outcome::Skip, "no trace");
        let mut t = RecordTrace {
            dir: "t".into(),
            files: vec![],
            window_ns: [0, 1],
            interval_ms: 20,
            spill_ns: [0, 0],
            observer_loaded: Some(true),
            vulkan_layer: None,
            total_launches: 10,
            failed_launches: 0,
            families: [("MMVQ".to_string(), 4u64), ("other".to_string(), 6)].into(),
            kernels: vec![],
            distinct_kernels: 2,
            processes: vec![],
            cut: vec![],
            crashes: vec![],
            device_lost: vec![],
            hangs: vec![],
            kernel: vec![],
            notes: vec![],
        };
        r.trace = Some(t.clone());
        assert_eq!(classify_kernel(&[r.clone()], "mmvq", false).outcome, Outcome::Bad);
        assert_eq!(classify_kernel(&[r.clone()], "MMVQ", true).outcome, Outcome::Good);
        assert_eq!(classify_kernel(&[r.clone()], "MMQ", false).outcome, Outcome::Good);
        assert_eq!(classify_kernel(&[r.clone()], "MMQ", true).outcome, Outcome::Bad);
        t.total_launches = 0;
        t.families.clear();
        r.trace = Some(t.clone());
        let c = classify_kernel(&[r.clone()], "MMQ", true);
        assert_eq!(c.outcome, Outcome::Bad, "the observer watched and nothing ran on the GPU: {}", c.reason);
        t.observer_loaded = Some(false);
        r.trace = Some(t);
        assert_eq!(classify_kernel(&[r], "MMQ", true).outcome, Outcome::Skip, "nothing watched is not absence");
    }

    #[test]
    fn a_log_line_matching_is_bad_and_cited() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("server.log"), "load\nggml_vulkan: using fallback\nready\n").unwrap();
        let mut r = rec(true, None);
        r.server = Some(ServerRef { pid: 1, port: 2, argv: vec![], log: "server.log".into(), start_no: 1 });
        let re = regex_lite::Regex::new("fallback").unwrap();
        let c = classify_log(&[r.clone()], &re, dir.path());
        assert_eq!((c.outcome, c.lines[0].1), (Outcome::Bad, 2));
        let re = regex_lite::Regex::new("^nothing$").unwrap();
        assert_eq!(classify_log(&[r], &re, dir.path()).outcome, Outcome::Good);
        assert_eq!(classify_log(&[rec(true, None)], &re, dir.path()).outcome, Outcome::Skip);
    }
}
