//! `backscope logs` on hostile logs: a thousand crashes counted past the detail cap, CR-only line ends, a binary
//! file, and a 1 GiB line, each in bounded memory. Every input is generated here; the commands run as children
//! under [`bounded::run`] (address-space limit, deadline, peak RSS) or are sampled for their peak RSS.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::support::bounded::{self, Bounds, GIB};
use crate::support::util::*;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, bytes).unwrap();
    p
}

fn bounds(seconds: u64) -> Bounds {
    Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(seconds), ..Bounds::default() }
}

/// The log fixtures of crates/logs (real lines quoted from public issues; README there).
fn log_text(name: &str) -> String {
    let path = log_fixture(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One Ollama runner crash cycle: the runner is started (`starting llama server`, a port of its own), loads and
/// crashes (the GGML_ASSERT and SIGSEGV with its goroutine dump of ollama/ollama#9352) and is reported dead (the
/// `post predict` EOF, `llama runner terminated` and HTTP 500 lines of ollama/ollama#14983).
fn runner_crash_cycle(i: usize) -> String {
    let crash = log_text("ollama-9352-assert-sigsegv.log");
    let death = log_text("ollama-14983-post-predict-eof.log");
    let mut cycle = format!(
        "time=2025-02-26T00:25:17.{:03}Z level=INFO source=server.go:405 msg=\"starting llama server\" cmd=\"/usr/bin/ollama runner --model /m --port {}\"\n",
        i % 1000,
        40000 + i
    );
    cycle += &crash;
    for line in
        death.lines().filter(|l| l.contains("post predict") || l.contains("runner terminated") || l.contains("| 500 |"))
    {
        cycle += line;
        cycle.push('\n');
    }
    cycle
}

#[test]
fn logs_counts_every_one_of_a_thousand_crashes_and_says_how_many_it_shows() {
    let dir = tempfile::tempdir().unwrap();
    let log: String = (0..1000).map(runner_crash_cycle).collect();
    let path = write(dir.path(), "cycles.log", log.as_bytes());
    let json = bounded::run(&["logs".into(), "--json".into(), path.clone().into_os_string()], bounds(120));
    json.assert_bounded(&[1], 120, GIB);
    let v: Value = serde_json::from_str(&json.stdout).expect("logs --json");
    let r = &v["report"];
    assert_eq!(r["crashes_total"], 1000, "before: 257 (every crash past the 256th merged into one)");
    assert_eq!(r["crashes"].as_array().unwrap().len(), 256);
    assert_eq!(r["crashes_dropped"], 744);
    assert_eq!(r["signatures"][0]["count"], 1000);
    let dropped = v["claims"].as_array().unwrap().iter().find(|c| c["id"] == "logs.crashes_dropped").expect("claim");
    let statement = dropped["statement"].as_str().unwrap();
    assert!(statement.contains("1000 crashes") && statement.contains("first 256"), "{statement}");

    let text = bounded::run(&["logs".into(), path.into_os_string()], bounds(120));
    text.assert_bounded(&[1], 120, GIB);
    let head: String = text.stdout.lines().take(3).collect::<Vec<_>>().join(" ");
    assert!(head.contains("1000 crashes (1 distinct signatures), the first 256 shown in detail"), "{head}");
    assert!(text.stdout.contains("The log shows 1000 crashes; the first 256 are shown in detail"), "no claim");
}

#[test]
fn a_cr_only_log_is_read_as_its_lines_in_bounded_memory() {
    // The 1000 runner crash cycles with every line ending in CR alone (an old Mac file, a paste, progress output):
    // before, the whole log was one line and showed no crash at all.
    let dir = tempfile::tempdir().unwrap();
    let lf: String = (0..1000).map(runner_crash_cycle).collect();
    let lines = lf.lines().count();
    let path = write(dir.path(), "cr.log", lf.replace('\n', "\r").as_bytes());
    let json = bounded::run(&["logs".into(), "--json".into(), path.into_os_string()], bounds(120));
    json.assert_bounded(&[1], 120, 256 * bounded::MIB);
    let v: Value = serde_json::from_str(&json.stdout).expect("logs --json");
    assert_eq!(v["report"]["stats"]["lines"], lines);
    assert_eq!(v["report"]["crashes_total"], 1000);
    // The claims quote the lines they cite, read again from the file with the same line ends.
    let crash = &v["claims"].as_array().unwrap().iter().find(|c| c["id"] == "logs.crash.1").expect("a crash claim");
    let first = &crash["sources"][0];
    let cited = lf.lines().nth(first["line"].as_u64().unwrap() as usize - 1).unwrap();
    assert_eq!(first["text"], cited);
    assert!(cited.contains("GGML_ASSERT"), "{cited}");
}

/// The highest `VmHWM` (peak resident set, KiB) seen in `/proc/PID/status` while the process runs, sampled every
/// 20 ms until it exits. (`wait4`'s `ru_maxrss` would not do: it keeps the peak of the forking test process,
/// which execve preserves.) The peak only grows, so the last sample is within 20 ms of the end.
fn peak_rss_kib(pid: u32) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            let Some(line) = status.lines().find(|l| l.starts_with("VmHWM:")) else { break };
            peak = peak.max(line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0));
            std::thread::sleep(Duration::from_millis(20));
        }
        peak
    })
}

#[test]
fn logs_refuses_a_binary_file_and_reads_past_a_one_gib_line_in_bounded_memory() {
    // A binary file: the error names the offset of its first NUL byte (found here independently) and says why.
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_backscope"));
    let first_nul = std::fs::read(&exe).unwrap().iter().position(|b| *b == 0).unwrap();
    let out = run(backscope().arg("logs").arg(&exe));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("at byte offset {first_nul:#x}")) && err.contains("binary file"), "{err}");
    assert!(out.stdout.is_empty());

    // A 1 GiB line on standard input, then a real line (ollama/ollama#13070): the long line is cut and said so,
    // the next one is read, and the process stays small.
    let mut child = backscope()
        .args(["logs", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    const TAIL: &[u8] = b"\nload_backend: loaded ROCm backend from /usr/lib/ollama/libggml-hip.so\n";
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..1024 {
            stdin.write_all(&chunk)?;
        }
        stdin.write_all(TAIL)
    });
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let peak = peak_rss_kib(child.id());
    writer.join().unwrap().unwrap();
    let text = reader.join().unwrap().unwrap();
    let status = child.wait().unwrap();
    let rss_kib = peak.join().unwrap();
    assert!(status.success(), "{status}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["report"]["stats"]["bytes"], (1u64 << 30) + TAIL.len() as u64);
    let cut = claim(&v, "logs.truncated");
    assert_eq!(cut["confidence"], "Limited");
    assert!(s(&cut["statement"]).starts_with("1 line(s) were longer than 64 KiB"), "{cut:#}");
    assert_eq!(cut["sources"][0]["line"], 1);
    let backend = claim(&v, "logs.backend.ROCm");
    assert_eq!(backend["sources"][0]["line"], 2);
    assert!(rss_kib > 0, "the process was sampled while it ran");
    assert!(rss_kib < 64 << 10, "peak RSS {rss_kib} KiB for a 1 GiB line");
}
