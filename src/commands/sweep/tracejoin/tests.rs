//! The join of requests to trace windows, from trace files in the observer's and the Vulkan layer's formats, and
//! the summary's claims about the joined records.

use super::*;

fn header(pid: u32, ppid: u32, exe: &str) -> String {
    format!(
        r#"{{"format":"backscope-trace","version":1,"pid":{pid},"ppid":{ppid},"exe":"{exe}","cmdline":[],"clock":"monotonic","start_ns":1000,"interval_ms":20,"shape_buckets":8,"max_kernels":1048576,"observer":"0.1.0"}}"#
    )
}

const MMVQ: &str = "_Z13mul_mat_vec_qIL9ggml_type12ELi1EEvPKvS2_PKiPfj";
const MMQ: &str = "_ZL9mul_mat_qIL9ggml_type12ELi64ELb0EEvPKcPKiPfi";
const QUANT: &str = "_Z13quantize_q8_1PKfPvllllllj";

/// Server process 42: MMVQ + quantize in windows [1000,2000] (before), [2000,3000] (straddles t0=2500),
/// [3000,4000] (inside), [6000,7000] (after). Runner 43 (child of 42): MMQ in [3500,4500].
fn server_trace() -> String {
    [
        header(42, 1, "/usr/bin/llama-server"),
        format!(r#"{{"kernel":1,"name":"{MMVQ}","api":"cuda","source":"register"}}"#),
        format!(r#"{{"kernel":2,"name":"{QUANT}","api":"cuda","source":"register"}}"#),
        r#"{"window":[1000,2000],"counts":[[1,100]]}"#.into(),
        r#"{"window":[2000,3000],"counts":[[1,10],[2,10]],"graph":[[1,4]]}"#.into(),
        r#"{"window":[3000,4000],"counts":[[1,254],[2,254]],"errors":[[2,1]]}"#.into(),
        r#"{"window":[6000,7000],"counts":[[1,999]]}"#.into(),
    ]
    .join("\n")
        + "\n"
}

fn runner_trace() -> String {
    [
        header(43, 42, "/usr/lib/ollama/runner"),
        format!(r#"{{"kernel":1,"name":"{MMQ}","api":"cuda","source":"register"}}"#),
        format!(r#"{{"kernel":2,"name":"{MMVQ}","api":"cuda","source":"register"}}"#),
        r#"{"window":[3500,4500],"counts":[[1,7],[2,6]]}"#.into(),
    ]
    .join("\n")
        + "\n"
}

/// The request's families by launches, most first: `MMVQ 264, quantize 264`; `none` without launches.
fn families_text(t: &RecordTrace) -> String {
    if t.families.is_empty() {
        return "none".into();
    }
    let mut f: Vec<(&String, &u64)> = t.families.iter().collect();
    f.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    f.iter().map(|(name, n)| format!("{name} {n}")).collect::<Vec<_>>().join(", ")
}

/// The floor's claims about `records` and the sweep's view of them, as `sweep report` prints them.
fn claims_and_text(records: &[crate::run::format::record::Record]) -> (Vec<crate::evidence::Claim>, String) {
    let s = crate::run_analysis::aggregate::of_records(records).unwrap();
    let claims = crate::run_analysis::claims::claims(&s, "r", Path::new("/runs/r"));
    let text = crate::commands::sweep::view::render("r", "/runs/r", &s, &claims);
    (claims, text)
}

fn label(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn joins_partially_overlapping_windows_across_processes() {
    let a = TraceFile::parse(&server_trace()).unwrap();
    let b = TraceFile::parse(&runner_trace()).unwrap();
    let j = join("traces/s001-x", vec![], &[&a, &b], &label, [2500, 4200], 20);
    // [2000,3000] straddles t0 and counts; [1000,2000] and [6000,7000] do not.
    let mmvq = j.kernels.iter().find(|k| k.family == "MMVQ").unwrap();
    assert_eq!(mmvq.launches, 10 + 254 + 6, "both processes' launches of one kernel name merge");
    assert_eq!(mmvq.graph, 4);
    assert_eq!(mmvq.ggml_type.as_deref(), Some("Q4_K"));
    assert!(mmvq.demangled.starts_with("mul_mat_vec_q<"), "{}", mmvq.demangled);
    assert_eq!(j.families.get("MMQ"), Some(&7));
    assert_eq!(j.total_launches, 270 + 264 + 7);
    assert_eq!(j.failed_launches, 1);
    assert_eq!(j.distinct_kernels, 3);
    assert_eq!(j.kernels[0].launches, 270, "most launched first");
    // The straddling window began 500 ns before t0; the runner's ran 300 ns past t1.
    assert_eq!(j.spill_ns, [500, 300]);
    assert_eq!(
        j.processes.iter().map(|p| (p.pid, p.ppid, p.launches)).collect::<Vec<_>>(),
        [(42, 1, 528), (43, 42, 13)]
    );
    assert_eq!(families_text(&j), "MMVQ 270, quantize 264, MMQ 7");
    // A request entirely inside one window: exact to one window.
    let j = join("d", vec![], &[&a], &label, [3100, 3200], 20);
    assert_eq!(j.total_launches, 508);
    assert_eq!(j.spill_ns, [100, 800]);
    // A request in an idle gap: nothing.
    let j = join("d", vec![], &[&a, &b], &label, [5000, 5500], 20);
    assert_eq!((j.total_launches, j.kernels.len(), families_text(&j).as_str()), (0, 0, "none"));
}

#[test]
fn traced_records_get_a_claim_and_a_kernels_column() {
    let a = TraceFile {
        path: Some(PathBuf::from("/runs/r/traces/s001-cuda/trace-42.jsonl")),
        ..TraceFile::parse(&server_trace()).unwrap()
    };
    let label = |p: &Path| p.strip_prefix("/runs/r").unwrap().display().to_string();
    let mut rec = crate::run::write::store::tests::record("r", "cuda|m|ngl=99|p|n=1|e1|r3", 2);
    rec.endpoint = "cuda".into();
    rec.num_gpu = 99;
    rec.repetition = 3;
    rec.trace = Some(join("traces/s001-cuda", vec![], &[&a], &label, [3100, 3900], 20));
    let mut cpu = crate::run::write::store::tests::record("r", "cpu|m|ngl=0|p|n=1|e1|r1", 3);
    cpu.endpoint = "cpu".into();
    cpu.trace = Some(RecordTrace {
        observer_loaded: Some(true),
        ..join("traces/s002-cpu", vec![], &[], &label, [5000, 6000], 20)
    });
    let (claims, text) = claims_and_text(&[rec, cpu]);
    let k: Vec<&crate::evidence::Claim> = claims.iter().filter(|c| c.id.ends_with(".kernels")).collect();
    assert_eq!(k.len(), 2);
    assert_eq!(k[0].confidence, crate::evidence::Confidence::Confirmed);
    assert_eq!(
        k[0].statement,
        "`cuda` at num_gpu=99: kernels per request (median of 1 traced requests): MMVQ 254, quantize 254, 508 \
         launches in all and no MMQ, no MMVF, no MMF in any of them [join precision: windows of 20 ms]"
    );
    assert!(
        matches!(&k[0].sources[0], crate::evidence::Source::File { path, .. } if path == "/runs/r/traces/s001-cuda/trace-42.jsonl")
    );
    assert!(k[1].statement.contains("no CUDA/HIP kernel launch (Vulkan and CPU work"), "{}", k[1].statement);
    assert!(
        matches!(&k[1].sources[0], crate::evidence::Source::File { path, .. } if path == "/runs/r/traces/s002-cpu"),
        "the directory that stayed empty: {:?}",
        k[1].sources
    );
    assert!(text.contains("kernels (per request)") && text.contains("MMVQ 254, quantize 254"), "{text}");
}

#[test]
fn no_trace_file_gives_an_empty_join() {
    let j = join("traces/s001-cpu", vec![], &[], &label, [1, 2], 20);
    assert_eq!(j.total_launches, 0);
    assert!(j.processes.is_empty() && j.files.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let mut td = TraceDir::new(dir.path().join("missing"));
    let t1 = monotonic_ns();
    let j = observe(&mut td, "x", &label, [t1 - 1000, t1], 5);
    assert_eq!(j.total_launches, 0);
    assert!(j.notes.is_empty(), "{:?}", j.notes);
}

#[test]
fn reads_growing_files_incrementally_and_tolerates_a_cut_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace-42.jsonl");
    let full = server_trace();
    // First the header, definitions and two windows, then half of the third window's line.
    let cut = full.find(r#"{"window":[3000"#).unwrap();
    std::fs::write(&path, format!("{}{}", &full[..cut], r#"{"window":[3000,40"#)).unwrap();
    let mut td = TraceDir::new(dir.path().to_path_buf());
    td.refresh();
    let t = td.traces().next().unwrap();
    assert_eq!(t.windows.len(), 2, "the cut line waits for its end");
    assert!(!td.caught_up(3500));
    std::fs::write(&path, &full).unwrap();
    std::fs::write(dir.path().join("trace-43.jsonl"), runner_trace()).unwrap();
    td.refresh();
    assert_eq!(td.traces().map(|t| t.windows.len()).collect::<Vec<_>>(), [4, 1]);
    assert!(td.caught_up(4500));
    let files: Vec<String> = td.paths().map(|p| label(p)).collect();
    let traces: Vec<&TraceFile> = td.traces().collect();
    let j = join("d", files, &traces, &label, [2500, 4200], 20);
    assert_eq!(j.total_launches, 270 + 264 + 7, "the same as parsing whole files");
    assert_eq!(j.files.len(), 2);
    // A later chunk that uses kernels defined in an earlier one, and the end record.
    let more =
        format!("{full}{}\n{}\n", r#"{"window":[7000,8000],"counts":[[2,5]]}"#, r#"{"end_ns":8100,"reason":"exit"}"#);
    std::fs::write(&path, more).unwrap();
    td.refresh();
    td.forget_before(7500);
    let t = td.traces().next().unwrap();
    assert_eq!(t.windows.len(), 1);
    assert!(t.end.is_some());
    // A file that is not a trace is reported, not fatal.
    std::fs::write(dir.path().join("trace-9.jsonl"), "not json\n").unwrap();
    td.refresh();
    assert_eq!(td.errors().count(), 1);
}

#[test]
fn a_cut_trace_counts_as_flushed_and_its_counts_are_noted_as_lower_bounds() {
    let cut = format!(
        "{}{}\n",
        server_trace().replace(r#""version":1"#, r#""version":2"#),
        r#"{"truncated":"budget","at_ns":7500,"bytes":900,"max_bytes":1024}"#
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trace-42.jsonl"), cut).unwrap();
    let mut td = TraceDir::new(dir.path().to_path_buf());
    td.refresh();
    // Nothing more will be written: no request after the cut waits for a flush that never comes.
    assert!(td.caught_up(1_000_000));
    let traces: Vec<&TraceFile> = td.traces().collect();
    let before = join("d", vec![], &traces, &label, [3100, 3900], 20);
    assert!(before.notes.is_empty(), "a request before the cut is complete: {:?}", before.notes);
    let after = join("d", vec![], &traces, &label, [8000, 9000], 20);
    assert_eq!(after.total_launches, 0);
    assert_eq!(after.notes.len(), 1);
    assert!(after.notes[0].contains("budget of 1024 bytes") && after.notes[0].contains("lower bounds"));
    assert!(before.cut.is_empty());
    assert_eq!(after.cut, [dir.path().join("trace-42.jsonl").display().to_string()]);
}

/// A service traced with `BACKSCOPE_TRACE_ROTATE`: server 42's windows in two segments, the first ending with its
/// `rotated` record. A request across both is one process's; the first segment, once deleted, is forgotten.
#[test]
fn the_segments_of_a_rotating_trace_join_each_request_as_one_process() {
    let segment = |k: u32, windows: &[&str], last: &str| {
        let header = header(42, 1, "/usr/bin/llama-server").replace(r#""version":1"#, r#""version":4"#).replace(
            r#""observer":"0.1.0"}"#,
            &format!(r#""observer":"0.1.0","segment":{k},"segments_kept":2,"segment_max_bytes":16384}}"#),
        );
        let mut text =
            format!("{header}\n{{\"kernel\":1,\"name\":\"{MMVQ}\",\"api\":\"cuda\",\"source\":\"register\"}}\n");
        windows.iter().chain([last].iter().filter(|l| !l.is_empty())).for_each(|l| text += &format!("{l}\n"));
        text
    };
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("trace-42.jsonl");
    std::fs::write(
        &first,
        segment(
            0,
            &[r#"{"window":[1000,2000],"counts":[[1,5]]}"#],
            r#"{"rotated":"trace-42.s1.jsonl","at_ns":2100,"bytes":500}"#,
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("trace-42.s1.jsonl"),
        segment(1, &[r#"{"window":[2000,3000],"counts":[[1,7]]}"#], ""),
    )
    .unwrap();
    let mut td = TraceDir::new(dir.path().to_path_buf());
    td.refresh();
    let rec = observe(&mut td, "d", &label, [1500, 2500], 1);
    assert_eq!(rec.processes.len(), 1, "{:?}", rec.processes);
    assert_eq!((rec.processes[0].pid, rec.total_launches), (42, 12));
    assert!(rec.processes[0].file.ends_with("trace-42.s1.jsonl"), "the newest segment's");
    assert!(rec.notes.is_empty(), "{:?}", rec.notes);
    std::fs::remove_file(&first).unwrap();
    td.refresh();
    assert_eq!(td.paths().count(), 1, "the deleted segment is forgotten");
}

#[test]
fn claims_from_a_cut_trace_are_lower_bounds_and_never_claim_absence() {
    let cut = format!(
        "{}{}\n",
        server_trace().replace(r#""version":1"#, r#""version":2"#),
        r#"{"truncated":"budget","at_ns":7500,"bytes":900,"max_bytes":1024}"#
    );
    let mut t = TraceFile::parse(&cut).unwrap();
    t.path = Some(PathBuf::from("/runs/r/traces/s001-cuda/trace-42.jsonl"));
    let label = |p: &Path| p.strip_prefix("/runs/r").unwrap().display().to_string();
    // One request per num_gpu, so that each group's claim is about one request.
    let rec = |rep: u32, window: [u64; 2]| {
        let mut r = crate::run::write::store::tests::record("r", &format!("cuda|m|ngl={rep}|p|n=1|e1|r1"), rep as u64);
        r.endpoint = "cuda".into();
        r.num_gpu = i64::from(rep);
        r.trace = Some(join("traces/s001-cuda", vec![], &[&t], &label, window, 20));
        r
    };
    // Before the cut, across it (the window [6000,7000] counts, the cut at 7500 comes before the end), after it.
    let records = [rec(1, [3100, 3900]), rec(2, [6500, 8000]), rec(3, [8000, 9000])];
    let (claims, text) = claims_and_text(&records);
    let k: Vec<&crate::evidence::Claim> = claims.iter().filter(|c| c.id.ends_with(".kernels")).collect();
    use crate::evidence::Confidence;
    assert_eq!(k[0].confidence, Confidence::Confirmed);
    assert!(k[0].statement.contains(" 508 launches in all") && k[0].statement.contains("and no MMQ"));
    assert_eq!(k[1].confidence, Confidence::Limited, "{}", k[1].statement);
    assert!(k[1].statement.contains("MMVQ 999, 999 launches in all"), "{}", k[1].statement);
    assert!(!k[1].statement.contains("no MMQ"), "absence is not established by a cut trace: {}", k[1].statement);
    assert!(
        k[1].statement.contains("1 of the traces were cut before their request ended, so these are lower bounds"),
        "{}",
        k[1].statement
    );
    assert_eq!(k[2].confidence, Confidence::Unresolved, "{}", k[2].statement);
    assert!(!k[2].statement.contains("no CUDA/HIP kernel launch"), "{}", k[2].statement);
    assert!(k[2].statement.contains("launches during the requests are unknown"), "{}", k[2].statement);
    assert!(text.contains("(trace cut: lower bounds)"), "{text}");
}

/// A Vulkan server process that lost its device and then aborted, as the observer and the Vulkan layer write
/// it (the layer's lines as crates/vklayer writes them, tests/vulkan/crash.rs runs it for real).
#[test]
fn a_vulkan_crash_and_a_lost_device_join_their_request_as_one_crash_claim_and_a_device_lost_claim() {
    let header = |writer: &str| {
        format!(
            r#"{{"format":"backscope-trace","version":3,"pid":77,"ppid":1,"exe":"/bin/llama-server","cmdline":[],"clock":"monotonic","start_ns":1000,"interval_ms":20,"shape_buckets":8,"max_kernels":1024,"max_bytes":0,"observer":"0.1.0","writer":"{writer}"}}"#
        )
    };
    let observer = format!(
        "{}\n{}\n",
        header("backscope-observer"),
        r#"{"crash":6,"signal":"SIGABRT","code":-6,"addr":0,"sender_pid":77,"at_ns":5000,"seq":1,"tid":77,"flushed":false,"threads":[{"tid":77,"launches":[]}]}"#
    );
    let queues = r#""queues":[{"queue":0,"device":0,"submits":9,"dispatches":[[1,8,[8,2,1],1],[2,9,[1,1,1],1]]}]"#;
    let layer = [
        header("backscope-vklayer"),
        r#"{"device":0,"api":"vulkan","name":"AMD Radeon RX Vega (RADV VEGA10)"}"#.to_string(),
        r#"{"kernel":1,"name":"matmul_q4_k_f32_l","api":"vulkan","source":"debug_name","device":0}"#.to_string(),
        r#"{"kernel":2,"name":"add_f32","api":"vulkan","source":"debug_name","device":0}"#.to_string(),
        r#"{"window":[1000,4000],"counts":[[1,8],[2,9]],"submits":9}"#.to_string(),
        format!(r#"{{"device_lost":"vkWaitForFences","result":-4,"at_ns":4500,"seq":1,"tid":78,{queues}}}"#),
        format!(
            r#"{{"crash":6,"signal":"SIGABRT","code":-6,"addr":0,"sender_pid":77,"at_ns":4990,"seq":1,"tid":77,"flushed":true,"threads":[{{"tid":77,"launches":[]}},{{"tid":78,"in_flight":"vkWaitForFences","launches":[]}}],{queues}}}"#
        ),
    ]
    .join("\n");
    let mut a = TraceFile::parse(&observer).unwrap();
    a.path = Some(PathBuf::from("/runs/r/traces/s001-vk/trace-77.jsonl"));
    let mut b = TraceFile::parse(&layer).unwrap();
    b.path = Some(PathBuf::from("/runs/r/traces/s001-vk/trace-77.1.jsonl"));
    let label = |p: &Path| p.strip_prefix("/runs/r").unwrap().display().to_string();
    let mut rec = crate::run::write::store::tests::record("r", "vk|m|ngl=1|p|n=1|e1|r1", 1);
    rec.endpoint = "vk".into();
    // The server died of the SIGABRT: the request failed (the summary reads crash records of failed runs).
    rec.status = crate::run::format::record::Status::Fail;
    rec.error_class = Some(crate::run::format::record::ErrorClass::Crash);
    rec.signal = Some("SIGABRT".into());
    rec.trace = Some(join("traces/s001-vk", vec![], &[&a, &b], &label, [3000, 6000], 20));
    let t = rec.trace.as_ref().unwrap();
    assert_eq!(t.crashes.len(), 1, "the observer's and the layer's records of one signal are one: {:#?}", t.crashes);
    assert_eq!(t.crashes[0].vulkan_file.as_deref(), Some("traces/s001-vk/trace-77.1.jsonl"));
    assert_eq!(t.crashes[0].threads[1].in_flight.as_deref(), Some("vkWaitForFences"));
    assert_eq!(t.device_lost.len(), 1);
    let (claims, _) = claims_and_text(std::slice::from_ref(&rec));
    let crash = claims.iter().find(|c| c.id.ends_with(".trace_crash")).expect("a crash claim");
    assert_eq!(crash.confidence, crate::evidence::Confidence::Confirmed);
    assert!(
        crash.statement.contains(
            "the last Vulkan dispatches before the crash were: queue 0 (AMD Radeon RX Vega (RADV VEGA10)), \
             submissions 8–9 of 9: 1× matmul_q4_k_f32_l"
        ) && crash.statement.ends_with("1× add_f32 (ADD) [1,1,1]; the last: add_f32 (ADD)"),
        "{}",
        crash.statement
    );
    assert_eq!(crash.sources.len(), 3, "both trace files and the run: {:?}", crash.sources);
    let lost = claims.iter().find(|c| c.id.ends_with(".trace_device_lost")).expect("a device-lost claim");
    assert!(
        lost.statement
            .contains("pid 77 (/bin/llama-server): vkWaitForFences returned VK_ERROR_DEVICE_LOST in thread 78"),
        "{}",
        lost.statement
    );
    // A request that began after both records carries neither.
    let later = join("traces/s001-vk", vec![], &[&a, &b], &label, [7000, 8000], 20);
    assert!(later.crashes.is_empty() && later.device_lost.is_empty());
}

#[test]
fn server_env_preloads_the_observer_before_an_existing_preload() {
    let mut env = vec![("LD_PRELOAD".to_string(), "/lib/a.so".to_string()), ("X".into(), "1".into())];
    server_env(&mut env, Path::new("/o/libbackscope_observer.so"), Path::new("/r/traces/s001-x"), 20, None);
    assert!(env.contains(&("LD_PRELOAD".into(), "/o/libbackscope_observer.so:/lib/a.so".into())));
    assert!(env.contains(&("BACKSCOPE_TRACE_DIR".into(), "/r/traces/s001-x".into())));
    assert!(env.contains(&("BACKSCOPE_TRACE_INTERVAL_MS".into(), "20".into())));
    let mut env = Vec::new();
    server_env(&mut env, Path::new("/o/l.so"), Path::new("/d"), 5, Some("/lib/b.so".into()));
    assert_eq!(env[0], ("LD_PRELOAD".into(), "/o/l.so:/lib/b.so".into()));
    assert!(monotonic_ns() > 0);
}
