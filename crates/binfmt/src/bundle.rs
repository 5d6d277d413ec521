//! Clang offload bundles (`__CLANG_OFFLOAD_BUNDLE__`) and the `.hip_fatbin` sections that hold many of
//! them back to back, compressed (`CCOB`) or not.
//!
//! Layout (clang's ClangOffloadBundler documentation; verified on a ROCm 6.3 `libggml-hip.so`): 24-byte
//! magic, u64 entry count, then per entry u64 offset, u64 size, u64 ID length and the ID bytes. Entry
//! offsets are relative to the bundle's own start. A bundle's length is not stored: it ends at the end
//! of its last entry, and HIP pads to the next 4096-byte boundary before the next bundle.

use crate::amdgpu::target::TargetId;
use crate::ccob::CompressedBundle;
use crate::error::{Error, Result};
use crate::read::{self, add};
use crate::sniff::{BUNDLE_MAGIC, CCOB_MAGIC};
use crate::{Limits, EXPECT_BUNDLE_ENTRIES_CAP};

pub use crate::bundle_layout::{extent, Extent};
use crate::bundle_layout::{ENTRY_RECORD_SIZE, HEADER_SIZE};

/// One entry of a bundle: a code object for one target, or the (usually empty) host entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BundleEntry<'a> {
    /// The raw entry ID, e.g. `hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`.
    pub id: BundleId<'a>,
    /// Offset of the entry's bytes from the bundle start.
    pub offset: u64,
    pub size: u64,
    pub data: &'a [u8],
}

/// A parsed uncompressed offload bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle<'a> {
    /// The bundle's bytes, from its magic to the end of its last entry.
    pub data: &'a [u8],
    pub header_size: u64,
    pub entries: Vec<BundleEntry<'a>>,
}

impl<'a> Bundle<'a> {
    /// Parse a bundle that starts at `data[0]`. `data` may run past the bundle's end (as when it is the
    /// rest of a `.hip_fatbin` section); the bundle's own length is derived from its entries. At most
    /// [`Limits::DEFAULT`]'s `max_bundle_entries` entries; see [`Bundle::parse_with_limits`].
    pub fn parse(data: &'a [u8]) -> Result<Bundle<'a>> {
        Bundle::parse_with_limits(data, &Limits::DEFAULT)
    }

    /// [`Bundle::parse`] with an explicit cap on the entry count (`limits.max_bundle_entries`).
    pub fn parse_with_limits(data: &'a [u8], limits: &Limits) -> Result<Bundle<'a>> {
        if !data.starts_with(BUNDLE_MAGIC) {
            return Err(Error::new(0, "offload bundle magic", "`__CLANG_OFFLOAD_BUNDLE__`"));
        }
        let count = read::u64_at(data, 24, "offload bundle entry count")?;
        // The cap first: a count over it is refused as such whatever the data holds (a decompressed bundle is
        // parsed from only as many bytes as its header needs, see [`extent`]).
        if count > limits.max_bundle_entries {
            return Err(Error::new(24, "offload bundle entry count", EXPECT_BUNDLE_ENTRIES_CAP));
        }
        // Every entry record takes at least 24 bytes, so a count the data cannot hold is a lie: reject it
        // before it drives a loop or an allocation.
        let room = (data.len() as u64).saturating_sub(HEADER_SIZE) / ENTRY_RECORD_SIZE;
        if count > room {
            return Err(Error::new(24, "offload bundle entry count", "a count whose entry records fit in the data"));
        }
        // A few entries is the rule; grow from there rather than trust the count.
        let mut entries = Vec::with_capacity(count.min(16) as usize);
        let mut pos = HEADER_SIZE;
        let mut end = HEADER_SIZE;
        for _ in 0..count {
            let offset = read::u64_at(data, pos, "offload bundle entry offset")?;
            let size = read::u64_at(data, pos + 8, "offload bundle entry size")?;
            let id_len = read::u64_at(data, pos + 16, "offload bundle entry ID length")?;
            let id_bytes = read::slice_at(data, pos + 24, id_len, "offload bundle entry ID")?;
            let id = std::str::from_utf8(id_bytes)
                .map_err(|_| Error::new(pos + 24, "offload bundle entry ID", "ASCII text"))?;
            let entry_data = read::slice_at(data, offset, size, "offload bundle entry bytes")
                .map_err(|e| Error { offset: pos, ..e })?;
            entries.push(BundleEntry { id: BundleId::parse(id), offset, size, data: entry_data });
            end = end.max(add(offset, size, pos, "offload bundle entry offset + size")?);
            pos = add(pos, ENTRY_RECORD_SIZE + id_len, pos, "offload bundle entry record")?;
        }
        end = end.max(pos);
        let bundle_data = read::slice_at(data, 0, end, "offload bundle")?;
        Ok(Bundle { data: bundle_data, header_size: pos, entries })
    }

    /// Entries that carry code for a device (everything but the host entry).
    pub fn device_entries(&self) -> impl Iterator<Item = &BundleEntry<'a>> {
        self.entries.iter().filter(|e| e.id.kind != "host")
    }
}

/// A bundle entry ID: `<offload-kind>-<triple>[-<target-id>]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BundleId<'a> {
    pub raw: &'a str,
    /// `host`, `hip`, `hipv4`, `openmp`, …
    pub kind: &'a str,
    /// The triple as written, e.g. `amdgcn-amd-amdhsa-` (4 fields, empty environment) or `amdgcn-amd-amdhsa`.
    pub triple: &'a str,
    /// The target ID, if any: `gfx90a:sramecc+:xnack-`, `gfx11-generic`.
    pub target: Option<&'a str>,
}

impl<'a> BundleId<'a> {
    /// Split an entry ID. Target IDs of generic processors contain dashes (`gfx9-4-generic`), so the ID is
    /// not split on every dash: the kind runs to the first dash, then come the triple's arch, vendor and
    /// OS; a fourth field that already starts with `gfx` means a 3-field triple without environment.
    pub fn parse(raw: &'a str) -> BundleId<'a> {
        let (kind, rest) = raw.split_once('-').unwrap_or((raw, ""));
        let mut cut = 0usize;
        for _ in 0..3 {
            match rest.get(cut..).and_then(|r| r.find('-')) {
                Some(i) => cut += i + 1,
                None => return BundleId { raw, kind, triple: rest, target: None },
            }
        }
        let after_os = rest.get(cut..).unwrap_or("");
        let (triple, target) = if after_os.starts_with("gfx") {
            (rest.get(..cut.saturating_sub(1)).unwrap_or(rest), after_os)
        } else {
            match after_os.find('-') {
                Some(i) => (rest.get(..cut + i).unwrap_or(rest), after_os.get(i + 1..).unwrap_or("")),
                None => (rest, ""),
            }
        };
        BundleId { raw, kind, triple, target: if target.is_empty() { None } else { Some(target) } }
    }

    /// The parsed target ID, if the entry names one.
    pub fn target_id(&self) -> Option<TargetId<'a>> {
        self.target.map(TargetId::parse)
    }
}

/// One item found in a fatbin section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FatbinItem<'a> {
    Bundle(Bundle<'a>),
    Compressed(CompressedBundle<'a>),
}

/// An item and where it starts within the section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located<'a> {
    pub offset: u64,
    pub item: FatbinItem<'a>,
}

/// Walk a `.hip_fatbin` section (or any buffer of concatenated bundles): yields each bundle, compressed or
/// not. After a malformed item it yields the error and resynchronises at the next magic, so one bad
/// bundle does not hide the others; it always makes progress, so it ends on any input. Bundles are parsed
/// with [`Limits::DEFAULT`]; see [`walk_with_limits`].
pub fn walk(section: &[u8]) -> Walk<'_> {
    walk_with_limits(section, &Limits::DEFAULT)
}

/// [`walk`], parsing each bundle with [`Bundle::parse_with_limits`].
pub fn walk_with_limits<'a>(section: &'a [u8], limits: &Limits) -> Walk<'a> {
    Walk { data: section, pos: 0, limits: *limits }
}

#[derive(Debug, Clone)]
pub struct Walk<'a> {
    data: &'a [u8],
    pos: usize,
    limits: Limits,
}

impl<'a> Walk<'a> {
    /// The next position at or after `from` where a bundle magic (either kind) starts.
    fn resync(&self, from: usize) -> usize {
        read::find_any(self.data, &[BUNDLE_MAGIC, CCOB_MAGIC], from).unwrap_or(self.data.len())
    }
}

impl<'a> Iterator for Walk<'a> {
    type Item = Result<Located<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        // Skip the zero padding between bundles.
        let rest = self.data.get(self.pos..)?;
        let skip = rest.iter().position(|&b| b != 0)?;
        self.pos += skip;
        let start = self.pos;
        let here = self.data.get(start..)?;
        let offset = start as u64;
        let parsed = if here.starts_with(BUNDLE_MAGIC) {
            Bundle::parse_with_limits(here, &self.limits).map(|b| (b.data.len(), FatbinItem::Bundle(b)))
        } else if here.starts_with(CCOB_MAGIC) {
            CompressedBundle::parse(here).map(|c| (c.total_len(), FatbinItem::Compressed(c)))
        } else {
            Err(Error::new(0, "fatbin section", "an offload bundle or CCOB magic (or zero padding)"))
        };
        match parsed {
            Ok((len, item)) => {
                // A CCOB v1 has no total size; its payload runs to the next magic (see ccob.rs), which
                // `total_len` already found, so `len` is never 0 here. `max(1)` keeps progress certain.
                self.pos = start + len.max(1);
                Some(Ok(Located { offset, item }))
            }
            Err(e) => {
                self.pos = self.resync(start + 1);
                Some(Err(e.at_base(offset)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = BUNDLE_MAGIC.to_vec();
        out.extend((entries.len() as u64).to_le_bytes());
        let header: u64 = 32 + entries.iter().map(|(id, _)| 24 + id.len() as u64).sum::<u64>();
        let mut data_off = header;
        let mut payload: Vec<u8> = Vec::new();
        for (id, bytes) in entries {
            out.extend(data_off.to_le_bytes());
            out.extend((bytes.len() as u64).to_le_bytes());
            out.extend((id.len() as u64).to_le_bytes());
            out.extend(id.as_bytes());
            payload.extend(*bytes);
            data_off += bytes.len() as u64;
        }
        out.extend(payload);
        out
    }

    #[test]
    fn splits_entry_ids() {
        let id = BundleId::parse("hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-");
        assert_eq!((id.kind, id.triple, id.target), ("hipv4", "amdgcn-amd-amdhsa-", Some("gfx90a:sramecc+:xnack-")));
        let id = BundleId::parse("hipv4-amdgcn-amd-amdhsa--gfx9-4-generic");
        assert_eq!(id.target, Some("gfx9-4-generic"));
        let id = BundleId::parse("hip-amdgcn-amd-amdhsa-gfx906");
        assert_eq!((id.triple, id.target), ("amdgcn-amd-amdhsa", Some("gfx906")));
        let id = BundleId::parse("hip-amdgcn-amd-amdhsa-unknown-gfx900");
        assert_eq!((id.triple, id.target), ("amdgcn-amd-amdhsa-unknown", Some("gfx900")));
        let id = BundleId::parse("host-x86_64-unknown-linux--");
        assert_eq!((id.kind, id.target), ("host", None));
        for odd in ["", "-", "hip", "hip-", "a-b-c-d-e-f", "\u{1f600}-x"] {
            let _ = BundleId::parse(odd);
        }
    }

    #[test]
    fn parses_and_walks_bundles_with_padding() {
        let b1 = bundle(&[("host-x86_64-unknown-linux--", b""), ("hipv4-amdgcn-amd-amdhsa--gfx900", b"\x7fELFabc")]);
        let b2 = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx1030", b"xyz")]);
        let mut section = b1.clone();
        section.resize(4096, 0);
        section.extend(&b2);
        let items: Vec<_> = walk(&section).collect::<Result<_>>().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].offset, 4096);
        let FatbinItem::Bundle(first) = &items[0].item else { panic!("expected a bundle") };
        assert_eq!(first.device_entries().count(), 1);
        assert_eq!(first.entries[1].data, b"\x7fELFabc");
        assert_eq!(first.data.len(), b1.len());
    }

    #[test]
    fn rejects_lies_and_keeps_going() {
        let mut huge = BUNDLE_MAGIC.to_vec();
        huge.extend(u64::MAX.to_le_bytes());
        let err = Bundle::parse(&huge).unwrap_err();
        assert_eq!((err.offset, err.field), (24, "offload bundle entry count"));

        // An entry pointing past the end, followed by a good bundle: the walk reports the first and finds
        // the second.
        let mut bad = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx900", b"abcd")]);
        bad[32..40].copy_from_slice(&1_000_000u64.to_le_bytes());
        let good = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx906", b"ok")]);
        let mut section = bad.clone();
        section.extend(&good);
        let items: Vec<_> = walk(&section).collect();
        assert_eq!(items.len(), 2);
        let err = items[0].as_ref().unwrap_err();
        assert_eq!(err.field, "offload bundle entry bytes");
        assert!(items[1].is_ok());

        // Truncations at every length never panic.
        let whole = bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx900", b"abcdefgh")]);
        for n in 0..whole.len() {
            let _ = Bundle::parse(&whole[..n]);
            let _: Vec<_> = walk(&whole[..n]).collect();
        }
        let junk: Vec<_> = walk(b"\x01\x02junk").collect();
        assert_eq!(junk.len(), 1);
    }

    #[test]
    fn entry_count_is_capped_before_anything_is_read() {
        let empty: Vec<(&str, &[u8])> = vec![("", b""); 5];
        let five = bundle(&empty);
        let limits = Limits { max_bundle_entries: 4, ..Limits::DEFAULT };
        let err = Bundle::parse_with_limits(&five, &limits).unwrap_err();
        assert_eq!(
            (err.offset, err.field, err.expected),
            (24, "offload bundle entry count", EXPECT_BUNDLE_ENTRIES_CAP)
        );
        let items: Vec<_> = walk_with_limits(&five, &limits).collect();
        assert_eq!(items[0].as_ref().unwrap_err().expected, EXPECT_BUNDLE_ENTRIES_CAP);
        assert_eq!(Bundle::parse(&five).unwrap().entries.len(), 5);
        assert!(limits.explain(&err).unwrap().contains("4 entries per bundle"));
    }
}
