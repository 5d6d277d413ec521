//! The kernel's lines of traces written while backscope was not running (a service left traced with
//! `backscope trace --env`), read after the fact when `trace --read` finds traces but no `kernel-log.jsonl`.
//!
//! The span is the traces' own: from the earliest `start_ns` to the last instant any trace records (a window's end,
//! the end record, a crash, a device loss, a hang, a cut), and [`join::GAP_USEC`] beyond it, since the driver times out
//! a job the process left on the GPU after the process's last record. The lines are read from `/dev/kmsg` from its
//! oldest record (CLOCK_MONOTONIC µs, the traces' clock); where it cannot be read, or its oldest record is newer than
//! the span's start (the kernel's buffer has wrapped since), from the journal instead (`journalctl -k -o json -b 0`:
//! `_SOURCE_MONOTONIC_TIMESTAMP`, the kernel's own timestamp of the record). Records are kept as the live capture
//! keeps them ([`Keeper`]: the kernel's own GPU-driver lines, the same caps), grouped and joined as its lines are.
//! Nothing is written into the traced directory: the service may still be running, and a stored file would then hold
//! a span cut short for every later read. A kept line is cited as its source and the record's sequence number
//! (`/dev/kmsg`) or the line of journalctl's output (the journal).
//!
//! Only traces of the current boot have their kernel lines here: a trace file last written before this machine booted
//! (`btime` in /proc/stat), or one whose clock is past CLOCK_MONOTONIC now, is of an earlier boot, and that is said.
//!
//! `BACKSCOPE_KMSG=FILE` (the live capture's test hook) is read from its start instead of `/dev/kmsg`;
//! `BACKSCOPE_JOURNALCTL=PATH` runs that program instead of `journalctl`, or, when it is a file that is not executable,
//! reads it as journalctl's JSON output: the tests' way to play the kernel log and the journal.

use std::io::Read;
use std::path::Path;

use super::capture::{Keeper, Reader, KMSG, SOURCE_ENV};
use super::join;
use super::record::KernelLine;
use super::stored::KernelLog;
use crate::trace::TraceFile;

/// The environment variable naming a program to run instead of `journalctl`, or a file of its JSON output.
pub const JOURNAL_ENV: &str = "BACKSCOPE_JOURNALCTL";
/// The journal's kernel lines of this boot, one JSON object a line.
pub const JOURNAL_ARGS: &[&str] = &["-k", "-o", "json", "-b", "0", "--no-pager"];
/// Most bytes of journalctl's output read (a boot's kernel lines are a few MiB at most).
const MAX_JOURNAL_BYTES: u64 = 64 << 20;
/// Passes over `/dev/kmsg` at most (each reads up to the capture's bound of records).
const MAX_PASSES: usize = 64;

/// The kernel's time span of the traces, µs since boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start_usec: u64,
    pub end_usec: u64,
}

impl Span {
    /// From the earliest start to the last instant recorded, and [`join::GAP_USEC`] after it. `None` without traces.
    pub fn of(traces: &[&TraceFile]) -> Option<Span> {
        let start = traces.iter().map(|t| t.header.start_ns).min()?;
        let last = traces.iter().map(|t| last_ns(t)).max()?.max(start);
        Some(Span { start_usec: start / 1000, end_usec: last / 1000 + join::GAP_USEC })
    }

    fn holds(&self, usec: u64) -> bool {
        (self.start_usec..=self.end_usec).contains(&usec)
    }

    /// `1200.000000–1260.000000 s (kernel time)`.
    pub fn words(&self) -> String {
        let s = |u: u64| format!("{}.{:06}", u / 1_000_000, u % 1_000_000);
        format!("{}–{} s (kernel time)", s(self.start_usec), s(self.end_usec))
    }
}

/// The last instant a trace records, CLOCK_MONOTONIC ns.
fn last_ns(t: &TraceFile) -> u64 {
    let windows = t.windows.iter().map(|w| w.t1);
    let end = t.end.iter().map(|e| e.end_ns);
    let cut = t.truncated.iter().map(|c| c.at_ns).chain(t.rotated.iter().map(|r| r.at_ns));
    let failures = t.crashes.iter().map(|c| c.at_ns);
    let lost = t.device_lost.iter().map(|d| d.at_ns).chain(t.hangs.iter().map(|h| h.at_ns));
    windows.chain(end).chain(cut).chain(failures).chain(lost).max().unwrap_or(t.header.start_ns)
}

/// When this machine booted, seconds since the epoch (`btime` in /proc/stat).
fn boot_time() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()
}

/// This boot's id as the journal writes it (32 hex digits, no dashes).
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().replace('-', ""))
}

/// Whether `t` was written in this boot: its file last written after the boot, and its clock not past now.
fn of_this_boot(t: &TraceFile, booted: Option<u64>, now_ns: u64) -> bool {
    let mtime = t.path.as_deref().and_then(|p| std::fs::metadata(p).ok()?.modified().ok());
    let secs = mtime.and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_secs());
    let after_boot = match (secs, booted) {
        (Some(m), Some(b)) => m >= b,
        _ => true,
    };
    after_boot && t.header.start_ns <= now_ns
}

/// What one source gave: the kept lines, the counts, the oldest record's time.
struct Kept {
    lines: Vec<KernelLine>,
    keeper: Keeper,
    oldest_usec: Option<u64>,
}

/// The kernel's GPU-driver lines of `traces`' span, read after the fact; `None` when there are no traces, or nothing
/// was kept and nothing is worth saying (as a live capture that kept nothing leaves no file).
pub fn read(traces: &[TraceFile]) -> Option<KernelLog> {
    if traces.is_empty() {
        return None;
    }
    let now_ns = trace_format::clock::now_ns();
    let booted = boot_time();
    let (this_boot, earlier): (Vec<&TraceFile>, Vec<&TraceFile>) =
        traces.iter().partition(|t| of_this_boot(t, booted, now_ns));
    let earlier_words = |n: usize| {
        let when = booted.map(|b| format!(" (btime {b})")).unwrap_or_default();
        format!(
            "{n} trace file(s) are from an earlier boot (last written before this machine booted{when}, or their \
             clock is past this boot's): the kernel log of that boot is not available here"
        )
    };
    let Some(span) = Span::of(&this_boot) else {
        return Some(KernelLog {
            file: KMSG.to_string(),
            unreadable: Some(earlier_words(earlier.len())),
            ..Default::default()
        });
    };
    let kmsg_path = std::env::var(SOURCE_ENV).ok().filter(|p| !p.is_empty());
    let kmsg_name = kmsg_path.clone().unwrap_or_else(|| KMSG.to_string());
    let kmsg = read_kmsg(&kmsg_name, kmsg_path.is_some(), span);
    let kmsg_holds_span = matches!(&kmsg, Ok(r) if r.oldest_usec.is_none_or(|o| o <= span.start_usec));
    let mut problems = Vec::new();
    let (source, got) = if kmsg_holds_span {
        (kmsg_name.clone(), kmsg)
    } else {
        let why = match &kmsg {
            Ok(r) => format!(
                "{kmsg_name} holds records from {} only",
                r.oldest_usec.map_or(String::new(), |o| format!("{}.{:06} s", o / 1_000_000, o % 1_000_000))
            ),
            Err(e) => e.clone(),
        };
        let journal = read_journal(span);
        match (journal, kmsg) {
            (Ok((cited, r)), _) => {
                if r.oldest_usec.is_some_and(|o| o > span.start_usec) {
                    problems.push(format!(
                        "the journal's kernel records of this boot begin after the traces began: GPU-driver lines \
                         before them are missing ({why})"
                    ));
                }
                (cited, Ok(r))
            }
            (Err(j), Ok(r)) => {
                problems.push(format!(
                    "{why}, after the traces began, and the journal was not read ({j}): GPU-driver lines before are \
                     missing"
                ));
                (kmsg_name.clone(), Ok(r))
            }
            (Err(j), Err(k)) => (kmsg_name.clone(), Err(format!("{k}; the journal: {j}"))),
        }
    };
    if !earlier.is_empty() {
        problems.push(earlier_words(earlier.len()));
    }
    let from = if source == kmsg_name { source.clone() } else { format!("the journal ({source})") };
    let mut log = KernelLog {
        file: source.clone(),
        source: Some(source.clone()),
        started_usec: Some(span.start_usec),
        read_after: Some(format!("read after the fact from {from} for the traces' span {}", span.words())),
        problems,
        ..Default::default()
    };
    match got {
        Ok(r) => {
            let mut end = r.keeper.end;
            end.usec = now_ns / 1000;
            log.end = Some(end);
            log.lines = r.lines;
        }
        Err(why) => log.unreadable = Some(why),
    }
    let worth_saying = !log.lines.is_empty() || log.unreadable.is_some() || !log.problems.is_empty();
    let said_by_end = log.end.as_ref().is_some_and(|e| e.lost > 0 || e.overwritten || e.over_cap > 0);
    (worth_saying || said_by_end).then_some(log)
}

/// `path` (`/dev/kmsg`, or a file in its format when `file`) from its oldest record: the records in `span` kept.
fn read_kmsg(path: &str, file: bool, span: Span) -> Result<Kept, String> {
    let mut reader = Reader::open_from_start(path, file)?;
    let mut out = Kept { lines: Vec::new(), keeper: Keeper::default(), oldest_usec: None };
    for _ in 0..MAX_PASSES {
        let mut seen = 0u64;
        reader.read(&mut |r| {
            seen += 1;
            out.oldest_usec = Some(out.oldest_usec.map_or(r.usec, |o| o.min(r.usec)));
            if !span.holds(r.usec) {
                return;
            }
            let Some(text) = out.keeper.take(r.seq, r.from_kernel(), r.text) else { return };
            let device = r.get(b"DEVICE").map(|d| String::from_utf8_lossy(d).into_owned());
            out.lines.extend(KernelLine::new(path.to_string(), r.seq, (r.seq, r.usec, r.level), text, device));
        })?;
        if seen == 0 {
            break;
        }
    }
    out.keeper.end.overwritten |= reader.overwritten;
    Ok(out)
}

/// journalctl's output: the program [`JOURNAL_ENV`] names (or `journalctl`) run with [`JOURNAL_ARGS`], or the file
/// it names when that is not executable. `Ok`: how lines are cited (the command, or the file), and its bytes.
fn journal_output() -> Result<(String, Vec<u8>), String> {
    use std::os::unix::fs::PermissionsExt;
    let program = std::env::var(JOURNAL_ENV).ok().filter(|p| !p.is_empty());
    if let Some(p) = &program {
        let meta = std::fs::metadata(p).map_err(|e| format!("{p}: {e}"))?;
        if meta.is_file() && meta.permissions().mode() & 0o111 == 0 {
            let input = crate::host::inputs::open_input(Path::new(p)).map_err(|e| format!("{p}: {e}"))?;
            let mut bytes = Vec::new();
            input.file.take(MAX_JOURNAL_BYTES).read_to_end(&mut bytes).map_err(|e| format!("{p}: {e}"))?;
            return Ok((p.clone(), bytes));
        }
    }
    let program = program.unwrap_or_else(|| "journalctl".to_string());
    let name = format!("{program} {}", JOURNAL_ARGS[..5].join(" "));
    let mut child = std::process::Command::new(&program)
        .args(JOURNAL_ARGS)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    let mut bytes = Vec::new();
    let read = child.stdout.take().map(|o| o.take(MAX_JOURNAL_BYTES).read_to_end(&mut bytes));
    // Past the bound, the rest is not wanted: journalctl is stopped rather than waited on.
    if bytes.len() as u64 >= MAX_JOURNAL_BYTES {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| format!("{program}: {e}"))?;
    if let Some(Err(e)) = read {
        return Err(format!("{program}: {e}"));
    }
    if bytes.is_empty() && !status.success() {
        return Err(format!("{program} {}: {status}", JOURNAL_ARGS.join(" ")));
    }
    Ok((name, bytes))
}

/// A journal field's text: a string, or an array of bytes (journalctl's JSON for a value that is not UTF-8).
fn field(v: &serde_json::Value, key: &str) -> Option<Vec<u8>> {
    match v.get(key)? {
        serde_json::Value::String(s) => Some(s.clone().into_bytes()),
        serde_json::Value::Array(a) => a.iter().map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok())).collect(),
        _ => None,
    }
}

fn number(v: &serde_json::Value, key: &str) -> Option<u64> {
    String::from_utf8(field(v, key)?).ok()?.trim().parse().ok()
}

/// The journal's kernel records of this boot, the ones in `span` kept; `Ok`: how lines are cited, and what was read.
fn read_journal(span: Span) -> Result<(String, Kept), String> {
    let (name, bytes) = journal_output()?;
    let this_boot = boot_id();
    let mut out = Kept { lines: Vec::new(), keeper: Keeper::default(), oldest_usec: None };
    let mut taken = 0u64;
    for (i, l) in bytes.split(|&b| b == b'\n').enumerate() {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(l) else { continue };
        let boot = field(&v, "_BOOT_ID").map(|b| String::from_utf8_lossy(&b).into_owned());
        if boot.is_some() && this_boot.is_some() && boot != this_boot {
            continue;
        }
        // The kernel's timestamp of the record; the journal's own arrival time only when it has none.
        let Some(usec) = number(&v, "_SOURCE_MONOTONIC_TIMESTAMP").or_else(|| number(&v, "__MONOTONIC_TIMESTAMP"))
        else {
            continue;
        };
        let Some(text) = field(&v, "MESSAGE") else { continue };
        out.oldest_usec = Some(out.oldest_usec.map_or(usec, |o| o.min(usec)));
        if !span.holds(usec) {
            continue;
        }
        // A line a process wrote into /dev/kmsg comes with its own facility (1 and up); the kernel's is 0.
        let from_kernel = number(&v, "SYSLOG_FACILITY").is_none_or(|f| f == 0);
        let level = number(&v, "PRIORITY").and_then(|p| u8::try_from(p).ok()).unwrap_or(6);
        taken += 1;
        let Some(text) = out.keeper.take(taken, from_kernel, &text) else { continue };
        let device = field(&v, "_KERNEL_DEVICE").map(|d| String::from_utf8_lossy(&d).into_owned());
        out.lines.extend(KernelLine::new(name.clone(), i as u64 + 1, (taken, usec, level), text, device));
    }
    Ok((name, out))
}
