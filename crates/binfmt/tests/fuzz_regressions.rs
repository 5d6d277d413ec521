//! Replays every input in `tests/regressions/` through the same drain logic as the fuzz targets
//! (`tests/drain/mod.rs`), with the shared loop of `fuzz_replay`. To add one: copy
//! `fuzz/artifacts/<target>/crash-<sha1>` to `tests/regressions/<target>-<first 8 hex digits of the sha1>.bin`,
//! fix the decoder, run this test.

mod drain;

use std::path::Path;

#[test]
fn every_regression_input_drains_without_panicking() {
    fuzz_replay::replay(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions"), drain::TARGETS);
}
