//! Fuzz target `bisect_spec`: arbitrary bytes read as a stored bisect spec (`bisect_runs.spec_json`), as
//! `backscope bisect --resume` reads one back: parsed and validated, never a panic. A spec that passes is what a
//! resume would run: it must survive a round trip unchanged, pass again, and describe what it runs.

#![no_main]

use backscope::commands::bisect::BisectSpec;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(spec) = BisectSpec::from_stored("bisect-20261202-000000-0000", text) else { return };
    let again = serde_json::to_string(&spec).expect("a valid spec serialises");
    let back = BisectSpec::from_stored("bisect-20261202-000000-0000", &again).expect("a valid spec reads back");
    assert_eq!(back, spec);
    assert!(!spec.what_runs().is_empty());
    let _ = spec.runs_stored_code();
    spec.flags().expect("a valid spec names a backend");
});
