//! The substrings the searching rules look for, searched once per message and only when a rule asks.

use std::sync::LazyLock;

/// Every substring that a rule searches for (rather than matching at a fixed place), each by a slice of it (the
/// comment gives the whole). One pass of this searcher over a message tells whether any such rule can apply; most
/// lines of a log (model metadata, trace frames, progress) contain none, and then no rule searches them at all.
/// The searcher's fingerprint of a pattern is its first bytes, and a slice that begins where the bytes are rare in
/// logs (`ss has terminated`, not `process`) leaves it few false candidates to check: a line with the slice but not
/// the whole only lets the rules look, and they find nothing.
pub(super) static MARKERS: LazyLock<crate::patterns::Patterns> = LazyLock::new(|| {
    crate::patterns::Patterns::new(&[
        "g device ", // using device
        "offloaded ",
        "r size",    // buffer size
        "ML_ASSERT", // GGML_ASSERT
        "iceLost",   // DeviceLost
        "ICE_LOST",  // DEVICE_LOST
        "ce lost",   // device lost
        "of memory", // out of memory
        "OutOfDeviceMemory",
        "o allocate",              // failed to allocate, unable to allocate
        "ss has terminated",       // process has terminated
        "th error",                // runner exited with error
        "r starting llama runner", // error starting llama runner
        "Assertion `",
        "tedly stopped", // unexpectedly stopped
        "ST predict",    // POST predict
        "st predict",    // post predict
        "segfault at",
        "ot supported", // not supported
        "unsupported",
        "quest: ",                // request:
        "leaning up before exit", // cleaning up before exit
        "couldn't bind",
        "ss already in use", // address already in use
        " abort:",
        "ut additional information", // crashed without additional information
        "Failed to load model",
        "ss exited, code=", // Main process exited, code=
        "umped core",       // dumped core
    ])
    .expect("the marker patterns are valid")
});

/// Whether a message holds any substring a searching rule looks for, computed on first use: lines that
/// a rule claims by position never pay for the scan.
pub(super) struct Marked<'a> {
    msg: &'a [u8],
    value: std::cell::Cell<Option<bool>>,
}

impl<'a> Marked<'a> {
    pub(super) fn new(msg: &'a [u8]) -> Self {
        Marked { msg, value: std::cell::Cell::new(None) }
    }

    pub(super) fn get(&self) -> bool {
        match self.value.get() {
            Some(v) => v,
            None => {
                let v = MARKERS.find(self.msg).is_some();
                self.value.set(Some(v));
                v
            }
        }
    }
}
