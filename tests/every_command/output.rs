//! The output layer end to end on real inputs: `backscope logs` on Ollama logs quoted in public issues, hostile
//! strings carried by a real log line and by a real sweep record into every format, a closed pipe for every
//! command, the demo's scan at 80 and 120 columns, and HTML reports loaded in headless Chromium.
//!
//! Markdown is checked by rendering it with an independent CommonMark reader (pulldown-cmark, GitHub tables on);
//! HTML by Chromium's own DOM and network log.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::output::*;
use crate::support::sweep::*;
use crate::support::util::*;

fn json_of(cmd: &mut Command) -> Value {
    let text = stdout_ok(cmd);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The standard output of `backscope logs` on a log that shows a crash: it exits with 1.
fn crash_stdout(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(1), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn crash_json(cmd: &mut Command) -> Value {
    let text = crash_stdout(cmd);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn logs_turns_real_ollama_sigsegv_logs_into_timeline_phase_and_signature() {
    // ollama/ollama#12106: a generate request answers 200 at 10:25:21 (line 1); at 10:25:27 the runner gets
    // SIGSEGV (line 2) with PC=0x7fb47d1c4640 addr=0x28 (line 3) during cgo, in llama_decode (line 8).
    let file = log_fixture("ollama-12106-rocm-decode-sigsegv.log");
    let v = crash_json(backscope().args(["logs", "--json"]).arg(&file));
    assert_eq!(v["schema"], "backscope.logs-command/1");
    assert_eq!(v["input"], file.display().to_string());
    let crash = claim(&v, "logs.crash.1");
    assert_eq!(crash["confidence"], "Confirmed");
    assert!(
        s(&crash["statement"]).starts_with(
            "The log shows a crash at line 2 (+6.000 s): SIGSEGV (segmentation violation) PC=0x7fb47d1c4640 addr=0x28"
        ),
        "{crash:#}"
    );
    let src = &crash["sources"][0];
    assert_eq!((s(&src["kind"]), s(&src["path"]), src["line"].as_u64()), ("log_line", s(&v["input"]), Some(2)));
    assert!(s(&src["text"]).ends_with("SIGSEGV: segmentation violation"), "{src}");
    let phase = claim(&v, "logs.crash.1.phase");
    // The fragment starts with that 200, which may be `ollama run`'s load-only request: the phase is unresolved
    // (never a wrong Inferred phase), and the claim cites the answer and the llama_decode frame.
    assert_eq!(phase["confidence"], "Unresolved");
    assert!(s(&phase["statement"]).contains("during an unknown phase"), "{phase:#}");
    assert_eq!(phase["sources"][0]["line"], 1);
    assert!(
        s(&phase["sources"][0]["text"]).contains("POST     \"/api/generate\"")
            || s(&phase["sources"][0]["text"]).contains("\"/api/generate\"")
    );
    let sig = claim(&v, "logs.crash.1.signature");
    assert!(s(&sig["statement"]).ends_with(": SIGSEGV | llama._Cfunc_llama_decode"), "{sig:#}");
    let timeline: Vec<(u64, &str, f64)> = v["report"]["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["line"].as_u64().unwrap(), s(&e["kind"]), e["t"].as_f64().unwrap()))
        .collect();
    assert_eq!(
        timeline,
        vec![(1, "http_request", 0.0), (2, "signal", 6.0), (3, "signal_context", 6.0), (4, "signal_in_cgo", 6.0)]
    );

    // Standard input gives the same analysis.
    let mut child =
        backscope().args(["logs", "-", "--json"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(&std::fs::read(&file).unwrap()).unwrap();
    let out = child.wait_with_output().unwrap();
    let from_stdin: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(from_stdin["input"], "<stdin>");
    assert_eq!(from_stdin["report"]["crashes"], v["report"]["crashes"]);

    // Text: the verdict first, the crash's timeline, within the width.
    let text = crash_stdout(backscope().env("COLUMNS", "100").arg("logs").arg(&file));
    assert_fits(&text, 100);
    let first = text.lines().take(2).collect::<Vec<_>>().join(" ");
    assert!(first.contains("1 crash, in an unknown phase"), "{text}");
    assert!(text.contains("+6.000s ┆    2 ┆ signal"), "{text}");

    // ollama/ollama#9807: RX 580 (gfx803), SIGSEGV at PC=0x7f8d52964434 addr=0x18 while the model loads, at or
    // after 2.009 s from the runner start (02:36:31.324 → 02:36:33.333, the last timestamp; the SIGSEGV line has
    // none of its own and none follows).
    let file = log_fixture("ollama-9807-gfx803-load-sigsegv.log");
    let v = crash_json(backscope().args(["logs", "--format", "json"]).arg(&file));
    let crash = claim(&v, "logs.crash.1");
    assert!(
        s(&crash["statement"]).starts_with(
            "The log shows a crash at line 38 (at or after +2.009 s): SIGSEGV (segmentation violation) PC=0x7f8d52964434 addr=0x18"
        ),
        "{crash:#}"
    );
    assert!(s(&claim(&v, "logs.crash.1.phase")["statement"]).contains("during model loading"));
    assert_eq!(
        s(&claim(&v, "logs.device.ROCm0")["statement"]),
        "The log lists ROCm device 0: Radeon RX 580 Series (gfx803)"
    );
    let md = crash_stdout(backscope().args(["logs", "--format", "markdown"]).arg(&file));
    assert!(md.contains("\n## Claims\n") && md.contains("| time | line | event | what |"), "{md}");
}

/// `backscope ARGS --format F` for text, markdown and html.
fn three_formats(args: &[&str]) -> (String, String, String) {
    let f = |format: &str| stdout_ok(backscope().env("COLUMNS", "120").args(args).args(["--format", format]));
    (f("text"), f("markdown"), f("html"))
}

#[test]
fn a_hostile_real_log_line_is_inert_in_every_format() {
    // The real journal lines of ollama/ollama#13070 with hostile text in the device name (a table cell of the
    // devices table) and in the backend path (a claim, a fact, a timeline summary).
    let log = std::fs::read_to_string(log_fixture("ollama-13070-rocm-discovery.log")).unwrap();
    let hostile_name = HOSTILE.replace(['\n', ','], " ");
    let log = log
        .replace("AMD Radeon RX 6700 XT", &hostile_name)
        .replace("/usr/lib/ollama/libggml-hip.so", &format!("/usr/lib/{hostile_name}/libggml-hip.so"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hostile.log");
    std::fs::write(&file, &log).unwrap();
    let path = file.to_str().unwrap();
    let v = json_of(backscope().args(["logs", "--json", path]));
    let dev = claim(&v, "logs.device.ROCm0");
    assert!(s(&dev["statement"]).contains("</table><script>alert(1)</script> a|b next"), "{dev:#}");
    let (text, markdown, html) = three_formats(&["logs", path]);
    assert_inert(&text, &markdown, &html);
    assert!(text.contains("</table><script>alert(1)</script>"), "text shows the text as it is: {text}");
}

/// Runs `cmd` with its standard output already closed by the reader; returns the exit code and stderr.
fn with_closed_stdout(cmd: &mut Command) -> (Option<i32>, String) {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_quiet_exit(what: &str, (code, stderr): (Option<i32>, String)) {
    assert_eq!(code, Some(0), "{what}: {stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{what}: {stderr}");
}

#[test]
fn no_command_panics_on_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db_s = db.to_str().unwrap();
    // A dry run's plan cut by `head`, as a shell runs it.
    let dry = format!(
        "set -o pipefail; \"$0\" sweep --dry-run --endpoint a=http://127.0.0.1:9 --model m --repetitions 1000 --num-gpu 0,1,2,-1 --db {} | head -2",
        dir.path().join("dry.db").display()
    );
    let out = run(Command::new("bash").arg("-c").arg(&dry).arg(env!("CARGO_BIN_EXE_backscope")));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);

    // A stored run to report on: llama-bench output imported (a real llama-bench JSON line).
    let bench = dir.path().join("bench.jsonl");
    std::fs::write(
        &bench,
        "{\"backends\":\"Vulkan\",\"gpu_info\":\"llvmpipe\",\"model_filename\":\"/m/tiny.gguf\",\"n_gpu_layers\":99,\"n_prompt\":64,\"n_gen\":0,\"n_depth\":0,\"test_time\":\"2026-11-21T12:00:00Z\",\"avg_ns\":1361702127,\"stddev_ns\":1,\"avg_ts\":47.0,\"stddev_ts\":0.5,\"samples_ns\":[1361702127],\"samples_ts\":[47.0]}\n",
    )
    .unwrap();
    let runs = dir.path().join("runs");
    let import = || {
        let mut c = backscope();
        c.args(["sweep", "import"]).arg(&bench).args(["--db", db_s, "--runs-dir"]).arg(&runs);
        c
    };
    assert_quiet_exit("sweep import", with_closed_stdout(&mut import()));
    let garbage = injector(Fault::Garbage, 4, Duration::from_secs(60));
    let observer = observer_library();
    let jax = fixture("jax_rocm7_plugin");
    let crash_log = log_fixture("ollama-9352-assert-sigsegv.log");
    let empty = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("scan", vec!["scan".into(), jax.display().to_string()]),
        ("scan --json", vec!["scan".into(), "--json".into(), jax.display().to_string()]),
        ("logs", vec!["logs".into(), crash_log.display().to_string()]),
        ("logs --format html", vec!["logs".into(), "--format".into(), "html".into(), crash_log.display().to_string()]),
        ("sweep report", vec!["sweep".into(), "report".into(), "--db".into(), db_s.into()]),
        (
            "sweep report --format markdown",
            vec!["sweep".into(), "report".into(), "--format".into(), "markdown".into(), "--db".into(), db_s.into()],
        ),
        ("sweep export", vec!["sweep".into(), "export".into(), "--jsonl".into(), "--db".into(), db_s.into()]),
        (
            "sweep (a real run)",
            vec![
                "sweep".into(),
                "--endpoint".into(),
                format!("g=http://127.0.0.1:{garbage}"),
                "--model".into(),
                "m".into(),
                "--db".into(),
                db_s.into(),
                "--runs-dir".into(),
                runs.display().to_string(),
            ],
        ),
        ("trace --env", vec!["trace".into(), "--env".into(), "--observer".into(), observer.display().to_string()]),
        ("trace --read", vec!["trace".into(), "--read".into(), empty.path().display().to_string()]),
        ("synth", vec!["synth".into(), "--preset".into(), "tiny".into(), "-o".into(), model.display().to_string()]),
    ];
    for (what, args) in &cases {
        let (code, stderr) = with_closed_stdout(backscope().args(args));
        // `logs` of a crash log keeps its verdict (1: a crash) in the status when the reader went away.
        let expected = if what.starts_with("logs") { 1 } else { 0 };
        assert_eq!(code, Some(expected), "{what}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{what}: {stderr}");
    }
    assert!(model.is_file(), "synth wrote its model although nobody read its summary");
    assert_eq!(export(&db, None).len(), 2, "the imported record and the real run's record are stored");
}

/// A process for `maps` to read, killed and reaped when dropped.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(Command::new("sleep").arg("120").stdin(Stdio::null()).spawn().unwrap())
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `predict`, `gate`, `doctor`, `maps` and `scan --disasm`, each with arguments that give it real work: the
/// cyllama-rocm MMQ kernels for gfx942 (one code object holds them), a live `sleep` for `maps`.
fn ported_commands(sleeper: &Sleeper) -> Vec<(&'static str, Vec<String>)> {
    let hip = cyllama_hip().display().to_string();
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    vec![
        ("predict", strings(&["predict", "--arch", "gfx900", "--type", "q4_k", "--prompt-tokens", "100", "--explain"])),
        ("gate", strings(&["gate", "--arch", "gfx900"])),
        ("doctor", strings(&["doctor", "--no-tools"])),
        ("maps", vec!["maps".into(), sleeper.pid()]),
        (
            "scan --disasm",
            strings(&[
                "scan",
                "--disasm",
                "--no-disasm-cache",
                "--arch",
                "gfx942",
                "--kernel",
                "mul_mat_q<(ggml_type)12, 64, ",
                &hip,
            ]),
        ),
    ]
}

#[test]
fn predict_gate_doctor_maps_and_disasm_exit_quietly_on_a_closed_pipe() {
    let sleeper = Sleeper::start();
    for (what, args) in ported_commands(&sleeper) {
        for format in ["text", "json", "markdown", "html"] {
            let what = format!("{what} --format {format}");
            assert_quiet_exit(&what, with_closed_stdout(backscope().args(&args).args(["--format", format])));
        }
        // As a shell runs it: `| head -1` takes the first line (the summary: the output's first block) and exits.
        let line = "set -o pipefail; \"$0\" \"$@\" | head -1";
        let out = run(Command::new("bash")
            .arg("-c")
            .arg(line)
            .arg(env!("CARGO_BIN_EXE_backscope"))
            .args(&args)
            .env("COLUMNS", "120"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{what} | head -1: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        let first = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(first.lines().count(), 1, "{what}: {first}");
        let expected = match what {
            "predict" => "  GPU     gfx900 (GCN5, ",
            "gate" => "Gate for gfx900 (GCN5)",
            "doctor" => "backscope doctor: ",
            "maps" => "[Confirmed] sleep (pid ",
            _ => "On gfx942",
        };
        assert!(first.starts_with(expected), "{what}: {first}");
    }
}

#[test]
fn the_demo_scan_fits_80_and_120_columns_with_the_gfx900_verdict_first() {
    // scripts/demo.sh's scan: five real libraries and install trees.
    let roots = [
        fixture("cyllama_rocm/cyllama_rocm.libs"),
        fixture("cyllama_cuda12/cyllama_cuda12.libs"),
        fixture("jax_rocm7_plugin"),
        PathBuf::from("/usr/lib/x86_64-linux-gnu/librocsparse.so.0.1"),
        fixture("librocblas0"),
    ];
    for width in [120, 80] {
        let text =
            stdout_ok(backscope().env("COLUMNS", width.to_string()).args(["scan", "--arch", "gfx900"]).args(&roots));
        assert_fits(&text, width);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("On gfx900"), "{text}");
        let verdict = lines.next().unwrap();
        // No library carries ggml code for gfx900: the verdict says what is left, by library (the mode-dependent
        // rocSPARSE, the vendor-BLAS code objects).
        assert!(
            verdict.starts_with("[Inferred] On gfx900, no scanned library carries ggml code built for it;"),
            "{text}"
        );
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains("librocsparse.so.0.1 carries code only for a specific xnack/sramecc mode"), "{text}");
        assert!(flat.contains("vendor BLAS kernels exist for it (librocblas.so.0"), "{text}");
        // The rocBLAS library directory keeps both ends of its label in the coverage table (it once showed as
        // `library)`): its name, and as much of its path as the width leaves.
        let start = if width == 120 { "┆ rocblas (/" } else { "┆ rocb" };
        assert!(
            text.lines().any(|l| l.starts_with("│ gfx1030 ") && l.contains(start) && l.contains("library) ┆")),
            "the rocBLAS directory label: {text}"
        );
        assert!(text.contains("more rows (--all to show)"), "{text}");
    }
}

#[test]
fn a_real_sigsegv_sweep_reports_phase_and_signature_keeps_hostile_prompts_inert_and_renders_in_chromium() {
    let _turn = heavy();
    let (bin, model) = (llama_bin(), tiny_model());
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("db"), dir.path().join("runs"));
    // The second prompt's name is the hostile text: records carry it, the table shows it (the prompts vary) and
    // the claims name it. TOML escapes give the newline, ESC and BEL.
    let toml_name = HOSTILE.replace('\n', "\\n").replace('\u{1b}', "\\u001b").replace('\u{7}', "\\u0007");
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "[[prompts]]\nname = \"Hello\"\ntext = \"Hello\"\n\n[[prompts]]\nname = \"{toml_name}\"\ntext = \"Hi\"\n"
        ),
    )
    .unwrap();
    let args = [
        "--spec",
        spec.to_str().unwrap(),
        "--server",
        "cpu=llama-server:--device,none",
        "--llama-bin",
        bin.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--num-gpu",
        "0",
        "--repetitions",
        "2",
        // Long enough that the SIGSEGV sent at the first token lands while the request still streams.
        "--num-predict",
        "48",
        "--read-timeout",
        "120",
    ];
    let mut sweep = Sweep::start(&args, &db, &runs);
    // The second request on the first server: the first one has finished on it.
    let first = sweep.wait_for(Duration::from_secs(600), |e| event_is(e, "first_token") && e["seq"] == 1);
    let pid = first["pid"].as_i64().expect("first_token names the server pid");
    // SAFETY: signalling the llama-server this test's sweep started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSEGV) }, 0);
    let (status, events, stderr) = sweep.finish(Duration::from_secs(600));
    assert_eq!(status.code(), Some(1), "{stderr}");
    let recs = records(&events);
    assert_eq!(recs.len(), 4, "{recs:#?}");
    assert_eq!(recs[3]["prompt"], HOSTILE, "the record keeps the name as given");
    let crashed = recs.iter().find(|r| r["error_class"] == "crash").expect("a crashed cell");
    assert_eq!((crashed["seq"].as_u64(), crashed["signal_source"].as_str()), (Some(1), Some("wait status")));
    let run_id = s(&recs[0]["run_id"]).to_string();
    let db_s = db.to_str().unwrap();

    // The crash's phase and signature, from the log of the server that died: it had answered the first request
    // (its `slot release` line), so the crash falls in decoding.
    let v = json_of(backscope().args(["sweep", "report", "--json", &run_id, "--db", db_s]));
    let phase = v["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| s(&c["id"]).contains(".crash_phase."))
        .unwrap_or_else(|| panic!("no crash-phase claim: {v:#}"));
    assert_eq!(phase["confidence"], "Inferred", "{phase:#}");
    let statement = s(&phase["statement"]);
    assert!(
        // The place names what varies in the run (the prompt here; num_predict is 48 for both prompts).
        statement.starts_with("`cpu` at num_gpu=0, prompt Hello: the log of the server that died"),
        "{statement}"
    );
    assert!(statement.contains("places the failure of 1 run(s) in decoding"), "{statement}");
    assert!(statement.contains("crash signature ") && statement.contains("killed by SIGSEGV"), "{statement}");
    let log_sources: Vec<&Value> =
        phase["sources"].as_array().unwrap().iter().filter(|x| x["kind"] == "log_line").collect();
    assert!(log_sources.iter().all(|x| s(&x["path"]).ends_with("/servers/s001-cpu.log")), "{phase:#}");
    assert!(log_sources.iter().any(|x| s(&x["text"]).contains("stop processing")), "the finished request: {phase:#}");
    assert!(phase["sources"].as_array().unwrap().iter().any(|x| x["kind"] == "run" && x["file"] == crashed["file"]));

    // The hostile prompt, stored in real records, is inert in every format.
    let (text, markdown, html) = three_formats(&["sweep", "report", &run_id, "--db", db_s]);
    assert_inert(&text, &markdown, &html);
    assert_fits(&text, 120);

    // The HTML report in Chromium: its tables and claims are in the DOM, it refers to nothing outside itself and
    // makes no request; the same check catches a page that does (the control).
    let page = dir.path().join("report.html");
    stdout_ok(backscope().args(["sweep", "report", &run_id, "--db", db_s, "--format", "html", "-o"]).arg(&page));
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (dom, requests) = load_in_chromium(&page, &shots.join("sweep-report.png"));
    assert!(dom.contains("<th>backend (from log)</th>") && dom.contains("<ul class=\"claims\">"), "{dom}");
    assert!(dom.contains("class=\"badge inferred\""), "{dom}");
    assert!(dom.contains("Content-Security-Policy"), "{dom}");
    assert!(!dom.to_lowercase().contains("<script"), "{dom}");
    assert_no_external_reference(&std::fs::read_to_string(&page).unwrap());
    assert!(requests.is_empty(), "the report made requests: {requests:?}");
    let control = dir.path().join("control.html");
    let port = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port();
    std::fs::write(&control, format!("<html><body><img src=\"http://127.0.0.1:{port}/probe.png\"></body></html>"))
        .unwrap();
    let (_, control_requests) = load_in_chromium(&control, &shots.join("control.png"));
    assert_eq!(control_requests, vec![format!("http://127.0.0.1:{port}/probe.png")], "the check sees requests");

    // A crash log's HTML too.
    let page = dir.path().join("logs.html");
    crash_stdout(
        backscope()
            .args(["logs", "--format", "html", "-o"])
            .arg(&page)
            .arg(log_fixture("ollama-9352-assert-sigsegv.log")),
    );
    let (dom, requests) = load_in_chromium(&page, &shots.join("logs-report.png"));
    assert!(dom.contains("<th>frame</th>") && dom.contains("<pre>"), "{dom}");
    assert!(requests.is_empty(), "{requests:?}");
    assert_no_external_reference(&std::fs::read_to_string(&page).unwrap());
}

fn headers(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn ported_commands_fit_120_columns_and_their_markdown_and_html_tables_hold_every_row() {
    let sleeper = Sleeper::start();
    for (what, args) in ported_commands(&sleeper) {
        let text = stdout_ok(backscope().env("COLUMNS", "120").args(&args));
        assert_fits(&text, 120);
        let v = json_of(backscope().args(&args).arg("--json"));
        let markdown = stdout_ok(backscope().args(&args).args(["--format", "markdown"]));
        let html = stdout_ok(backscope().args(&args).args(["--format", "html"]));
        assert!(!html.to_lowercase().contains("<script"), "{what}: {html}");
        assert_no_external_reference(&html);
        // The same tables in both documents: Markdown read by pulldown-cmark, HTML as backscope writes it.
        let from_markdown = html_tables(&commonmark(&markdown));
        assert_eq!(from_markdown, html_tables(&html), "{what}: the Markdown and HTML tables differ");
        let tables = from_markdown;
        // Every claim is listed with its confidence, but those the document says otherwise: gate's verdict (its
        // first line) and its rows without sources (the table has their confidence), doctor's gate claims (its
        // Gate section).
        let claims = v["claims"].as_array().unwrap();
        for c in claims {
            let id = s(&c["id"]);
            let elsewhere = match what {
                "gate" => {
                    id.ends_with(".verdict") || (!id.contains(".explain.") && c["sources"] == serde_json::json!([]))
                }
                "doctor" => id.starts_with("doctor.gate."),
                _ => false,
            };
            let item = format!(
                "<li class=\"claim {0}\" id=\"claim-{id}\"><span class=\"badge {0}\">",
                s(&c["confidence"]).to_lowercase()
            );
            assert_eq!(html.contains(&item), !elsewhere, "{what}: {item}");
        }
        match what {
            "predict" => {
                // One table per phase (its weights), each followed by one decision path per weight (--explain).
                let phases = v["phases"].as_array().unwrap();
                let mut expected = Vec::new();
                for p in phases {
                    let weights = p["weights"].as_array().unwrap();
                    expected.push((
                        headers(&["type", "op", "weights", "ne11", "family", "rule", "citation"]),
                        weights.len(),
                    ));
                    for w in weights {
                        expected.push((
                            headers(&["rule", "held", "decided", "inputs"]),
                            w["path"].as_array().unwrap().len(),
                        ));
                    }
                }
                let got: Vec<(Vec<String>, usize)> = tables.iter().map(|(h, r)| (h.clone(), r.len())).collect();
                assert_eq!(got, expected);
                assert_eq!(tables[0].1[0][4], "dequantize/convert + vendor BLAS (cuBLAS/hipBLAS) (F16)");
                assert_eq!(
                    commonmark(&markdown).matches("<li><strong>Inferred</strong>").count(),
                    claims.len(),
                    "every claim is a list item"
                );
            }
            "gate" => {
                let layers = v["layers"].as_array().unwrap();
                assert_eq!(layers.len(), 7, "seven layers (README, docs/commands.md)");
                assert_eq!(tables.len(), 1);
                assert_eq!(tables[0].0, headers(&["layer", "status", "confidence", "finding", "basis"]));
                for (row, layer) in tables[0].1.iter().zip(layers) {
                    assert_eq!(row[0], format!("{} {}", layer["number"], s(&layer["title"])));
                    assert_eq!((row[1].as_str(), row[3].as_str()), (s(&layer["status"]), s(&layer["finding"])));
                }
                // The verdict is the first paragraph, in Markdown as in HTML.
                for page in [commonmark(&markdown), html.clone()] {
                    let first = &page[page.find("<p>").unwrap()..];
                    let first = html_text(&first[..first.find("</p>").unwrap()]);
                    assert_eq!(first, format!("Verdict: {}", s(&v["verdict"])));
                }
            }
            "doctor" => {
                // Verdicts first: the Gate section comes before the first section of findings.
                let gate = markdown.find("\n## Gate\n").expect("a Gate section");
                let gpus = markdown.find("\n## GPUs\n").expect("a GPUs section");
                assert!(gate < gpus, "{markdown}");
                assert!(tables.is_empty());
                let listed = commonmark(&markdown).matches("<li><strong>").count();
                let sectioned = claims.iter().filter(|c| !s(&c["id"]).starts_with("doctor.gate.")).count();
                assert_eq!(listed, sectioned, "every finding but the gate claims (the Gate section says those)");
            }
            "maps" => {
                let process = &v["processes"][0];
                assert_eq!(process["pid"].as_u64(), Some(u64::from(sleeper.0.id())));
                assert_eq!(tables.len(), 1);
                assert_eq!(tables[0].0, headers(&["library", "class", "SONAME", "version", "GPU code"]));
                let mut paths: Vec<&str> = tables[0].1.iter().map(|r| r[0].as_str()).collect();
                paths.sort();
                let mut mapped: Vec<&str> =
                    process["libraries"].as_array().unwrap().iter().map(|l| s(&l["path"])).collect();
                mapped.sort();
                assert_eq!(paths, mapped, "every mapped library, with its whole path in documents");
                // Read independently: each is in /proc/PID/maps.
                let maps = std::fs::read_to_string(format!("/proc/{}/maps", sleeper.0.id())).unwrap();
                assert!(paths.iter().all(|p| maps.contains(p)), "{paths:?}");
            }
            _ => {
                // --kernel: the per-kernel mix, one table of counts per library and target, then the path-deciding
                // instructions of the kernels that have any.
                let cos = v["disasm"]["code_objects"].as_array().unwrap();
                assert_eq!(cos.len(), 1, "one gfx942 code object holds the kernels");
                let kernels = cos[0]["kernels"].as_array().unwrap();
                assert!(!kernels.is_empty());
                let classes =
                    ["vector-alu", "fma", "matrix", "scalar", "lds", "global-load", "global-store", "branch", "wait"];
                // After the scan's own tables (the answer for gfx942, the libraries, the coverage).
                let at = tables
                    .iter()
                    .position(|(h, _)| h.starts_with(&headers(&["kernel", "family"])))
                    .expect("the mix table");
                let mix = &tables[at..];
                assert_eq!(
                    mix[0].0,
                    headers(&[
                        "kernel", "family", "instrs", "VALU", "FMA", "matrix", "scalar", "LDS", "load", "store",
                        "branch", "wait"
                    ])
                );
                assert_eq!(mix[0].1.len(), kernels.len());
                for (row, k) in mix[0].1.iter().zip(kernels) {
                    assert_eq!((row[0].as_str(), row[1].as_str()), (s(&k["demangled"]), s(&k["family"])));
                    assert_eq!(row[2], k["instructions"].to_string());
                    for (cell, class) in row[3..].iter().zip(classes) {
                        assert_eq!(*cell, k["classes"][class].as_u64().unwrap_or(0).to_string(), "{class}");
                    }
                }
                assert_eq!(mix[1].0, headers(&["kernel", "path-deciding instructions"]));
                let with_paths = kernels.iter().filter(|k| k["paths"].as_object().unwrap().values().any(|n| n != 0));
                assert_eq!(mix[1].1.len(), with_paths.count());
                for (row, k) in mix[1].1.iter().zip(kernels) {
                    assert_eq!(row[0], s(&k["demangled"]));
                    assert!(row[1].starts_with(&format!("MFMA {}", k["paths"]["MFMA"])), "{row:?}");
                }
                let text_heading = "Instruction mix per kernel (disassembly)\nlibggml-hip-f822f971.so, gfx942\n";
                assert!(text.contains(text_heading), "{text}");
                assert!(text.contains("\ndisassembled 1 code objects (0 from the cache, 0 failed, "), "{text}");
            }
        }
    }
}

/// Only the output layer opens standard output: a command that took `std::io::stdout()` itself would bypass its
/// formats, `-o`, buffering and closed-pipe handling (the print macros are checked by a unit test beside it).
#[test]
fn nothing_outside_the_output_layer_takes_standard_output() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    fn walk(dir: &Path, skip: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path == skip {
                continue;
            }
            if path.is_dir() {
                walk(&path, skip, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, line) in text.lines().enumerate() {
                    if line.split("//").next().unwrap_or("").contains("stdout()") {
                        found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                    }
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(&src, &src.join("output"), &mut found);
    assert!(found.is_empty(), "standard output taken outside src/output:\n{}", found.join("\n"));
    // The control: the check finds the one place that does take it.
    walk(&src.join("output"), Path::new("/"), &mut found);
    assert!(found.iter().any(|f| f.contains("output/mod.rs")), "{found:?}");
}
