//! Fuzz target `sweep_plan`: arbitrary bytes read as a stored sweep plan (`runs.plan_json`), as
//! `backscope sweep --resume` reads one back before it starts anything: parsed, checked, its cells laid out and
//! what it would run listed. Never a panic, and a plan that passes lays out a bounded number of cells.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok((cells, _runs)) = backscope::commands::sweep::read_stored_plan(text) {
        assert!(cells <= 1_000_000, "a checked plan laid out {cells} cells");
    }
});
