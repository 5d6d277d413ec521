//! Hardening round 2 (issue 21), the log reader and the text output under hostile text: crash counts past the
//! cap, CR-only line ends, unbreakable tokens in text wrapping, terminal escapes in error messages, and bidi,
//! line-separator and zero-width characters in tables. Every input is generated here; the commands run as
//! children under [`bounded::run`] (address-space limit, deadline, peak RSS).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::bounded::{self, Bounds, GIB};

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

/// A 64 KiB token without a space: where one stands, text output must cut it, not choke on it.
fn token(i: usize, len: usize) -> String {
    let mut t = format!("t{i:04}-");
    t.extend((0..len - t.len()).map(|k| char::from(b'a' + (k % 26) as u8)));
    t
}

#[test]
fn text_output_of_unbreakable_tokens_takes_seconds_not_minutes() {
    // A 6.5 MB log whose backend paths and Vulkan device names and drivers are tokens of up to 63 KiB (under the
    // 64 KiB line cap; lines of
    // tests/data's shapes: `load_backend: …` of ollama/ollama#13070, `ggml_vulkan: N = …` of llama.cpp#17334).
    // Before: 172 s (backend paths, wrapped as facts and claims) and 81 s (device drivers, wrapped in a table
    // column) in a debug build, against under a second for --json; wrapping measured and copied the rest of the
    // token at every cut.
    let dir = tempfile::tempdir().unwrap();
    let mut log = String::new();
    for i in 0..50 {
        log += &format!("load_backend: loaded CPU backend from /{}\n", token(i, 63 << 10));
    }
    for i in 0..50 {
        log += &format!(
            "ggml_vulkan: {i} = {} ({}) | uma: 0 | fp16: 1 | warp size: 64 | shared memory: 65536 | int dot: 1 | matrix cores: none\n",
            token(i, 32 << 10),
            token(i + 1000, 32 << 10)
        );
    }
    assert!(log.len() > 6_500_000);
    let path = write(dir.path(), "tokens.log", log.as_bytes());
    let width = 100;
    let columns = Bounds { env: vec![("COLUMNS", width.to_string())], ..bounds(120) };
    let text = bounded::run(&["logs".into(), "--all".into(), path.clone().into_os_string()], columns);
    text.assert_bounded(&[0], 15, GIB);
    for line in text.stdout.lines() {
        assert!(unicode_width::UnicodeWidthStr::width(line) <= width, "wider than {width}: {line:.200}");
    }
    // The tokens are cut, not lost: a backend path whole across its wrapped lines, the last driver's start.
    let joined: String = text.stdout.split(['\n', ' ']).collect();
    assert!(joined.contains(&token(0, 63 << 10)), "the first backend path is not whole");
    assert!(text.stdout.contains("t1049-"), "the last driver is missing");
    let json = bounded::run(&["logs".into(), "--json".into(), path.into_os_string()], bounds(120));
    json.assert_bounded(&[0], 15, GIB);
    assert!(
        text.elapsed < json.elapsed * 20 + Duration::from_secs(3),
        "text {:?}, json {:?}",
        text.elapsed,
        json.elapsed
    );
}
