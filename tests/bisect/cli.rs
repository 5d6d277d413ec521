//! `backscope bisect` end to end: the binary over a directory of builds (`--builds dir:DIR`, `DIR/bNNN/bin`) whose
//! `bin/` directories carry marker files, with an external test command that reads them — so the first bad build
//! is set by the test's own layout, not by backscope — and one bisect whose test runs real llama-servers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::util::{backscope, wait_for_file};

/// `DIR/bN/bin/llama-server` for each build; builds from `first_bad` on carry a `bad` marker; `broken` get no `bin/` at all.
fn builds(dir: &Path, range: std::ops::RangeInclusive<u32>, first_bad: u32, missing: &[u32]) -> PathBuf {
    let root = dir.join("builds");
    for b in range {
        let bin = root.join(format!("b{b}/bin"));
        if missing.contains(&b) {
            std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
            continue;
        }
        std::fs::create_dir_all(&bin).unwrap();
        // The directory source lists a build whose bin/ holds a llama-server; these tests never start it.
        std::fs::write(bin.join("llama-server"), "#!/bin/sh\nexit 1\n").unwrap();
        if b >= first_bad {
            std::fs::write(bin.join("bad"), "").unwrap();
        }
    }
    root
}

/// A build directory `bin` whose `llama-server` runs the real one (in `real`) with `extra` appended to its arguments.
fn wrapper_build(bin: &Path, real: &Path, extra: &str) {
    std::fs::create_dir_all(bin).unwrap();
    let script = format!("#!/bin/sh\nexec '{}' \"$@\" {extra}\n", real.join("llama-server").display());
    std::fs::write(bin.join("llama-server"), script).unwrap();
    let mut p = std::fs::metadata(bin.join("llama-server")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
    std::fs::set_permissions(bin.join("llama-server"), p).unwrap();
}

/// The test command: records which build it ran on, then fails where the `bad` marker is.
const TEST: &str = r#"echo "$BACKSCOPE_BUILD" >> "$CALLS"; test ! -e "$BACKSCOPE_BIN_DIR/bad""#;

fn bisect(dir: &Path, args: &[&str]) -> Command {
    let mut c = backscope();
    c.current_dir(dir).arg("bisect").args(["--db", "b.db", "--runs-dir", "runs"]).args(args);
    c.env("CALLS", dir.join("calls"));
    c
}

fn run(mut c: Command) -> (Output, Value) {
    let out = c.output().expect("run backscope bisect");
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, json)
}

fn calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls")).unwrap_or_default().lines().map(String::from).collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_external_test_finds_the_first_bad_build_and_report_shows_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    builds(d, 100..=116, 109, &[]);
    let (out, v) =
        run(bisect(d, &["--good", "100", "--bad", "b116", "--builds", "dir:builds", "--json", "--", "sh", "-c", TEST]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["schema"], "backscope.bisect/1");
    assert_eq!((v["verdict"]["kind"].as_str(), v["verdict"]["first_bad"].as_u64()), (Some("found"), Some(109)));
    assert_eq!(v["verdict"]["last_good"], 108);
    assert_eq!(v["bisect"]["upstream"]["compare_url"], "https://github.com/ggml-org/llama.cpp/compare/b108...b109");
    let steps = v["steps"].as_array().unwrap();
    // Both ends, then at most ⌈log2(15 + 1)⌉ = 4 probes; each a build the command really ran on, in order.
    assert!(steps.len() <= 6, "{} steps", steps.len());
    let tested: Vec<String> = steps.iter().map(|s| format!("b{}", s["build"])).collect();
    assert_eq!(tested, calls(d));
    assert_eq!((&tested[0][..], &tested[1][..]), ("b100", "b116"), "the ends first");
    let first_bad = &v["claims"][0];
    assert_eq!(
        (first_bad["id"].as_str(), first_bad["confidence"].as_str()),
        (Some("bisect.first_bad"), Some("Confirmed"))
    );
    let log = first_bad["sources"][1]["path"].as_str().unwrap();
    assert!(std::fs::read_to_string(log).is_ok(), "the cited test log exists: {log}");
    // The report reads the same bisect back from the database.
    let report = backscope().current_dir(d).args(["report", "b.db", "--bisect", "--json"]).output().unwrap();
    assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
    let r: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(r, v, "report --bisect shows what bisect showed");
    let text = backscope().current_dir(d).args(["report", "b.db", "--bisect"]).output().unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("first bad build b109 (last good b108)") && text.contains("b108...b109"), "{text}");
}

#[test]
fn skipped_builds_are_stepped_around_and_a_range_of_skips_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    builds(d, 100..=104, 104, &[]);
    // The test skips (125) b101..b103: only skipped builds lie between the good and the bad end.
    let skip = format!(r#"case "$BACKSCOPE_BUILD" in b101|b102|b103) exit 125;; esac; {TEST}"#);
    let (out, v) =
        run(bisect(d, &["--good", "100", "--bad", "104", "--builds", "dir:builds", "--json", "--", "sh", "-c", &skip]));
    assert_eq!(out.status.code(), Some(1), "no single first bad build: {}", stderr(&out));
    assert_eq!(v["verdict"]["kind"], "ambiguous");
    assert_eq!(v["verdict"]["excluded"], serde_json::json!([101, 102, 103]));
    assert!(v["verdict"]["summary"].as_str().unwrap().contains("one of b101, b102, b103, b104"), "{}", v["verdict"]);
}

#[test]
fn a_bad_range_names_the_end_and_its_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    builds(d, 100..=104, 100, &[]);
    let (out, v) =
        run(bisect(d, &["--good", "100", "--bad", "104", "--builds", "dir:builds", "--json", "--", "sh", "-c", TEST]));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(v["verdict"]["kind"], "bad_range");
    let summary = v["verdict"]["summary"].as_str().unwrap();
    assert!(summary.contains("the good end b100 tests bad"), "{summary}");
    assert_eq!(v["steps"].as_array().unwrap().len(), 1, "nothing else is tested");
    assert_eq!(v["claims"][0]["sources"][0]["excerpt"], "exit 1", "the command's exit is the evidence");
}

#[test]
fn usage_errors_exit_2_and_a_dry_run_builds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    builds(d, 100..=108, 105, &[103]);
    for args in [
        &["--good", "100", "--bad", "100", "--builds", "dir:builds", "--", "true"][..],
        &["--good", "100", "--bad", "108", "--builds", "dir:builds"][..],
        &["--good", "100", "--bad", "108", "--builds", "dir:builds", "--crash", "--", "true"][..],
        &["--good", "100", "--bad", "108", "--builds", "dir:builds", "--crash"][..],
        &["--good", "99", "--bad", "108", "--builds", "dir:builds", "--", "true"][..],
        &["--good", "x100", "--bad", "108", "--", "true"][..],
    ] {
        let out = bisect(d, args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    let out = bisect(d, &["--good", "99", "--bad", "108", "--builds", "dir:builds", "--", "true"]).output().unwrap();
    assert!(
        stderr(&out).contains("--good b99 is not a build") && stderr(&out).contains("nearest: b100"),
        "{}",
        stderr(&out)
    );
    let (out, v) = run(bisect(
        d,
        &["--good", "100", "--bad", "108", "--builds", "dir:builds", "--dry-run", "--json", "--", "sh", "-c", TEST],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // b103 has no bin/: the directory source does not list it.
    assert_eq!(v["candidates"], serde_json::json!([100, 101, 102, 104, 105, 106, 107, 108]));
    let planned: Vec<u64> = v["planned"].as_array().unwrap().iter().map(|p| p[0].as_u64().unwrap()).collect();
    assert_eq!(planned, [100, 108, 104]);
    assert!(calls(d).is_empty() && !d.join("b.db").exists(), "a dry run runs and records nothing");
}

/// Whether `pid` is alive (not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn sigkill_mid_step_loses_no_committed_step_and_resume_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    builds(d, 100..=108, 105, &[103]);
    // The third step (the midpoint b104) hangs until the test's own marker says otherwise.
    let hang = format!(
        r#"if [ "$BACKSCOPE_BUILD" = b104 ] && [ ! -e "$CALLS.go" ]; then echo $$ > "$CALLS.pid"; sleep 60; fi; {TEST}"#
    );
    let mut c = bisect(d, &["--good", "100", "--bad", "108", "--builds", "dir:builds", "--", "sh", "-c", &hang]);
    let mut child = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    while !d.join("calls.pid").exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the third step never began; calls: {:?}", calls(d));
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: no handler runs, nothing is tidied
    child.wait().unwrap();
    let sleeper: i32 = std::fs::read_to_string(d.join("calls.pid")).unwrap().trim().parse().unwrap();
    // The test command ran in its own process group: it outlives a SIGKILLed backscope, as any child would.
    if alive(sleeper) {
        // SAFETY: kill(2) on the pid our own test command wrote.
        unsafe { libc::kill(-sleeper, libc::SIGKILL) };
    }
    let db = rusqlite::Connection::open_with_flags(d.join("b.db"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let committed: Vec<(u32, String)> = db
        .prepare("SELECT build, outcome FROM bisect_steps ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    drop(db);
    assert_eq!(committed, [(100, "good".to_string()), (108, "bad".to_string())]);
    std::fs::write(d.join("calls.go"), "").unwrap();
    // The stored test is an external command: a resume runs it only when told to (--yes).
    let (out, v) = run(bisect(d, &["--resume", "--yes", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!((v["verdict"]["last_good"].as_u64(), v["verdict"]["first_bad"].as_u64()), (Some(104), Some(105)));
    let c = calls(d);
    assert_eq!(c.iter().filter(|b| *b == "b100" || *b == "b108").count(), 2, "committed ends not run again: {c:?}");
    // The killed try of b104 never reached its echo; the resumed bisect tests b104 again.
    assert_eq!(c.iter().filter(|b| *b == "b104").count(), 1, "the step in progress is taken again: {c:?}");
    let steps: Vec<u64> = v["steps"].as_array().unwrap().iter().map(|s| s["build"].as_u64().unwrap()).collect();
    assert_eq!(&steps[..3], &[100, 108, 104]);
    let (out, _) = run(bisect(d, &["--resume", "--good", "100"]));
    assert_eq!(out.status.code(), Some(2), "--resume takes the stored spec only");
}

/// A real bisect whose cells run llama-server: builds b200 and b201 are the real llama.cpp 11434 build; b202 and
/// b203 wrap it in a `llama-server` that adds an argument the real one rejects, so their servers exit at start
/// (the sweep's `server_exit`). The first bad build is b202 by construction.
#[test]
fn a_crash_test_runs_real_llama_servers_through_sweep() {
    let _turn = crate::support::sweep::heavy();
    let (real, model) = (crate::support::sweep::llama_bin(), crate::support::sweep::tiny_model());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let root = d.join("builds");
    for b in [200, 201] {
        std::fs::create_dir_all(root.join(format!("b{b}"))).unwrap();
        std::os::unix::fs::symlink(&real, root.join(format!("b{b}/bin"))).unwrap();
    }
    for b in [202, 203] {
        wrapper_build(&root.join(format!("b{b}/bin")), &real, "--no-such-flag-bisect");
    }
    let model = model.display().to_string();
    let args = [
        "--good",
        "200",
        "--bad",
        "203",
        "--builds",
        "dir:builds",
        "--crash",
        "--class",
        "server_exit",
        "--model",
        &model,
        "--num-gpu",
        "0",
        "--server-arg=--device",
        "--server-arg=none",
        "--num-predict",
        "4",
        "--json",
    ];
    let (out, v) = run(bisect(d, &args));
    assert_eq!(out.status.code(), Some(0), "{}\n{v:#}", stderr(&out));
    assert_eq!((v["verdict"]["last_good"].as_u64(), v["verdict"]["first_bad"].as_u64()), (Some(201), Some(202)));
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4, "both ends, b201, b202");
    // The evidence is the sweep's: each step names a run of this database whose records say what happened.
    for s in steps {
        let run = &s["evidence"]["attempts"][0]["runs"][0];
        let (run_dir, record) = (run["run_dir"].as_str().unwrap(), run["records"][0].as_str().unwrap());
        let rec: Value =
            serde_json::from_str(&std::fs::read_to_string(Path::new(run_dir).join(record)).unwrap()).unwrap();
        let bad = s["outcome"] == "bad";
        assert_eq!(rec["status"], if bad { "fail" } else { "ok" }, "{rec:#}");
        if bad {
            assert_eq!(rec["error_class"], "server_exit");
            let log = Path::new(run_dir).join(rec["server"]["log"].as_str().unwrap());
            let text = std::fs::read_to_string(&log).unwrap();
            assert!(text.contains("invalid argument: --no-such-flag-bisect"), "llama-server's own words: {text}");
        } else {
            assert!(rec["decode_tps"].as_f64().unwrap() > 0.0, "the good builds served the request");
        }
    }
}

#[test]
fn ctrl_c_mid_step_stops_the_test_exits_130_and_resume_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    builds(d, 100..=108, 107, &[]);
    let hang = format!(
        r#"if [ "$BACKSCOPE_BUILD" = b104 ] && [ ! -e "$CALLS.go" ]; then echo $$ > "$CALLS.pid"; sleep 60; fi; {TEST}"#
    );
    let mut c =
        bisect(d, &["--good", "100", "--bad", "108", "--builds", "dir:builds", "--json", "--", "sh", "-c", &hang]);
    let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let t0 = Instant::now();
    wait_for_file(&d.join("calls.pid"), Duration::from_secs(60), "the third step never began");
    // SAFETY: kill(2) on the backscope we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(50), "the test's sleep was ended, not waited for");
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(stderr(&out).contains("--resume"), "says how to continue: {}", stderr(&out));
    let sleeper: i32 = std::fs::read_to_string(d.join("calls.pid")).unwrap().trim().parse().unwrap();
    assert!(!alive(sleeper), "the test command got the interrupt");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["bisect"]["status"].as_str(), v["verdict"]["kind"].as_str()), (Some("interrupted"), Some("open")));
    assert_eq!(v["steps"].as_array().unwrap().len(), 2, "the interrupted step is not recorded");
    std::fs::write(d.join("calls.go"), "").unwrap();
    let id = v["bisect"]["bisect_id"].as_str().unwrap();
    let (out, v) = run(bisect(d, &["--resume", id, "--yes", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!((v["verdict"]["first_bad"].as_u64(), v["bisect"]["status"].as_str()), (Some(107), Some("finished")));
}

/// The speed test's path: each round is one sweep of the good end's and the candidate's llama-server side by side.
/// Both builds are the same real build here, so the decision is left to the measurements (undecided or good on
/// this busy machine, rarely anything else); what is asserted is that each side ran its own build's server and
/// that the rates compared are the records'.
#[test]
fn a_speed_step_runs_the_good_end_and_the_candidate_side_by_side() {
    let _turn = crate::support::sweep::heavy();
    let (real, model) = (crate::support::sweep::llama_bin(), crate::support::sweep::tiny_model());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for b in [300, 301] {
        std::fs::create_dir_all(d.join(format!("builds/b{b}"))).unwrap();
        std::os::unix::fs::symlink(&real, d.join(format!("builds/b{b}/bin"))).unwrap();
    }
    let model = model.display().to_string();
    let args = [
        "--good",
        "300",
        "--bad",
        "301",
        "--builds",
        "dir:builds",
        "--slower",
        "decode",
        "--factor",
        "1.5",
        "--model",
        &model,
        "--num-gpu",
        "0",
        "--server-arg=--device",
        "--server-arg=none",
        "--num-predict",
        "4",
        "--epochs",
        "2",
        "--repeat",
        "2",
        "--json",
    ];
    let (out, v) = run(bisect(d, &args));
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let step = &v["steps"][1];
    assert_eq!(step["build"], 301);
    let attempt = &step["evidence"]["attempts"][0];
    let runs = attempt["runs"].as_array().unwrap();
    assert!((1..=2).contains(&runs.len()), "at most --repeat 2 rounds: {runs:?}");
    let mut rates: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for run in runs {
        let run_dir = Path::new(run["run_dir"].as_str().unwrap());
        for f in run["records"].as_array().unwrap() {
            let rec: Value =
                serde_json::from_str(&std::fs::read_to_string(run_dir.join(f.as_str().unwrap())).unwrap()).unwrap();
            let endpoint = rec["endpoint"].as_str().unwrap().to_string();
            let build = if endpoint == "good" { "b300" } else { "b301" };
            let program = rec["server"]["argv"][0].as_str().unwrap();
            assert!(program.ends_with(&format!("builds/{build}/bin/llama-server")), "{endpoint} ran {program}");
            rates.entry(endpoint).or_default().push(rec["decode_tps"].as_f64().unwrap());
        }
    }
    let measured = |k: &str| -> Vec<f64> {
        attempt["measured"][k].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
    };
    assert_eq!(measured("good_tps"), rates["good"], "the good end's rates are its records'");
    assert_eq!(measured("candidate_tps"), rates["candidate"]);
    assert!(attempt["measured"]["ratio"]["level"] == 0.95, "{attempt:#}");
}

/// A kernel-path bisect on real servers: b400 is the llama.cpp 11434 build on Vulkan (lavapipe), b401 wraps its
/// llama-server to add `--device none`, a CPU fallback. `--kernel MMV --absent` (the matrix-vector family stops
/// running) must name b401; llama-server's own log says where each cell ran.
#[test]
fn a_kernel_test_finds_a_cpu_fallback_from_the_traces() {
    let _turn = crate::support::sweep::heavy();
    let (real, model) = (crate::support::sweep::llama_bin(), crate::support::sweep::tiny_model());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("builds/b400")).unwrap();
    std::os::unix::fs::symlink(&real, d.join("builds/b400/bin")).unwrap();
    wrapper_build(&d.join("builds/b401/bin"), &real, "--device none");
    let model = model.display().to_string();
    let args = [
        "--good",
        "400",
        "--bad",
        "401",
        "--builds",
        "dir:builds",
        "--kernel",
        "MMV",
        "--absent",
        "--model",
        &model,
        "--num-gpu",
        "99",
        "--server-arg=--device",
        "--server-arg=Vulkan0",
        "--env",
        "GGML_VK_VISIBLE_DEVICES=0",
        "--num-predict",
        "4",
        "--json",
    ];
    let mut c = bisect(d, &args);
    c.env("BACKSCOPE_OBSERVER_SO", crate::support::util::observer_library());
    c.env("BACKSCOPE_VKLAYER_SO", crate::support::util::vklayer_library());
    let (out, v) = run(c);
    assert_eq!(out.status.code(), Some(0), "{}\n{v:#}", stderr(&out));
    assert_eq!((v["verdict"]["last_good"].as_u64(), v["verdict"]["first_bad"].as_u64()), (Some(400), Some(401)));
    for (s, backend, mmv) in [(&v["steps"][0], "Vulkan0", true), (&v["steps"][1], "CPU", false)] {
        let run = &s["evidence"]["attempts"][0]["runs"][0];
        let path = Path::new(run["run_dir"].as_str().unwrap()).join(run["records"][0].as_str().unwrap());
        let rec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let served = rec["backend"]["backend"].as_str().unwrap();
        assert!(served.starts_with(backend), "the server's log says it ran on {served}");
        assert_eq!(rec["trace"]["families"]["MMV"].as_u64().unwrap_or(0) > 0, mmv, "{:#}", rec["trace"]);
    }
}
