//! Hostile and broken input: binary files, a 1 GiB line, escape sequences, invalid UTF-8, broken
//! timestamps, and a long log that must stay within the report's caps. Memory is checked against the
//! process's peak RSS (this test binary runs only these tests).

mod drain;

use std::io::Read;

use logs::{analyze_bytes, analyze_reader, Error, EventKind, Limits, Parser};

/// Peak resident set size of this process in KiB (Linux `VmHWM`).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_binary_file_is_refused_with_its_offset() {
    // This test executable is an ELF file: e_ident is 7f 'E' 'L' 'F', class, data, version, then
    // EI_OSABI = 0 (System V) at offset 7 (System V ABI, "ELF Identification").
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    assert_eq!(&exe[..4], b"\x7fELF");
    match analyze_bytes(&exe, Limits::default()) {
        Err(Error::Binary { offset }) => assert_eq!(offset, 7),
        other => panic!("expected a binary-file error, got {other:?}"),
    }
    let message = Error::Binary { offset: 7 }.to_string();
    assert!(message.contains("0x7") && message.contains("binary file"), "{message}");
}

#[test]
fn a_one_gib_line_is_cut_not_loaded() {
    let before = peak_rss_kib();
    let huge = std::io::repeat(b'x').take(1 << 30);
    let tail: &[u8] = b"\nload_backend: loaded CPU backend from /usr/lib/ollama/libggml-cpu-haswell.so\n";
    let limits = Limits::default();
    let mut events = Vec::new();
    let stats = Parser::parse_reader(huge.chain(tail), limits, |e| {
        events.push((e.line, e.raw.len(), e.flags.truncated, e.kind.name()));
    })
    .unwrap();
    assert_eq!(stats.bytes, (1 << 30) + tail.len() as u64);
    assert_eq!(stats.truncated_lines, 1);
    assert_eq!(events, vec![(1, limits.max_line, true, "other"), (2, 76, false, "backend_loaded")]);
    let grown_mib = peak_rss_kib().saturating_sub(before) / 1024;
    assert!(grown_mib < 64, "peak RSS grew by {grown_mib} MiB for a 1 GiB line");
}

#[test]
fn escape_sequences_and_invalid_utf8_do_not_break_a_line() {
    // A real line (ollama/ollama#13070) wrapped in colour codes, with two invalid bytes in the path.
    let line = b"\x1b[32mload_backend: loaded ROCm backend from /usr/lib/oll\xff\xfeama/libggml-hip.so\x1b[0m\n";
    let mut seen = Vec::new();
    let mut parser = Parser::new(Limits::default());
    let mut sink = |e: &logs::Event<'_>| {
        let EventKind::BackendLoaded { backend, path } = e.kind else { panic!("{:?}", e.kind) };
        seen.push((
            backend.to_vec(),
            path.to_vec(),
            e.flags.ansi,
            e.flags.invalid_utf8,
            e.raw.starts_with(b"\x1b[32m"),
        ));
    };
    parser.feed(line, &mut sink).unwrap();
    parser.finish(&mut sink).unwrap();
    assert_eq!(seen, vec![(b"ROCm".to_vec(), b"/usr/lib/oll\xff\xfeama/libggml-hip.so".to_vec(), true, true, true)]);
    // The report keeps the raw text (escape included, for a renderer to escape) and a printable summary.
    let r = analyze_bytes(line, Limits::default()).unwrap();
    assert!(r.timeline[0].raw.starts_with('\u{1b}'));
    assert!(r.timeline[0].summary.contains('\u{fffd}'));
    assert!(!logs::render::report_text(&r).contains('\u{1b}'));
}

#[test]
fn broken_timestamps_are_flagged_not_fatal() {
    // The discovery-failure line of ollama/ollama#15762 with its month turned into 13.
    let line = br#"time=2026-13-23T01:57:05.334Z level=INFO source=runner.go:464 msg="failure during GPU discovery" error="runner crashed""#;
    let r = analyze_bytes(line, Limits::default()).unwrap();
    assert_eq!(r.stats.bad_timestamps, 1);
    assert_eq!(r.bad_timestamps.ranges, vec![(1, 1)]);
    assert_eq!(r.timeline[0].kind, "discovery_failure");
    assert_eq!(r.timeline[0].t, None);
}

#[test]
fn a_long_log_stays_within_the_caps() {
    // The crash of ollama/ollama#9352 repeated 3000 times, each after a runner start (~10 MB).
    let crash =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ollama-9352-assert-sigsegv.log")).unwrap();
    let runner = b"time=2025-02-26T00:30:00.000Z level=INFO source=server.go:405 msg=\"starting llama server\" cmd=\"/usr/bin/ollama runner --model /m --port 1\"\n";
    let mut log = Vec::new();
    for _ in 0..3000 {
        log.extend_from_slice(runner);
        log.extend_from_slice(&crash);
    }
    let limits = Limits::default();
    let r = analyze_reader(&log[..], limits).unwrap();
    assert_eq!(r.crashes.len(), limits.max_crashes);
    assert_eq!(r.crashes_total, 3000);
    assert_eq!(r.crashes_dropped, 3000 - limits.max_crashes as u64);
    assert_eq!(r.signatures.len(), 1);
    assert_eq!(r.signatures[0].count, 3000);
    assert_eq!(r.timeline.len(), limits.timeline_head + limits.timeline_tail);
    assert!(r.timeline_elided > 0);
    assert!(r.other.ranges.len() <= limits.max_ranges);
    assert_eq!(r.stats.lines, 3000 * 35);
}

/// One Ollama runner crash cycle as the server logs it: the runner is started (the `starting llama server`
/// line of ollama/ollama#9352's era, with a port of its own), loads, crashes (the GGML_ASSERT and SIGSEGV of
/// tests/data/ollama-9352-assert-sigsegv.log, with its goroutine dump) and is reported dead (the `post predict`
/// EOF, `llama runner terminated` and HTTP 500 lines of tests/data/ollama-14983-post-predict-eof.log).
fn runner_crash_cycle(i: usize) -> Vec<u8> {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/");
    let crash = std::fs::read(format!("{data}ollama-9352-assert-sigsegv.log")).unwrap();
    let death = std::fs::read_to_string(format!("{data}ollama-14983-post-predict-eof.log")).unwrap();
    let mut cycle = format!(
        "time=2025-02-26T00:25:17.{:03}Z level=INFO source=server.go:405 msg=\"starting llama server\" cmd=\"/usr/bin/ollama runner --model /m --port {}\"\n",
        i % 1000,
        40000 + i
    )
    .into_bytes();
    cycle.extend_from_slice(&crash);
    for line in
        death.lines().filter(|l| l.contains("post predict") || l.contains("runner terminated") || l.contains("| 500 |"))
    {
        cycle.extend_from_slice(line.as_bytes());
        cycle.push(b'\n');
    }
    cycle
}

#[test]
fn a_thousand_runner_crash_cycles_are_a_thousand_crashes() {
    // Past the cap crashes used to be followed without their signals, so every later cycle merged into one
    // (1000 cycles: 257 crashes). Each cycle is one crash, kept in detail or not; 1000 is past the cap.
    let mut log = Vec::new();
    let mut starts = Vec::new();
    for i in 0..1000 {
        starts.push(log.iter().filter(|b| **b == b'\n').count() as u64 + 1);
        log.extend_from_slice(&runner_crash_cycle(i));
    }
    let limits = Limits::default();
    assert!(limits.max_crashes < 1000);
    let r = analyze_bytes(&log, limits).unwrap();
    assert_eq!(r.crashes_total, 1000);
    assert_eq!(r.crashes.len(), limits.max_crashes);
    assert_eq!(r.crashes_dropped, 1000 - limits.max_crashes as u64);
    // One signature, every cycle counted in it; the kept crashes are the first ones, one per cycle.
    assert_eq!(r.signatures.len(), 1, "{:?}", r.signatures);
    assert_eq!(r.signatures[0].count, 1000);
    assert_eq!(r.signatures_dropped, 0);
    for (c, start) in r.crashes.iter().zip(&starts) {
        let end = start + runner_crash_cycle(0).iter().filter(|b| **b == b'\n').count() as u64;
        assert!(
            c.line > *start && c.last_line < end,
            "crash {}–{} outside its cycle {start}–{end}",
            c.line,
            c.last_line
        );
        assert!(c.signal.as_ref().is_some_and(|s| s.name == "SIGSEGV"));
        assert!(c.consequences.iter().any(|q| q.kind == "runner_terminated"), "{:?}", c.consequences);
    }
    // The count does not depend on the cap.
    for max_crashes in [0, 1, 4, 10_000] {
        let r = analyze_bytes(&log, Limits { max_crashes, ..limits }).unwrap();
        assert_eq!((r.crashes_total, r.crashes.len()), (1000, max_crashes.min(1000)), "max_crashes {max_crashes}");
    }
}

#[test]
fn a_second_runner_termination_is_a_second_crash() {
    // The death of ollama/ollama#14983 (post predict EOF, runner terminated, HTTP 500) twice, without a
    // runner start between them (a log excerpt): a runner terminates once, so these are two crashes.
    let death =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ollama-14983-post-predict-eof.log")).unwrap();
    let log = [&death[..], &death[..]].concat();
    let r = analyze_bytes(&log, Limits::default()).unwrap();
    // (A `post predict` EOF right after a termination stays with it: with parallel requests Ollama logs one per
    // request, and the order of those and the termination is not fixed.)
    assert_eq!(r.crashes_total, 2, "{:#?}", r.crashes);
    for c in &r.crashes {
        assert_eq!(c.consequences.iter().filter(|q| q.kind == "runner_terminated").count(), 1, "{c:#?}");
    }
}

#[test]
fn cr_only_and_crlf_logs_are_read_as_the_lines_they_show() {
    // A real crash log (ollama/ollama#9352) with its line ends rewritten: CR alone (old Mac files, pastes,
    // progress output) made the whole log one line; CRLF must stay one end per line.
    let lf = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ollama-9352-assert-sigsegv.log")).unwrap();
    let lines = lf.iter().filter(|b| **b == b'\n').count() as u64;
    let expected = analyze_bytes(&lf, Limits::default()).unwrap();
    assert_eq!((expected.stats.lines, expected.crashes_total), (lines, 1));
    for end in [&b"\r"[..], b"\r\n"] {
        let rewritten: Vec<u8> =
            lf.split(|b| *b == b'\n').collect::<Vec<_>>().join(end).into_iter().collect::<Vec<u8>>();
        let r = analyze_bytes(&rewritten, Limits::default()).unwrap();
        assert_eq!(r.stats.lines, lines, "{end:?}");
        assert_eq!(r.counts, expected.counts, "{end:?}");
        assert_eq!(r.crashes_total, 1);
        let (c, e) = (&r.crashes[0], &expected.crashes[0]);
        assert_eq!((c.line, c.last_line, &c.signature.id, c.phase), (e.line, e.last_line, &e.signature.id, e.phase));
        assert_eq!(r.timeline.len(), expected.timeline.len());
        assert!(r.timeline.iter().all(|t| !t.raw.contains('\r')), "{end:?}");
    }
}

#[test]
fn edge_cases_hold_the_drain_properties() {
    // The fuzz target's properties on hand-picked edge cases: empty input, lone CR/LF, unbalanced quotes
    // and parentheses, a trace without a header, NUL after the probe window.
    let mut late_nul = vec![b'a'; 100];
    late_nul.extend_from_slice(b"\0\nSIGSEGV: x\n");
    for input in [
        &b""[..],
        b"\r",
        b"\n\n\r\n",
        b"\r\r\n\n\r",
        b"SIGSEGV: segmentation violation\rPC=0x1 m=0 sigcode=1 addr=0x2\rsignal arrived during cgo execution\r",
        b"time=\"",
        b"time=2025-01-01T00:00:00Z msg=\"x",
        b"goroutine 1 [a]:\n)(\n((((\n\t.go:1\n",
        b"slot  : id | task",
        b"ggml_vulkan: 0 = (",
        b"  Device 0: , VMM: ",
        b"#",
        b"[GIN] | | |",
        &late_nul,
    ] {
        drain::logs(input);
    }
}

#[test]
fn the_fuzz_seeds_of_hostile_shapes_hold_the_drain_properties() {
    // fuzz/seeds/logs (scripts/fuzz.sh adds them to the corpus): CR-only and mixed line ends, six runner crash
    // cycles (past the drain's crash cap of 4), terminal escapes, bidi and invisible characters.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/logs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        drain::logs(&std::fs::read(&path).unwrap());
        seen += 1;
    }
    assert!(seen >= 4, "seeds missing in {}", dir.display());
    let cycles = std::fs::read(dir.join("crash-cycles.log")).unwrap();
    let r = analyze_bytes(&cycles, drain::limits()).unwrap();
    assert_eq!((r.crashes_total, r.crashes.len()), (6, drain::limits().max_crashes));
    let cr = analyze_bytes(&std::fs::read(dir.join("cr-only.log")).unwrap(), Limits::default()).unwrap();
    assert_eq!(cr.stats.lines, 8);
}

#[test]
fn fuzz_regressions() {
    // Crash files the fuzz targets `logs` and `kmsg` found, kept in tests/regressions/ (README there).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    fuzz_replay::replay(&dir, &[("logs", drain::logs), ("kmsg", drain::kmsg)]);
}

/// The kmsg fuzz target's properties (drain::kmsg) on its seeds and on every cut and many byte changes of them: the
/// decoder's errors stay values and its records stay inside the input.
#[test]
fn the_kmsg_decoder_holds_on_its_seeds_cut_and_changed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut seeds = vec![std::fs::read(root.join("tests/data/kmsg/gpu-lines.kmsg")).unwrap()];
    for e in std::fs::read_dir(root.join("fuzz/seeds/kmsg")).unwrap() {
        seeds.push(std::fs::read(e.unwrap().path()).unwrap());
    }
    assert!(seeds.len() >= 3);
    for s in &seeds {
        drain::kmsg(s);
        for cut in 0..s.len().min(400) {
            drain::kmsg(&s[..cut]);
            drain::kmsg(&s[cut..]);
        }
        for (i, b) in [b',', b';', b'\n', b' ', b'9', 0xff].iter().cycle().take(600).enumerate() {
            let mut m = s.clone();
            let at = (i * 7919) % m.len();
            m[at] = *b;
            drain::kmsg(&m);
        }
    }
}
