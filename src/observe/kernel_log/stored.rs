//! The stored kernel lines of a traced run, `kernel-log.jsonl` (docs/trace-format.md, "The kernel's lines"): one JSON
//! object a line, in the order written —
//!
//! ```text
//! {"kernel_log":1,"source":"/dev/kmsg","started_usec":81234567890}
//! {"seq":5012,"usec":81240001234,"level":3,"text":"amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, …","device":"+pci:0000:03:00.0"}
//! {"end":{"usec":81250000000,"records":420,"kept":1,"lost":0,"overwritten":false,"over_cap":0}}
//! ```
//!
//! the header (the format's version, where the lines were read, CLOCK_MONOTONIC in µs when reading began), the kept
//! records (the kernel's sequence number, timestamp, level, text and `DEVICE=`), `{"unreadable":"…"}` when the kernel
//! log could not be read, `{"read_error":"…"}` when reading stopped, and the end with the counts (records read, kept,
//! lost to overwriting, left out over the caps). A file without its end was cut (backscope was killed).
//!
//! Reading it back is bounded ([`MAX_FILE`], [`MAX_LINES`]); a line that is not one of these is a problem named with
//! its line number, and the other lines are still read.

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::record::{KernelLine, MAX_TEXT};

/// The format's version in the header.
pub const VERSION: u32 = 1;
/// Largest stored file read, in bytes: the capture keeps at most 512 KiB of text.
pub const MAX_FILE: u64 = 8 << 20;
/// Most kept lines read back (the capture keeps at most 1000).
pub const MAX_LINES: usize = 4000;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Header {
    pub kernel_log: u32,
    pub source: String,
    pub started_usec: u64,
}

/// A kept record as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoredRecord {
    pub seq: u64,
    pub usec: u64,
    pub level: u8,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// The counts at the end of a capture.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// CLOCK_MONOTONIC in µs when reading ended.
    pub usec: u64,
    /// Records read (every record, not only the kept ones).
    pub records: u64,
    pub kept: u64,
    /// Records overwritten before they were read (gaps in the sequence numbers).
    pub lost: u64,
    /// The kernel said records were overwritten (`EPIPE`) where no gap could be counted.
    #[serde(default)]
    pub overwritten: bool,
    /// GPU-driver lines left out over the caps on lines and bytes kept.
    pub over_cap: u64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Line {
    Header(Header),
    Unreadable { unreadable: String },
    ReadError { read_error: String },
    End { end: End },
    Record(StoredRecord),
}

/// A stored file read back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KernelLog {
    /// The file, as cited.
    pub file: String,
    /// Where the lines were read (`/dev/kmsg`, or the file `BACKSCOPE_KMSG` named; the journal read after the fact).
    pub source: Option<String>,
    /// Not kept while the command ran but read after the fact, for the traces' span: how, in words (`read after the
    /// fact from the journal (journalctl -k -b 0) for 1200.000–1260.000 s (kernel time)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_after: Option<String>,
    pub started_usec: Option<u64>,
    pub lines: Vec<KernelLine>,
    /// Why the kernel log could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    /// Why reading stopped before the run ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_error: Option<String>,
    /// `None`: the file has no end (the capture was cut).
    pub end: Option<End>,
    /// Lines of the file that could not be read, with their line numbers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// One stored line of `value` (a header, record, unreadable, read_error or end object), with its newline.
pub fn line<T: Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string(value).unwrap_or_default();
    s.push('\n');
    s
}

/// Reads `path` (cited as `file`); `None` when there is no such file (nothing was kept and nothing went wrong).
pub fn read(path: &Path, file: &str) -> Option<KernelLog> {
    std::fs::symlink_metadata(path).ok()?;
    let mut log = KernelLog { file: file.to_string(), ..Default::default() };
    // A regular file only: a FIFO or a device in a directory given to `trace --read` would block or never end.
    let f = match crate::host::inputs::open_input(path) {
        Ok(input) => input.file,
        Err(e) => {
            log.problems.push(format!("{file}: {e}"));
            return Some(log);
        }
    };
    let mut bytes = Vec::new();
    if let Err(e) = f.take(MAX_FILE + 1).read_to_end(&mut bytes) {
        log.problems.push(format!("{file}: {e}"));
        return Some(log);
    }
    if bytes.len() as u64 > MAX_FILE {
        log.problems.push(format!("{file}: larger than {MAX_FILE} bytes; the rest is not read"));
        bytes.truncate(MAX_FILE as usize);
    }
    let text = String::from_utf8_lossy(&bytes);
    for (i, l) in text.lines().enumerate() {
        let n = i as u64 + 1;
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(l) {
            Ok(Line::Header(h)) => {
                if h.kernel_log != VERSION {
                    log.problems
                        .push(format!("{file}:{n}: format version {} (this backscope reads {VERSION})", h.kernel_log));
                }
                log.source = Some(h.source);
                log.started_usec = Some(h.started_usec);
            }
            Ok(Line::Unreadable { unreadable }) => log.unreadable = Some(unreadable),
            Ok(Line::ReadError { read_error }) => log.read_error = Some(read_error),
            Ok(Line::End { end }) => log.end = Some(end),
            Ok(Line::Record(r)) if log.lines.len() < MAX_LINES => {
                let text: String = r.text.chars().take(MAX_TEXT).collect();
                // A record the classifier does not take (edited by hand, or read by a later backscope) is left out.
                if let Some(k) = KernelLine::new(file.to_string(), n, (r.seq, r.usec, r.level), text, r.device) {
                    log.lines.push(k);
                }
            }
            Ok(Line::Record(_)) => {}
            Err(e) if log.problems.len() < 8 => log.problems.push(format!("{file}:{n}: not a kernel-log line: {e}")),
            Err(_) => {}
        }
    }
    Some(log)
}

/// The stored file of a directory (`dir/kernel-log.jsonl`), cited as `cited`.
pub fn read_dir(dir: &Path, cited: &str) -> Option<KernelLog> {
    read(&dir.join(super::record::FILE_NAME), cited)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_file_reads_back_with_its_problems_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kernel-log.jsonl");
        let text = [
            line(&Header { kernel_log: 1, source: "/dev/kmsg".into(), started_usec: 100 }),
            line(&StoredRecord {
                seq: 9,
                usec: 200,
                level: 3,
                text: "amdgpu 0000:03:00.0: amdgpu: GPU reset begin!".into(),
                device: Some("+pci:0000:03:00.0".into()),
            }),
            "{\"seq\":10,\"usec\":201,\"level\":6,\"text\":\"not a GPU line\"}\n".into(),
            "garbage\n".into(),
            line(&serde_json::json!({"end": End { usec: 300, records: 5, kept: 1, ..Default::default() }})),
        ]
        .concat();
        std::fs::write(&path, text).unwrap();
        let log = read(&path, "kernel-log.jsonl").unwrap();
        assert_eq!((log.source.as_deref(), log.started_usec), (Some("/dev/kmsg"), Some(100)));
        assert_eq!(log.lines.len(), 1);
        assert_eq!(
            (log.lines[0].line, log.lines[0].seq, log.lines[0].device.as_deref()),
            (2, 9, Some("+pci:0000:03:00.0"))
        );
        assert_eq!(log.end.as_ref().map(|e| (e.records, e.kept)), Some((5, 1)));
        assert_eq!(log.problems.len(), 1);
        assert!(log.problems[0].starts_with("kernel-log.jsonl:4: not a kernel-log line"), "{:?}", log.problems);
        assert!(read(&dir.path().join("none"), "none").is_none());
        // A FIFO is refused without blocking.
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid path for mkfifo.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let log = read(&fifo, "fifo").unwrap();
        assert!(log.lines.is_empty() && log.problems.len() == 1, "{log:?}");
    }
}
