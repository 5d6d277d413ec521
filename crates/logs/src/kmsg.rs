//! Records of the kernel's log as `/dev/kmsg` gives them (the kernel's `Documentation/ABI/testing/dev-kmsg`): one
//! `read()` returns one record,
//!
//! ```text
//! 6,1283,512345678,-;amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout, signaled seq=7, emitted seq=9
//!  SUBSYSTEM=pci
//!  DEVICE=+pci:0000:03:00.0
//! ```
//!
//! a header of comma-separated fields up to `;` — the syslog prefix (the level in its 3 low bits, the facility above:
//! 0 for the kernel's own messages; a line written into /dev/kmsg by a process has facility 1, `LOG_USER`, unless it
//! says otherwise, and can never claim facility 0), the record's 64-bit sequence number (a gap between two records
//! read one after the other means records were overwritten before they were read), the timestamp in microseconds
//! since boot (the printk clock, which journald takes as CLOCK_MONOTONIC), and the flags (`-`, or `c` for a
//! continuation of an earlier printk); later kernels may add fields before the `;` — then the text up to the
//! newline, and continuation lines that start with a space: the record's dictionary, `KEY=VALUE` (`SUBSYSTEM=pci`,
//! `DEVICE=+pci:0000:03:00.0`). The kernel escapes non-printable bytes of the text and the values as `\xNN`; they
//! stay escaped here.
//!
//! [`parse_record`] reads one record; [`Records`] splits a text of records (a file in this format, one record after
//! the other) into records. Both borrow the input, allocate nothing, and are linear in its length; a malformed record
//! is an error naming its byte offset and the field, never a panic.

/// One record. `text` and the dictionary are borrowed, as the kernel wrote them (escaped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KmsgRecord<'a> {
    /// The syslog level (0 emergency … 7 debug).
    pub level: u8,
    /// The syslog facility: 0 for the kernel's own messages.
    pub facility: u32,
    pub seq: u64,
    /// Microseconds since boot, by the printk clock.
    pub usec: u64,
    /// The `c` flag: the record continues an earlier printk of the same line.
    pub continuation: bool,
    pub text: &'a [u8],
    /// The dictionary lines, each with its leading space (see [`KmsgRecord::dict`]).
    dict: &'a [u8],
}

impl<'a> KmsgRecord<'a> {
    /// Whether the kernel itself wrote the record (facility 0); no process can write one.
    pub fn from_kernel(&self) -> bool {
        self.facility == 0
    }

    /// The dictionary's `(KEY, VALUE)` pairs; a line without `=` is left out.
    pub fn dict(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.dict.split(|&b| b == b'\n').filter_map(|l| {
            let l = l.strip_prefix(b" ")?;
            let eq = l.iter().position(|&b| b == b'=')?;
            Some((&l[..eq], &l[eq + 1..]))
        })
    }

    /// The value of dictionary key `key`.
    pub fn get(&self, key: &[u8]) -> Option<&'a [u8]> {
        self.dict().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// A record that is not one: where (a byte offset in the record, or in the text [`Records`] reads) and what was
/// expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KmsgError {
    pub offset: usize,
    pub field: &'static str,
    pub expected: &'static str,
}

impl std::fmt::Display for KmsgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "byte {}: {}: expected {}", self.offset, self.field, self.expected)
    }
}

impl std::error::Error for KmsgError {}

/// Longest header (the fields before `;`) read: the kernel's is under 64 bytes (four numbers and a flag).
pub const MAX_HEADER: usize = 256;

/// A decimal field of at most 20 digits (a u64), ending at `,` or `;`.
fn number(bytes: &[u8], at: usize, field: &'static str) -> Result<(u64, usize), KmsgError> {
    let digits = bytes[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    let err = |offset| KmsgError { offset, field, expected: "a decimal number" };
    if digits == 0 || digits > 20 {
        return Err(err(at));
    }
    let mut v: u64 = 0;
    for &b in &bytes[at..at + digits] {
        v = v.checked_mul(10).and_then(|v| v.checked_add(u64::from(b - b'0'))).ok_or(err(at))?;
    }
    Ok((v, at + digits))
}

/// One record: a header, `;`, the text up to the first newline (or the end), and dictionary lines.
pub fn parse_record(bytes: &[u8]) -> Result<KmsgRecord<'_>, KmsgError> {
    let head_end = bytes[..bytes.len().min(MAX_HEADER)]
        .iter()
        .position(|&b| b == b';' || b == b'\n')
        .filter(|&i| bytes[i] == b';')
        .ok_or(KmsgError { offset: 0, field: "header", expected: "`PREFIX,SEQ,USEC,FLAGS;` within 256 bytes" })?;
    let comma = |at: usize, field| match bytes.get(at) {
        Some(b',') => Ok(at + 1),
        _ => Err(KmsgError { offset: at, field, expected: "`,` after it" }),
    };
    let (prefix, at) = number(bytes, 0, "prefix")?;
    let at = comma(at, "prefix")?;
    let (seq, at) = number(bytes, at, "sequence number")?;
    let at = comma(at, "sequence number")?;
    let (usec, at) = number(bytes, at, "timestamp")?;
    let at = comma(at, "timestamp")?;
    if prefix > u64::from(u32::MAX) {
        return Err(KmsgError { offset: 0, field: "prefix", expected: "a syslog priority (a 32-bit number)" });
    }
    // The flags, then any fields a later kernel adds, up to the `;` (numbers and commas stop before it).
    let flags = bytes.get(at..head_end).unwrap_or_default();
    let flags = &flags[..flags.iter().position(|&b| b == b',').unwrap_or(flags.len())];
    if flags.is_empty() {
        return Err(KmsgError { offset: at, field: "flags", expected: "`-` or `c`" });
    }
    let body = &bytes[head_end + 1..];
    let text_end = body.iter().position(|&b| b == b'\n').unwrap_or(body.len());
    let dict = body.get(text_end + 1..).unwrap_or(&[]);
    Ok(KmsgRecord {
        level: (prefix & 7) as u8,
        facility: (prefix >> 3) as u32,
        seq,
        usec,
        continuation: flags.contains(&b'c'),
        text: &body[..text_end],
        dict,
    })
}

/// The records of a text in /dev/kmsg format, one after the other: a record is a line that does not start with a
/// space and the lines after it that do. Yields each record's byte offset in the text with the record or why it is
/// none; an empty line is skipped.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Records<'a> {
    pub fn new(text: &'a [u8]) -> Self {
        Records { text, at: 0 }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = (usize, Result<KmsgRecord<'a>, KmsgError>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let rest = self.text.get(self.at..).filter(|r| !r.is_empty())?;
            let start = self.at;
            // The record ends at a newline that is not followed by a dictionary line.
            let mut end = 0;
            let len = loop {
                match memchr::memchr(b'\n', &rest[end..]) {
                    Some(nl) if rest.get(end + nl + 1) == Some(&b' ') => end += nl + 1,
                    Some(nl) => break end + nl,
                    None => break rest.len(),
                }
            };
            self.at = start + (len + 1).min(rest.len());
            if len == 0 {
                continue;
            }
            let record = parse_record(&rest[..len]).map_err(|e| KmsgError { offset: start + e.offset, ..e });
            return Some((start, record));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_with_its_dictionary() {
        let r = parse_record(
            b"3,1283,512345678,-;amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout\n SUBSYSTEM=pci\n DEVICE=+pci:0000:03:00.0\n",
        )
        .unwrap();
        assert_eq!((r.level, r.facility, r.seq, r.usec, r.continuation), (3, 0, 1283, 512345678, false));
        assert_eq!(r.text, b"amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.0 timeout");
        assert_eq!(r.get(b"DEVICE"), Some(&b"+pci:0000:03:00.0"[..]));
        assert_eq!(r.dict().count(), 2);
        assert!(r.from_kernel());
    }

    #[test]
    fn the_lines_of_this_machines_kernel() {
        // The first records of /dev/kmsg on the machine this was written on (`head -3 /dev/kmsg`), and the ABI's
        // examples: a user's line (facility 1), a continuation, a field a later kernel added, escaped bytes.
        let r = parse_record(b"4,2,0,-;[Firmware Bug]: TSC doesn't count with P0 frequency!").unwrap();
        assert_eq!((r.level, r.seq, r.usec), (4, 2, 0));
        let r = parse_record(b"12,300,4000,-;backscope-test: hello").unwrap();
        assert_eq!((r.level, r.facility, r.from_kernel()), (4, 1, false));
        let r = parse_record(b"6,174,0,c;[0 1 2 3 ]").unwrap();
        assert!(r.continuation);
        let r = parse_record(b"6,5,77,-,caller=T1;text\\x0a more").unwrap();
        assert_eq!((r.usec, r.text), (77, &b"text\\x0a more"[..]));
        assert_eq!(r.dict().count(), 0);
    }

    #[test]
    fn malformed_records_name_the_field() {
        let err = |b: &[u8]| parse_record(b).unwrap_err();
        assert_eq!(err(b"").field, "header");
        assert_eq!(err(b"6,1,2,-").field, "header");
        assert_eq!(err(b"x,1,2,-;t").field, "prefix");
        assert_eq!(err(b"6;t").field, "prefix");
        assert_eq!(err(b"6,,2,-;t"), KmsgError { offset: 2, field: "sequence number", expected: "a decimal number" });
        assert_eq!(err(b"6,1,99999999999999999999999,-;t").field, "timestamp");
        assert_eq!(err(b"6,1,2,;t").field, "flags");
        assert_eq!(err(b"68719476736,1,2,-;t").field, "prefix");
        // A newline before the `;` ends the header.
        assert_eq!(err(b"6,1\n,2,-;t").field, "header");
    }

    #[test]
    fn records_split_a_text_at_lines_that_do_not_continue() {
        let text = b"6,1,10,-;first\n SUBSYSTEM=pci\n\n6,2,20,-;second\nbad\n6,3,30,-;third";
        let got: Vec<(usize, Result<&[u8], &str>)> =
            Records::new(text).map(|(at, r)| (at, r.map(|r| r.text).map_err(|e| e.field))).collect();
        assert_eq!(
            got,
            vec![(0, Ok(&b"first"[..])), (31, Ok(&b"second"[..])), (47, Err("header")), (51, Ok(&b"third"[..]))]
        );
        let first = Records::new(text).next().unwrap().1.unwrap();
        assert_eq!(first.get(b"SUBSYSTEM"), Some(&b"pci"[..]));
    }
}
