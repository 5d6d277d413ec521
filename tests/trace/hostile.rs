//! `trace --read` (and `predict --trace` on the same traces) on hostile traces: memory follows the kernel table,
//! not the file; every file a trace names (a pipeline's shader library) is read within bounds, and devices, FIFOs
//! and directories are named without being read; a directory of thousands of trace files is read up to its bound;
//! FIFOs and `/dev/zero` in place of trace files are named and left out. The traces are written here by hand (the
//! trace format's own writers, crates/trace) and every command runs under the bounded runner
//! (tests/support/bounded.rs): an address-space cap, a deadline, its peak RSS measured.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::support::bounded::{self, Bounds, Done, GIB, MIB};
use crate::support::util::{claim, mkfifo};

/// What the commands here get: 4 GiB of address space (a whole-file read of /dev/zero grew past 23 GB before) and a
/// minute.
fn bounds() -> Bounds {
    Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(60), ..Default::default() }
}

/// A sparse file of `len` bytes (no block written).
fn sparse(path: &Path, len: u64) {
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

/// The header of a trace of `/opt/llama/llama-server` as process `pid`, written by `writer`: 50 ms windows, no
/// rotation, no order record.
fn llama_server_header(pid: u32, writer: &str) -> trace_format::record::Header<'_> {
    trace_format::record::Header {
        pid,
        ppid: 1,
        exe: b"/opt/llama/llama-server",
        cmdline: b"llama-server\0",
        start_ns: 0,
        interval_ms: 50,
        shape_buckets: 8,
        max_kernels: 1 << 20,
        max_bytes: 1 << 30,
        observer: "0.1.0",
        writer,
        max_sequences: 0,
        segment: None,
    }
}

/// Writes `dir/trace-PID.jsonl` as the Vulkan layer does: a header, one device (an NVIDIA discrete GPU), one
/// unnamed pipeline per library in `libraries`, its SPIR-V from that library (`spirv_object`), each dispatched
/// three times in one window, and the end record.
fn vk_trace(dir: &Path, pid: u32, libraries: &[PathBuf]) {
    use trace_format::record::{self, api, source, ShapeCount};
    std::fs::create_dir_all(dir).unwrap();
    let mut out = Vec::new();
    record::header(&mut out, &llama_server_header(pid, "backscope-vklayer"));
    record::device(
        &mut out,
        &record::Device {
            id: 1,
            api: api::VULKAN,
            name: b"NVIDIA H100 80GB HBM3",
            driver: b"NVIDIA",
            driver_info: b"570.124.06",
            driver_version: 0,
            api_version: [1, 4, 303],
            vendor_id: 0x10de,
            device_id: 0x2330,
            device_type: "discrete",
            subgroup_size: 32,
            subgroup_size_min: 32,
            subgroup_size_max: 32,
            integer_dot: true,
            cooperative_matrix: true,
            shader_core_count: Some((132, "VK_NV_shader_sm_builtins")),
            flags: &[("subgroup_arithmetic", true), ("fp16", true)],
            impersonated: None,
        },
    );
    let names: Vec<String> = (0..libraries.len()).map(|i| format!("spirv:{:016x}", 0xabc0 + i)).collect();
    for (i, lib) in libraries.iter().enumerate() {
        let hash = &names[i]["spirv:".len()..];
        record::kernel(
            &mut out,
            &record::KernelDef {
                device: Some(1),
                spirv_hash: Some(hash),
                local_size: Some([64, 1, 1]),
                spirv_object: Some(lib.as_os_str().as_encoded_bytes()),
                ..record::KernelDef::new(i as u32 + 1, names[i].as_bytes(), api::VULKAN, source::SPIRV_HASH)
            },
        );
    }
    let counts: Vec<(u32, u64)> = (1..=libraries.len() as u32).map(|id| (id, 3)).collect();
    let shapes: Vec<ShapeCount> = counts
        .iter()
        .map(|&(kernel, count)| ShapeCount { kernel, grid: [8, 1, 1], block: [64, 1, 1], count })
        .collect();
    record::window(
        &mut out,
        &record::Window { t0: 0, t1: 50_000_000, counts: &counts, shapes: &shapes, ..Default::default() },
    );
    record::end(&mut out, 50_000_000);
    std::fs::write(dir.join(format!("trace-{pid}.jsonl")), out).unwrap();
}

/// The source texts of a claim, one string each (path and what it says).
fn sources(c: &Value) -> Vec<String> {
    c["sources"].as_array().unwrap().iter().map(Value::to_string).collect()
}

/// A pipeline's `spirv_object` was once read whole after a size check that devices and FIFOs pass: /dev/zero
/// grew past 23 GB, a FIFO hung `trace --read`. Now each is refused without being opened for reading (a FIFO
/// without blocking), a directory too, and a sparse 1 GiB file is mapped (the decoder reads its header, not the
/// GiB); `trace --read` finishes at once in little memory, exits 0 (the traces themselves were read), and a Limited
/// claim names each library with why.
#[test]
fn trace_read_refuses_devices_fifos_and_directories_a_pipeline_names() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("libggml-vulkan-fifo.so");
    mkfifo(&fifo);
    let sparse_lib = tmp.path().join("libggml-vulkan-sparse.so");
    sparse(&sparse_lib, GIB);
    let directory = tmp.path().join("libdir.so");
    std::fs::create_dir(&directory).unwrap();
    let libraries = [PathBuf::from("/dev/zero"), fifo.clone(), directory.clone(), sparse_lib.clone()];
    let traces = tmp.path().join("traces");
    vk_trace(&traces, 4242, &libraries);

    let done = bounded::run(&["trace", "--json", "--read", traces.to_str().unwrap()], bounds());
    done.assert_bounded(&[0], 30, 256 * MIB);
    let summary = done.json();
    assert_eq!(summary["kernels"].as_array().unwrap().len(), 4, "the trace itself is summarised");
    let skipped = claim(&summary, "trace.vulkan.libraries_skipped");
    assert_eq!(skipped["confidence"], "Limited", "{skipped}");
    let statement = skipped["statement"].as_str().unwrap();
    assert!(statement.starts_with("4 of the 4 shader libraries"), "{statement}");
    for (path, why) in [
        ("/dev/zero".to_string(), "is a character device, not a regular file"),
        (fifo.display().to_string(), "is a FIFO, not a regular file"),
        (directory.display().to_string(), "is a directory, not a regular file"),
        // Mapped and decoded: all zeros is no ELF file.
        (sparse_lib.display().to_string(), "ELF"),
    ] {
        let shown = sources(skipped);
        assert!(shown.iter().any(|s| s.contains(&path) && s.contains(why)), "{path}: {why}: {shown:#?}");
    }
}

/// Twelve sparse 1 GiB "libraries" once cost 1 GB of RSS and 28 s. The command's read budget (2 GiB of
/// record- and trace-named files) is spent after two of them; the other ten are named as not read, with the
/// budget as the reason. `predict --trace` on the same traces goes on with the assumed build and names the library
/// it could not read.
#[test]
fn twelve_sparse_gib_libraries_spend_the_read_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let libraries: Vec<PathBuf> = (0..12).map(|i| tmp.path().join(format!("lib{i:02}.so"))).collect();
    for l in &libraries {
        sparse(l, GIB);
    }
    let traces = tmp.path().join("traces");
    vk_trace(&traces, 4243, &libraries);
    let done = bounded::run(&["trace", "--json", "--read", traces.to_str().unwrap()], bounds());
    done.assert_bounded(&[0], 20, 256 * MIB);
    let summary = done.json();
    let unnamed = claim(&summary, "trace.vulkan.unnamed");
    let shown = sources(unnamed);
    assert_eq!(shown.len(), 12, "every library is listed: {shown:#?}");
    let over_budget = shown.iter().filter(|s| s.contains("budget")).count();
    // 2 GiB: the first two are read (and are no ELF file), the rest are not.
    assert_eq!(over_budget, 10, "{shown:#?}");
    for (i, l) in libraries.iter().enumerate() {
        let s = shown.iter().find(|s| s.contains(&format!("{}\"", l.display()))).unwrap();
        assert_eq!(s.contains("budget"), i >= 2, "{s}");
    }
    let skipped = claim(&summary, "trace.vulkan.libraries_skipped");
    assert!(skipped["statement"].as_str().unwrap().contains("12 of the 12"), "{skipped}");

    let done = predict_vulkan_trace(&traces);
    done.assert_bounded(&[0], 30, 256 * MIB);
    let report = done.json();
    let assumptions = report["assumptions"].to_string();
    let first = libraries[0].display().to_string();
    assert!(
        assumptions.contains(&format!("the libggml-vulkan the trace names ({first}) was not read")),
        "{assumptions}"
    );
}

/// `predict --backend vulkan` of one F16 weight at 8 tokens with the device and the observation from the trace
/// directory `traces`, under the bounded runner.
fn predict_vulkan_trace(traces: &Path) -> Done {
    let dir = traces.to_str().unwrap();
    let args = [
        "predict",
        "--json",
        "--backend",
        "vulkan",
        "--device",
        dir,
        "--trace",
        dir,
        "--type",
        "f16",
        "--prompt-tokens",
        "8",
    ];
    bounded::run(&args, bounds())
}

/// `predict --trace` with a trace whose library is `/dev/zero`: the device comes from the trace, the build is
/// assumed, and the note names the device file and what it is.
#[test]
fn predict_trace_names_a_library_that_is_a_device() {
    let tmp = tempfile::tempdir().unwrap();
    let traces = tmp.path().join("traces");
    vk_trace(&traces, 4244, &[PathBuf::from("/dev/zero")]);
    let done = predict_vulkan_trace(&traces);
    done.assert_bounded(&[0], 30, 256 * MIB);
    let report = done.json();
    let assumptions = report["assumptions"].to_string();
    assert!(
        assumptions.contains("(/dev/zero) was not read") && assumptions.contains("character device"),
        "{assumptions}"
    );
    // The observed pipelines say why they keep their hash names.
    let notes = report["comparison"]["observed"]["notes"].to_string();
    assert!(
        notes.contains("1 of the 1 shader libraries the traces name were not read") && notes.contains("/dev/zero"),
        "{report:#}"
    );
}

/// 100,000 trace files once took 727 MB. One directory's reading stops at 4096 trace files (one per
/// traced process) and says how many more there were; memory follows what was read.
#[test]
fn a_directory_of_thousands_of_trace_files_is_read_up_to_its_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let traces = tmp.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    let files = 5000;
    for pid in 0..files {
        vk_trace(&traces, 100_000 + pid, &[]);
    }
    let done = bounded::run(&["trace", "--json", "--top", "0", "--read", traces.to_str().unwrap()], bounds());
    // Exit 1: a problem (the files left out) is listed.
    done.assert_bounded(&[1], 60, 256 * MIB);
    let summary = done.json();
    assert_eq!(summary["processes"].as_array().unwrap().len(), 4096);
    let problems = summary["problems"].to_string();
    assert!(problems.contains(&format!("{} more trace files not read", files - 4096)), "{problems}");
}

/// Writes a trace of `kernels` HIP kernels and `windows` windows, each launching 100 of them (two shapes each),
/// with the format's own writers (crates/trace). Returns the total launches written.
fn big_trace(path: &Path, kernels: u32, windows: u32) -> u64 {
    use trace_format::record::{self, api, source, ShapeCount};
    let mut out = Vec::new();
    record::header(&mut out, &llama_server_header(4242, "backscope-observer"));
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

/// `trace --read` once held every window (≈3.6× the file: 507 MB → 1.8 GB). Read streaming and folded, a
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
