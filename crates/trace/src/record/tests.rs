use super::*;
fn line(f: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = Vec::new();
    f(&mut out);
    String::from_utf8(out).unwrap()
}

/// The examples of docs/trace-format.md, written by these functions.
#[test]
fn records_match_the_documented_examples() {
    let h = Header {
        pid: 4242,
        ppid: 4200,
        exe: b"/usr/bin/llama-server",
        cmdline: b"llama-server\0-m\0m.gguf\0",
        start_ns: 1254000000000,
        interval_ms: 50,
        shape_buckets: 8,
        max_kernels: 1048576,
        max_bytes: 1073741824,
        observer: "0.1.0",
        writer: "",
        max_sequences: 0,
        segment: None,
    };
    assert_eq!(
        line(|o| header(o, &h)),
        "{\"format\":\"backscope-trace\",\"version\":3,\"pid\":4242,\"ppid\":4200,\"exe\":\"/usr/bin/llama-server\",\
         \"cmdline\":[\"llama-server\",\"-m\",\"m.gguf\"],\"clock\":\"monotonic\",\"start_ns\":1254000000000,\
         \"interval_ms\":50,\"shape_buckets\":8,\"max_kernels\":1048576,\"max_bytes\":1073741824,\"observer\":\"0.1.0\"}\n"
    );
    let name = b"_Z13mul_mat_vec_qIL9ggml_type12ELi1EEvPKvS2_PKiPfj";
    assert_eq!(
        line(|o| kernel(o, &KernelDef::new(1, name, api::CUDA, source::REGISTER))),
        "{\"kernel\":1,\"name\":\"_Z13mul_mat_vec_qIL9ggml_type12ELi1EEvPKvS2_PKiPfj\",\"api\":\"cuda\",\"source\":\"register\"}\n"
    );
    let w = Window {
        t0: 1254000000000,
        t1: 1254050012000,
        counts: &[(1, 264), (2, 22)],
        errors: &[(2, 1)],
        graph: &[(1, 240)],
        captured: &[(1, 12)],
        shapes: &[
            ShapeCount { kernel: 1, grid: [8, 1, 1], block: [32, 4, 1], count: 264 },
            ShapeCount { kernel: 2, grid: [1, 1, 1], block: [256, 1, 1], count: 22 },
        ],
        other_shapes: &[(3, 5)],
        graph_launches: 20,
        unknown_graph_launches: 1,
        expired_captures: 1,
        ..Window::default()
    };
    assert_eq!(
        line(|o| window(o, &w)),
        "{\"window\":[1254000000000,1254050012000],\"counts\":[[1,264],[2,22]],\"errors\":[[2,1]],\
         \"graph\":[[1,240]],\"captured\":[[1,12]],\"shapes\":[[1,[8,1,1],[32,4,1],264],[2,[1,1,1],[256,1,1],22]],\
         \"other_shapes\":[[3,5]],\"graph_launches\":20,\"unknown_graph_launches\":1,\"expired_captures\":1}\n"
    );
    assert_eq!(line(|o| end(o, 1254093000000)), "{\"end_ns\":1254093000000,\"reason\":\"exit\"}\n");
    assert_eq!(
        line(|o| truncated_budget(o, 1254093000000, 1073741300, 1073741824)),
        "{\"truncated\":\"budget\",\"at_ns\":1254093000000,\"bytes\":1073741300,\"max_bytes\":1073741824}\n"
    );
}

#[test]
fn the_header_keeps_at_most_4_kib_of_arguments() {
    let long: Vec<u8> = std::iter::repeat_n(b"x".repeat(1000), 10)
        .flat_map(|mut a| {
            a.push(0);
            a
        })
        .collect();
    let h = Header {
        cmdline: &long,
        ..Header {
            pid: 1,
            ppid: 0,
            exe: b"",
            cmdline: b"",
            start_ns: 0,
            interval_ms: 0,
            shape_buckets: 8,
            max_kernels: 1,
            max_bytes: 0,
            observer: "",
            writer: "w",
            max_sequences: 0,
            segment: None,
        }
    };
    let text = line(|o| header(o, &h));
    assert_eq!(text.matches(&"x".repeat(1000)).count(), 4);
    assert!(text.ends_with(",\"writer\":\"w\"}\n"));
}

#[test]
fn a_crash_record_lists_threads_and_their_launches() {
    let launches = [
        CrashLaunch { kernel: 1, window_t0: 100, grid: [1, 1, 1], block: [64, 1, 1], failed: true },
        CrashLaunch { kernel: 2, window_t0: 150, grid: [2, 1, 1], block: [32, 1, 1], failed: false },
    ];
    let threads = [
        CrashThread { tid: 7, in_flight: Some("hipLaunchKernel"), launches: &launches },
        CrashThread { tid: 8, in_flight: None, launches: &[] },
    ];
    let c = Crash {
        seq: 1,
        signal: 11,
        code: 1,
        addr: 0,
        sender_pid: None,
        at_ns: 200,
        tid: 7,
        flushed: true,
        threads: &threads,
    };
    assert_eq!(
        line(|o| crash(o, &c)),
        "{\"crash\":11,\"signal\":\"SIGSEGV\",\"code\":1,\"addr\":0,\"at_ns\":200,\"seq\":1,\"tid\":7,\"flushed\":true,\
         \"threads\":[{\"tid\":7,\"in_flight\":\"hipLaunchKernel\",\"launches\":[[1,100,[1,1,1],[64,1,1],1],\
         [2,150,[2,1,1],[32,1,1],0]]},{\"tid\":8,\"launches\":[]}]}\n"
    );
    assert_eq!(signal_name(6), "SIGABRT");
}

/// The Vulkan layer's crash and device-lost examples of docs/trace-format.md.
#[test]
fn vulkan_crash_and_device_lost_records_match_the_documented_examples() {
    let dispatches: Vec<QueueDispatch> = (1..=3)
        .flat_map(|s| {
            [
                QueueDispatch { kernel: 1, submit: s, grid: [4, 1, 1], count: 1, label: b"" },
                QueueDispatch { kernel: 2, submit: s, grid: [2, 1, 1], count: 1, label: b"" },
            ]
        })
        .collect();
    let queues =
        [CrashQueue { queue: 0, device: Some(0), submits: 3, dispatches: &dispatches, omitted: 0, progress: None }];
    let threads = [CrashThread { tid: 3302, in_flight: None, launches: &[] }];
    let c = Crash {
        seq: 1,
        signal: 11,
        code: 1,
        addr: 0,
        sender_pid: None,
        at_ns: 9664662022230,
        tid: 3302,
        flushed: true,
        threads: &threads,
    };
    assert_eq!(
        line(|o| crash_with_queues(o, &c, &queues)),
        "{\"crash\":11,\"signal\":\"SIGSEGV\",\"code\":1,\"addr\":0,\"at_ns\":9664662022230,\"seq\":1,\"tid\":3302,\"flushed\":true,\
         \"threads\":[{\"tid\":3302,\"launches\":[]}],\"queues\":[{\"queue\":0,\"device\":0,\"submits\":3,\
         \"dispatches\":[[1,1,[4,1,1],1],[2,1,[2,1,1],1],[1,2,[4,1,1],1],[2,2,[2,1,1],1],[1,3,[4,1,1],1],[2,3,[2,1,1],1]]}]}\n"
    );
    let queues = [CrashQueue {
        queue: 0,
        device: Some(0),
        submits: 3,
        dispatches: &dispatches[2..],
        omitted: 0,
        progress: None,
    }];
    let lost = DeviceLost { call: "vkWaitForFences", result: -4, at_ns: 9683944997073, tid: 4567, seq: 1, faults: &[] };
    assert_eq!(
        line(|o| device_lost(o, &lost, &queues)),
        "{\"device_lost\":\"vkWaitForFences\",\"result\":-4,\"at_ns\":9683944997073,\"seq\":1,\"tid\":4567,\
         \"queues\":[{\"queue\":0,\"device\":0,\"submits\":3,\"dispatches\":[[1,2,[4,1,1],1],[2,2,[2,1,1],1],\
         [1,3,[4,1,1],1],[2,3,[2,1,1],1]]}]}\n"
    );
    // Without queues the observer's record is unchanged.
    assert!(!line(|o| crash(o, &c)).contains("queues"));
    // A label follows the count.
    let labelled = [QueueDispatch { label: b"MUL_MAT blk.0.attn_q > mul_mat_vec (2,1,1)", ..dispatches[0] }];
    let queue = [CrashQueue { queue: 1, device: None, submits: 1, dispatches: &labelled, omitted: 0, progress: None }];
    assert!(line(|o| device_lost(o, &lost, &queue))
        .contains(r#""dispatches":[[1,1,[4,1,1],1,"MUL_MAT blk.0.attn_q > mul_mat_vec (2,1,1)"]]"#));
    // An omitted count shows; a record of this kind is never taken for a `device` record.
    let with_omitted = [CrashQueue { omitted: 2, device: None, ..queues[0] }];
    let text = line(|o| device_lost(o, &lost, &with_omitted));
    assert!(text.contains(",\"omitted\":2}"), "{text}");
    assert_eq!(kind::ALL.iter().find(|k| text.contains(&format!("{{\"{k}\":"))), Some(&kind::DEVICE_LOST));
}

/// The Vulkan layer's order record of docs/trace-format.md: a sequence's definition, its count in a window, and the
/// header field that says the writer records order (left out, as before, when it does not).
#[test]
fn sequence_records_match_the_documented_examples() {
    let runs = [(1, 1), (2, 1), (3, 2), (1, 1)];
    let text = line(|o| sequence(o, &Sequence { id: 1, first_ns: 1254000000000, runs: &runs }));
    assert_eq!(text, "{\"sequence\":1,\"first_ns\":1254000000000,\"runs\":[[1,1],[2,1],[3,2],[1,1]]}\n");
    assert_eq!(kind::ALL.iter().find(|k| text.contains(&format!("{{\"{k}\":"))), Some(&kind::SEQUENCE));
    let w = Window { t0: 1, t1: 2, counts: &[(1, 2)], submits: 1, sequences: &[(1, 1), (0, 3)], ..Window::default() };
    assert_eq!(
        line(|o| window(o, &w)),
        "{\"window\":[1,2],\"counts\":[[1,2]],\"submits\":1,\"sequences\":[[1,1],[0,3]]}\n"
    );
    let h = Header {
        pid: 1,
        ppid: 0,
        exe: b"",
        cmdline: b"",
        start_ns: 0,
        interval_ms: 50,
        shape_buckets: 8,
        max_kernels: 1,
        max_bytes: 0,
        observer: "0.1.0",
        writer: "backscope-vklayer",
        max_sequences: 4096,
        segment: None,
    };
    assert!(line(|o| header(o, &h)).ends_with(",\"writer\":\"backscope-vklayer\",\"max_sequences\":4096}\n"));
    assert!(!line(|o| header(o, &Header { max_sequences: 0, ..h })).contains("max_sequences"));
}
