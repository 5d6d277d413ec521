use super::*;

/// Kept lines from `(seq, usec, text)`, as the capture stores them in `kernel-log.jsonl`.
fn lines(records: &[(u64, u64, &str)]) -> Vec<KernelLine> {
    records
        .iter()
        .enumerate()
        .map(|(i, &(seq, usec, text))| {
            KernelLine::new("kernel-log.jsonl".into(), i as u64 + 2, (seq, usec, 3), text.into(), None)
                .unwrap_or_else(|| panic!("not a GPU line: {text}"))
        })
        .collect()
}

/// ggml-org/llama.cpp#21724 (turn 8 by SteelPh0enix): a Vulkan device loss on an AMD APU, kernel 6.x, with the
/// pid moved to 4242 (the traced process of the test) and times made up around it.
fn amdgpu_device_loss(pid: u32) -> Vec<KernelLine> {
    let process = format!("amdgpu 0000:c2:00.0:  Process llama-server pid {pid} thread llama-server pid {pid}");
    lines(&[
        (10, 100_000_000, "amdgpu 0000:c2:00.0: [drm] AMDGPU device coredump file has been created"),
        (11, 100_000_100, "amdgpu 0000:c2:00.0: [drm] Check your /sys/class/drm/card1/device/devcoredump/data"),
        (12, 100_000_200, "amdgpu 0000:c2:00.0: ring gfx_0.0.0 timeout, signaled seq=166926, emitted seq=166928"),
        (13, 100_000_300, &process),
        (14, 100_000_400, "amdgpu 0000:c2:00.0: Starting gfx_0.0.0 ring reset"),
        (15, 100_000_500, "amdgpu 0000:c2:00.0: Ring gfx_0.0.0 reset succeeded"),
        // 8 minutes later: the next hang (its coredump line) is another incident.
        (16, 580_000_000, "amdgpu 0000:c2:00.0: [drm] AMDGPU device coredump file has been created"),
    ])
}

fn lost(pid: u32, at_ns: u64) -> Failure {
    Failure { pid, at_ns, what: "VK_ERROR_DEVICE_LOST (vkWaitForFences)".into(), claim: "trace.device_lost".into() }
}

#[test]
fn an_amdgpu_timeout_naming_the_traced_pid_joins_its_device_loss() {
    let kept = amdgpu_device_loss(4242);
    let traced = [(4242, "llama-server".to_string()), (99, "sh".to_string())];
    // The device loss 1.5 s after the timeout (the kernel times out the job, resets, the process sees the loss).
    let failures = [lost(4242, 101_500_200_000)];
    let joined = join(&kept, &traced, &failures);
    assert_eq!(joined.len(), 2, "{joined:#?}");
    let j = &joined[0];
    assert_eq!((j.incident.lines.len(), j.incident.pid, j.failure), (6, Some(4242), Some(0)));
    assert_eq!(j.confidence, Confidence::Confirmed);
    let last_work = |pid: u32, _t: u64| (pid == 4242).then_some([99_500_000_000, 99_600_000_000]);
    let c = j.claim("trace.kernel.1".into(), &failures, &last_work);
    assert_eq!(
        c.statement,
        "The kernel's GPU driver reported a GPU job timeout on ring gfx_0.0.0 naming pid 4242 (llama-server), a traced \
         process (llama-server), at 100.000200 s (kernel time); 1.500 s before pid 4242's VK_ERROR_DEVICE_LOST \
         (vkWaitForFences) (trace.device_lost); 400–500 ms after its last observed GPU work (the trace window that held \
         it); the GPU was reset; a device coredump was written"
    );
    assert_eq!(c.sources.len(), 6);
    assert!(
        matches!(&c.sources[2], Source::LogLine { line: 4, text, .. } if text.starts_with("[  100.000200] amdgpu"))
    );
    let (note, sources) = j.note_for(0, "trace.kernel.1", &failures).unwrap();
    assert_eq!(
        note,
        "; the kernel's side (trace.kernel.1): a GPU job timeout on ring gfx_0.0.0 naming this process, 1.500 s before \
         it; the GPU was reset, a device coredump was written"
    );
    assert_eq!(sources.len(), 6);
    // The later coredump names no process and no failure is near it.
    let later = &joined[1];
    assert_eq!((later.failure, later.confidence), (None, Confidence::Unresolved));
    let c = later.claim("trace.kernel.2".into(), &failures, &last_work);
    assert!(
        c.statement.contains("naming no process") && c.statement.contains("whose job it was is not known"),
        "{}",
        c.statement
    );
}

#[test]
fn a_line_naming_another_process_is_kept_and_not_joined() {
    let kept = amdgpu_device_loss(3503);
    let joined = join(&kept, &[(4242, "vkspin".into())], &[lost(4242, 101_000_000_000)]);
    let j = &joined[0];
    assert_eq!((j.traced.as_ref(), j.failure, j.confidence), (None, None, Confidence::Confirmed));
    let c = j.claim("trace.kernel.1".into(), &[lost(4242, 101_000_000_000)], &|_, _| None);
    assert!(c.statement.contains("naming pid 3503 (llama-server), which is not a traced process"), "{}", c.statement);
    assert!(!c.statement.contains("trace.device_lost"), "{}", c.statement);
    assert!(j.note_for(0, "trace.kernel.1", &[lost(4242, 101_000_000_000)]).is_none());
}

#[test]
fn nvidia_and_intel_lines_name_their_process_in_the_trigger() {
    // tinygrad/tinygrad#6947: two MMU faults of two python processes, 6 minutes apart; clearlinux/distribution#2907:
    // an i915 hang with its chip reset before it (pids and times as there, apart from the hang's time).
    let kept = lines(&[
        (1, 22_859_081_860, "NVRM: Xid (PCI:0000:01:00): 31, pid=14292, name=python, Ch 00000030, intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_ESC faulted @ 0x10_00200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"),
        (2, 23_203_142_515, "NVRM: Xid (PCI:0000:01:00): 31, pid=14566, name=python, Ch 00000030, intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_ESC faulted @ 0x10_00200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"),
        (3, 30_000_000_000, "i915 0000:00:02.0: [drm] Resetting chip for GuC failed to reset engine mask=0x1"),
        (4, 30_000_000_100, "i915 0000:00:02.0: [drm] GPU HANG: ecode 12:1:0020fffe, in xdg-desktop-por [1676]"),
    ]);
    let incidents = incidents(&kept);
    let got: Vec<(Option<u32>, String, Vec<&str>)> = incidents.iter().map(|i| (i.pid, i.what(), i.after())).collect();
    assert_eq!(
        got,
        vec![
            (Some(14292), "NVIDIA Xid 31".to_string(), vec![]),
            (Some(14566), "NVIDIA Xid 31".to_string(), vec![]),
            (Some(1676), "a GPU hang".to_string(), vec!["a GPU reset began"]),
        ]
    );
    let joined = join(&kept, &[(14566, "python".into())], &[]);
    assert_eq!(joined.iter().map(|j| j.traced.is_some()).collect::<Vec<_>>(), vec![false, true, false]);
}

#[test]
fn bursts_stay_one_incident_and_a_second_timeout_is_another() {
    let kept = lines(&[
        (1, 1_000_000, "amdgpu 0000:03:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:3 pasid:32771)"),
        (2, 1_000_010, "amdgpu 0000:03:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:3 pasid:32771)"),
        (3, 1_000_020, "amdgpu 0000:02:00.0: VM_L2_PROTECTION_FAULT_STATUS:0x0020153C"),
        (4, 2_000_000, "amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9"),
        (5, 2_000_010, "amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=9, emitted seq=11"),
    ]);
    let got: Vec<String> = incidents(&kept).iter().map(Incident::what).collect();
    assert_eq!(
        got,
        vec![
            "a GPU page fault (3 lines)",
            "a GPU job timeout on ring comp_1.1.0",
            "a GPU job timeout on ring comp_1.1.0"
        ]
    );
}

#[test]
fn times_read_as_the_kernel_and_the_trace_clock_compare() {
    assert_eq!(relative(1_000_000, 2_500_000_000), "1.500 s before");
    assert_eq!(relative(3_000_000, 2_500_000_000), "0.500 s after");
    assert_eq!(relative(2_500_000, 2_500_000_400), "within a millisecond of");
}

#[test]
fn the_capture_s_limits_are_one_limited_claim() {
    let log = KernelLog {
        file: "kernel-log.jsonl".into(),
        unreadable: Some("/dev/kmsg: Operation not permitted (os error 1)".into()),
        ..Default::default()
    };
    let c = limits_claim(&log, "trace.kernel_log").unwrap();
    assert_eq!(c.confidence, Confidence::Limited);
    assert!(
        c.statement.starts_with("Kernel log: the kernel log was not read (/dev/kmsg: Operation not permitted"),
        "{}",
        c.statement
    );
    let ended = KernelLog {
        file: "k".into(),
        end: Some(super::super::stored::End { lost: 3, ..Default::default() }),
        ..Default::default()
    };
    assert!(limits_claim(&ended, "x").unwrap().statement.contains("3 kernel log records were overwritten"));
    let fine = KernelLog { file: "k".into(), end: Some(Default::default()), ..Default::default() };
    assert!(limits_claim(&fine, "x").is_none());
}
