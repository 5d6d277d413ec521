//! Hardening round 2 (issue 21) for `trace`, `predict`, GGUF reading and `maps`: each finding as a test whose
//! input is generated here, run under memory and time limits where the finding is about memory or time.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::bounded::{self, Bounds, GIB, MIB};
use crate::support::util::*;

// ---- trace -- CMD: the traced command starts with a clean signal mask and gets forwarded signals ----

/// The masks of a process as `/proc/PID/status` shows them (see proc(5)): `SigBlk` and `SigIgn`, hexadecimal.
fn mask(status: &str, field: &str) -> u64 {
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in {status}"));
    u64::from_str_radix(line[field.len()..].trim(), 16).unwrap()
}

#[test]
fn traced_command_starts_with_no_signal_blocked() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(backscope()
        .arg("trace")
        .arg("--observer")
        .arg(observer_library())
        .arg("--dir")
        .arg(tmp.path().join("traces"))
        .args(["--", "sh", "-c", "exec cat /proc/self/status"]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status = String::from_utf8_lossy(&out.stdout);
    assert_eq!(mask(&status, "SigBlk:"), 0, "the traced command inherited a blocked signal: {status}");
    // SIGINT (2) and SIGTERM (15) are not ignored either: bit N-1 of the mask is signal N.
    let ignored = mask(&status, "SigIgn:");
    assert_eq!(ignored & ((1 << (libc::SIGINT - 1)) | (1 << (libc::SIGTERM - 1))), 0, "SigIgn {ignored:x}");
}

/// Sends `signal` to a `backscope trace` of a shell that waits 60 s, once the shell runs: the command must end by
/// that signal at once, and backscope must say so and exit with 128 + the signal's number.
fn forwarded_signal_ends_the_command(signal: libc::c_int, name: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let started_file = tmp.path().join("started");
    let script = format!("echo $$ > '{}'; exec sleep 60", started_file.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_backscope"))
        .arg("trace")
        .arg("--observer")
        .arg(observer_library())
        .arg("--dir")
        .arg(tmp.path().join("traces"))
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::fs::read_to_string(&started_file).map_or(true, |s| !s.ends_with('\n')) {
        assert!(started.elapsed() < Duration::from_secs(20), "the traced shell never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let command_pid: libc::pid_t = std::fs::read_to_string(&started_file).unwrap().trim().parse().unwrap();
    // SAFETY: signals the backscope process this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    let sent = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if sent.elapsed() > Duration::from_secs(15) {
            // SAFETY: the traced command and backscope, both started by this test.
            unsafe {
                libc::kill(command_pid, libc::SIGKILL);
                libc::kill(child.id() as libc::pid_t, libc::SIGKILL);
            }
            let _ = child.wait();
            panic!("{name} did not end the traced command within 15 s (it stayed pending in it)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(128 + signal), "{stdout}{stderr}");
    assert!(stderr.contains(&format!("{name}: passed on to")), "{stderr}");
    assert!(stdout.contains(&format!("traced command was ended by {name} (exit status {})", 128 + signal)), "{stdout}");
    assert!(!Path::new(&format!("/proc/{command_pid}")).exists(), "the traced command survives");
}

#[test]
fn sigterm_to_backscope_reaches_the_traced_command() {
    forwarded_signal_ends_the_command(libc::SIGTERM, "SIGTERM");
}

#[test]
fn sigint_to_backscope_reaches_the_traced_command() {
    forwarded_signal_ends_the_command(libc::SIGINT, "SIGINT");
}

// ---- predict --model: time and memory bounded by the input, whatever its tensor count ----

/// Writes a GGUF with the gguf crate's writer: llama metadata and `n` weight matrices `blk.I.attn_q.weight`
/// of type `ggml_type` with the dimensions `dims(I)` gives (zero rows: a valid tensor of no bytes, so the
/// file is all metadata).
fn many_tensor_gguf(path: &Path, n: u64, ggml_type: gguf::GgmlType, dims: impl Fn(u64) -> [u64; 2]) {
    use gguf::{GgufWriter, TensorSpec, Value};
    let specs: Vec<TensorSpec> =
        (0..n).map(|i| TensorSpec::new(format!("blk.{i}.attn_q.weight"), &dims(i), ggml_type)).collect();
    let kvs = [
        ("general.architecture", Value::String(b"llama")),
        ("llama.attention.head_count", Value::U32(32)),
        ("llama.attention.head_count_kv", Value::U32(8)),
        ("llama.embedding_length", Value::U32(4096)),
    ];
    let out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = GgufWriter::new(out, &kvs, &specs).unwrap();
    let total: u64 = specs.iter().map(|s| s.n_bytes().unwrap()).sum();
    w.write_data(&vec![0u8; total as usize]).unwrap();
    w.finish().unwrap();
}

fn predict_bounded(model: &Path, extra: &[&str]) -> bounded::Done {
    let mut args = vec!["predict", "--json", "--arch", "gfx1201", "--model", model.to_str().unwrap()];
    args.extend(extra);
    bounded::run(&args, Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(60), ..Default::default() })
}

/// Issue 21: the whole rule table ran per tensor per phase (20k tensors 11.6 s, 300k over 60 s). 300k tensors with
/// the same facts are one evaluation per phase.
#[test]
fn predict_on_300k_equal_tensors_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("many.gguf");
    many_tensor_gguf(&model, 300_000, gguf::GgmlType::F16, |_| [4096, 0]);
    let done = predict_bounded(&model, &["--prompt-tokens", "1000"]);
    done.assert_bounded(&[0], 10, GIB);
    let report: serde_json::Value = serde_json::from_str(done.stdout.trim()).unwrap();
    let phases = report["phases"].as_array().unwrap();
    // 1000 tokens: ubatch 1 of 512, the last of 488, then one decode step (llama.cpp's split_simple).
    let ids: Vec<&str> = phases.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert!(ids.starts_with(&["prefill", "prefill-last"]) && ids.ends_with(&["decode"]), "{ids:?}");
    for p in phases {
        let tensors: u64 = p["weights"].as_array().unwrap().iter().map(|g| g["tensors"].as_u64().unwrap()).sum();
        // Every tensor is counted once per phase it takes part in (the last layer's attn_q is before the gather).
        assert_eq!(tensors, 300_000, "{}", p["id"]);
    }
}

/// The hostile variant: every tensor a different row length, so no two share a query; with --explain too (the
/// decision paths show the values, so they are not memoised: 2.4 GB and 26 s before they were left out).
#[test]
fn predict_on_150k_distinct_tensors_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("distinct.gguf");
    many_tensor_gguf(&model, 150_000, gguf::GgmlType::F32, |i| [i + 1, 0]);
    assert!(std::fs::metadata(&model).unwrap().len() < 10 * MIB);
    let plain = predict_bounded(&model, &["--prompt-tokens", "1000"]);
    plain.assert_bounded(&[0], 10, GIB);
    let explained = predict_bounded(&model, &["--prompt-tokens", "1000", "--explain"]);
    explained.assert_bounded(&[0], 10, GIB);
    // The same groups either way; with --explain each carries its path.
    let (a, b): (serde_json::Value, serde_json::Value) =
        (serde_json::from_str(plain.stdout.trim()).unwrap(), serde_json::from_str(explained.stdout.trim()).unwrap());
    let groups = |r: &serde_json::Value| -> Vec<(String, u64)> {
        let phases = r["phases"].as_array().unwrap().iter();
        let weights = phases.flat_map(|p| p["weights"].as_array().unwrap().iter());
        weights.map(|g| (g["family"].to_string(), g["tensors"].as_u64().unwrap())).collect()
    };
    assert_eq!(groups(&a), groups(&b));
    assert!(b["phases"][0]["weights"][0]["path"].as_array().is_some_and(|p| !p.is_empty()), "{b}");
}

/// Issue 21: huge token counts wrapped (or, in a debug build, panicked) in the KV lengths and node counts. Each
/// count is checked against its range, and the error names the flag.
#[test]
fn predict_refuses_token_counts_outside_their_range() {
    let max = u64::MAX.to_string();
    let cases: [(&[&str], &str); 4] = [
        (&["--prompt-tokens", &max], "--prompt-tokens is 18446744073709551615; expected 0 to 1099511627776"),
        (&["--prompt-tokens", "10", "--decode-tokens", &max], "--decode-tokens"),
        (&["--ne11", "0"], "--ne11 is 0; expected 1 to 1099511627776"),
        (&["--prompt-tokens", "9", "--ubatch", &max], "--ubatch is 18446744073709551615"),
    ];
    for (flags, message) in cases {
        let mut args = vec!["predict", "--json", "--arch", "gfx1201", "--type", "q4_k"];
        args.extend(flags);
        let done = bounded::run(&args, Bounds { deadline: Duration::from_secs(30), ..Default::default() });
        done.assert_bounded(&[2], 30, GIB);
        assert!(done.stderr.contains(message), "{flags:?}: {}", done.stderr);
        assert!(done.stdout.is_empty(), "{flags:?}: {}", done.stdout);
    }
    // The top of the range is a prediction: 2^40 prompt tokens then 2^40 decode steps, the counts exact.
    let top = (1u64 << 40).to_string();
    let args =
        ["predict", "--json", "--arch", "gfx1201", "--type", "q4_k", "--prompt-tokens", &top, "--decode-tokens", &top];
    let done = bounded::run(&args, Bounds { deadline: Duration::from_secs(30), ..Default::default() });
    done.assert_bounded(&[0], 30, GIB);
    let report: serde_json::Value = serde_json::from_str(done.stdout.trim()).unwrap();
    let decode = report["phases"].as_array().unwrap().iter().find(|p| p["id"] == "decode").unwrap();
    assert_eq!(decode["repeat"].as_u64(), Some(1 << 40));
    // 2^40 / 512 ubatches: all but the last full, the last of 512 (llama.cpp's split_simple).
    let prefill = report["phases"].as_array().unwrap().iter().find(|p| p["id"] == "prefill").unwrap();
    assert_eq!(prefill["repeat"].as_u64(), Some((1 << 40) / 512 - 1));
}

// ---- trace --read: memory follows the kernel table, not the file ----

/// Writes a trace of `kernels` HIP kernels and `windows` windows, each launching 100 of them (two shapes each),
/// with the format's own writers (crates/trace). Returns the total launches written.
fn big_trace(path: &Path, kernels: u32, windows: u32) -> u64 {
    use trace_format::record::{self, api, source, ShapeCount};
    let mut out = Vec::new();
    record::header(
        &mut out,
        &record::Header {
            pid: 4242,
            ppid: 1,
            exe: b"/opt/llama/llama-server",
            cmdline: b"llama-server\0",
            start_ns: 0,
            interval_ms: 50,
            shape_buckets: 8,
            max_kernels: 1 << 20,
            max_bytes: 1 << 30,
            observer: "0.1.0",
            writer: "backscope-observer",
            max_sequences: 0,
            segment: None,
        },
    );
    let names: Vec<String> = (0..kernels).map(|i| format!("_Z6kernelILi{i}EEvPf")).collect();
    for (i, name) in names.iter().enumerate() {
        record::kernel(&mut out, &record::KernelDef::new(i as u32 + 1, name.as_bytes(), api::HIP, source::REGISTER));
    }
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    std::io::Write::write_all(&mut file, &out).unwrap();
    let mut total = 0u64;
    for w in 0..windows {
        let ids: Vec<u32> = (0..100).map(|j| (w * 7 + j * 13) % kernels + 1).collect();
        let counts: Vec<(u32, u64)> = ids.iter().map(|&id| (id, u64::from(id % 5) + 2)).collect();
        let shapes: Vec<ShapeCount> = counts
            .iter()
            .flat_map(|&(kernel, n)| {
                let one = ShapeCount { kernel, grid: [kernel, 1, 1], block: [64, 1, 1], count: 1 };
                [one, ShapeCount { grid: [kernel, 2, 1], count: n - 1, ..one }]
            })
            .collect();
        total += counts.iter().map(|&(_, n)| n).sum::<u64>();
        let t0 = u64::from(w) * 50_000_000;
        out.clear();
        record::window(
            &mut out,
            &record::Window { t0, t1: t0 + 50_000_000, counts: &counts, shapes: &shapes, ..Default::default() },
        );
        std::io::Write::write_all(&mut file, &out).unwrap();
    }
    out.clear();
    record::end(&mut out, u64::from(windows) * 50_000_000);
    std::io::Write::write_all(&mut file, &out).unwrap();
    std::io::Write::flush(&mut file).unwrap();
    total
}

/// Issue 21: `trace --read` held every window (≈3.6× the file: 507 MB → 1.8 GB). Read streaming and folded, a
/// trace of tens of MB costs a small fraction of its size above what the same kernel table costs in a trace of
/// one window, and the totals are those written.
#[test]
fn trace_read_memory_follows_the_kernel_table_not_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let read = |dir: &Path| {
        bounded::run(
            &["trace", "--json", "--top", "0", "--read", dir.to_str().unwrap()],
            Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(60), ..Default::default() },
        )
    };
    let (one, dir) = (tmp.path().join("one-window"), tmp.path().join("traces"));
    std::fs::create_dir(&one).unwrap();
    std::fs::create_dir(&dir).unwrap();
    big_trace(&one.join("trace-4242.jsonl"), 2000, 1);
    let floor = read(&one);
    floor.assert_bounded(&[0], 60, GIB);
    let path = dir.join("trace-4242.jsonl");
    let total = big_trace(&path, 2000, 7_000);
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size > 40 * MIB, "{size}");
    let done = read(&dir);
    eprintln!("trace --read of {} MiB: {} (one window: {} MiB)", size / MIB, done.describe(), floor.peak_rss / MIB);
    // Before: ≈3.6× the file (120 MiB here). Now: the one-window cost plus an eighth of the file at most.
    done.assert_bounded(&[0], 60, floor.peak_rss + size / 8);
    let summary: serde_json::Value = serde_json::from_str(done.stdout.trim()).unwrap();
    let kernels = summary["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 2000);
    assert_eq!(kernels.iter().map(|k| k["launches"].as_u64().unwrap()).sum::<u64>(), total);
    assert_eq!(summary["processes"][0]["launches"].as_u64(), Some(total));
    assert_eq!(summary["processes"][0]["complete"], true);
}

// ---- frictions ----

/// Issue 21: `predict --run` demanded `--model` although each record names its model. Without it, each record's
/// model is read: a GGUF path (here relative to the working directory, as the sweep was given it), else an Ollama
/// name through Ollama's manifest and blob layout; a model found neither way is named in the error.
#[test]
fn predict_run_takes_each_records_model() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = crate::predict::cli::mmvq_program(tmp.path());
    let (status, events, stderr, db) =
        crate::sweep::trace::traced_stand_in_sweep(tmp.path(), &exe, &observer_library(), 1);
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    let recs = crate::support::sweep::records(&events);
    let run_id = recs[0]["run_id"].as_str().unwrap().to_string();
    assert!(recs.iter().all(|r| r["model"] == "stand-in"));
    let predict = |cwd: &Path, ollama: &Path| {
        let mut cmd = backscope();
        cmd.current_dir(cwd).env("OLLAMA_MODELS", ollama);
        cmd.args(["predict", "--json", "--arch", "gfx900", "--run", &run_id, "--db", db.to_str().unwrap()]);
        run(&mut cmd)
    };
    let (with_file, elsewhere, ollama) =
        (tmp.path().join("cwd"), tmp.path().join("elsewhere"), tmp.path().join("ollama"));
    for d in [&with_file, &elsewhere, &ollama] {
        std::fs::create_dir(d).unwrap();
    }
    // Four Q4_K matrices of 256-element rows.
    let gguf = with_file.join("stand-in");
    many_tensor_gguf(&gguf, 4, gguf::GgmlType::Q4_K, |_| [256, 0]);

    let out = predict(&with_file, &ollama);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), recs.len());
    for cell in cells {
        assert_eq!(cell["report"]["model"]["source"], "stand-in");
        assert_eq!(cell["report"]["model"]["weights_per_type"]["Q4_K"], 4);
    }

    let out = predict(&elsewhere, &ollama);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("model stand-in is neither a GGUF file here nor an Ollama model in"), "{stderr}");

    // The same name as an Ollama model: manifests/registry.ollama.ai/library/stand-in/latest names the blob.
    let hex = "ab".repeat(32);
    let manifest = ollama.join("manifests/registry.ollama.ai/library/stand-in");
    std::fs::create_dir_all(&manifest).unwrap();
    let layer =
        serde_json::json!({"mediaType": "application/vnd.ollama.image.model", "digest": format!("sha256:{hex}")});
    std::fs::write(manifest.join("latest"), serde_json::json!({"schemaVersion": 2, "layers": [layer]}).to_string())
        .unwrap();
    std::fs::create_dir(ollama.join("blobs")).unwrap();
    std::fs::copy(&gguf, ollama.join(format!("blobs/sha256-{hex}"))).unwrap();
    let out = predict(&elsewhere, &ollama);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["cells"][0]["report"]["model"]["weights_per_type"]["Q4_K"], 4);

    // Without --run there is nothing to take the model from.
    let out = run(backscope().args(["predict", "--arch", "gfx900", "--prompt-tokens", "5"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--model M.gguf or --type T"));
}

/// Issue 21: `trace` on a Vulkan-only program refused to start without the CUDA/HIP observer library beside the
/// binary. A backscope with only the Vulkan layer (here: a hard link of the binary in a directory of its own, the
/// layer named by $BACKSCOPE_VKLAYER_SO) traces vulkaninfo's device and says that CUDA/HIP is not observed; with
/// neither it refuses, saying so.
#[test]
fn trace_starts_with_the_vulkan_layer_alone() {
    let alone = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let exe = alone.path().join("backscope");
    std::fs::hard_link(env!("CARGO_BIN_EXE_backscope"), &exe).unwrap();
    let layer = crate::support::util::vklayer_library();
    let traces = alone.path().join("traces");
    let mut cmd = Command::new(&exe);
    cmd.env_remove("BACKSCOPE_OBSERVER_SO").env("BACKSCOPE_VKLAYER_SO", &layer);
    cmd.args(["trace", "--json", "--dir"]).arg(&traces).args(["--", "vulkaninfo", "--summary"]);
    let out = run(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("CUDA/HIP launches are not observed: cannot find libbackscope_observer.so"), "{stderr}");
    // Issue 27: where it looked, all of it: the variable, beside the binary, deps/, and the prefix's lib/backscope.
    let looked = format!(
        "($BACKSCOPE_OBSERVER_SO is not set; looked in {0}, {0}/deps, {1}/lib/backscope, for the backscope at {0}/backscope)",
        alone.path().display(),
        alone.path().parent().unwrap().display()
    );
    assert!(stderr.contains(&looked), "{looked}\n{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = serde_json::from_str(text.trim_end().rsplit('\n').next().unwrap()).unwrap();
    assert!(!summary["devices"].as_array().unwrap().is_empty(), "the layer described vulkaninfo's device: {summary}");

    let mut cmd = Command::new(&exe);
    cmd.env_remove("BACKSCOPE_OBSERVER_SO").env_remove("BACKSCOPE_VKLAYER_SO");
    cmd.args(["trace", "--dir"]).arg(alone.path().join("none")).args(["--", "true"]);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing to observe with: neither the observer library"), "{stderr}");
}

/// Issue 27: an install under one prefix (the Debian package's /usr, or `cargo install`'s ~/.cargo plus the two
/// libraries copied to ~/.cargo/lib/backscope, as the README says) traces with no flag or variable: PREFIX/bin/backscope
/// finds both libraries in PREFIX/lib/backscope, and `trace --env` names them there.
#[test]
fn an_install_under_one_prefix_finds_its_libraries() {
    let prefix = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (bin, lib) = (prefix.path().join("bin"), prefix.path().join("lib/backscope"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    let exe = bin.join("backscope");
    std::fs::hard_link(env!("CARGO_BIN_EXE_backscope"), &exe).unwrap();
    std::fs::copy(crate::support::util::observer_library(), lib.join("libbackscope_observer.so")).unwrap();
    std::fs::copy(crate::support::util::vklayer_library(), lib.join("libbackscope_vklayer.so")).unwrap();
    let clean = |cmd: &mut Command| {
        cmd.env_remove("BACKSCOPE_OBSERVER_SO").env_remove("BACKSCOPE_VKLAYER_SO");
        cmd.env_remove("VK_ADD_LAYER_PATH").env_remove("VK_LAYER_PATH").env_remove("VK_INSTANCE_LAYERS");
    };
    let mut cmd = Command::new(&exe);
    clean(&mut cmd);
    cmd.args(["trace", "--json", "--dir"]).arg(prefix.path().join("traces")).args(["--", "vulkaninfo", "--summary"]);
    let out = run(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("not observed"), "both libraries were found: {stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = serde_json::from_str(text.trim_end().rsplit('\n').next().unwrap()).unwrap();
    assert!(!summary["devices"].as_array().unwrap().is_empty(), "the installed layer described the device: {summary}");

    let mut cmd = Command::new(&exe);
    clean(&mut cmd);
    cmd.args(["trace", "--env", "--dir"]).arg(prefix.path().join("service"));
    let out = run(&mut cmd);
    let text = String::from_utf8_lossy(&out.stdout);
    let lib = lib.canonicalize().unwrap();
    assert!(text.contains(&format!("export LD_PRELOAD={}/libbackscope_observer.so\n", lib.display())), "{text}");
    // VK_ADD_LAYER_PATH, or VK_LAYER_PATH where a package's layer is installed too (src/observe.rs, layer_env).
    assert!(text.contains(&format!("LAYER_PATH={}/vulkan\n", lib.display())), "{text}");
}

/// Issue 21: `maps` (and `scan`) called ggml's core `libggml.so` "ggml (vulkan)": it has `ggml_backend_vk_reg` in
/// its dynamic strings because it *imports* it (it registers the backends it was linked with). Only a defined
/// symbol is evidence of a backend; nm(1) is the independent judge of which of llama.cpp's Vulkan build's libraries
/// define one.
#[test]
fn only_a_library_that_defines_a_backends_reg_function_is_that_backend() {
    let bin = cache().join("llama.cpp").join(backscope::cache::LLAMA_VULKAN_BUILD).join("build/bin");
    let mut seen = 0;
    let cases = [
        ("libggml.so", "ggml", "ggml_backend_vk_reg"),
        ("libggml-vulkan.so", "vulkan", "ggml_backend_vk_reg"),
        ("libggml-cpu.so", "cpu", "ggml_backend_cpu_reg"),
    ];
    for (file, expected, reg) in cases {
        let path = bin.join(file);
        let nm = stdout_ok(Command::new("nm").arg("-D").arg("--defined-only").arg(&path));
        let defined_reg = nm.lines().any(|l| l.ends_with(&format!(" {reg}")));
        let scan = scan_json(&[], &[&path]);
        let backend = &scan["files"][0]["backend"];
        assert_eq!(backend["name"], expected, "{file}: {backend}");
        // Content evidence exactly where nm lists the backend's reg function as defined.
        assert_eq!(backend["content_evidence"].is_string(), defined_reg, "{file}: {backend}\n{nm}");
        seen += 1;
    }
    assert_eq!(seen, 3);
    let nm = stdout_ok(Command::new("nm").arg("-D").arg(bin.join("libggml.so")));
    assert!(nm.lines().any(|l| l.trim_start().starts_with("U ggml_backend_vk_reg")), "the core library imports it");
}
