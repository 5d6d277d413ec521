//! The output layer end to end on real inputs: `backscope logs` on Ollama logs quoted in public issues, hostile
//! strings carried by a real log line and by a real sweep record into every format, a closed pipe for every
//! command, the demo's scan at 80 and 120 columns, and HTML reports loaded in headless Chromium.
//!
//! Markdown is checked by rendering it with an independent CommonMark reader (pulldown-cmark, GitHub tables on);
//! HTML by Chromium's own DOM and network log.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::sweep_common::*;
use crate::util::*;

fn log_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/logs/tests/data").join(name)
}

fn json_of(cmd: &mut Command) -> Value {
    let text = stdout_ok(cmd);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn claim<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no claim {id} in {:#}", v["claims"]))
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// Every line of `text` fits `width` columns (the text is box drawing, ASCII and `…`/`×`/`→`: one column each).
pub(crate) fn assert_fits(text: &str, width: usize) {
    for (i, l) in text.lines().enumerate() {
        assert!(l.chars().count() <= width, "line {} is {} columns wide (> {width}): {l:?}", i + 1, l.chars().count());
    }
}

#[test]
fn logs_turns_real_ollama_sigsegv_logs_into_timeline_phase_and_signature() {
    // ollama/ollama#12106: a generate request answers 200 at 10:25:21 (line 1); at 10:25:27 the runner gets
    // SIGSEGV (line 2) with PC=0x7fb47d1c4640 addr=0x28 (line 3) during cgo, in llama_decode (line 8).
    let file = log_fixture("ollama-12106-rocm-decode-sigsegv.log");
    let v = json_of(backscope().args(["logs", "--json"]).arg(&file));
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
    assert_eq!(phase["confidence"], "Inferred");
    assert!(s(&phase["statement"]).contains("during decoding"), "{phase:#}");
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
    let text = stdout_ok(backscope().env("COLUMNS", "100").arg("logs").arg(&file));
    assert_fits(&text, 100);
    let first = text.lines().take(2).collect::<Vec<_>>().join(" ");
    assert!(first.contains("1 crash, in decoding"), "{text}");
    assert!(text.contains("+6.000s ┆    2 ┆ signal"), "{text}");

    // ollama/ollama#9807: RX 580 (gfx803), SIGSEGV at PC=0x7f8d52964434 addr=0x18 while the model loads,
    // 2.009 s after the runner started (the timestamps 02:36:31.324 → 02:36:33.333).
    let file = log_fixture("ollama-9807-gfx803-load-sigsegv.log");
    let v = json_of(backscope().args(["logs", "--format", "json"]).arg(&file));
    let crash = claim(&v, "logs.crash.1");
    assert!(
        s(&crash["statement"]).starts_with(
            "The log shows a crash at line 38 (+2.009 s): SIGSEGV (segmentation violation) PC=0x7f8d52964434 addr=0x18"
        ),
        "{crash:#}"
    );
    assert!(s(&claim(&v, "logs.crash.1.phase")["statement"]).contains("during model loading"));
    assert_eq!(
        s(&claim(&v, "logs.device.ROCm0")["statement"]),
        "The log lists ROCm device 0: Radeon RX 580 Series (gfx803)"
    );
    let md = stdout_ok(backscope().args(["logs", "--format", "markdown"]).arg(&file));
    assert!(md.contains("\n## Claims\n") && md.contains("| time | line | event | what |"), "{md}");
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

/// Hostile text: markup that would end a table or run a script, a Markdown table breaker, a newline, ANSI colour
/// and title-setting escape sequences.
pub(crate) const HOSTILE: &str =
    "</table><script>alert(1)</script> a|b\nnext \u{1b}[31mred\u{1b}[0m \u{1b}]0;pwned\u{7}";

/// The checks every rendering of hostile input must pass.
pub(crate) fn assert_inert(text: &str, markdown: &str, html: &str) {
    for (name, out) in [("text", text), ("markdown", markdown), ("html", html)] {
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{name}: an escape sequence got through");
    }
    // HTML: the hostile markup is text; every table that opens closes once.
    let body = &html[html.find("<body>").expect("a body")..];
    assert!(!body.to_lowercase().contains("<script"), "html: {body}");
    assert!(body.contains("&lt;/table&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), "html: {body}");
    assert_eq!(body.matches("<table>").count(), body.matches("</table>").count(), "html: {body}");
    // Markdown, read by an independent CommonMark reader: no script element, no table broken out of.
    let mut rendered = String::new();
    let parser = pulldown_cmark::Parser::new_ext(markdown, pulldown_cmark::Options::ENABLE_TABLES);
    pulldown_cmark::html::push_html(&mut rendered, parser);
    assert!(!rendered.to_lowercase().contains("<script"), "markdown rendered: {rendered}");
    assert!(rendered.contains("&lt;/table&gt;&lt;script&gt;"), "markdown rendered: {rendered}");
    for table in rendered.split("<table>").skip(1) {
        let table = &table[..table.find("</table>").expect("the table closes")];
        let columns = table.matches("<th>").count() + table.matches("<th ").count();
        for row in table.split("<tr>").skip(2) {
            assert_eq!(row.matches("<td").count(), columns, "a row with a different cell count: {row}\n{markdown}");
        }
    }
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
    // The reproduction, as a shell runs it.
    let dry = format!(
        "set -o pipefail; \"$0\" sweep --dry-run --endpoint a=http://127.0.0.1:9 --model m --repetitions 5000 --db {} | head -2",
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
        assert_quiet_exit(what, with_closed_stdout(backscope().args(args)));
    }
    assert!(model.is_file(), "synth wrote its model although nobody read its summary");
    assert_eq!(export(&db, None).len(), 2, "the imported record and the real run's record are stored");
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
        assert!(verdict.starts_with("[Inferred] On gfx900, whether any scanned library can run depends"), "{text}");
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

/// Chromium run headless on a local page, with the flags that keep it from phoning home.
fn chromium(profile: &Path) -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .stdin(Stdio::null());
    c
}

/// Requests the page itself made, from Chromium's network log: URL requests whose initiator is an origin (a
/// page loaded from a file has the opaque origin `null`). Chromium's own background requests have none.
fn page_requests(net_log: &Path) -> Vec<String> {
    let log: Value = serde_json::from_str(&std::fs::read_to_string(net_log).unwrap()).unwrap();
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].as_u64().unwrap();
    log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        .filter(|e| e["params"]["initiator"].as_str().is_some_and(|i| i != "not an origin"))
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_string))
        .filter(|u| !u.starts_with("file:"))
        .collect()
}

/// Loads `page` in Chromium: its DOM, the requests it made, and a screenshot written to `shot`.
pub(crate) fn load_in_chromium(page: &Path, shot: &Path) -> (String, Vec<String>) {
    let profile = tempfile::tempdir().unwrap();
    let net = profile.path().join("net.json");
    let url = format!("file://{}", page.display());
    let out = chromium(profile.path())
        .arg(format!("--log-net-log={}", net.display()))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap_or_else(|e| panic!("cannot run chromium ({e}): bash scripts/install-deps.sh installs it"));
    assert!(out.status.success(), "chromium --dump-dom: {}", String::from_utf8_lossy(&out.stderr));
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let out = chromium(profile.path())
        .args(["--window-size=1280,2400", &format!("--screenshot={}", shot.display()), &url])
        .output()
        .unwrap();
    assert!(out.status.success() && shot.is_file(), "chromium --screenshot: {}", String::from_utf8_lossy(&out.stderr));
    (dom, page_requests(&net))
}

/// Every `src`, `href`, `srcset`, `action` and CSS `url(…)` in the page names nothing with a scheme or a host.
pub(crate) fn assert_no_external_reference(html: &str) {
    let lower = html.to_lowercase();
    for attr in ["src=", "href=", "srcset=", "action=", "url(", "@import"] {
        for (at, _) in lower.match_indices(attr) {
            let value = lower[at + attr.len()..].trim_start_matches(['"', '\'', ' ']);
            let value: String = value.chars().take_while(|c| !matches!(c, '"' | '\'' | ')' | ' ' | '>')).collect();
            assert!(
                !value.contains(':') && !value.starts_with("//"),
                "{attr}{value}: a reference that leaves the page"
            );
        }
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
        "--num-predict",
        "8",
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
        statement.starts_with("`cpu` at num_gpu=0, prompt Hello, num_predict 8: the log of the server that died"),
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
    stdout_ok(
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
