//! `backscope trace` on a real HIP program (Debian's hipcc and HIP runtime, no GPU): the observer sees the
//! registrations and every launch; the counts must equal the program's own account of its launches.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::util::*;

#[test]
fn trace_counts_match_the_programs_own_launch_log() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/observer/tests/c/kernels.hip");
    let exe = tmp.path().join("kernels");
    stdout_ok(Command::new("hipcc").arg("--offload-arch=gfx900").arg(&src).arg("-o").arg(&exe));
    let plain = stdout_ok(&mut Command::new(&exe));

    let observer = observer_library();
    let dir = tmp.path().join("traces");
    let out = run(backscope()
        .args(["trace", "--json", "--observer"])
        .arg(&observer)
        .arg("--dir")
        .arg(&dir)
        .arg("--")
        .arg(&exe));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    // The traced program's own output comes first, unchanged; the summary is the last line.
    let (program_output, summary) = text.trim_end().rsplit_once('\n').unwrap();
    assert_eq!(program_output.trim_end(), plain.trim_end(), "the observer must not change the program's behaviour");
    let summary: serde_json::Value = serde_json::from_str(summary).unwrap();

    // The program prints one line per launch: "launch <label> grid=… block=… rc=<status>".
    let mut expected: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in plain.lines().filter(|l| l.starts_with("launch ")) {
        let label = line.split_whitespace().nth(1).unwrap().to_string();
        let failed = !line.ends_with("rc=0");
        let e = expected.entry(label).or_default();
        e.0 += 1;
        e.1 += u64::from(failed);
    }
    let kernels = summary["kernels"].as_array().unwrap();
    for (label, (launches, failed)) in &expected {
        let k = kernels
            .iter()
            .find(|k| k["demangled"].as_str().unwrap().starts_with(label.as_str()))
            .unwrap_or_else(|| panic!("{label} not observed: {kernels:?}"));
        assert_eq!(k["launches"].as_u64(), Some(*launches), "{label}");
        assert_eq!(k["errors"].as_u64(), Some(*failed), "{label}");
    }
    assert_eq!(kernels.len(), expected.len(), "never_launched is registered but must not be listed");
    assert_eq!(summary["claims"][0]["confidence"], "Confirmed");
    assert!(summary["claims"][0]["sources"][0]["path"].as_str().unwrap().starts_with(dir.to_str().unwrap()));

    // The trace directory must be new or empty: traces of two runs must never mix.
    let out = run(backscope().args(["trace", "--observer"]).arg(&observer).arg("--dir").arg(&dir).arg("--").arg(&exe));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
}

#[test]
fn trace_env_prints_a_systemd_drop_in() {
    let observer = observer_library();
    let text = stdout_ok(
        backscope()
            .args(["trace", "--env", "--systemd", "ollama.service", "--dir", "/var/tmp/bt", "--observer"])
            .arg(&observer),
    );
    assert!(text.contains("[Service]"));
    assert!(text.contains("Environment=\"BACKSCOPE_TRACE_DIR=/var/tmp/bt\""));
    assert!(text.contains(&format!("Environment=\"LD_PRELOAD={}\"", observer.canonicalize().unwrap().display())));
}
