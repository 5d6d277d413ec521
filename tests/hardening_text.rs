//! Hardening round 2 (issue 21), the log reader and the text output under hostile text: crash counts past the
//! cap, CR-only line ends, unbreakable tokens in text wrapping, terminal escapes in error messages, and bidi,
//! line-separator and zero-width characters in tables. Every input is generated here; the commands run as
//! children under [`bounded::run`] (address-space limit, deadline, peak RSS).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::bounded::{self, Bounds, GIB, MIB};

/// The log fixtures of crates/logs (real lines quoted from public issues; README there).
fn log_fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/logs/tests/data").join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One Ollama runner crash cycle: the runner is started (`starting llama server`, a port of its own), loads and
/// crashes (the GGML_ASSERT and SIGSEGV with its goroutine dump of ollama/ollama#9352) and is reported dead (the
/// `post predict` EOF, `llama runner terminated` and HTTP 500 lines of ollama/ollama#14983).
fn runner_crash_cycle(i: usize) -> String {
    let crash = log_fixture("ollama-9352-assert-sigsegv.log");
    let death = log_fixture("ollama-14983-post-predict-eof.log");
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

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, bytes).unwrap();
    p
}

fn bounds(seconds: u64) -> Bounds {
    Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(seconds), ..Bounds::default() }
}

#[test]
fn logs_counts_every_one_of_a_thousand_crashes_and_says_how_many_it_shows() {
    let dir = tempfile::tempdir().unwrap();
    let log: String = (0..1000).map(runner_crash_cycle).collect();
    let path = write(dir.path(), "cycles.log", log.as_bytes());
    let json = bounded::run(&["logs".into(), "--json".into(), path.clone().into_os_string()], bounds(120));
    json.assert_bounded(&[0], 120, GIB);
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
    text.assert_bounded(&[0], 120, GIB);
    let head: String = text.stdout.lines().take(3).collect::<Vec<_>>().join(" ");
    assert!(head.contains("1000 crashes (1 distinct signatures), the first 256 shown in detail"), "{head}");
    assert!(text.stdout.contains("The log shows 1000 crashes; the first 256 are shown in detail"), "no claim");
}
