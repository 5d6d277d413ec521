//! The layout facts that both a bundle's parser and a decompressor need: the header and entry-record sizes, and how
//! far into a bundle's bytes parsing reads ([`extent`]), which [`crate::ccob`] uses to stop decompressing where the
//! bundle ends.

use crate::read;
use crate::sniff::BUNDLE_MAGIC;
use crate::Limits;

/// Size of the fixed bundle header: magic + entry count.
pub(crate) const HEADER_SIZE: u64 = 32;
/// Size of the fixed part of one entry record: offset, size, ID length.
pub(crate) const ENTRY_RECORD_SIZE: u64 = 24;

/// How much of a bundle's bytes [`Bundle::parse`] reads, judged from a prefix of them: see [`extent`].
///
/// [`Bundle::parse`]: crate::bundle::Bundle::parse
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// The prefix ends inside the header or the entry table: at least this many bytes are needed to go on.
    NeedMore(u64),
    /// The bundle ends here: the end of its entry table or of its furthest entry, whichever is later. Also
    /// returned, as the prefix's own length, when the prefix already shows that parsing fails (wrong magic, an
    /// entry count over the cap or beyond `total`, an entry past `total`): parsing the prefix gives that error.
    Ends(u64),
}

/// For a bundle of `total` bytes (a decompressed payload, say) of which `prefix` has been produced: how far
/// [`Bundle::parse_with_limits`] reads into it. Parsing the first [`Extent::Ends`] bytes gives the same bundle, or
/// the same error, as parsing all `total` (bytes past the end of the last entry are never read), so a
/// decompressor can stop there instead of inflating padding, or a gibibyte of zeros behind an empty header.
///
/// [`Bundle::parse_with_limits`]: crate::bundle::Bundle::parse_with_limits
pub fn extent(prefix: &[u8], total: u64, limits: &Limits) -> Extent {
    let have = prefix.len() as u64;
    let need = |n: u64| if n > total { Extent::Ends(have) } else { Extent::NeedMore(n) };
    if have < HEADER_SIZE {
        return need(HEADER_SIZE);
    }
    let Ok(count) = read::u64_at(prefix, 24, "") else { return Extent::Ends(have) };
    let room = total.saturating_sub(HEADER_SIZE) / ENTRY_RECORD_SIZE;
    if !prefix.starts_with(BUNDLE_MAGIC) || count > limits.max_bundle_entries || count > room {
        return Extent::Ends(have);
    }
    let mut pos = HEADER_SIZE;
    let mut end = HEADER_SIZE;
    // Parsing fails at the current record. The records before it were checked, their entries' bytes included, so
    // the prefix must reach the furthest of those bytes too: a shorter one would fail at an earlier record instead
    // (a different offset and field). `end` never passes `total` (each entry was checked against it).
    let fails_here = |end: u64| if have < end { Extent::NeedMore(end) } else { Extent::Ends(have) };
    for _ in 0..count {
        let Some(record_end) = pos.checked_add(ENTRY_RECORD_SIZE) else { return fails_here(end) };
        if have < record_end {
            return need(record_end);
        }
        let (Ok(offset), Ok(size), Ok(id_len)) =
            (read::u64_at(prefix, pos, ""), read::u64_at(prefix, pos + 8, ""), read::u64_at(prefix, pos + 16, ""))
        else {
            return fails_here(end);
        };
        // In the order parsing checks them: the ID must lie inside, then the entry's bytes.
        let Some(next) = record_end.checked_add(id_len) else { return fails_here(end) };
        if next > total {
            return fails_here(end);
        }
        if have < next {
            return need(next);
        }
        match offset.checked_add(size) {
            Some(entry_end) if entry_end <= total => end = end.max(entry_end),
            _ => return fails_here(end),
        }
        pos = next;
    }
    Extent::Ends(end.max(pos))
}
