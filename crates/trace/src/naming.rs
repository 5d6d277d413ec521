//! Trace file names. Every process writes a file of its own, created exclusively (`O_EXCL`), so that
//! no two processes share one and no trace is ever overwritten; when a name is taken the next
//! candidate is tried, at most [`MAX_CANDIDATES`] of them.
//!
//! * `BACKSCOPE_TRACE_DIR=D`: `D/trace-<pid>.jsonl`, then `D/trace-<pid>.<n>.jsonl` (n = 1, 2, …).
//! * `BACKSCOPE_TRACE_FILE=P`: `P` with `%p` replaced by the pid; when it is taken and `P` has no `%p`,
//!   the pid goes before the `.jsonl` suffix (or at the end without one), then a number:
//!   `t.jsonl`, `t.<pid>.jsonl`, `t.<pid>.<n>.jsonl`; with `%p` only the number is added.
//! * A rotating trace (`BACKSCOPE_TRACE_ROTATE`): segment 0 is named as above; segment k ≥ 1 puts `.s<k>` before
//!   the first segment's `.jsonl` suffix (or at its end without one): `trace-<pid>.s<k>.jsonl`,
//!   `trace-<pid>.<n>.s<k>.jsonl`, `t.s<k>.jsonl`; when that is taken (a process of the same pid before it, whose
//!   first segment was rotated away, so that this one got its name), a number follows: `trace-<pid>.s<k>.<n>.jsonl`.
//!   The `s` keeps a segment apart from the numbered names of pid reuse; which process a segment belongs to is in
//!   its header (pid and start time), never in its name.
//!
//! Candidates are written into an [`Out`] so that the crash path can build them in a fixed buffer.

use crate::json::{put_u64, Out};

pub const PREFIX: &str = "trace-";
pub const SUFFIX: &str = ".jsonl";
/// Names tried before giving up.
pub const MAX_CANDIDATES: u32 = 100;

/// Whether `name` (a file name, no directory) is a trace file name: `trace-*.jsonl`.
pub fn is_trace_file_name(name: &str) -> bool {
    name.starts_with(PREFIX) && name.ends_with(SUFFIX)
}

/// Candidate `attempt` (0-based) in directory `dir`; false once the candidates are used up.
pub fn dir_candidate(out: &mut (impl Out + ?Sized), dir: &[u8], pid: u32, attempt: u32) -> bool {
    if attempt >= MAX_CANDIDATES {
        return false;
    }
    out.put(dir);
    out.put(b"/");
    out.put(PREFIX.as_bytes());
    put_u64(out, pid.into());
    if attempt > 0 {
        out.put(b".");
        put_u64(out, attempt.into());
    }
    out.put(SUFFIX.as_bytes());
    true
}

/// `pattern` with `%p` replaced by `pid`: the path a `BACKSCOPE_TRACE_FILE` names.
pub fn expand_pattern(out: &mut (impl Out + ?Sized), pattern: &[u8], pid: u32) {
    let mut rest = pattern;
    while let Some(at) = rest.windows(2).position(|w| w == b"%p") {
        out.put(&rest[..at]);
        put_u64(out, pid.into());
        rest = &rest[at + 2..];
    }
    out.put(rest);
}

/// Candidate `attempt` (0-based) for the `BACKSCOPE_TRACE_FILE` pattern `pattern`; false once the
/// candidates are used up.
pub fn file_candidate(out: &mut (impl Out + ?Sized), pattern: &[u8], pid: u32, attempt: u32) -> bool {
    if attempt == 0 {
        expand_pattern(out, pattern, pid);
        return true;
    }
    let has_pid = pattern.windows(2).any(|w| w == b"%p");
    // Attempt 1 without `%p` adds the pid alone; every later one (and every one with `%p`) a number.
    let number = if has_pid { attempt } else { attempt - 1 };
    if number >= MAX_CANDIDATES {
        return false;
    }
    let (stem, extension) = match pattern.strip_suffix(SUFFIX.as_bytes()) {
        Some(stem) => (stem, SUFFIX.as_bytes()),
        None => (pattern, &b""[..]),
    };
    expand_pattern(out, stem, pid);
    if !has_pid {
        out.put(b".");
        put_u64(out, pid.into());
    }
    if number > 0 {
        out.put(b".");
        put_u64(out, number.into());
    }
    out.put(extension);
    true
}

/// Candidate `attempt` (0-based) for segment `index` (≥ 1) of the rotating trace whose segment 0 is `first`; false
/// once the candidates are used up.
pub fn segment_candidate(out: &mut (impl Out + ?Sized), first: &[u8], index: u32, attempt: u32) -> bool {
    if attempt >= MAX_CANDIDATES {
        return false;
    }
    let (stem, extension) = match first.strip_suffix(SUFFIX.as_bytes()) {
        Some(stem) => (stem, SUFFIX.as_bytes()),
        None => (first, &b""[..]),
    };
    out.put(stem);
    out.put(b".s");
    put_u64(out, index.into());
    if attempt > 0 {
        out.put(b".");
        put_u64(out, attempt.into());
    }
    out.put(extension);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates(f: impl Fn(&mut Vec<u8>, u32) -> bool) -> Vec<String> {
        let mut all = Vec::new();
        for attempt in 0.. {
            let mut out = Vec::new();
            if !f(&mut out, attempt) {
                break;
            }
            all.push(String::from_utf8(out).unwrap());
        }
        all
    }

    #[test]
    fn directory_names_follow_the_documented_sequence() {
        let names = candidates(|o, a| dir_candidate(o, b"/t", 42, a));
        assert_eq!(&names[..3], ["/t/trace-42.jsonl", "/t/trace-42.1.jsonl", "/t/trace-42.2.jsonl"]);
        assert_eq!(names.len(), MAX_CANDIDATES as usize);
        assert!(names.iter().all(|n| is_trace_file_name(n.rsplit('/').next().unwrap())));
    }

    #[test]
    fn file_patterns_add_the_pid_then_a_number() {
        let names = candidates(|o, a| file_candidate(o, b"/x/t.jsonl", 7, a));
        assert_eq!(&names[..3], ["/x/t.jsonl", "/x/t.7.jsonl", "/x/t.7.1.jsonl"]);
        assert_eq!(names.len(), 1 + MAX_CANDIDATES as usize);
        let names = candidates(|o, a| file_candidate(o, b"/x/c-%p.jsonl", 7, a));
        assert_eq!(&names[..3], ["/x/c-7.jsonl", "/x/c-7.1.jsonl", "/x/c-7.2.jsonl"]);
        let names = candidates(|o, a| file_candidate(o, b"/dev/stderr", 7, a));
        assert_eq!(&names[..2], ["/dev/stderr", "/dev/stderr.7"]);
        assert!(!is_trace_file_name("notes.txt") && !is_trace_file_name("trace-1.json"));
    }

    #[test]
    fn segments_add_s_and_their_number_before_the_suffix() {
        let names = candidates(|o, a| segment_candidate(o, b"/t/trace-42.jsonl", 3, a));
        assert_eq!(&names[..3], ["/t/trace-42.s3.jsonl", "/t/trace-42.s3.1.jsonl", "/t/trace-42.s3.2.jsonl"]);
        assert_eq!(names.len(), MAX_CANDIDATES as usize);
        assert!(names.iter().all(|n| is_trace_file_name(n.rsplit('/').next().unwrap())));
        // Apart from pid reuse's numbered names, whatever the first segment was called.
        let reused = candidates(|o, a| dir_candidate(o, b"/t", 42, a));
        assert!(names.iter().all(|n| !reused.contains(n)));
        let names = candidates(|o, a| segment_candidate(o, b"/t/trace-42.1.jsonl", 1, a));
        assert_eq!(names[0], "/t/trace-42.1.s1.jsonl");
        let names = candidates(|o, a| segment_candidate(o, b"/dev/shm/t", 12, a));
        assert_eq!(&names[..2], ["/dev/shm/t.s12", "/dev/shm/t.s12.1"]);
    }
}
