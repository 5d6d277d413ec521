//! `bisect` against hostile stores and tests: a stored bisect is data, not code. Each hostile store is made here:
//! a real bisect is run over a directory of builds (`--builds dir:DIR`) with an external test, and its SQLite row is
//! then rewritten with SQLite itself (rusqlite) as an attacker with write access to the file would. The binary runs
//! under the bounded runner.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::Connection;
use serde_json::Value;

use crate::support::bounded::{self, Bounds, Done, MIB};

/// The honest test: bad where the build carries the `bad` marker.
const TEST: &str = r#"test ! -e "$BACKSCOPE_BIN_DIR/bad""#;

fn bounds(dir: &Path, seconds: u64) -> Bounds {
    Bounds { deadline: Duration::from_secs(seconds), cwd: Some(dir.to_path_buf()), ..Bounds::default() }
}

/// `backscope bisect --db b.db --runs-dir runs ARGS` in `dir`, bounded.
fn bisect(dir: &Path, args: &[&str]) -> Done {
    let mut all = vec!["bisect", "--db", "b.db", "--runs-dir", "runs"];
    all.extend(args);
    bounded::run(&all, bounds(dir, 60))
}

/// A bisect b100..b104 (first bad b103) run to its end; its id.
fn finished_bisect(dir: &Path) -> String {
    crate::support::util::marker_builds(dir, 100..=104, 103);
    let done =
        bisect(dir, &["--good", "100", "--bad", "104", "--builds", "dir:builds", "--json", "--", "sh", "-c", TEST]);
    done.assert_bounded(&[0], 30, 200 * MIB);
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["verdict"]["kind"], "found", "{}", done.stdout);
    v["bisect"]["bisect_id"].as_str().unwrap().to_string()
}

/// A bisect b100..b104 whose test aborted at its first step (exit 127: the command could not run): stored as
/// failed, so `--resume` continues it. Its id.
fn stopped_bisect(dir: &Path) -> String {
    crate::support::util::marker_builds(dir, 100..=104, 103);
    let done = bisect(dir, &["--good", "100", "--bad", "104", "--builds", "dir:builds", "--", "sh", "-c", "exit 127"]);
    done.assert_bounded(&[2], 30, 200 * MIB);
    let conn = Connection::open(dir.join("b.db")).unwrap();
    let (id, status): (String, String) =
        conn.query_row("SELECT bisect_id, status FROM bisect_runs", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    assert_eq!(status, "failed");
    id
}

/// Rewrite the stored spec of the one bisect in `dir/b.db` with `edit`.
fn rewrite_spec(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let conn = Connection::open(dir.join("b.db")).unwrap();
    let text: String = conn.query_row("SELECT spec_json FROM bisect_runs", [], |r| r.get(0)).unwrap();
    let mut spec: Value = serde_json::from_str(&text).unwrap();
    edit(&mut spec);
    conn.execute("UPDATE bisect_runs SET spec_json = ?1", [spec.to_string()]).unwrap();
}

/// A rewritten spec_json once made a plain `bisect --resume` run the row's command. Now the
/// command is shown (escaped) and refused without `--yes`, and runs with it.
#[test]
fn a_planted_command_runs_only_after_yes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let id = stopped_bisect(d);
    let marker = d.join("planted-ran");
    // The planted command also carries a terminal escape (a window-title change) in an argument.
    let planted = format!("touch '{}' # \u{1b}]0;pwned\u{7}", marker.display());
    rewrite_spec(d, |s| s["test"]["argv"] = serde_json::json!(["sh", "-c", planted]));

    let done = bisect(d, &["--resume"]);
    done.assert_bounded(&[2], 30, 200 * MIB);
    assert!(!marker.exists(), "the planted command ran without --yes");
    assert!(done.stderr.contains("touch") && done.stderr.contains("--yes"), "{}", done.stderr);
    assert!(done.stderr.contains(&id), "{}", done.stderr);
    assert!(!done.stderr.contains('\u{1b}') && !done.stderr.contains('\u{7}'), "a raw escape: {:?}", done.stderr);
    assert!(done.stderr.contains("\\x1b"), "the escape is shown visibly: {}", done.stderr);

    let done = bisect(d, &["--resume", &id, "--yes"]);
    done.assert_no_panic();
    assert!(marker.exists(), "with --yes the stored command runs: {}", done.describe());
}

/// The choice documented in docs/commands.md: a built-in test on PyPI builds with no CMake or server arguments
/// runs no code the row chose, so it resumes without `--yes`; `dir:` builds are binaries the row names.
#[test]
fn a_resume_of_stored_directory_builds_needs_yes_too() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    stopped_bisect(d);
    rewrite_spec(d, |s| {
        s["test"] = serde_json::json!({"kind": "crash", "class": null, "signature": null});
        s["cell"] = serde_json::json!({"model": "/m.gguf", "num_gpu": null, "server_args": [], "env": [],
            "num_predict": null, "prompt_tokens": null, "epochs": null});
    });
    let done = bisect(d, &["--resume"]);
    done.assert_bounded(&[2], 30, 200 * MIB);
    assert!(done.stderr.contains("builds: dir:") && done.stderr.contains("--yes"), "{}", done.stderr);
}

/// The id: `--resume ../x` and a stored id rewritten to a path are refused; no directory is made
/// outside the runs directory.
#[test]
fn a_bisect_id_that_is_a_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    stopped_bisect(d);
    for id in ["../../escaped", "/tmp/escaped", "bisect-20261202-021855-0a9f/../../x"] {
        let done = bisect(d, &["--resume", id, "--yes"]);
        done.assert_bounded(&[2], 30, 200 * MIB);
        assert!(done.stderr.contains("not a bisect id"), "{id}: {}", done.stderr);
    }
    let conn = Connection::open(d.join("b.db")).unwrap();
    conn.execute("UPDATE bisect_runs SET bisect_id = '../escaped'", []).unwrap();
    conn.execute("UPDATE bisect_steps SET bisect_id = '../escaped'", []).unwrap();
    let done = bisect(d, &["--resume", "--yes"]);
    done.assert_bounded(&[2], 30, 200 * MIB);
    assert!(done.stderr.contains("does not make"), "{}", done.stderr);
    assert!(!d.join("escaped").exists(), "a directory was made outside runs/");
}

/// A timeout of u64::MAX once panicked (Instant + Duration overflow), on the command line and from a stored
/// spec. Both are now a clean exit 2 naming the flag or the field.
#[test]
fn a_huge_test_timeout_is_refused_on_the_command_line_and_in_a_stored_spec() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::support::util::marker_builds(d, 100..=104, 103);
    let done = bisect(
        d,
        &["--good", "100", "--bad", "104", "--builds", "dir:builds", "--test-timeout", "18446744073709551615", "--"],
    );
    done.assert_bounded(&[2], 30, 200 * MIB);
    assert!(done.stderr.contains("--test-timeout"), "{}", done.stderr);

    let id = stopped_bisect(d);
    rewrite_spec(d, |s| s["test_timeout_s"] = serde_json::json!(u64::MAX));
    let done = bisect(d, &["--resume", "--yes"]);
    done.assert_bounded(&[2], 30, 200 * MIB);
    assert!(done.stderr.contains("test_timeout_s") && done.stderr.contains(&id), "{}", done.stderr);
}

/// `--repeat 4294967295` once looped practically forever; it is refused at parse time, and in a stored spec.
#[test]
fn a_huge_repeat_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::support::util::marker_builds(d, 100..=104, 103);
    for n in ["4294967295", "101", "0"] {
        let done = bisect(d, &["--good", "100", "--bad", "104", "--builds", "dir:builds", "--repeat", n, "--", "true"]);
        done.assert_bounded(&[2], 30, 200 * MIB);
        assert!(done.stderr.contains("--repeat"), "{n}: {}", done.stderr);
    }
    stopped_bisect(d);
    rewrite_spec(d, |s| s["repeat"] = serde_json::json!(u32::MAX));
    let done = bisect(d, &["--resume", "--yes"]);
    done.assert_bounded(&[2], 30, 200 * MIB);
    assert!(done.stderr.contains("`repeat`"), "{}", done.stderr);
}

/// A row whose good and bad ends were swapped once made `report --bisect` print a Confirmed verdict its own
/// steps contradict. The ends now come from the steps, and a contradiction gives no verdict and no Confirmed claim.
#[test]
fn a_row_with_swapped_ends_gives_no_confirmed_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    finished_bisect(d);
    let conn = Connection::open(d.join("b.db")).unwrap();
    conn.execute("UPDATE bisect_runs SET good = bad, bad = good", []).unwrap();
    let db = d.join("b.db");
    let done =
        bounded::run(&["report".as_ref(), db.as_os_str(), "--bisect".as_ref(), "--json".as_ref()], bounds(d, 30));
    done.assert_no_panic();
    let v: Value = serde_json::from_str(&done.stdout).unwrap_or_else(|_| panic!("{}", done.describe()));
    assert_eq!(v["verdict"]["kind"], "inconsistent", "{}", done.stdout);
    let summary = v["verdict"]["summary"].as_str().unwrap();
    assert!(summary.contains("b104") && summary.contains("b100"), "says what contradicts what: {summary}");
    let claims = v["claims"].as_array().unwrap();
    assert!(claims.iter().all(|c| c["confidence"] != "Confirmed"), "{claims:?}");
    let text = bounded::run(&["report".as_ref(), db.as_os_str(), "--bisect".as_ref()], bounds(d, 30));
    assert!(!text.stdout.contains("first bad build b"), "{}", text.stdout);
}

/// An external test's output was once stored whole (2.1 GB in 3 s). A test printing 200 MB per build now
/// finishes with its log capped at its head and tail, the bisect's verdict intact and its RSS bounded.
#[test]
fn an_external_tests_output_is_capped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::support::util::marker_builds(d, 100..=101, 101);
    let loud = format!("head -c 200000000 /dev/zero; echo; echo last-line; {TEST}");
    let done =
        bisect(d, &["--good", "100", "--bad", "101", "--builds", "dir:builds", "--json", "--", "sh", "-c", &loud]);
    done.assert_bounded(&[0], 50, 200 * MIB);
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["verdict"]["first_bad"], 101, "the test still gets its exit status");
    let logs: Vec<PathBuf> =
        walk(&d.join("runs")).into_iter().filter(|p| p.extension() == Some("log".as_ref())).collect();
    assert_eq!(logs.len(), 2, "{logs:?}");
    for log in logs {
        let len = std::fs::metadata(&log).unwrap().len();
        assert!(len <= 16 * MIB + 4096, "{}: {len} bytes", log.display());
        let text = std::fs::read(&log).unwrap();
        let end = String::from_utf8_lossy(&text[text.len() - 100..]).into_owned();
        assert!(end.contains("last-line"), "the tail is kept: {end:?}");
        assert!(String::from_utf8_lossy(&text).contains("bytes of output dropped"), "{}", log.display());
    }
    for step in v["steps"].as_array().unwrap() {
        let tail = step["evidence"]["attempts"][0]["command"]["tail"].as_str().unwrap();
        assert!(tail.len() <= 4000 && tail.contains("last-line"), "{tail:?}");
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
