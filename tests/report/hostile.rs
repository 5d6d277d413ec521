//! `backscope report` and its evidence bundle on hostile runs: a record's paths never lead a write outside the
//! bundle, the runtime scan stays with the runtime, no planted secret of the corpus
//! (tests/data/redaction/) reaches a bundle, a log linked out of the run is not copied or quoted, FIFOs and
//! `/dev/zero` links in a run directory neither hang nor exhaust memory, a malformed or implausible record is a
//! problem named while the rest of the report stands, the HTML report shows each chart with its summary, and a WAL
//! database copied without its `-shm` is read whole or refused with the reason.
//!
//! Run directories are written here as `backscope sweep` lays them out (`run.json`, `cells/NNNNN-*/result.json`,
//! `servers/*.log`), each record with the fields of the sweep's record; every `backscope` runs under the bounded
//! runner (own process group, address-space limit, deadline).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::bounded::{self, run, Bounds, Done, GIB, MIB};
use crate::support::output::load_in_chromium;
use crate::support::util::{mkfifo, mode, stranger_uid};
use crate::support::wal::wal_only_copy;

/// A record as `backscope sweep` stores it: endpoint `ep` at `ngl`, cell `seq`; ok with decode `tps`, or a crash by
/// SIGSEGV (its server killed, wait status read) after `tps` ms.
fn record(seq: u64, ep: &str, ngl: i64, ok: bool, tps: f64) -> Value {
    let cell = format!("cells/{seq:05}-{ep}-ngl{ngl}");
    let mut r = json!({
        "schema": 1, "run_id": "hr", "cell_key": format!("{ep}|m|ngl={ngl}|p|n=8|e1|r{seq}"), "seq": seq,
        "source": "sweep", "file": format!("{cell}/result.json"), "endpoint": ep, "managed": true, "model": "m",
        "num_gpu": ngl, "prompt": "p", "num_predict": 8, "epoch": 1, "repetition": seq + 1, "stream": true,
        "started_at": "2026-11-26T15:00:00Z", "status": if ok { "ok" } else { "fail" },
        "server_timings": {}, "prompt_count_includes_cache": false, "response_chars": 10, "body_bytes": 100,
        "log_slice": format!("{cell}/server.log"),
        "server": {"pid": 1, "port": 1, "argv": [], "log": format!("servers/s{seq:02}.log"), "start_no": seq + 1},
    });
    if ok {
        r["wall_ms"] = json!(800.0 / tps.max(1e-9));
        r["decode_tps"] = json!(tps);
        r["prompt_tps"] = json!(tps * 10.0);
    } else {
        r["error_class"] = json!("crash");
        r["signal"] = json!("SIGSEGV");
        r["signal_source"] = json!("wait status");
        r["ttf_ms"] = json!(tps);
    }
    r
}

/// A server log that `backscope-logs` reads as llama.cpp's: devices, offload, a request.
const SERVER_LOG: &str = "\
ggml_vulkan: Found 1 Vulkan devices:
ggml_vulkan: 0 = llvmpipe (LLVM 19.1.7, 256 bits) (llvmpipe) | uma: 0 | fp16: 1 | warp size: 8
load_tensors: offloaded 1/5 layers to GPU
main: server is listening on http://127.0.0.1:8080 - starting the main loop
srv  update_slots: all slots are idle
";

/// Writes `records` into a new run directory `dir`: each its `result.json`, its slice and its server's log (the
/// same text, unless already there), and `run.json` with `plan`.
fn write_run(dir: &Path, records: &[Value], plan: Value) {
    std::fs::create_dir_all(dir.join("servers")).unwrap();
    for r in records {
        let cell = dir.join(r["file"].as_str().unwrap()).parent().unwrap().to_path_buf();
        std::fs::create_dir_all(&cell).unwrap();
        std::fs::write(cell.join("result.json"), serde_json::to_vec_pretty(r).unwrap()).unwrap();
        for log in [&r["log_slice"], &r["server"]["log"]] {
            if let Some(rel) = log.as_str().filter(|l| !l.starts_with('/') && !l.contains("..")) {
                let path = dir.join(rel);
                if std::fs::symlink_metadata(&path).is_err() {
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    std::fs::write(&path, SERVER_LOG).unwrap();
                }
            }
        }
    }
    let run =
        json!({"run_id": "hr", "created_at": "2026-11-26T15:00:00Z", "argv": ["backscope", "sweep"], "plan": plan});
    if std::fs::symlink_metadata(dir.join("run.json")).is_err() {
        std::fs::write(dir.join("run.json"), serde_json::to_vec_pretty(&run).unwrap()).unwrap();
    }
}

fn report(args: &[&std::ffi::OsStr], bounds: Bounds) -> Done {
    let mut all: Vec<std::ffi::OsString> = vec!["report".into()];
    all.extend(args.iter().map(|a| a.to_os_string()));
    run(&all, bounds)
}

fn quick() -> Bounds {
    Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(60), ..Default::default() }
}

/// Every entry under `root` (not following links), except under `skip`: its kind and its bytes or link target.
fn snapshot(root: &Path, skip: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(dir: &Path, skip: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.starts_with(skip) {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                walk(&p, skip, out);
                "dir".to_string()
            } else if m.is_file() {
                format!("file {:?}", std::fs::read(&p).unwrap())
            } else {
                "special".to_string()
            };
            out.insert(p, what);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, skip, &mut out);
    out
}

#[test]
fn a_record_naming_paths_outside_the_run_writes_nothing_outside_the_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let (run_dir, out) = (work.join("run"), work.join("out"));
    std::fs::create_dir_all(&out).unwrap();
    // What a climbing or absolute `file` would have overwritten or created: the bundle is work/out/bundle.
    let victim = out.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("timeline.md"), "precious").unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("timeline.md"), "precious too").unwrap();
    let mut records = vec![record(0, "vk", 1, false, 2600.0), record(1, "vk", 1, false, 2650.0)];
    records.push(record(2, "vk", 1, false, 2700.0));
    write_run(&run_dir, &records, json!({}));
    // The records' `file` fields now name paths out of the run; their slices stay inside (so a timeline is made).
    let climbing = "../victim/result.json";
    let deeper = "../../created/x/result.json";
    let absolute = elsewhere.join("result.json").display().to_string();
    for (i, file) in [climbing, deeper, absolute.as_str()].into_iter().enumerate() {
        let path = run_dir.join(records[i]["file"].as_str().unwrap());
        let mut r = records[i].clone();
        r["file"] = json!(file);
        std::fs::write(&path, serde_json::to_vec(&r).unwrap()).unwrap();
    }
    let bundle = out.join("bundle");
    let before = snapshot(tmp.path(), &bundle);
    let done = report(&[run_dir.as_os_str(), "--bundle".as_ref(), bundle.as_os_str()], quick());
    done.assert_bounded(&[0], 60, GIB);
    let after = snapshot(tmp.path(), &bundle);
    let changed: Vec<_> = after.iter().filter(|(p, v)| before.get(*p) != Some(v)).map(|(p, _)| p).collect();
    let gone: Vec<_> = before.keys().filter(|p| !after.contains_key(*p)).collect();
    assert!(changed.is_empty() && gone.is_empty(), "changed or created {changed:?}, removed {gone:?}");
    assert!(!work.join("created").exists());
    let files = crate::support::util::files_under(&bundle);
    assert!(files.keys().all(|f| !f.contains("..")), "{files:?}");
    assert!(!files.keys().any(|f| f.ends_with("timeline.md")), "no record path is one of the run's: {files:?}");
    for f in [climbing, deeper, absolute.as_str()] {
        assert!(done.stderr.contains(&format!("{f}: not a path inside the run directory")), "{f}: {}", done.stderr);
    }
    // The same run with honest paths gets its timelines, beside the records.
    let honest = tmp.path().join("honest");
    write_run(&honest, &records, json!({}));
    let bundle = tmp.path().join("honest-bundle");
    report(&[honest.as_os_str(), "--bundle".as_ref(), bundle.as_os_str()], quick()).assert_bounded(&[0], 60, GIB);
    let files = crate::support::util::files_under(&bundle);
    assert!(files.contains_key("cells/00000-vk-ngl1/timeline.md"), "{:?}", files.keys());
}

#[test]
fn the_bundle_scans_the_program_and_the_libraries_beside_it_within_a_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("llama/bin");
    std::fs::create_dir_all(bin.join("sub")).unwrap();
    std::fs::write(bin.join("llama-server"), "not really a program").unwrap();
    for i in 0..100 {
        std::fs::write(bin.join(format!("libggml-{i:03}.so")), "not really a library").unwrap();
    }
    std::fs::write(bin.join("sub/libdeep.so"), "below the program's directory").unwrap();
    std::fs::write(bin.join("notes.txt"), "not a library").unwrap();
    let run_dir = tmp.path().join("run");
    let program = bin.join("llama-server").display().to_string();
    let plan = json!({"endpoints": [
        {"name": "root", "kind": {"program": "/", "preset": "llama-server"}},
        {"name": "etc", "kind": {"program": "/etc", "preset": "ollama"}},
        {"name": "vk", "kind": {"program": program, "preset": "llama-server"}},
    ]});
    write_run(&run_dir, &[record(0, "vk", 1, true, 10.0)], plan);
    let bundle = tmp.path().join("bundle");
    // Scanning `/` recursively took minutes and gigabytes; the program's own files take well under a minute.
    let done = report(&[run_dir.as_os_str(), "--bundle".as_ref(), bundle.as_os_str()], quick());
    eprintln!("report --bundle of a plan naming / and 100 libraries: {}", done.describe());
    done.assert_bounded(&[0], 30, GIB);
    let files = crate::support::util::files_under(&bundle);
    let scans: Vec<&String> = files.keys().filter(|f| f.starts_with("scan/") && f.ends_with(".json")).collect();
    assert_eq!(scans.len(), 1, "only the program's directory: {scans:?}");
    let scan: Value = serde_json::from_str(&files[scans[0]]).unwrap();
    let roots: Vec<&str> = scan["roots"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    // The program, then the libraries by name, 64 files in all; nothing below the directory, nothing else in it.
    let bin = bin.canonicalize().unwrap();
    let mut want = vec![bin.join("llama-server").display().to_string()];
    want.extend((0..63).map(|i| bin.join(format!("libggml-{i:03}.so")).display().to_string()));
    assert_eq!(roots, want);
    let e = &done.stderr;
    let past = format!(
        "{}/libggml-063.so and 36 more file(s) of {} (past the scan budget of 64 files",
        bin.display(),
        bin.display()
    );
    assert!(e.contains(&past), "{e}");
    assert!(e.contains("/ (endpoint root's program is not a regular file: nothing scanned)"), "{e}");
    assert!(e.contains("/etc (endpoint etc's program is not a regular file: nothing scanned)"), "{e}");
    assert!(files.values().all(|t| !t.contains("libdeep.so") && !t.contains("notes.txt")));
}

/// The blocks of a corpus file: separated by `%%` lines, `#` lines dropped.
fn corpus_blocks(text: &str) -> Vec<String> {
    text.split("\n%%\n")
        .map(|b| b.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n"))
        .filter(|b| !b.trim().is_empty())
        .collect()
}

#[test]
fn no_planted_secret_reaches_the_bundle_and_plain_log_lines_stay() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/redaction");
    let secrets = corpus_blocks(&std::fs::read_to_string(data.join("secrets.txt")).unwrap());
    let plain: Vec<String> = std::fs::read_to_string(data.join("not-secrets.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    assert!(secrets.len() >= 30 && plain.len() >= 20);
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    let records = [record(0, "vk", 1, false, 2600.0), record(1, "vk", 0, true, 10.0)];
    // The crashed server's whole log: real discovery lines, every secret shape and every plain line, then the
    // crash; each secret line also as the record's error and backend evidence (quoted in claims).
    let mut log = String::from(SERVER_LOG);
    for block in &secrets {
        log.push_str(block);
        log.push('\n');
    }
    for line in &plain {
        log.push_str(line);
        log.push('\n');
    }
    log.push_str("ggml_vulkan: device lost: Authorization: Bearer c4n4ry98qwertyu\n");
    let mut crashed = records[0].clone();
    crashed["error"] = json!(secrets.join(" | "));
    crashed["backend"] = json!({"backend": "Vulkan0", "devices": ["Vulkan0"], "offloaded": [1, 5],
        "loaded_backends": [], "evidence": secrets.iter().take(12).enumerate()
            .map(|(i, b)| json!({"file": "servers/s00.log", "line": i + 1, "text": b})).collect::<Vec<_>>()});
    crashed["server"]["argv"] =
        json!(["llama-server", "--api-key", "c4n4ry95", "-hft", "c4n4ry96", "--hf-token=c4n4ry97", "--port", "1"]);
    std::fs::create_dir_all(run_dir.join("servers")).unwrap();
    std::fs::write(run_dir.join("servers/s00.log"), &log).unwrap();
    let slice = run_dir.join("cells/00000-vk-ngl1/server.log");
    std::fs::create_dir_all(slice.parent().unwrap()).unwrap();
    std::fs::write(&slice, &log).unwrap();
    let env = json!({"env": {"HF_TOKEN": "c4n4ry93"}, "endpoints": {"vk": {"program": "llama-server",
        "env": {"OLLAMA_API_KEY": "c4n4ry94"}, "probes": [{"argv": ["llama-server", "--version"], "exit": 0,
        "output": secrets.join("\n")}]}}});
    std::fs::write(run_dir.join("env.json"), env.to_string()).unwrap();
    write_run(&run_dir, &[crashed, records[1].clone()], json!({}));
    // The report itself (not meant to leave the machine) quotes them: the record's error, the backend evidence, the
    // timeline of the crash. So the bundle's copies of it are where redaction has to work.
    let local = report(&["--json".as_ref(), run_dir.as_os_str()], quick());
    local.assert_bounded(&[0], 60, GIB);
    let quoted: Vec<&str> =
        ["c4n4ry98", "c4n4ry01", "c4n4ry05", "c4n4ry02"].into_iter().filter(|c| local.stdout.contains(c)).collect();
    assert!(quoted.len() >= 2, "the planted secrets reach the unredacted report: {quoted:?}");
    let bundle = tmp.path().join("bundle");
    let done = report(&[run_dir.as_os_str(), "--bundle".as_ref(), bundle.as_os_str()], quick());
    done.assert_bounded(&[0], 60, GIB);
    let files = crate::support::util::files_under(&bundle);
    for name in
        ["report.html", "report.json", "report.md", "env.json", "servers/s00.log", "cells/00000-vk-ngl1/server.log"]
    {
        assert!(files.contains_key(name), "{name}: {:?}", files.keys());
    }
    // Every file of the bundle, as a directory and as the archive `tar` unpacks; a canary in any case (an AWS key
    // id plants it in upper case).
    let archive = tmp.path().join("bundle.tar.gz");
    report(&[run_dir.as_os_str(), "--bundle".as_ref(), archive.as_os_str()], quick()).assert_bounded(&[0], 60, GIB);
    let unpacked = tmp.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let tar = std::process::Command::new("tar").arg("-xzf").arg(&archive).arg("-C").arg(&unpacked).status().unwrap();
    assert!(tar.success());
    let from_archive = crate::support::util::files_under(&unpacked);
    assert_eq!(from_archive.len(), files.len(), "{:?}", from_archive.keys());
    for (name, text) in files.iter().chain(&from_archive) {
        if let Some(at) = text.to_ascii_lowercase().find("c4n4ry") {
            let around = &text.as_bytes()[at.saturating_sub(80)..(at + 40).min(text.len())];
            panic!("{name} carries a planted secret: …{}…", String::from_utf8_lossy(around));
        }
    }
    // The logs are there: every line without a secret as it was (a private key's lines become one), every plain
    // line among them.
    let copied = &files["servers/s00.log"];
    let key_line = |l: &str| l.len() >= 40 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b));
    for line in
        log.lines().filter(|l| !l.to_ascii_lowercase().contains("c4n4ry") && !key_line(l) && !l.starts_with("-----"))
    {
        assert!(copied.lines().any(|l| l == line), "a line without a secret was changed: {line}");
    }
    for line in &plain {
        assert!(copied.lines().any(|l| l == line), "a plain line was changed: {line}");
    }
    assert!(!done.stderr.to_ascii_lowercase().contains("c4n4ry"));
}

#[test]
fn a_log_linked_out_of_the_run_is_neither_copied_nor_quoted() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("id_ed25519");
    // Text that no redaction pattern takes: only the link check keeps it out.
    let private = "load_tensors: offloaded 5/5 layers to GPU PRIVATE-NOTE-7f3e\nggml_vulkan: 0 = PRIVATE-NOTE-7f3e\n";
    std::fs::write(&key, private).unwrap();
    let run_dir = tmp.path().join("run");
    let records = vec![record(0, "vk", 1, false, 2600.0), record(1, "vk", 0, true, 10.0)];
    std::fs::create_dir_all(run_dir.join("cells/00000-vk-ngl1")).unwrap();
    std::fs::create_dir_all(run_dir.join("servers")).unwrap();
    for link in ["cells/00000-vk-ngl1/server.log", "servers/s00.log", "cells/00001-vk-ngl0/server.log"] {
        std::fs::create_dir_all(run_dir.join(link).parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&key, run_dir.join(link)).unwrap();
    }
    write_run(&run_dir, &records, json!({}));
    let bundle = tmp.path().join("bundle");
    let done = report(&[run_dir.as_os_str(), "--bundle".as_ref(), bundle.as_os_str()], quick());
    done.assert_bounded(&[0], 60, GIB);
    for (name, text) in crate::support::util::files_under(&bundle) {
        assert!(!text.contains("PRIVATE-NOTE"), "{name} quotes the linked file");
    }
    let json = report(&["--json".as_ref(), run_dir.as_os_str()], quick());
    json.assert_bounded(&[0], 60, GIB);
    assert!(!json.stdout.contains("PRIVATE-NOTE"), "{}", json.stdout);
    let warned = format!("a link to {}, outside the run directory", key.canonicalize().unwrap().display());
    assert!(done.stderr.contains(&warned), "{}", done.stderr);
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    assert!(v["problems"].as_array().unwrap().iter().any(|p| p.as_str().unwrap().contains("server.log")));
}

#[test]
fn fifos_dev_zero_and_dev_stdin_in_a_run_directory_are_named_and_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    let mut records = vec![record(0, "vk", 1, false, 2600.0), record(1, "vk", 1, false, 2650.0)];
    records.push(record(2, "cpu", 0, true, 10.0));
    // A FIFO slice and server log; an absolute slice `/dev/stdin`; a FIFO for a record; links to /dev/zero for
    // run.json and env.json.
    std::fs::create_dir_all(run_dir.join("cells/00000-vk-ngl1")).unwrap();
    std::fs::create_dir_all(run_dir.join("servers")).unwrap();
    mkfifo(&run_dir.join("cells/00000-vk-ngl1/server.log"));
    mkfifo(&run_dir.join("servers/s00.log"));
    records[1]["log_slice"] = json!("/dev/stdin");
    records[1]["server"]["log"] = json!("/dev/stdin");
    std::fs::create_dir_all(run_dir.join("cells/00003-cpu-ngl0")).unwrap();
    mkfifo(&run_dir.join("cells/00003-cpu-ngl0/result.json"));
    std::os::unix::fs::symlink("/dev/zero", run_dir.join("run.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", run_dir.join("env.json")).unwrap();
    write_run(&run_dir, &records, json!({}));
    let bundle = tmp.path().join("bundle");
    // Standard input is a pipe nobody writes to or closes: reading `/dev/stdin` would wait forever.
    let bounds = Bounds {
        address_space: GIB,
        deadline: Duration::from_secs(30),
        stdin: Some(Stdio::piped()),
        ..Default::default()
    };
    let done = report(&[run_dir.as_os_str(), "--bundle".as_ref(), bundle.as_os_str()], bounds);
    eprintln!("report --bundle of a run of FIFOs and /dev/zero links: {}", done.describe());
    done.assert_bounded(&[0], 30, 256 * MIB);
    let e = &done.stderr;
    for (what, name) in [
        ("a FIFO", "cells/00000-vk-ngl1/server.log"),
        ("a FIFO", "servers/s00.log"),
        ("a FIFO", "cells/00003-cpu-ngl0/result.json"),
        ("a link to /dev/zero, outside the run directory", "run.json"),
        ("a link to /dev/zero, outside the run directory", "env.json"),
    ] {
        let line = e
            .lines()
            .find(|l| l.contains(&format!("{}/{name}", run_dir.display())))
            .unwrap_or_else(|| panic!("{name}: {e}"));
        assert!(line.contains(what), "{line}");
    }
    assert!(e.contains("log_slice /dev/stdin: not a path inside the run directory"), "{e}");
    // The rest stands: the three readable records, their statistics, the bundle.
    let json = report(
        &["--json".as_ref(), run_dir.as_os_str()],
        Bounds {
            address_space: GIB,
            deadline: Duration::from_secs(30),
            stdin: Some(Stdio::piped()),
            ..Default::default()
        },
    );
    json.assert_bounded(&[0], 30, 256 * MIB);
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!((v["cells"].as_u64(), v["ok"].as_u64(), v["failed"].as_u64()), (Some(3), Some(1), Some(2)));
    assert!(bundle.join("report.html").is_file());
}

#[test]
fn malformed_and_implausible_records_are_problems_and_the_rest_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    let mut records: Vec<Value> =
        [10.0, 12.0, 11.0].iter().enumerate().map(|(i, t)| record(i as u64, "cpu", 0, true, *t)).collect();
    // Implausible values: a negative rate, an overflowing one, a token count past 32 bits, a negative duration.
    let mut negative = record(3, "cpu", 0, true, 10.0);
    negative["decode_tps"] = json!(-5.0);
    let mut huge_count = record(4, "cpu", 0, true, 10.0);
    huge_count["server_timings"] = json!({"decode_n": 5_000_000_000u64, "decode_ms": 1.0});
    huge_count["decode_tps"] = json!(5e12);
    let mut negative_wall = record(5, "cpu", 0, true, 10.0);
    negative_wall["wall_ms"] = json!(-1.0);
    negative_wall["decode_tps"] = json!(-1e6);
    records.extend([negative, huge_count, negative_wall]);
    write_run(&run_dir, &records, json!({}));
    // Written by hand: JSON with an overflowing number, and a record cut short.
    let infinite = run_dir.join("cells/00006-cpu-ngl0/result.json");
    std::fs::create_dir_all(infinite.parent().unwrap()).unwrap();
    let text = serde_json::to_string(&record(6, "cpu", 0, true, 10.0))
        .unwrap()
        .replace("\"decode_tps\":10.0", "\"decode_tps\":1e999");
    assert!(text.contains("1e999"));
    std::fs::write(&infinite, text).unwrap();
    let cut = run_dir.join("cells/00007-cpu-ngl0/result.json");
    std::fs::create_dir_all(cut.parent().unwrap()).unwrap();
    let whole = serde_json::to_string(&record(7, "cpu", 0, true, 10.0)).unwrap();
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let done = report(&["--json".as_ref(), run_dir.as_os_str()], quick());
    done.assert_bounded(&[0], 60, GIB);
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    let problems: Vec<&str> = v["problems"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    let has = |needle: &str| problems.iter().any(|p| p.contains(needle));
    assert!(has("00007-cpu-ngl0/result.json") && has("left out"), "{problems:#?}");
    assert!(has("(seq 3): decode_tps is -5"), "{problems:#?}");
    assert!(has("(seq 4): server_timings.decode_n is 5000000000"), "{problems:#?}");
    assert!(has("(seq 5): wall_ms is -1"), "{problems:#?}");
    assert!(has("(seq 5): decode_tps is -1000000"), "{problems:#?}");
    // serde_json refuses 1e999 (a float past f64): that record is a problem of its own.
    assert!(has("00006-cpu-ngl0/result.json") && has("number out of range"), "{problems:#?}");
    // The median decode rate of the believable rates only (10, 12, 11), with every record but the two that do not
    // parse counted.
    let g = &v["groups"][0];
    assert_eq!(g["decode_tps"]["median"].as_f64(), Some(11.0), "{g:#}");
    assert_eq!(g["decode_tps"]["n"].as_u64(), Some(3), "{g:#}");
    assert_eq!(v["cells"].as_u64(), Some(6));
    assert!(done.stderr.contains("warning:") && done.stderr.contains("00007-cpu-ngl0/result.json"), "{}", done.stderr);
}

#[test]
fn the_html_report_shows_each_chart_with_its_summary_in_chromium() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    let mut records = Vec::new();
    let mut seq = 0;
    for (ep, ngls) in [("cpu", [0, 1, 2]), ("vk", [0, 1, 2])] {
        for ngl in ngls {
            for k in 0..3 {
                let crash = ep == "vk" && ngl == 2;
                let value = if crash { 2600.0 + 10.0 * k as f64 } else { 10.0 + ngl as f64 + k as f64 * 0.1 };
                records.push(record(seq, ep, ngl, !crash, value));
                seq += 1;
            }
        }
    }
    write_run(&run_dir, &records, json!({}));
    let page = tmp.path().join("report.html");
    let done =
        report(&["--format".as_ref(), "html".as_ref(), "-o".as_ref(), page.as_os_str(), run_dir.as_os_str()], quick());
    done.assert_bounded(&[0], 60, GIB);
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hardening-report.png");
    let (dom, requests) = load_in_chromium(&page, &shot);
    assert!(requests.is_empty(), "{requests:?}");
    let at = |s: &str| dom.find(s).unwrap_or_else(|| panic!("no {s:?} in the DOM"));
    let crash_chart = at("<figcaption>time to failure</figcaption>");
    let rate_chart = at("<figcaption>decode t/s by num_gpu</figcaption>");
    assert!(at(">Crash timing<") < crash_chart && crash_chart < at(">Matched results"), "under its verdicts");
    assert!(
        rate_chart < at(">Backend that served") && rate_chart < at(">Claims<"),
        "under the pivot, before the claims"
    );
    // The decode chart's x axis as Chromium has it: the three num_gpu labels and no empty label after them.
    let svg = &dom[rate_chart..];
    let svg = &svg[..svg.find("</svg>").unwrap()];
    // Texts by their y: the tick labels of the x axis share one.
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in svg.split("<text ").skip(1) {
        let y = t.split("y=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default().to_string();
        let label = t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()].trim().to_string();
        rows.entry(y).or_default().push(label);
    }
    let axis = rows.values().find(|r| r.contains(&"0".to_string())).unwrap_or_else(|| panic!("{svg}"));
    assert_eq!(axis, &["0", "1", "2"], "{svg}");
}

/// `report` on a WAL database copied without its `-shm` sees the run only the WAL holds (it used to open the
/// main file as immutable and report run A); where the directory is read-only to the reader, the `-shm` cannot be
/// rebuilt and the open is refused with the reason rather than silently missing run B.
#[test]
fn a_wal_database_without_its_shm_is_read_whole_or_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let (copy, _a, b) = wal_only_copy(&tmp.path().join("orig"), &tmp.path().join("copy"), None);
    let done = bounded::run(&["report".as_ref(), "--json".as_ref(), copy.as_os_str()], quick());
    done.assert_bounded(&[0, 1], 30, 512 * MIB);
    let v: Value = serde_json::from_str(&done.stdout).unwrap_or_else(|e| panic!("{e}: {}", done.describe()));
    assert_eq!((v["run"]["run_id"].as_str(), v["cells"].as_u64()), (Some(&*b), Some(5)), "{}", done.stdout);

    // The same copy in a directory another user may only read.
    let ro = tmp.path().join("read-only");
    wal_only_copy(&tmp.path().join("orig2"), &ro, None);
    for f in ["a.db", "a.db-wal"] {
        mode(&ro.join(f), 0o644);
    }
    mode(&ro, 0o755);
    mode(tmp.path(), 0o755);
    let mut bo = quick();
    bo.uid = Some(stranger_uid(2));
    bo.cwd = Some(PathBuf::from("/"));
    let done = bounded::run(&["report".as_ref(), ro.join("a.db").as_os_str()], bo);
    done.assert_bounded(&[2], 30, 512 * MIB);
    let e = &done.stderr;
    assert!(
        e.contains("write-ahead log") && e.contains(&format!("{} is not writable", ro.display())),
        "{}",
        done.describe()
    );
    assert!(!ro.join("a.db-shm").exists());
}
