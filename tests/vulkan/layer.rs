//! The Vulkan layer (`crates/vklayer`) under real programs on Mesa's lavapipe (a Vulkan device on the CPU) with the
//! llama.cpp 11434 Vulkan build: its dispatch counts against ggml-vulkan's own account of the same run
//! (`GGML_VK_PERF_LOGGER=1`, which times every graph node), its device record against what the driver and ggml say,
//! its SPIR-V hashes against the shaders `nm` finds in libggml-vulkan.so, and vulkaninfo with and without it.
//!
//! How the perf logger counts (ggml-vulkan.cpp, ggml_backend_vk_graph_compute and vk_perf_logger): one timestamp per
//! graph node (a fused group of nodes counts once, named `FUSION NODE`), so a node is one line entry however many
//! dispatches it issues. The node's op name is what `data/vulkan_pipelines.toml` gives each pipeline as `op`; the
//! dispatches a node issues besides its main pipeline (`helper = true`: split-k reductions, flash-attention
//! combines) are the differences, each explained by its rule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::sweep::*;
use crate::support::util::*;

/// The environment that enables the layer by hand (what `backscope trace` sets, without ggml's debug markers).
fn with_layer(cmd: &mut Command, trace_dir: &Path) {
    let manifest = backscope::observe::observers::manifest_dir(&vklayer_library()).unwrap();
    cmd.env("VK_ADD_LAYER_PATH", manifest)
        .env("VK_INSTANCE_LAYERS", "VK_LAYER_BACKSCOPE_dispatch")
        .env("BACKSCOPE_TRACE_DIR", trace_dir)
        .env_remove("GGML_VK_DEBUG_MARKERS");
}

/// GGML_VK_PERF_LOGGER's lines (`vk_perf_logger::print_timings`: `NAME: COUNT x AVG us = TOTAL us`, NAME being
/// `[FUSION ]NODE …`), summed over every block they print: entries per node op, and MUL_MAT_VEC entries per `m`.
fn perf_logger(text: &str) -> (BTreeMap<String, u64>, BTreeMap<u64, u64>) {
    let op_of = |token: &str| {
        let op = token.split('(').next().unwrap_or("");
        (!op.is_empty() && op.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .then(|| op.to_string())
    };
    let (mut ops, mut mmv_m) = (BTreeMap::new(), BTreeMap::new());
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(": ") else { continue };
        let Some(count) = rest.split_once(" x ").and_then(|(c, _)| c.parse::<u64>().ok()) else { continue };
        add_entry(&op_of, name, count, &mut ops, &mut mmv_m);
    }
    (ops, mmv_m)
}

fn add_entry(
    op_of: &dyn Fn(&str) -> Option<String>,
    name: &str,
    count: u64,
    ops: &mut BTreeMap<String, u64>,
    mmv_m: &mut BTreeMap<u64, u64>,
) {
    let tokens: Vec<&str> = name.split(' ').collect();
    let Some(first) = tokens.first().and_then(|t| op_of(t)) else { return };
    // A fused group is `FUSION NODE…`: the node is the second token when that is an op name too.
    let node = tokens.get(1).and_then(|t| op_of(t)).unwrap_or(first);
    if node == "MUL_MAT_VEC" {
        let m = name.split_whitespace().find_map(|t| t.strip_prefix("m=")?.parse::<u64>().ok()).expect("m=");
        *mmv_m.entry(m).or_default() += count;
    }
    *ops.entry(node).or_default() += count;
}

/// Dispatches per ggml op (the data file's `op` of each pipeline), main pipelines and helpers apart, from rows of
/// (pipeline name, dispatches).
fn by_op<'a>(rows: impl IntoIterator<Item = (&'a str, u64)>) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let (mut main, mut helpers) = (BTreeMap::new(), BTreeMap::new());
    for (name, n) in rows {
        let d = backscope::observe::vulkan::describe(name, None);
        let op = d.op.unwrap_or_else(|| panic!("data/vulkan_pipelines.toml gives {name} no op"));
        let into = if d.helper { &mut helpers } else { &mut main };
        *into.entry(op.to_string()).or_default() += n;
    }
    (main, helpers)
}

/// The helper dispatches must each belong to an op that ran, and no more often than that op's nodes (ggml issues at
/// most one such dispatch per node: ggml_vk_flash_attn's split-k reduce, ggml_vk_matmul's split-k reduce).
fn assert_helpers_explained(helpers: &BTreeMap<String, u64>, nodes: &BTreeMap<String, u64>) {
    for (op, n) in helpers {
        let ran = nodes.get(op).copied().unwrap_or(0);
        assert!(*n <= ran, "{n} helper dispatches of {op}, but only {ran} {op} nodes ran");
    }
}

#[test]
fn vulkaninfo_reports_the_same_devices_with_and_without_the_layer() {
    let dir = tempfile::tempdir().unwrap();
    let plain = stdout_ok(&mut Command::new("vulkaninfo"));
    let mut cmd = Command::new("vulkaninfo");
    with_layer(&mut cmd, dir.path());
    let layered = stdout_ok(&mut cmd);
    // The only difference allowed: the loader lists the layer among the available ones (its manifest is on
    // VK_ADD_LAYER_PATH). Properties, features, extensions, formats and queues must be the same.
    let mut kept = Vec::new();
    let mut skipping = false;
    for line in layered.lines() {
        if line.starts_with("VK_LAYER_BACKSCOPE_dispatch ") {
            skipping = true;
        } else if skipping && line.is_empty() {
            skipping = false;
            continue;
        }
        if !skipping {
            kept.push(line);
        }
    }
    let count = |text: &str| text.lines().find(|l| l.starts_with("Layers: count = ")).map(str::to_string);
    let plain_count = count(&plain).unwrap();
    let n: u32 = plain_count.trim_start_matches("Layers: count = ").parse().unwrap();
    assert_eq!(count(&layered), Some(format!("Layers: count = {}", n + 1)));
    let kept = kept.join("\n").replace(&format!("Layers: count = {}", n + 1), &plain_count);
    assert!(kept == plain.lines().collect::<Vec<_>>().join("\n"), "vulkaninfo differs beyond the layer list");
    assert!(plain.len() > 10_000, "vulkaninfo printed the whole device report");
    // vulkaninfo creates a device: the layer described it, with vulkaninfo's own values.
    let traces = backscope::trace::read_dir(dir.path()).unwrap();
    let device = &traces.traces[0].devices[&0];
    let value = |key: &str| {
        plain.lines().find_map(|l| l.trim().strip_prefix(key)?.trim().strip_prefix('=').map(|v| v.trim().to_string()))
    };
    assert_eq!(Some(device.name.clone()), value("deviceName"));
    assert_eq!(Some(device.driver.clone()), value("driverName"));
    assert_eq!(Some(device.driver_info.clone()), value("driverInfo"));
    assert_eq!(Some(device.subgroup_size.to_string()), value("subgroupSize"));
    assert_eq!(Some(device.subgroup_size_min.to_string()), value("minSubgroupSize"));
    let offered = |ext: &str| plain.lines().any(|l| l.trim_start().starts_with(&format!("{ext} ")));
    assert_eq!(device.integer_dot, offered("VK_KHR_shader_integer_dot_product"));
    assert_eq!(device.cooperative_matrix, offered("VK_KHR_cooperative_matrix"));
    // ggml's shader core count: shaderSMCount or activeComputeUnitCount as vulkaninfo prints them, else none (0).
    let expected = if offered("VK_NV_shader_sm_builtins") {
        (value("shaderSMCount"), "VK_NV_shader_sm_builtins")
    } else if offered("VK_AMD_shader_core_properties2") {
        (value("activeComputeUnitCount"), "VK_AMD_shader_core_properties2")
    } else {
        (Some("0".to_string()), "none")
    };
    assert_eq!(
        (device.shader_core_count.map(|c| c.to_string()), device.shader_core_count_from.as_deref()),
        (expected.0, Some(expected.1))
    );
}

/// `nm` (binutils) lists the shader arrays of libggml-vulkan.so with their sizes: binfmt's reading must find the same.
/// The arrays of pointers ggml-vulkan also names `*_data` (`arr_dmmv_*_data`, `add_data`: per-variant tables) hold
/// relocated pointers, so they live in writable-then-protected data (`nm` type `d`), not read-only data (`r`).
#[test]
fn embedded_shaders_are_the_arrays_nm_lists() {
    let lib = llama_bin().join("libggml-vulkan.so");
    let listing = stdout_ok(Command::new("nm").args(["-S", "--defined-only"]).arg(&lib));
    let mut sizes: BTreeMap<String, u64> = BTreeMap::new();
    let mut lens = std::collections::BTreeSet::new();
    for line in listing.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [_, size, kind, name] = f[..] {
            if let Some(base) = name.strip_suffix("_data").filter(|_| kind.eq_ignore_ascii_case("r")) {
                sizes.insert(base.to_string(), u64::from_str_radix(size, 16).unwrap());
            } else if let Some(base) = name.strip_suffix("_len") {
                lens.insert(base.to_string());
            }
        }
    }
    sizes.retain(|k, _| lens.contains(k));
    let bytes = std::fs::read(lib.canonicalize().unwrap()).unwrap();
    let shaders = binfmt::spirv::embedded_shaders(&bytes).unwrap();
    let found: BTreeMap<String, u64> = shaders.iter().map(|s| (s.name.to_string(), s.code.len() as u64)).collect();
    assert!(found.len() > 1000, "{}", found.len());
    assert_eq!(found, sizes);
    // Every matrix-multiply and attention shader of the library falls in a family of data/vulkan_pipelines.toml
    // (pipelines without a debug name are named after their shader).
    for name in
        found.keys().filter(|n| n.starts_with("matmul") || n.starts_with("mul_mat") || n.starts_with("flash_attn"))
    {
        let d = backscope::observe::vulkan::describe(name, Some(name));
        assert_ne!(d.family, backscope::observe::vulkan::OTHER, "{name}");
        assert!(d.op.is_some(), "{name}");
    }
}

#[test]
fn llama_bench_dispatches_equal_ggml_perf_logger_per_op_and_shape() {
    let _turn = heavy();
    let (bin, model) = (llama_bin(), tiny_model());
    let tmp = tempfile::tempdir().unwrap();
    let bench_args = |cmd: &mut Command| {
        cmd.arg(bin.join("llama-bench"))
            .args(["-m"])
            .arg(&model)
            .args(["-ngl", "99", "-p", "8", "-n", "2", "-r", "1"])
            .env("GGML_VK_VISIBLE_DEVICES", "0");
    };

    // 1. backscope trace, with ggml-vulkan's debug markers (pipeline names) and its perf logger.
    let dir = tmp.path().join("named");
    let mut cmd = backscope();
    cmd.args(["trace", "--json", "--vklayer"]).arg(vklayer_library()).arg("--dir").arg(&dir).arg("--");
    bench_args(&mut cmd);
    let out = run(cmd.env("GGML_VK_PERF_LOGGER", "1"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(stdout.trim_end().rsplit('\n').next().unwrap()).unwrap();

    let (nodes, mmv_m) = perf_logger(&stderr);
    assert!(nodes.get("MUL_MAT_VEC").is_some_and(|&n| n > 0), "no perf logger output: {stderr}");
    let traces = backscope::trace::read_dir(&dir).unwrap();
    assert!(traces.problems.is_empty(), "{:?}", traces.problems);
    let trace = &traces.traces[0];
    assert_eq!(trace.header.writer, "backscope-vklayer");
    let stats = trace.stats_by_name(backscope::trace::Range::All);
    for s in stats.values() {
        assert_eq!(s.api, "vulkan");
        assert!(!s.name.starts_with("spirv:"), "ggml names every pipeline with GGML_VK_DEBUG_MARKERS: {}", s.name);
        assert_eq!(s.other_shapes, 0, "{}: more workgroup counts than shape buckets", s.name);
    }
    let (main, helpers) = by_op(stats.values().filter(|s| s.launches > 0).map(|s| (s.name.as_str(), s.launches)));
    assert_eq!(main, nodes, "dispatches per op (main pipelines) against the perf logger's nodes per op");
    assert_helpers_explained(&helpers, &nodes);

    // Per shape: a MUL_MAT_VEC node with m output rows dispatches ceil(m / r) workgroups, r the rows each workgroup
    // computes; r is read off the largest node and must then hold for every node.
    let mut grid_x: BTreeMap<u64, u64> = BTreeMap::new();
    for s in stats.values().filter(|s| backscope::observe::vulkan::describe(&s.name, None).op == Some("MUL_MAT_VEC")) {
        for (shape, n) in &s.shapes {
            assert_eq!((shape.grid[1], shape.grid[2]), (1, 1), "{}: batch 1", s.name);
            *grid_x.entry(u64::from(shape.grid[0])).or_default() += n;
        }
    }
    let (&m_max, &x_max) = (mmv_m.keys().last().unwrap(), grid_x.keys().last().unwrap());
    let rows = m_max / x_max;
    assert_eq!(m_max % x_max, 0);
    let expected: BTreeMap<u64, u64> = mmv_m.iter().fold(BTreeMap::new(), |mut acc, (m, n)| {
        *acc.entry(m.div_ceil(rows)).or_default() += n;
        acc
    });
    assert_eq!(
        grid_x, expected,
        "MUL_MAT_VEC workgroups per node (rows per workgroup {rows}) against the perf logger's m"
    );

    // The summary: the same counts, families from the data file, the device ggml printed.
    let kernels = summary["kernels"].as_array().unwrap();
    let total: u64 = kernels.iter().map(|k| k["launches"].as_u64().unwrap()).sum();
    assert_eq!(total, main.values().chain(helpers.values()).sum::<u64>());
    let mmv = kernels.iter().find(|k| k["name"] == "mul_mat_vec_f16_f32_f32").expect("F16 mat-vec");
    assert_eq!((mmv["family"].as_str(), mmv["ggml_type"].as_str()), (Some("MMV"), Some("F16")));
    assert!(mmv["shaders"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s.as_str().unwrap().starts_with("mul_mat_vec_f16_f32_f32")));
    let ggml_device = stderr
        .lines()
        .find_map(|l| l.strip_prefix("ggml_vulkan: 0 = ")?.split(" (").next().map(str::to_string))
        .expect("ggml's device line");
    let device = &summary["devices"][0];
    assert!(device["name"].as_str().unwrap().starts_with(&ggml_device), "{device} vs {ggml_device}");
    let claims = summary["claims"].as_array().unwrap();
    let claim = |id: &str| claims.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("{id}: {claims:#?}"));
    assert_eq!(claim("trace.vulkan.device")["confidence"], "Confirmed");
    assert!(claim("trace.family.MMV")["statement"].as_str().unwrap().contains("mul_mat_vec_f16_f32_f32"));
    assert!(claim("trace.absent")["statement"].as_str().unwrap().contains("MMVQ"));

    // 2. The same run without debug markers: pipelines are known by their SPIR-V hash, which backscope matches
    //    against libggml-vulkan.so. Per shader, the dispatches equal the named run's (its pipelines' hashes say
    //    which shader each ran).
    let bare = tmp.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    let mut cmd = Command::new(bin.join("llama-bench"));
    cmd.arg("-m").arg(&model).args(["-ngl", "99", "-p", "8", "-n", "2", "-r", "1"]).env("GGML_VK_VISIBLE_DEVICES", "0");
    with_layer(&mut cmd, &bare);
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = stdout_ok(backscope().args(["trace", "--json", "--read"]).arg(&bare));
    let bare_summary: Value = serde_json::from_str(read.trim_end()).unwrap();
    let per_shader = |s: &Value| -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for k in s["kernels"].as_array().unwrap() {
            let shaders = k["shaders"].as_array().unwrap();
            assert_eq!(shaders.len(), 1, "{k}");
            *out.entry(shaders[0].as_str().unwrap().to_string()).or_default() += k["launches"].as_u64().unwrap();
        }
        out
    };
    let bare_rows = per_shader(&bare_summary);
    assert_eq!(bare_rows, per_shader(&summary));
    for k in bare_summary["kernels"].as_array().unwrap() {
        assert_eq!(k["name"], k["shaders"][0], "an unnamed pipeline is named after its shader");
        assert_ne!(k["family"], "other", "{k}");
    }
    let claims = bare_summary["claims"].as_array().unwrap();
    let shaders_claim = claims.iter().find(|c| c["id"] == "trace.vulkan.shaders").expect("hash naming claim");
    assert_eq!(shaders_claim["confidence"], "Inferred");
    assert!(shaders_claim["sources"][0]["path"].as_str().unwrap().contains("libggml-vulkan.so"));
}

#[test]
fn trace_env_prints_the_vulkan_layer_variables() {
    let layer = vklayer_library();
    let text = stdout_ok(
        backscope()
            .args(["trace", "--env", "--systemd", "ollama.service", "--dir", "/var/tmp/bt", "--observer"])
            .arg(observer_library())
            .arg("--vklayer")
            .arg(&layer),
    );
    let manifest_dir = layer.canonicalize().unwrap().parent().unwrap().join("vulkan");
    assert!(text.contains(&format!("Environment=\"VK_ADD_LAYER_PATH={}\"", manifest_dir.display())), "{text}");
    assert!(text.contains("Environment=\"VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch\""), "{text}");
    // A service left traced: no ggml debug labels unless asked for (they cost ggml string building per dispatch).
    assert!(!text.contains("GGML_VK_DEBUG_MARKERS=1"), "{text}");
    let labelled = stdout_ok(
        backscope()
            .args(["trace", "--env", "--labels", "on", "--dir", "/var/tmp/bt", "--observer"])
            .arg(observer_library())
            .arg("--vklayer")
            .arg(&layer),
    );
    assert!(labelled.contains("export GGML_VK_DEBUG_MARKERS=1"), "{labelled}");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(manifest_dir.join("VkLayer_backscope_dispatch.json")).unwrap()).unwrap();
    assert_eq!(manifest["layer"]["library_path"], layer.canonicalize().unwrap().display().to_string());
    let json: Value = serde_json::from_str(&stdout_ok(
        backscope()
            .args(["trace", "--env", "--json", "--vklayer"])
            .arg(&layer)
            .arg("--observer")
            .arg(observer_library()),
    ))
    .unwrap();
    assert_eq!(json["variables"]["VK_INSTANCE_LAYERS"], "VK_LAYER_BACKSCOPE_dispatch");
}

/// scripts/demo.sh's sweep (the CPU backend against the Vulkan backend on lavapipe, num_gpu 0, 1 and -1, a Q4_K_M
/// model) with `--trace` and ggml's perf logger in the Vulkan server: every Vulkan request carries the pipelines it
/// dispatched, per op equal to the perf logger lines of its own slice of the server log.
#[test]
fn the_demo_sweep_traces_vulkan_pipelines_per_request_as_the_perf_logger_counts_them() {
    let _turn = heavy();
    let (bin, model) = (llama_bin(), tiny_q4_k_m());
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("backscope.db"), dir.path().join("runs"));
    let (observer, layer) = (observer_library(), vklayer_library());
    let args = [
        "--server",
        "cpu=llama-server:--device,none",
        "--server",
        "vulkan=llama-server:--device,Vulkan0",
        "--env",
        "vulkan:GGML_VK_VISIBLE_DEVICES=0",
        "--env",
        "vulkan:GGML_VK_PERF_LOGGER=1",
        "--llama-bin",
        bin.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--num-gpu",
        "0,1,-1",
        "--num-predict",
        "8",
        "--repetitions",
        "2",
        "--read-timeout",
        "300",
        "--trace",
        "--observer",
        observer.to_str().unwrap(),
        "--vklayer",
        layer.to_str().unwrap(),
    ];
    let sweep = Sweep::start(&args, &db, &runs);
    let (status, events, stderr) = sweep.finish(Duration::from_secs(1200));
    assert_eq!(status.code(), Some(0), "stderr: {stderr}\nevents: {events:#?}");
    let recs = records(&events);
    assert_eq!(recs.len(), 12);
    let started = events.iter().find(|e| event_is(e, "run_started")).unwrap();
    let run_dir = PathBuf::from(started["run_dir"].as_str().unwrap());
    let mut offloaded_requests = 0;
    for r in &recs {
        assert_eq!(r["status"], "ok", "{r:#}");
        let t = &r["trace"];
        assert_eq!(t["vulkan_layer"], true, "{t:#}");
        let kernels = t["kernels"].as_array().unwrap();
        assert!(kernels.iter().all(|k| k["api"] == "vulkan"), "{t:#}");
        assert_eq!(kernels.len() as u64, t["distinct_kernels"].as_u64().unwrap(), "every kernel listed: {t:#}");
        let (endpoint, num_gpu) = (r["endpoint"].as_str().unwrap(), r["num_gpu"].as_i64().unwrap());
        if endpoint == "cpu" || num_gpu == 0 {
            assert_eq!(t["total_launches"], 0, "nothing runs on Vulkan: {t:#}");
        } else {
            assert!(t["families"]["MMV"].as_u64().unwrap() > 0, "{t:#}");
            offloaded_requests += 1;
        }
        // The request's own perf logger lines, in the cell's slice of the server log.
        let slice = std::fs::read_to_string(run_dir.join(r["log_slice"].as_str().unwrap())).unwrap();
        let (nodes, _) = perf_logger(&slice);
        let (main, helpers) =
            by_op(kernels.iter().map(|k| (k["name"].as_str().unwrap(), k["launches"].as_u64().unwrap())));
        if r["repetition"] == 1 {
            // A server start's first slice also holds its start-up (the warm-up decode runs before any request):
            // the request's dispatches are a part of what that slice's perf logger lines count.
            for (op, n) in &main {
                assert!(*n <= nodes.get(op).copied().unwrap_or(0), "{op}: {n} dispatches, perf logger {nodes:?}");
            }
        } else {
            assert_eq!(main, nodes, "{endpoint} num_gpu={num_gpu}: dispatches per op against the perf logger's nodes");
        }
        assert_helpers_explained(&helpers, &nodes);
    }
    assert_eq!(offloaded_requests, 4, "num_gpu 1 and -1, two requests each");
    // The report's table gains the families per request for the Vulkan cells.
    let run_id = recs[0]["run_id"].as_str().unwrap().to_string();
    let text = stdout_ok(backscope().env("COLUMNS", "400").args(["sweep", "report", &run_id, "--db"]).arg(&db));
    assert!(text.contains("kernels (per request)") && text.contains("MMV "), "{text}");
    // `backscope report`: each group's MMV per request is the median of its records' own counts, and a group
    // with nothing on Vulkan says that the layer saw no dispatch rather than that Vulkan is not observed.
    let report: serde_json::Value =
        serde_json::from_str(&stdout_ok(backscope().args(["report", "--json"]).arg(&db))).unwrap();
    for g in report["groups"].as_array().unwrap() {
        let (endpoint, num_gpu) = (g["endpoint"].as_str().unwrap(), g["num_gpu"].as_i64().unwrap());
        let mut mmv: Vec<u64> = recs
            .iter()
            .filter(|r| r["endpoint"] == endpoint && r["num_gpu"] == num_gpu)
            .map(|r| r["trace"]["families"]["MMV"].as_u64().unwrap_or(0))
            .collect();
        mmv.sort_unstable();
        let k = &g["kernels"];
        assert_eq!((k["traced"].as_u64(), k["vulkan_layer"].as_u64()), (Some(2), Some(2)), "{g:#}");
        // Two requests per group: the median is their mean.
        let want = (mmv[0] + mmv[1]) as f64 / 2.0;
        assert_eq!(k["families"]["MMV"].as_f64().unwrap_or(0.0), want, "{endpoint} num_gpu={num_gpu}: {g:#}");
    }
    let silent: Vec<&str> = report["claims"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().unwrap().ends_with(".kernels"))
        .map(|c| c["statement"].as_str().unwrap())
        .filter(|s| s.contains("0 launches in all"))
        .collect();
    assert_eq!(silent.len(), 4, "cpu at 0, 1, -1 and vulkan at 0: {silent:#?}");
    assert!(silent
        .iter()
        .all(|s| s.contains("no Vulkan dispatch") && !s.contains("Vulkan and CPU work are not observed")));
}

/// A real llama-server answers a greedy completion with the same text with and without the layer (and ggml's debug
/// markers, which backscope sets): the layer forwards every call unchanged.
#[test]
fn llama_server_generates_the_same_text_with_and_without_the_layer() {
    let _turn = heavy();
    let (bin, model) = (llama_bin(), tiny_model());
    let traces = tempfile::tempdir().unwrap();
    let complete = |layer: bool| -> (String, Value) {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut cmd = Command::new(bin.join("llama-server"));
        cmd.arg("-m").arg(&model).args(["--host", "127.0.0.1", "--port", &port.to_string()]);
        cmd.args(["--device", "Vulkan0", "-ngl", "99"]).env("GGML_VK_VISIBLE_DEVICES", "0");
        cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        if layer {
            with_layer(&mut cmd, traces.path());
            cmd.env("GGML_VK_DEBUG_MARKERS", "1");
        }
        let _server = KillOnDrop(cmd.spawn().expect("start llama-server"));
        let started = std::time::Instant::now();
        while !ureq::get(&format!("http://127.0.0.1:{port}/health")).call().is_ok_and(|r| r.status() == 200) {
            assert!(started.elapsed() < Duration::from_secs(180), "llama-server did not become ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        let body = serde_json::json!({"prompt": "Once upon a time", "n_predict": 12, "temperature": 0, "seed": 7,
                                      "cache_prompt": false});
        let mut response =
            ureq::post(&format!("http://127.0.0.1:{port}/completion")).send_json(&body).expect("completion");
        let v: Value = response.body_mut().read_json().unwrap();
        (v["content"].as_str().unwrap().to_string(), v["tokens_predicted"].clone())
    };
    let plain = complete(false);
    let layered = complete(true);
    assert_eq!(plain.1, 12);
    assert_eq!(layered, plain, "the layer changed what the server generated");
    // The layer did observe the server: a trace with dispatches.
    let read = backscope::trace::read_dir(traces.path()).unwrap();
    assert!(read.traces.iter().any(|t| t.total_launches(backscope::trace::Range::All) > 0));
}
