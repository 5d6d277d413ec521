//! What the tests of pasted log lines share (`shapes.rs`, `front_ends.rs`): a log analysed whole, its one crash, and
//! that crash's cause kinds.

use logs::analysis::{Crash, Report};
use logs::{analyze_bytes, Limits};

pub fn report(log: &str) -> Report {
    analyze_bytes(log.as_bytes(), Limits::default()).expect("a text log")
}

pub fn only_crash(r: &Report) -> &Crash {
    assert_eq!(r.crashes.len(), 1, "crashes: {:#?}", r.crashes);
    &r.crashes[0]
}

pub fn cause_kinds(c: &Crash) -> Vec<&str> {
    c.causes.iter().map(|x| x.kind).collect()
}
