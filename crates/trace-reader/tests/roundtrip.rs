//! Every record kind written by `backscope-trace`'s writers (what the observers call) and read back
//! by this crate: the two halves of the format must agree on every name. Also the streaming reader
//! against whole-file parsing, and crash records with the summary built on them.

use format::json::FixedBuf;
use format::record::{self, api, source, CrashLaunch, CrashThread, PipelineStat, ShapeCount};
use trace_reader::{Aggregate, Range, Reader, Shape, TraceFile};

fn header(pid: u32) -> Vec<u8> {
    let mut out = Vec::new();
    record::header(
        &mut out,
        &record::Header {
            pid,
            ppid: 1,
            exe: b"/opt/llama/llama-server",
            cmdline: b"llama-server\0-m\0model.gguf\0",
            start_ns: 1_000,
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
    out
}

/// A CUDA process: two kernels, two windows, a crash whose thread launched both, and no end record.
fn crashed_cuda_trace() -> Vec<u8> {
    let mut out = header(42);
    record::kernel(&mut out, &record::KernelDef::new(1, b"_Z7add_onePfi", api::HIP, source::REGISTER));
    record::kernel(
        &mut out,
        &record::KernelDef::new(2, b"Cijk_Ailk_Bljk_SB_MT64x64x8", api::HIP_MODULE, source::GET_FUNCTION),
    );
    record::window(
        &mut out,
        &record::Window {
            t0: 1_000,
            t1: 2_000,
            counts: &[(1, 3)],
            errors: &[(1, 3)],
            shapes: &[ShapeCount { kernel: 1, grid: [1, 1, 1], block: [64, 1, 1], count: 3 }],
            ..Default::default()
        },
    );
    record::warning_record(&mut out, record::warning::STALE_CAPTURE, "detail \"quoted\"");
    record::window(
        &mut out,
        &record::Window {
            t0: 2_000,
            t1: 2_500,
            counts: &[(1, 1), (2, 1)],
            errors: &[(1, 1)],
            shapes: &[
                ShapeCount { kernel: 1, grid: [1, 1, 1], block: [64, 1, 1], count: 1 },
                ShapeCount { kernel: 2, grid: [4, 4, 1], block: [256, 1, 1], count: 1 },
            ],
            expired_captures: 2,
            ..Default::default()
        },
    );
    let add_one = CrashLaunch { kernel: 1, window_t0: 1_000, grid: [1, 1, 1], block: [64, 1, 1], failed: true };
    let launches = [
        add_one,
        add_one,
        add_one,
        CrashLaunch { window_t0: 2_000, ..add_one },
        CrashLaunch { kernel: 2, window_t0: 2_000, grid: [4, 4, 1], block: [256, 1, 1], failed: false },
    ];
    let threads = [
        CrashThread { tid: 43, in_flight: Some("hipModuleLaunchKernel"), launches: &launches },
        CrashThread { tid: 42, in_flight: None, launches: &[] },
    ];
    // The crash path writes from a signal handler, into a fixed buffer.
    let mut fixed = FixedBuf::<4096>::new();
    record::crash(
        &mut fixed,
        &record::Crash {
            seq: 1,
            signal: 11,
            code: 1,
            addr: 0xdead_0000,
            sender_pid: None,
            at_ns: 2_600,
            tid: 43,
            flushed: true,
            threads: &threads,
        },
    );
    assert!(!fixed.overflowed());
    out.extend_from_slice(fixed.as_bytes());
    out
}

#[test]
fn every_record_written_by_the_format_crate_reads_back() {
    let text = String::from_utf8(crashed_cuda_trace()).unwrap();
    let trace = TraceFile::parse(&text).unwrap();
    let h = &trace.header;
    assert_eq!((h.format.as_str(), h.version, h.pid, h.ppid), ("backscope-trace", 3, 42, 1));
    assert_eq!(h.cmdline, ["llama-server", "-m", "model.gguf"]);
    assert_eq!((h.clock.as_str(), h.start_ns, h.interval_ms, h.max_bytes), ("monotonic", 1_000, 50, 1 << 30));
    assert_eq!(h.writer, "backscope-observer");
    assert_eq!(trace.kernels[&2].api, "hip_module");
    assert_eq!(trace.kernels[&2].source, "get_function");
    assert_eq!(trace.windows[1].expired_captures, 2);
    assert_eq!(trace.warnings[0].detail, "detail \"quoted\"");
    assert_eq!(trace.total_launches(Range::All), 5);
    let crash = &trace.crashes[0];
    assert_eq!((crash.signal, crash.signal_name.as_str(), crash.code, crash.addr), (11, "SIGSEGV", 1, 0xdead_0000));
    assert_eq!((crash.tid, crash.seq, crash.flushed, crash.returned), (43, 1, true, false));
    assert_eq!(crash.threads[0].in_flight.as_deref(), Some("hipModuleLaunchKernel"));
    assert_eq!(crash.threads[0].launches[4].shape, Shape { grid: [4, 4, 1], block: [256, 1, 1] });
    assert!(crash.threads[0].launches[0].failed && !crash.threads[0].launches[4].failed);
    assert!(!crash.sent_by_process());
    assert_eq!(trace.fatal_crash().map(|c| c.seq), Some(1), "no end record after it: the process died of it");
}

#[test]
fn the_end_and_truncated_records_and_vulkan_records_read_back() {
    let mut out = header(7);
    record::device(
        &mut out,
        &record::Device {
            id: 0,
            api: api::VULKAN,
            name: b"AMD Radeon Pro WX 9100 (RADV VEGA10)",
            driver: b"radv",
            driver_info: b"Mesa 24.0.5",
            driver_version: 0x1800005,
            api_version: [1, 3, 278],
            vendor_id: 0x1002,
            device_id: 0x6868,
            device_type: "discrete",
            subgroup_size: 64,
            subgroup_size_min: 32,
            subgroup_size_max: 64,
            integer_dot: false,
            cooperative_matrix: false,
            shader_core_count: Some((64, "VK_AMD_shader_core_properties2")),
            flags: &[("subgroup_arithmetic", false), ("fp16", true)],
            impersonated: Some(record::Impersonated {
                profile: b"gfx900-radv",
                profile_source: b"written by hand",
                real_name: b"llvmpipe (LLVM 15.0.6, 256 bits)",
                real_driver: b"llvmpipe",
            }),
        },
    );
    let stats = [
        PipelineStat { executable: "Compute Shader", name: "SGPRs", value: 48.0 },
        PipelineStat { executable: "Compute Shader", name: "Spilled VGPRs", value: 0.0 },
    ];
    record::kernel(
        &mut out,
        &record::KernelDef {
            id: 1,
            name: b"mul_mat_vec_q4_k_f32_f32",
            api: api::VULKAN,
            source: source::DEBUG_NAME,
            device: Some(0),
            spirv_hash: Some("9f2c01aa"),
            local_size: Some([64, 1, 1]),
            spirv_object: Some(b"/opt/llama/libggml-vulkan.so"),
            stats: &stats,
        },
    );
    record::window(
        &mut out,
        &record::Window {
            t0: 1_000,
            t1: 1_050,
            counts: &[(1, 22)],
            shapes: &[ShapeCount { kernel: 1, grid: [4096, 1, 1], block: [64, 1, 1], count: 22 }],
            submits: 2,
            ..Default::default()
        },
    );
    record::end(&mut out, 1_100);
    let trace = TraceFile::parse(std::str::from_utf8(&out).unwrap()).unwrap();
    let d = &trace.devices[&0];
    let imp = d.impersonated.as_ref().expect("the impersonation reads back");
    assert_eq!((imp.profile.as_str(), imp.real_driver.as_str()), ("gfx900-radv", "llvmpipe"));
    assert_eq!(imp.real_name, "llvmpipe (LLVM 15.0.6, 256 bits)");
    assert_eq!((d.api.as_str(), d.driver.as_str(), d.vendor_id, d.subgroup_size_min), ("vulkan", "radv", 0x1002, 32));
    assert_eq!((d.api_version, d.integer_dot, d.flags["fp16"]), ([1, 3, 278], false, true));
    assert_eq!(
        (d.shader_core_count, d.shader_core_count_from.as_deref()),
        (Some(64), Some("VK_AMD_shader_core_properties2"))
    );
    let k = &trace.kernels[&1];
    assert_eq!((k.device, k.spirv_hash.as_deref(), k.local_size), (Some(0), Some("9f2c01aa"), Some([64, 1, 1])));
    assert_eq!(k.spirv_object.as_deref(), Some("/opt/llama/libggml-vulkan.so"));
    assert_eq!(k.stats[0].name, "SGPRs");
    assert_eq!(k.stats[0].value, 48.0);
    assert_eq!(trace.windows[0].submits, 2);
    assert!(trace.is_complete() && trace.fatal_crash().is_none());

    let mut cut = header(8);
    record::truncated_write_error(&mut cut, 5, 900, "No space left on device (os error 28)");
    let trace = TraceFile::parse(std::str::from_utf8(&cut).unwrap()).unwrap();
    assert_eq!(trace.truncated.unwrap().why(), "writing failed (No space left on device (os error 28))");

    // A pipeline naming a device that was never described is a broken trace.
    let mut orphan = header(9);
    record::kernel(
        &mut orphan,
        &record::KernelDef { device: Some(3), ..record::KernelDef::new(1, b"p", api::VULKAN, source::SPIRV_HASH) },
    );
    let error = TraceFile::parse(std::str::from_utf8(&orphan).unwrap()).unwrap_err();
    assert_eq!(error.line, Some(2));
    assert!(error.message.contains("device 3"), "{error}");
}

#[test]
fn feeding_lines_one_at_a_time_reads_what_parsing_the_file_reads() {
    let text = String::from_utf8(crashed_cuda_trace()).unwrap();
    let whole = TraceFile::parse(&text).unwrap();
    let mut reader = Reader::new(None);
    assert!(reader.trace().is_none());
    for line in text.lines() {
        reader.feed(line).unwrap();
        assert!(reader.trace().is_some(), "the header is the first line");
    }
    assert_eq!(reader.finish().unwrap(), whole);

    // A bad line is an error naming its number, and leaves the reader as it was: a growing file's
    // half-written last line can be fed again once it is whole.
    let mut reader = Reader::new(Some(std::path::Path::new("/t/trace-42.jsonl")));
    let lines: Vec<&str> = text.lines().collect();
    for line in &lines[..4] {
        reader.feed(line).unwrap();
    }
    let before = reader.trace().unwrap().clone();
    let error = reader.feed(&lines[4][..20]).unwrap_err();
    assert_eq!(error.line, Some(5));
    assert!(error.to_string().starts_with("/t/trace-42.jsonl:5: not JSON"), "{error}");
    assert_eq!(reader.trace().unwrap(), &before);
    // A crash naming a kernel the file never defined is corruption.
    let mut reader = Reader::new(None);
    reader.feed(lines[0]).unwrap();
    let error = reader.feed(lines.last().unwrap()).unwrap_err();
    assert!(error.message.contains("kernel 1 is used before its definition"), "{error}");
}

#[test]
fn a_returned_signal_or_an_exit_flush_makes_a_crash_not_fatal() {
    let mut text = crashed_cuda_trace();
    record::signal_returned(&mut text, 1, 2_700);
    let trace = TraceFile::parse(std::str::from_utf8(&text).unwrap()).unwrap();
    assert!(trace.crashes[0].returned);
    assert!(trace.fatal_crash().is_none());
    let mut wrong = crashed_cuda_trace();
    record::signal_returned(&mut wrong, 5, 2_700);
    let error = TraceFile::parse(std::str::from_utf8(&wrong).unwrap()).unwrap_err();
    assert!(error.message.contains("crash 5"), "{error}");
    let mut exited = crashed_cuda_trace();
    record::end(&mut exited, 9_000);
    assert!(TraceFile::parse(std::str::from_utf8(&exited).unwrap()).unwrap().fatal_crash().is_none());
}

#[test]
fn the_aggregate_names_the_kernels_before_a_crash_and_merges_processes() {
    let crashed = TraceFile::parse(std::str::from_utf8(&crashed_cuda_trace()).unwrap()).unwrap();
    let mut other = header(50);
    record::kernel(&mut other, &record::KernelDef::new(1, b"_Z7add_onePfi", api::HIP, source::REGISTER));
    record::window(
        &mut other,
        &record::Window {
            t0: 2_400,
            t1: 3_000,
            counts: &[(1, 10)],
            shapes: &[ShapeCount { kernel: 1, grid: [1, 1, 1], block: [64, 1, 1], count: 10 }],
            ..Default::default()
        },
    );
    let other = TraceFile::parse(std::str::from_utf8(&other).unwrap()).unwrap();
    let all = Aggregate::of([&crashed, &other], Range::All);
    assert_eq!(all.total_launches, 15);
    assert_eq!(all.failed_launches, 4);
    assert_eq!(all.kernels[0].name, "_Z7add_onePfi");
    assert_eq!((all.kernels[0].launches, all.kernels[0].ids.len()), (14, 2), "one name in two processes");
    assert_eq!(all.processes.iter().map(|p| (p.pid, p.launches)).collect::<Vec<_>>(), [(42, 5), (50, 10)]);
    assert_eq!(all.spill_ns, [0, 0]);
    assert_eq!(all.crashes.len(), 1);
    let report = &all.crashes[0];
    assert!(report.fatal);
    assert_eq!(report.launches(), 5);
    let runs: Vec<(&str, u32, bool)> =
        report.threads[0].launches.iter().map(|r| (r.name.as_str(), r.repeats, r.failed)).collect();
    assert_eq!(runs, [("_Z7add_onePfi", 4, true), ("Cijk_Ailk_Bljk_SB_MT64x64x8", 1, false)]);
    assert_eq!(report.threads[0].in_flight.as_deref(), Some("hipModuleLaunchKernel"));

    // A request interval: windows overlapping it count, the crash inside it is reported, and the
    // windows reaching outside it are measured.
    let request = Aggregate::of([&crashed, &other], Range::Overlapping(2_200, 2_700));
    assert_eq!(request.total_launches, 2 + 10);
    assert_eq!(request.spill_ns, [200, 300]);
    assert_eq!(request.crashes.len(), 1);
    let before = Aggregate::of([&crashed, &other], Range::Overlapping(1_100, 1_900));
    assert_eq!((before.total_launches, before.crashes.len()), (3, 0));
}

/// A Vulkan process as the layer writes it when a call returns `VK_ERROR_DEVICE_LOST` and the program then
/// aborts: the device, two pipelines, a window, the device-lost record and the crash record, both naming the
/// queue's last dispatches.
#[test]
fn vulkan_device_lost_and_crash_records_name_the_queues_last_dispatches() {
    let mut out = header(7);
    record::device(&mut out, &record::Device { id: 0, api: api::VULKAN, name: b"llvmpipe", ..Default::default() });
    for (id, name) in [(1, &b"matmul_f32_l"[..]), (2, b"add_f32")] {
        record::kernel(
            &mut out,
            &record::KernelDef {
                device: Some(0),
                local_size: Some([64, 1, 1]),
                ..record::KernelDef::new(id, name, api::VULKAN, source::DEBUG_NAME)
            },
        );
    }
    let dispatches = [
        record::QueueDispatch { kernel: 1, submit: 4, grid: [8, 2, 1], count: 1, label: b"" },
        record::QueueDispatch { kernel: 1, submit: 5, grid: [8, 2, 1], count: 2, label: b"" },
        record::QueueDispatch { kernel: 2, submit: 5, grid: [1, 1, 1], count: 1, label: b"ADD blk.0.ffn_inp \"x\"" },
    ];
    let queues = [record::CrashQueue {
        queue: 0,
        device: Some(0),
        submits: 5,
        dispatches: &dispatches,
        omitted: 3,
        progress: None,
    }];
    let lost = record::DeviceLost { call: "vkWaitForFences", result: -4, at_ns: 3_000, tid: 7, seq: 1, faults: &[] };
    record::device_lost(&mut out, &lost, &queues);
    let threads = [CrashThread { tid: 7, in_flight: Some("vkQueueSubmit"), launches: &[] }];
    let crash = record::Crash {
        seq: 1,
        signal: 6,
        code: -6,
        addr: 0,
        sender_pid: Some(7),
        at_ns: 3_500,
        tid: 7,
        flushed: true,
        threads: &threads,
    };
    record::crash_with_queues(&mut out, &crash, &queues);
    let trace = TraceFile::parse(std::str::from_utf8(&out).unwrap()).unwrap();
    assert_eq!(trace.device_lost.len(), 1);
    let read = &trace.device_lost[0];
    assert_eq!((read.call.as_str(), read.result, read.at_ns, read.seq, read.tid), ("vkWaitForFences", -4, 3_000, 1, 7));
    assert_eq!(read.queues[0].dispatches.len(), 3);
    assert_eq!((read.queues[0].device, read.queues[0].submits, read.queues[0].omitted), (Some(0), 5, 3));
    assert_eq!(
        read.queues[0].dispatches[1],
        trace_reader::QueueDispatch { kernel: 1, submit: 5, grid: [8, 2, 1], count: 2, label: None }
    );
    assert_eq!(read.queues[0].dispatches[2].label.as_deref(), Some("ADD blk.0.ffn_inp \"x\""));
    assert_eq!(trace.crashes[0].queues, read.queues);
    assert!(trace.devices.contains_key(&0), "a device_lost record is not taken for a device record");
    // A device record without the shader core count (layers before it was recorded) reads as not known.
    assert_eq!((trace.devices[&0].shader_core_count, trace.devices[&0].shader_core_count_from.as_ref()), (None, None));
    assert!(trace.devices[&0].impersonated.is_none(), "a device record without the field was not impersonated");

    let all = Aggregate::of([&trace], Range::All);
    let runs = &all.crashes[0].queues[0];
    assert_eq!(runs.device.as_deref(), Some("llvmpipe"));
    let named: Vec<String> =
        runs.runs.iter().map(|r| format!("{} {} {:?} {:?}", r.name, r.dispatches, r.submits, r.block)).collect();
    assert_eq!(named, ["matmul_f32_l 3 (4, 5) [64, 1, 1]", "add_f32 1 (5, 5) [64, 1, 1]"]);
    assert_eq!(all.device_lost.len(), 1);
    assert_eq!(all.device_lost[0].queues[0].dispatches(), 4);

    // A dispatch of an undefined pipeline makes the record unreadable, as a launch's does.
    let mut bad = out.clone();
    let undefined = [record::QueueDispatch { kernel: 9, submit: 1, grid: [1, 1, 1], count: 1, label: b"" }];
    record::device_lost(
        &mut bad,
        &lost,
        &[record::CrashQueue {
            queue: 0,
            device: None,
            submits: 1,
            dispatches: &undefined,
            omitted: 0,
            progress: None,
        }],
    );
    let error = TraceFile::parse(std::str::from_utf8(&bad).unwrap()).unwrap_err().to_string();
    assert!(error.contains("kernel 9 is used before its definition"), "{error}");
}

/// The files a trace names are its pipelines' `spirv_object`s, each once in kernel order, whatever they are: the
/// reader only reports them (the binary opens them through its read budget).
#[test]
fn a_trace_names_each_pipelines_object_once() {
    let mut out = header(11);
    let objects: [&[u8]; 4] = [b"/opt/a/libggml-vulkan.so", b"/dev/zero", b"/opt/a/libggml-vulkan.so", b"/tmp/fifo"];
    for (i, object) in objects.iter().enumerate() {
        record::kernel(
            &mut out,
            &record::KernelDef {
                spirv_hash: Some("9f2c01aa"),
                spirv_object: Some(object),
                ..record::KernelDef::new(i as u32 + 1, format!("spirv:{i}").as_bytes(), api::VULKAN, source::SPIRV_HASH)
            },
        );
    }
    record::kernel(&mut out, &record::KernelDef::new(9, b"_Z3addPf", api::HIP, source::REGISTER));
    let trace = TraceFile::parse(std::str::from_utf8(&out).unwrap()).unwrap();
    assert_eq!(trace.named_files(), ["/opt/a/libggml-vulkan.so", "/dev/zero", "/tmp/fifo"]);
}

/// A rotating trace's segment as the sink writes it (header with the segment fields, version 4; the `rotated`
/// record), read back: the fields agree, and the segment is neither cut nor partial.
#[test]
fn a_rotating_segment_reads_back() {
    let mut out = Vec::new();
    let segment = record::Segment { index: 3, keep: 4, max_bytes: 1 << 28, previous: b"trace-42.s2.jsonl" };
    record::header(
        &mut out,
        &record::Header {
            pid: 42,
            ppid: 1,
            exe: b"/usr/bin/ollama",
            cmdline: b"ollama\0runner\0",
            start_ns: 1_000,
            interval_ms: 1000,
            shape_buckets: 8,
            max_kernels: 1 << 20,
            max_bytes: 1 << 30,
            observer: "0.1.0",
            writer: "backscope-vklayer",
            max_sequences: 0,
            segment: Some(segment),
        },
    );
    record::kernel(&mut out, &record::KernelDef::new(1, b"k", api::HIP, source::REGISTER));
    record::window(&mut out, &record::Window { t0: 5_000, t1: 6_000, counts: &[(1, 2)], ..Default::default() });
    let bytes = out.len() as u64;
    record::rotated(&mut out, b"trace-42.s4.jsonl", 6_500, bytes);
    let trace = TraceFile::parse(std::str::from_utf8(&out).unwrap()).unwrap();
    let h = &trace.header;
    assert_eq!(h.version, format::ROTATING_VERSION);
    assert_eq!((h.segment, h.segments_kept, h.segment_max_bytes), (Some(3), Some(4), Some(1 << 28)));
    assert_eq!(h.previous.as_deref(), Some("trace-42.s2.jsonl"));
    let rotated = trace.rotated.as_ref().unwrap();
    assert_eq!((rotated.next.as_str(), rotated.at_ns), ("trace-42.s4.jsonl", 6_500));
    assert_eq!(rotated.bytes, bytes);
    assert!(trace.is_finished() && !trace.is_cut() && !trace.is_complete() && !trace.partial_last_line);
    assert_eq!(trace.rotated_away().unwrap().since_ns, Some(5_000));
}

/// The order of dispatches (the Vulkan layer's `sequence` records) reads back: each sequence's runs, the submissions
/// windows count per sequence (0: order not kept), the header that says order is recorded; a window folded keeps the
/// totals. A sequence that names an undefined pipeline, a window that counts an undefined sequence, a sequence 0 and
/// one defined twice differently are broken traces, each named by its line.
#[test]
fn dispatch_sequences_read_back_and_broken_ones_are_refused() {
    let vulkan_header = |max_sequences: u32| {
        let mut out = Vec::new();
        record::header(
            &mut out,
            &record::Header {
                pid: 5,
                ppid: 1,
                exe: b"/opt/llama/llama-bench",
                cmdline: b"llama-bench\0",
                start_ns: 1_000,
                interval_ms: 50,
                shape_buckets: 8,
                max_kernels: 1 << 20,
                max_bytes: 1 << 30,
                observer: "0.1.0",
                writer: "backscope-vklayer",
                max_sequences,
                segment: None,
            },
        );
        for (id, name) in [(1, &b"rms_norm_f32"[..]), (2, b"mul_mat_vec_q4_k_f32_f32")] {
            record::kernel(&mut out, &record::KernelDef::new(id, name, api::VULKAN, source::DEBUG_NAME));
        }
        out
    };
    let mut out = vulkan_header(4096);
    let decode = [(1, 1), (2, 3), (1, 1)];
    record::sequence(&mut out, &record::Sequence { id: 1, first_ns: 1_010, runs: &decode });
    let window = |out: &mut Vec<u8>, t0: u64, sequences: &[(u32, u64)]| {
        let counts = [(1, 2 * sequences[0].1), (2, 3 * sequences[0].1)];
        record::window(out, &record::Window { t0, t1: t0 + 50, counts: &counts, sequences, ..Default::default() });
    };
    window(&mut out, 1_000, &[(1, 2)]);
    record::sequence(&mut out, &record::Sequence { id: 2, first_ns: 1_060, runs: &[(2, 1)] });
    window(&mut out, 1_050, &[(1, 1), (2, 1), (0, 4)]);
    let text = String::from_utf8(out.clone()).unwrap();
    let trace = TraceFile::parse(&text).unwrap();
    assert!(trace.order_recorded());
    assert_eq!(trace.header.max_sequences, 4096);
    assert_eq!(trace.sequences[&1].runs, decode);
    assert_eq!((trace.sequences[&1].first_ns, trace.sequences[&1].dispatches()), (1_010, 5));
    let all = trace.sequence_submissions(Range::All);
    assert_eq!(all.into_iter().collect::<Vec<_>>(), [(0, 4), (1, 3), (2, 1)]);
    assert_eq!(trace.sequence_submissions(Range::Within(1_000, 1_050)).get(&2), None);
    let folded = TraceFile::parse_folded(&text).unwrap();
    assert_eq!(folded.sequence_submissions(Range::All), trace.sequence_submissions(Range::All));
    assert_eq!(folded.sequences, trace.sequences);
    // A trace of the CUDA observer, or of a layer before order was recorded, says nothing about order.
    assert!(!TraceFile::parse(std::str::from_utf8(&header(6)).unwrap()).unwrap().order_recorded());
    assert!(!TraceFile::parse(std::str::from_utf8(&vulkan_header(0)).unwrap()).unwrap().order_recorded());

    let broken = |line: &str, why: &str| {
        let mut text = String::from_utf8(vulkan_header(4096)).unwrap();
        text += &format!("{{\"sequence\":1,\"first_ns\":5,\"runs\":[[1,1]]}}\n{line}\n");
        let error = TraceFile::parse(&text).unwrap_err();
        assert_eq!(error.line, Some(5), "{line}: {error}");
        assert!(error.message.contains(why), "{line}: {error}");
    };
    broken(r#"{"sequence":2,"first_ns":5,"runs":[[9,1]]}"#, "kernel 9 is used before its definition");
    broken(r#"{"window":[1,2],"counts":[[1,1]],"sequences":[[3,1]]}"#, "sequence 3 is counted before its definition");
    broken(r#"{"sequence":0,"first_ns":5,"runs":[[1,1]]}"#, "sequence 0");
    broken(r#"{"sequence":1,"first_ns":5,"runs":[[2,1]]}"#, "sequence 1 defined twice, differently");
    broken(r#"{"sequence":3,"first_ns":5,"runs":[[1,-1]]}"#, "sequence record");
    broken(r#"{"sequence":3,"first_ns":5}"#, "sequence record");
}
