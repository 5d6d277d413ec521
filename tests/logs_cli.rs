//! `backscope logs` as a script sees it: the exit status (0 no crash, 1 a crash, 2 unreadable), the time of a crash
//! whose line has no timestamp (a bracket, never a point), and a Docker Compose prefix of a long container name.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use crate::util::*;

fn log_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/logs/tests/data").join(name)
}

/// Exit code, standard output and standard error of `backscope ARGS`.
fn logs(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = run(backscope().arg("logs").args(args));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn claim<'a>(v: &'a Value, id: &str) -> &'a str {
    let c = v["claims"].as_array().unwrap().iter().find(|c| c["id"] == id);
    c.unwrap_or_else(|| panic!("no claim {id}: {v:#}"))["statement"].as_str().unwrap()
}

#[test]
fn logs_exit_status_is_0_without_a_crash_1_with_one_2_when_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    // llama-server-cpu.log (tests/data/README.md): a request completes, SIGTERM, an orderly shutdown — no crash.
    let quiet = log_fixture("llama-server-cpu.log");
    let (code, out, err) = logs(&[quiet.as_os_str()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("no crash"), "{out}");
    // ollama/ollama#9807: a SIGSEGV while the model loads — in every format, and from standard input.
    let crash = log_fixture("ollama-9807-gfx803-load-sigsegv.log");
    for format in ["text", "json", "markdown", "html"] {
        let (code, out, err) = logs(&["--format".as_ref(), format.as_ref(), crash.as_os_str()]);
        assert_eq!(code, Some(1), "{format}: {err}");
        assert!(!out.is_empty(), "{format}: the report is still written");
    }
    let mut child = backscope().args(["logs", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(&std::fs::read(&crash).unwrap()).unwrap();
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(1), "standard input");
    // A reader that stops early (`| head`) does not turn the verdict into 0.
    let mut child = backscope().arg("logs").arg(&crash).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "closed pipe: {}", String::from_utf8_lossy(&out.stderr));
    // Unreadable: a binary file (not a log), a file that does not exist, a directory.
    let binary = dir.path().join("binary.log");
    std::fs::write(&binary, b"SIGSEGV: segmentation violation\n\0\x01\x02").unwrap();
    let missing = dir.path().join("missing.log");
    for (what, path) in [("binary", binary.as_path()), ("missing", &missing), ("directory", dir.path())] {
        let (code, out, err) = logs(&[path.as_os_str()]);
        assert_eq!(code, Some(2), "{what}: {out}{err}");
        assert!(!err.is_empty(), "{what}: says why");
    }
}

#[test]
fn logs_help_documents_the_exit_status() {
    let (code, out, _) = logs(&["--help".as_ref()]);
    assert_eq!(code, Some(0));
    assert!(out.contains("0") && out.contains("no crash") && out.contains("1") && out.contains("2"), "{out}");
    assert!(out.to_lowercase().contains("exit status"), "{out}");
}

#[test]
fn a_crash_line_without_a_timestamp_is_dated_between_its_neighbours() {
    // ollama/ollama#9352: the assertion (line 18) and the SIGSEGV have no timestamp; the runner start (line 17) is
    // the last before them. Appended: the line Ollama writes once the runner is gone, 15.951 s later.
    let dir = tempfile::tempdir().unwrap();
    let after = "time=2025-02-26T00:25:34.881Z level=ERROR source=sched.go:455 msg=\"error loading llama server\" \
                 error=\"llama runner process has terminated: exit status 2\"\n";
    let log = std::fs::read_to_string(log_fixture("ollama-9352-assert-sigsegv.log")).unwrap() + after;
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines[16].starts_with("time=2025-02-26T00:25:18.930Z") && !lines[17].contains("time="));
    // 00:25:34.881 − 00:25:18.930, the first timestamp of the log being line 17's.
    let (lo, hi) = (0.0, 34.881 - 18.930);
    let path = dir.path().join("9352-and-after.log");
    std::fs::write(&path, &log).unwrap();

    let (code, out, err) = logs(&["--json".as_ref(), path.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let statement = claim(&v, "logs.crash.1");
    assert!(
        statement.starts_with("The log shows a crash at line 18 (between +0.000 s and +15.951 s): "),
        "{statement}"
    );
    let crash = &v["report"]["crashes"][0];
    assert_eq!(crash["t_inherited"], true);
    let bounds: Vec<f64> = crash["t_bounds"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert!(bounds.len() == 2 && (bounds[0] - lo).abs() < 1e-6 && (bounds[1] - hi).abs() < 1e-6, "{bounds:?}");
    // Line 17 has its own time: no bracket.
    let entry = v["report"]["timeline"].as_array().unwrap().iter().find(|e| e["line"] == 17).unwrap();
    assert!(entry["t_bounds"].is_null() && entry["t_inherited"] == false, "{entry}");

    // Text: the claim and the crash's heading say the bracket, never the inherited point.
    let (code, text, _) = logs(&[path.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(text.contains("between +0.000 s and +15.951 s"), "{text}");
    assert!(!text.contains("line 18 (+0.000 s)"), "{text}");

    // Without the appended line nothing later is timestamped: at or after.
    let (_, out, _) = logs(&["--json".as_ref(), log_fixture("ollama-9352-assert-sigsegv.log").as_os_str()]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(claim(&v, "logs.crash.1").starts_with("The log shows a crash at line 18 (at or after +0.000 s): "));
    assert_eq!(v["report"]["crashes"][0]["t_bounds"], serde_json::json!([0.0, null]));
}

#[test]
fn a_compose_prefix_of_a_long_container_name_hides_nothing() {
    // ollama/ollama#12106's journal lines as `docker compose logs` shows them for Open WebUI's bundled Ollama: the
    // same crash at line 2, in the same phase, with the same signature as the plain log.
    let dir = tempfile::tempdir().unwrap();
    let plain = log_fixture("ollama-12106-rocm-decode-sigsegv.log");
    let text = std::fs::read_to_string(&plain).unwrap();
    let prefixed: String = text.lines().map(|l| format!("open-webui-ollama-1  | {l}\n")).collect();
    let path = dir.path().join("compose.log");
    std::fs::write(&path, prefixed).unwrap();
    let json = |p: &Path| -> Value {
        let (code, out, err) = logs(&["--json".as_ref(), p.as_os_str()]);
        assert_eq!(code, Some(1), "{}: {err}", p.display());
        serde_json::from_str(&out).unwrap()
    };
    let (a, b) = (json(&plain), json(&path));
    for id in ["logs.crash.1", "logs.crash.1.phase", "logs.crash.1.signature"] {
        assert_eq!(claim(&a, id), claim(&b, id));
    }
    // Unknown: the 200 that opens the fragment may be `ollama run`'s load-only request (issue 16).
    assert!(claim(&b, "logs.crash.1.phase").contains("during an unknown phase"));
    assert_eq!(b["report"]["flavor"], "ollama");
}
