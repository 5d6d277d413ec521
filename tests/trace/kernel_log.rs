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

/// A service's trace as `trace --env` leaves it (backscope not running beside it, so no kernel-log.jsonl): pid 4242
/// from `start` for 4 s, one window of work and its end record, CLOCK_MONOTONIC ns.
fn plant_service_trace(dir: &Path, start_ns: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let header = format!(
        "{{\"format\":\"backscope-trace\",\"version\":3,\"pid\":4242,\"ppid\":1,\"exe\":\"/usr/bin/llama-server\",\
         \"cmdline\":[\"llama-server\"],\"clock\":\"monotonic\",\"start_ns\":{start_ns},\"interval_ms\":50,\
         \"shape_buckets\":8,\"max_kernels\":1048576,\"max_bytes\":0,\"observer\":\"0.1.0\",\
         \"writer\":\"backscope-observer\"}}"
    );
    let kernel = r#"{"kernel":1,"name":"mul_mat_vec_q4_k","api":"hip","source":"register"}"#;
    let window =
        format!("{{\"window\":[{},{}],\"counts\":[[1,5]]}}", start_ns + 1_000_000_000, start_ns + 1_050_000_000);
    let end = format!("{{\"end_ns\":{},\"reason\":\"exit\"}}", start_ns + 4_000_000_000);
    std::fs::write(dir.join("trace-4242.jsonl"), [header, kernel.to_string(), window, end].join("\n") + "\n").unwrap();
}

/// amdgpu's ring timeout naming pid 4242, then its reset, at `usec` (the kernel 6.x lines of
/// ggml-org/llama.cpp#21724, turn 8, with the traced pid in place of theirs), as /dev/kmsg records.
fn amdgpu_timeout_kmsg(first_seq: u64, usec: u64) -> String {
    [
        (3, "amdgpu 0000:c2:00.0: ring gfx_0.0.0 timeout, signaled seq=166926, emitted seq=166928"),
        (3, "amdgpu 0000:c2:00.0:  Process llama-server pid 4242 thread llama-server pid 4242"),
        (6, "amdgpu 0000:c2:00.0: Starting gfx_0.0.0 ring reset"),
        (6, "amdgpu 0000:c2:00.0: Ring gfx_0.0.0 reset succeeded"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (level, text))| format!("{level},{},{},-;{text}\n", first_seq + i as u64, usec + i as u64 * 100))
    .collect()
}

/// The same lines as journalctl's JSON output of this boot (`journalctl -k -o json -b 0`).
fn amdgpu_timeout_journal(usec: u64) -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim().replace('-', "");
    amdgpu_timeout_kmsg(1, usec)
        .lines()
        .map(|l| {
            let (head, text) = l.split_once(';').unwrap();
            let f: Vec<&str> = head.split(',').collect();
            serde_json::json!({
                "_BOOT_ID": boot, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0", "PRIORITY": f[0],
                "_SOURCE_MONOTONIC_TIMESTAMP": f[2], "__MONOTONIC_TIMESTAMP": (f[2].parse::<u64>().unwrap() + 5).to_string(),
                "MESSAGE": text, "_KERNEL_DEVICE": "+pci:0000:c2:00.0",
            })
            .to_string()
                + "\n"
        })
        .collect()
}

/// `trace --read --json DIR` with the kernel log played from `kmsg` and the journal from `journal`.
fn read_traced(dir: &Path, kmsg: &Path, journal: &Path) -> serde_json::Value {
    let out = crate::support::util::run(
        crate::support::util::backscope()
            .args(["trace", "--json", "--read"])
            .arg(dir)
            .env("BACKSCOPE_KMSG", kmsg)
            .env("BACKSCOPE_JOURNALCTL", journal),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(said.trim_end().rsplit('\n').next().unwrap()).unwrap()
}

fn claim_of<'a>(summary: &'a serde_json::Value, id: &str) -> Option<&'a serde_json::Value> {
    summary["claims"].as_array().unwrap().iter().find(|c| c["id"] == id)
}

/// A service traced with `--env` has no kernel-log.jsonl; `trace --read` reads the kernel log from its oldest record
/// for the traces' span and joins the timeout naming the traced pid, saying the lines were read after the fact and
/// writing nothing into the traced directory.
#[test]
fn trace_read_joins_kernel_lines_read_after_the_fact_from_kmsg() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, kmsg, journal) = (tmp.path().join("traces"), tmp.path().join("kmsg"), tmp.path().join("journal"));
    let start = monotonic_usec() - 20_000_000;
    plant_service_trace(&dir, start * 1000);
    // A record from before the traces, then the timeout 2 s into them.
    let text = format!("6,10,{},-;amdgpu 0000:c2:00.0: Dumping IP State\n", start - 1_000_000)
        + &amdgpu_timeout_kmsg(11, start + 2_000_000);
    std::fs::write(&kmsg, text).unwrap();
    std::fs::write(&journal, "").unwrap();
    let summary = read_traced(&dir, &kmsg, &journal);
    let joined = claim_of(&summary, "trace.kernel").expect("the kernel's incident is a claim");
    assert_eq!(joined["confidence"], "Confirmed");
    let statement = joined["statement"].as_str().unwrap();
    assert!(
        statement.starts_with(
            "The kernel's GPU driver reported a GPU job timeout on ring gfx_0.0.0 naming pid 4242 (llama-server), a \
             traced process (/usr/bin/llama-server),"
        ) && statement.contains("; the GPU was reset")
            && statement.contains(&format!(
                "(the kernel's lines read after the fact from {} for the traces' span ",
                kmsg.display()
            )),
        "{statement}"
    );
    // Cited as the source and the record's sequence number.
    let sources = joined["sources"].as_array().unwrap();
    assert_eq!((sources[0]["path"].as_str(), sources[0]["line"].as_u64()), (kmsg.to_str(), Some(11)));
    let limits = claim_of(&summary, "trace.kernel_log").expect("how the lines were read is said");
    assert_eq!(limits["confidence"], "Limited");
    assert!(limits["statement"].as_str().unwrap().contains("backscope did not run beside the traced processes"));
    assert_eq!(summary["kernel_log"]["lines"].as_array().unwrap().len(), 4);
    assert!(!dir.join(FILE_NAME).exists(), "reading never writes into the traced directory");
}

/// Where the kernel log cannot be read, the journal's kernel lines of this boot are read instead, at the kernel's
/// own timestamps (`_SOURCE_MONOTONIC_TIMESTAMP`), and the claim says they came from the journal.
#[test]
fn trace_read_joins_kernel_lines_from_the_journal_when_kmsg_is_unreadable() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, journal) = (tmp.path().join("traces"), tmp.path().join("journal.json"));
    let start = monotonic_usec() - 20_000_000;
    plant_service_trace(&dir, start * 1000);
    std::fs::write(&journal, amdgpu_timeout_journal(start + 2_000_000)).unwrap();
    let summary = read_traced(&dir, &tmp.path().join("no-such-kmsg"), &journal);
    let joined = claim_of(&summary, "trace.kernel").expect("the journal's incident is a claim");
    assert_eq!(joined["confidence"], "Confirmed");
    let statement = joined["statement"].as_str().unwrap();
    assert!(
        statement.contains("naming pid 4242 (llama-server), a traced process")
            && statement.contains(&format!("read after the fact from the journal ({})", journal.display())),
        "{statement}"
    );
    let lines = summary["kernel_log"]["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        (lines[0]["usec"].as_u64(), lines[0]["device"].as_str()),
        (Some(start + 2_000_000), Some("+pci:0000:c2:00.0"))
    );
}

/// Kernel lines before the traces began or long after their last record are not theirs: nothing is joined, and with
/// nothing kept and nothing wrong the summary says nothing of the kernel log.
#[test]
fn kernel_lines_outside_the_traces_span_join_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, kmsg, journal) = (tmp.path().join("traces"), tmp.path().join("kmsg"), tmp.path().join("journal"));
    let start = monotonic_usec() - 300_000_000;
    plant_service_trace(&dir, start * 1000);
    // 100 s before the start, and 120 s after the end record (4 s in): past the 30 s the span reaches beyond it.
    let text = amdgpu_timeout_kmsg(1, start - 100_000_000) + &amdgpu_timeout_kmsg(5, start + 124_000_000);
    std::fs::write(&kmsg, text).unwrap();
    std::fs::write(&journal, "").unwrap();
    let summary = read_traced(&dir, &kmsg, &journal);
    assert!(claim_of(&summary, "trace.kernel").is_none() && claim_of(&summary, "trace.kernel.1").is_none());
    assert!(claim_of(&summary, "trace.kernel_log").is_none(), "{:#?}", summary["claims"]);
    assert!(summary["kernel_log"].is_null(), "{}", summary["kernel_log"]);
}

/// Traces last written before this machine booted are of another boot: their kernel log is not here, and the
/// summary says so rather than joining this boot's lines at the same clock values.
#[test]
fn traces_from_another_boot_say_their_kernel_log_is_not_available() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, kmsg, journal) = (tmp.path().join("traces"), tmp.path().join("kmsg"), tmp.path().join("journal.json"));
    let start = monotonic_usec() - 20_000_000;
    plant_service_trace(&dir, start * 1000);
    let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    std::fs::File::options().write(true).open(dir.join("trace-4242.jsonl")).unwrap().set_modified(long_ago).unwrap();
    std::fs::write(&kmsg, amdgpu_timeout_kmsg(1, start + 2_000_000)).unwrap();
    std::fs::write(&journal, amdgpu_timeout_journal(start + 2_000_000)).unwrap();
    let summary = read_traced(&dir, &kmsg, &journal);
    assert!(claim_of(&summary, "trace.kernel").is_none(), "{:#?}", summary["claims"]);
    let limits = claim_of(&summary, "trace.kernel_log").expect("the missing kernel log is said");
    assert_eq!(limits["confidence"], "Limited");
    let statement = limits["statement"].as_str().unwrap();
    assert!(
        statement.contains("from an earlier boot")
            && statement.contains("the kernel log of that boot is not available here"),
        "{statement}"
    );
}
