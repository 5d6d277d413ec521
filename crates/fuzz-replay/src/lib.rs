//! Replays the inputs a decoder crate keeps in `tests/regressions/` through the same drain functions as its
//! fuzz targets, so that every crash, timeout or OOM reproducer ever found stays a test on machines without a
//! fuzzer. Files are named `<target>-<short hash>.bin`, `<target>` being a fuzz target in `fuzz/fuzz_targets/`.
//!
//! Each decoder crate (binfmt, gguf, logs) has its own drains and its own regressions; this is the one loop that
//! reads them.

use std::panic;
use std::path::Path;
use std::time::{Duration, Instant};

/// A fuzz target's drain: decode everything reachable from the bytes, discard the results.
pub type Drain = fn(&[u8]);

/// A regression input that takes longer than this (in a debug build) is a slowness regression.
pub const MAX_TIME_PER_INPUT: Duration = Duration::from_secs(20);

/// Runs every `*.bin` in `dir` through the drain its name's target prefix names, and panics with one line per
/// input that panicked or took longer than [`MAX_TIME_PER_INPUT`], or if a name names no target, or if `dir` has
/// no inputs (a missing directory must not pass as "no regressions").
pub fn replay(dir: &Path, targets: &[(&str, Drain)]) {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no regression inputs in {}", dir.display());

    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().and_then(|n| n.to_str()).expect("UTF-8 file name");
        let target = name.rsplit_once('-').map(|(t, _)| t).unwrap_or_default();
        let Some(&(_, drain)) = targets.iter().find(|(t, _)| *t == target) else {
            let names: Vec<&str> = targets.iter().map(|(t, _)| *t).collect();
            panic!("{name}: the name must start with a fuzz target name: one of {names:?}");
        };
        let data = std::fs::read(path).expect("read regression input");
        let start = Instant::now();
        if let Err(panic) = panic::catch_unwind(|| drain(&data)) {
            let msg = panic.downcast_ref::<String>().map(String::as_str).or(panic.downcast_ref::<&str>().copied());
            failures.push(format!("{name}: panicked: {}", msg.unwrap_or("(non-string panic)")));
        }
        let took = start.elapsed();
        if took > MAX_TIME_PER_INPUT {
            failures.push(format!("{name}: took {took:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} regression inputs failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
