//! The kernel-log capture (`src/observe/kernel_log/`) on the real `/dev/kmsg` of this machine (CI runs as root, which can read
//! and write it) and on real GPU-driver lines from public issues in /dev/kmsg's record format
//! (`tests/data/kmsg/gpu-lines.kmsg`, its README says what is verbatim).

use std::io::Write;
use std::path::Path;

use backscope::observe::kernel_log::capture::{Capture, Reader, KMSG};
use backscope::observe::kernel_log::join;
use backscope::observe::kernel_log::record::FILE_NAME;
use backscope::observe::kernel_log::stored;
use logs::event::GpuDriverEvent as G;

fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// The kernel's log read from the moment the reader opened it: a tagged line written before is not read, one
/// written after is, as a process's line (facility 1) at the printk clock's time, which reads as CLOCK_MONOTONIC;
/// the capture counts it and keeps nothing (it is no GPU-driver line of the kernel's), so it writes no file.
#[test]
fn the_capture_reads_the_real_kernel_log_from_its_start_and_keeps_no_process_line() {
    let tag = format!("backscope-test {}-{}", std::process::id(), monotonic_usec());
    let mut kmsg = std::fs::OpenOptions::new()
        .write(true)
        .open(KMSG)
        .unwrap_or_else(|e| panic!("{KMSG}: {e}: this test writes harmless tagged lines into the kernel log as root"));
    // One write is one record: a formatted write would be several.
    kmsg.write_all(format!("<6>{tag} before: not a GPU line\n").as_bytes()).unwrap();
    let mut reader = Reader::open(KMSG, false).expect("root reads /dev/kmsg");
    let dir = tempfile::tempdir().unwrap();
    let capture = Capture::start_from(&dir.path().join(FILE_NAME), FILE_NAME, None);
    assert_eq!(capture.unreadable(), None);
    kmsg.write_all(format!("<6>{tag} after: not a GPU line\n").as_bytes()).unwrap();
    let written = monotonic_usec();

    let mut seen = Vec::new();
    reader
        .read(&mut |r| {
            let text = String::from_utf8_lossy(r.text).into_owned();
            if text.contains(&tag) {
                seen.push((text, r.facility, r.level, r.usec, r.from_kernel()));
            }
        })
        .unwrap();
    assert_eq!(seen.len(), 1, "only the line written after the reader opened: {seen:?}");
    let (text, facility, level, usec, from_kernel) = &seen[0];
    assert_eq!(
        (text.as_str(), *facility, *level, *from_kernel),
        (&*format!("{tag} after: not a GPU line"), 1, 6, false)
    );
    assert!(usec.abs_diff(written) < 2_000_000, "the printk clock ({usec} µs) against CLOCK_MONOTONIC ({written} µs)");

    let end = capture.finish();
    assert!(end.records >= 1, "{end:?}");
    assert_eq!((end.kept, end.lost, end.over_cap), (0, 0, 0), "{end:?}");
    assert!(!dir.path().join(FILE_NAME).exists(), "nothing kept and nothing wrong: no file");
}

/// Real GPU-driver lines appended to a followed file in /dev/kmsg's format after the capture started: the kernel's
/// GPU-failure lines are kept and stored, the others (driver chatter, a process's line) are not; read back, they group
/// into one incident per failure with the process each names.
#[test]
fn real_gpu_driver_lines_are_kept_stored_and_grouped() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kmsg/gpu-lines.kmsg");
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("kmsg");
    std::fs::write(&source, "6,1,5,-;a record from before the start\n").unwrap();
    let out = dir.path().join(FILE_NAME);
    let capture = Capture::start_from(&out, FILE_NAME, Some(source.to_str().unwrap()));
    let mut f = std::fs::OpenOptions::new().append(true).open(&source).unwrap();
    f.write_all(&std::fs::read(&data).unwrap()).unwrap();
    let end = capture.finish();
    assert_eq!((end.records, end.kept, end.lost), (20, 14, 0), "{end:?}");

    let log = stored::read(&out, FILE_NAME).unwrap();
    assert_eq!(log.source.as_deref(), source.to_str());
    assert!(log.problems.is_empty() && log.end.is_some(), "{log:?}");
    let kept: Vec<(u64, G)> = log.lines.iter().map(|l| (l.seq, l.event)).collect();
    assert_eq!(
        kept,
        vec![
            (102, G::Coredump),
            (103, G::Coredump),
            (104, G::RingTimeout),
            (105, G::Process),
            (106, G::ResetBegin),
            (107, G::ResetSucceeded),
            (112, G::Xid),
            (113, G::Xid),
            (114, G::Xid),
            (115, G::PageFault),
            (116, G::PageFault),
            (118, G::ResetBegin),
            (119, G::Hang),
            (120, G::ResetBegin),
        ]
    );
    // Each kept line cites its line of the stored file (the header is line 1).
    assert_eq!(log.lines.iter().map(|l| l.line).collect::<Vec<_>>(), (2..16).collect::<Vec<u64>>());
    let incidents: Vec<(Option<u32>, String, Vec<&str>)> =
        join::incidents(&log.lines).iter().map(|i| (i.pid, i.what(), i.after())).collect();
    assert_eq!(
        incidents,
        vec![
            (
                Some(12519),
                "a GPU job timeout on ring gfx_0.0.0".into(),
                vec!["the GPU was reset", "a device coredump was written"]
            ),
            (Some(14292), "NVIDIA Xid 31".into(), vec![]),
            (Some(1797828), "NVIDIA Xid 13, 109 (2 lines)".into(), vec![]),
            (Some(28192), "a GPU page fault (2 lines)".into(), vec![]),
            (Some(1676), "a GPU hang".into(), vec!["a GPU reset began"]),
            (None, "a GPU reset on ring ccs".into(), vec![]),
        ]
    );
}

/// The capture's reading thread blocks every signal: `trace` and `sweep` take SIGINT and SIGTERM in the thread that
/// blocked them, and a process-directed signal delivered to a thread that did not would end backscope before its
/// summary (tests/trace/cli.rs's SIGINT test caught this when the signal fell on the reading thread).
#[test]
fn the_reading_thread_takes_no_signal() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("kmsg");
    std::fs::write(&source, "").unwrap();
    let capture = Capture::start_from(&dir.path().join(FILE_NAME), FILE_NAME, Some(source.to_str().unwrap()));
    // The thread names itself once it runs: look until it has (at most 5 s).
    let started = std::time::Instant::now();
    let blocked: Vec<u64> = loop {
        let found: Vec<u64> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "kernel-log"))
            .filter_map(|t| {
                let status = std::fs::read_to_string(t.path().join("status")).ok()?;
                let mask = status.lines().find_map(|l| l.strip_prefix("SigBlk:"))?;
                u64::from_str_radix(mask.trim(), 16).ok()
            })
            .collect();
        if !found.is_empty() || started.elapsed().as_secs() >= 5 {
            break found;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    capture.finish();
    assert!(!blocked.is_empty(), "no kernel-log thread found");
    for mask in blocked {
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGCHLD, libc::SIGHUP] {
            assert_ne!(mask & (1 << (signal - 1)), 0, "signal {signal} not blocked: SigBlk {mask:#x}");
        }
    }
}
