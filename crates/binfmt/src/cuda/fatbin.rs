//! CUDA fatbin containers (`.nv_fatbin`, `__nv_relfatbin`) and their PTX / cubin entries.
//!
//! Layout (formats.md §4, checked on real files; all little-endian):
//!
//! - A section holds containers back to back (zero padding up to an 8-byte boundary is tolerated).
//!   Container header, 16 bytes: u32 magic `0xBA55ED50`, u16 version, u16 header size, u64 fat size
//!   (bytes of entries after the header).
//! - Entries follow each other inside the container. Entry header (at least 64 bytes): u16 kind,
//!   u16 (0x0101), u32 header size, u64 payload size, u32 compressed size, u32 extension offset,
//!   u16 minor, u16 major, u32 SM, u32 name offset, u32 name length, u64 flags, u64 reserved,
//!   u64 decompressed size. The payload starts at entry + header size; the next entry at
//!   entry + header size + payload size.
//!
//! Nothing here allocates from a length read from the input except [`Entry::contents`], which checks
//! the claimed decompressed size with [`Limits::check_decompressed`] first. Every offset in an
//! [`Error`] is relative to the section slice given to [`containers`].

use std::borrow::Cow;
use std::iter::FusedIterator;

use crate::error::{Error, Result};
use crate::read::{self, add};
use crate::sniff::FATBIN_MAGIC;
use crate::{Limits, EXPECT_ALLOCATION, EXPECT_ENTRIES_CAP};

/// Size of the container header that this decoder understands.
pub const CONTAINER_HEADER_SIZE: u16 = 16;
/// Smallest entry header: the fixed fields end at byte 64.
pub const ENTRY_HEADER_MIN: u32 = 64;

/// Entry kind 1: PTX text.
pub const KIND_PTX: u16 = 1;
/// Entry kind 2: ELF cubin.
pub const KIND_CUBIN: u16 = 2;

/// Entry flag: 64-bit device code.
pub const FLAG_64BIT: u64 = 0x1;
/// Entry flag: debug information.
pub const FLAG_DEBUG: u64 = 0x2;
/// Entry flag: Linux host.
pub const FLAG_LINUX: u64 = 0x10;
/// Entry flag that some tools name "compressed" (never seen alone in real files).
pub const FLAG_COMPRESSED_OLD: u64 = 0x1000;
/// Entry flag: payload is an LZ4 raw block (CUDA 12.x).
pub const FLAG_COMPRESSED_LZ4: u64 = 0x2000;
/// Entry flag: payload is a zstd frame (CUDA 13).
pub const FLAG_COMPRESSED_ZSTD: u64 = 0x8000;
/// Any of the flags that mark a compressed payload.
pub const FLAGS_COMPRESSED: u64 = FLAG_COMPRESSED_OLD | FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD;

/// The first bytes of a zstd frame.
pub const ZSTD_MAGIC: &[u8; 4] = b"\x28\xb5\x2f\xfd";

/// Containers are 8-aligned inside the section when padding separates them.
const CONTAINER_ALIGN: u64 = 8;

/// One fatbin container: a header and the entries area that follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Container<'a> {
    /// Offset of the container header within the section given to [`containers`].
    pub offset: u64,
    /// Container format version (1 in every real file).
    pub version: u16,
    /// Container header size (16 in every real file); the entries start at `offset + header_size`.
    pub header_size: u16,
    /// Number of bytes of entries after the header.
    pub fat_size: u64,
    /// The entries area (`fat_size` bytes).
    pub data: &'a [u8],
    max_entries: u64,
}

impl<'a> Container<'a> {
    /// Offset of the entries area within the section.
    pub fn entries_offset(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.header_size))
    }

    /// Total size of the container in the section (header + entries).
    pub fn total_size(&self) -> u64 {
        u64::from(self.header_size).saturating_add(self.fat_size)
    }

    /// The entries of this container, in file order. The iterator stops after the first error.
    pub fn entries(&self) -> EntryIter<'a> {
        EntryIter { data: self.data, base: self.entries_offset(), pos: 0, count: 0, max: self.max_entries, done: false }
    }
}

/// Iterator over the containers of a fatbin section; see [`containers`].
#[derive(Clone, Debug)]
pub struct ContainerIter<'a> {
    data: &'a [u8],
    pos: u64,
    count: u64,
    max: u64,
    max_entries: u64,
    done: bool,
}

/// Walk a whole `.nv_fatbin` / `__nv_relfatbin` section: containers back to back, zero padding between
/// them skipped (the next container then starts at an 8-aligned offset). Uses [`Limits::default`] for
/// the caps on containers and entries; see [`containers_with_limits`].
pub fn containers(section: &[u8]) -> ContainerIter<'_> {
    containers_with_limits(section, &Limits::default())
}

/// [`containers`] with explicit caps: at most `limits.max_entries` containers, and as many entries in
/// each container.
pub fn containers_with_limits<'a>(section: &'a [u8], limits: &Limits) -> ContainerIter<'a> {
    ContainerIter {
        data: section,
        pos: 0,
        count: 0,
        max: limits.max_entries,
        max_entries: limits.max_entries,
        done: false,
    }
}

impl<'a> ContainerIter<'a> {
    fn parse_next(&mut self) -> Result<Option<Container<'a>>> {
        let len = self.data.len() as u64;
        if self.pos >= len {
            return Ok(None);
        }
        let rest = read::slice_at(self.data, self.pos, len - self.pos, "fatbin section")?;
        // Zero padding: skip to the first non-zero byte, which must be an 8-aligned container magic.
        if rest.first() == Some(&0) {
            match rest.iter().position(|&b| b != 0) {
                None => return Ok(None),
                Some(skip) => {
                    let at = self.pos + skip as u64;
                    if !at.is_multiple_of(CONTAINER_ALIGN) {
                        return Err(Error::new(at, "fatbin padding", "zero bytes up to an 8-aligned container magic"));
                    }
                    self.pos = at;
                }
            }
        }
        let start = self.pos;
        let magic = read::u32_at(self.data, start, "fatbin container magic")?;
        if magic != FATBIN_MAGIC {
            return Err(Error::new(start, "fatbin container magic", "0xba55ed50 (50 ed 55 ba)"));
        }
        if self.count >= self.max {
            return Err(Error::new(start, "fatbin container count", EXPECT_ENTRIES_CAP));
        }
        let version = read::u16_at(self.data, start + 4, "fatbin container version")?;
        let header_size = read::u16_at(self.data, start + 6, "fatbin container header size")?;
        if header_size < CONTAINER_HEADER_SIZE {
            return Err(Error::new(start + 6, "fatbin container header size", "at least 16"));
        }
        let fat_size = read::u64_at(self.data, start + 8, "fatbin container fat size")?;
        let entries_at = add(start, u64::from(header_size), start + 6, "fatbin container header size")?;
        // The header (possibly longer than 16 bytes) must fit too.
        read::slice_at(self.data, start, u64::from(header_size), "fatbin container header size").map_err(|_| {
            Error::new(start + 6, "fatbin container header size", "a header that ends inside the section")
        })?;
        let data = read::slice_at(self.data, entries_at, fat_size, "fatbin container fat size").map_err(|_| {
            Error::new(start + 8, "fatbin container fat size", "a container that ends inside the section")
        })?;
        // Progress is at least the 16-byte header, so the walk ends.
        self.pos = entries_at + fat_size;
        self.count += 1;
        Ok(Some(Container { offset: start, version, header_size, fat_size, data, max_entries: self.max_entries }))
    }
}

impl<'a> Iterator for ContainerIter<'a> {
    type Item = Result<Container<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let step = self.parse_next();
        read::fused_step(&mut self.done, step)
    }
}

impl FusedIterator for ContainerIter<'_> {}

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// PTX assembly text (kind 1).
    Ptx,
    /// ELF cubin (kind 2).
    Cubin,
    /// Anything else (old cubins, LTO IR…), with the raw kind.
    Other(u16),
}

impl EntryKind {
    pub fn from_raw(kind: u16) -> Self {
        match kind {
            KIND_PTX => EntryKind::Ptx,
            KIND_CUBIN => EntryKind::Cubin,
            other => EntryKind::Other(other),
        }
    }

    pub fn raw(self) -> u16 {
        match self {
            EntryKind::Ptx => KIND_PTX,
            EntryKind::Cubin => KIND_CUBIN,
            EntryKind::Other(k) => k,
        }
    }
}

/// How an entry's payload is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    None,
    /// LZ4 raw block (flag 0x2000, CUDA 12).
    Lz4,
    /// zstd frame (flag 0x8000, CUDA 13).
    Zstd,
}

/// One fatbin entry (a PTX file or a cubin for one SM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Offset of the entry header within the section given to [`containers`].
    pub offset: u64,
    pub kind: EntryKind,
    /// Entry header size; the payload starts at `offset + header_size`.
    pub header_size: u32,
    /// Payload bytes in the file (padded to 8).
    pub payload_size: u64,
    /// Compressed size (0 when not compressed); the compressed stream is the first this many payload bytes.
    pub compressed_size: u32,
    /// (major, minor): for cubins the ELF ABI (1.7 or 1.8), for PTX the PTX ISA version.
    pub version: (u16, u16),
    /// SM number, e.g. 75, 90, 120.
    pub sm: u32,
    pub flags: u64,
    /// Decompressed size (0 when not compressed).
    pub decompressed_size: u64,
    /// Header bytes past the fixed 64 (opaque: a copy of `.nv.compat` records for newer cubins).
    pub header_extension: &'a [u8],
    /// The payload as stored (possibly compressed, possibly zero-padded).
    pub payload: &'a [u8],
}

impl<'a> Entry<'a> {
    /// Any of the flags 0x1000 / 0x2000 / 0x8000 is set.
    pub fn is_compressed(&self) -> bool {
        self.flags & FLAGS_COMPRESSED != 0
    }

    /// The payload's compression: zstd when the payload starts with a zstd frame magic or the zstd flag
    /// is the only compression flag, otherwise LZ4 for the other compression flags.
    pub fn compression(&self) -> Compression {
        if !self.is_compressed() {
            return Compression::None;
        }
        if self.payload.starts_with(ZSTD_MAGIC) {
            return Compression::Zstd;
        }
        if self.flags & (FLAG_COMPRESSED_OLD | FLAG_COMPRESSED_LZ4) == 0 {
            return Compression::Zstd;
        }
        Compression::Lz4
    }

    /// Offset of the payload within the section.
    pub fn payload_offset(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.header_size))
    }

    /// The compressed stream and its claimed decompressed size, after checking both against the payload
    /// and `limits`; `None` for an uncompressed entry.
    fn compressed_input(&self, limits: &Limits) -> Result<Option<(&'a [u8], u64)>> {
        if self.compression() == Compression::None {
            return Ok(None);
        }
        let csize = u64::from(self.compressed_size);
        if csize == 0 {
            return Err(Error::new(
                self.offset + 16,
                "fatbin entry compressed size",
                "a non-zero size for a compressed entry",
            ));
        }
        let input = read::slice_at(self.payload, 0, csize, "fatbin entry compressed size")
            .map_err(|e| Error::new(self.offset + 16, e.field, "a compressed size within the payload"))?;
        let claimed = self.decompressed_size;
        limits.check_decompressed(claimed, csize, self.offset + 56, "fatbin entry decompressed size")?;
        Ok(Some((input, claimed)))
    }

    /// The most memory [`Entry::contents`] holds at once for this entry, in bytes: the output buffer, plus
    /// the zstd decoder's window (at most the output size); 0 for an uncompressed entry, which is borrowed.
    /// Errors as `contents` would for a claim the limits refuse, so a caller can budget the memory before
    /// any is allocated.
    pub fn decode_cost(&self, limits: &Limits) -> Result<u64> {
        Ok(match self.compressed_input(limits)? {
            None => 0,
            Some((_, claimed)) if self.compression() == Compression::Zstd => {
                claimed.saturating_add(zstd_window(claimed))
            }
            Some((_, claimed)) => claimed,
        })
    }

    /// The payload, decompressed if needed. Uncompressed payloads are borrowed as stored (including any
    /// zero padding). Compressed ones are decoded into a buffer of exactly the header's decompressed size,
    /// after checking that size against `limits`; an output of any other size is an error, and so is a
    /// buffer the allocator refuses (under a memory limit), instead of an abort.
    pub fn contents(&self, limits: &Limits) -> Result<Cow<'a, [u8]>> {
        self.contents_with(limits, &zeroed_by_writing)
    }

    /// [`Entry::contents`], taking the buffer an LZ4 block is decoded into from `zeroed`: exactly the
    /// asked number of zero bytes, or `None` when they cannot be had. The LZ4 decoder writes into
    /// initialised bytes; the default writes the zeros itself, one pass over the output more than a caller
    /// that can have zeroed memory from the allocator (`alloc_zeroed`: fresh pages from the kernel are
    /// zero already) needs, which is about 5% of scanning a CUDA library.
    pub fn contents_with(&self, limits: &Limits, zeroed: &dyn Fn(usize) -> Option<Vec<u8>>) -> Result<Cow<'a, [u8]>> {
        let Some((input, claimed)) = self.compressed_input(limits)? else {
            return Ok(Cow::Borrowed(self.payload));
        };
        let size_field = "fatbin entry decompressed size";
        let out_len = usize::try_from(claimed)
            .map_err(|_| Error::new(self.offset + 56, size_field, "a size that fits in memory"))?;
        let refused = Error::new(self.offset + 56, size_field, EXPECT_ALLOCATION);
        let at = self.payload_offset();
        let (out, overlong) = match self.compression() {
            Compression::Lz4 => {
                let mut out = zeroed(out_len).filter(|v| v.len() == out_len).ok_or(refused)?;
                let n = decompress_lz4(input, &mut out, at)?;
                out.truncate(n);
                (out, false)
            }
            _ => {
                let mut out = Vec::new();
                out.try_reserve_exact(out_len).map_err(|_| refused)?;
                let overlong = decompress_zstd(input, claimed, &mut out, at)?;
                (out, overlong)
            }
        };
        if overlong || out.len() as u64 != claimed {
            return Err(Error::new(self.offset + 56, size_field, "the size that the compressed payload decodes to"));
        }
        Ok(Cow::Owned(out))
    }
}

/// `len` zero bytes, written here after a fallible reservation (`vec![0; len]` would abort when the
/// allocator refuses). Zeroing in 64 KiB copies rather than by `resize` keeps unoptimised (test) builds
/// fast: `resize` writes byte by byte there, seconds per GiB.
pub fn zeroed_by_writing(len: usize) -> Option<Vec<u8>> {
    static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
    let mut out = Vec::new();
    out.try_reserve_exact(len).ok()?;
    while out.len() < len {
        let n = (len - out.len()).min(ZEROS.len());
        out.extend_from_slice(&ZEROS[..n]);
    }
    Some(out)
}

/// Decode an LZ4 block into `out`; the number of bytes it produced. Kept out of line: inlined into
/// `contents_with`, the block decoder's copy loops compiled to 10% more instructions (measured with
/// callgrind on the CUDA ggml fixture).
#[inline(never)]
fn decompress_lz4(input: &[u8], out: &mut [u8], at: u64) -> Result<usize> {
    match lz4_flex::block::decompress_into(input, out) {
        Ok(n) => Ok(n),
        Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) => {
            Err(Error::new(at, "fatbin entry LZ4 payload", "no more output than the header's decompressed size"))
        }
        Err(_) => Err(Error::new(at, "fatbin entry LZ4 payload", "a valid LZ4 raw block")),
    }
}

/// The largest zstd window accepted for an output of `claimed` bytes: the window never needs to exceed the
/// content size, so a hostile frame header cannot make the decoder hold more than the (already checked)
/// output size, or ruzstd's default cap.
fn zstd_window(claimed: u64) -> u64 {
    claimed.max(1 << 20).saturating_mul(2).min(ruzstd::decoding::DEFAULT_MAX_WINDOW_SIZE)
}

/// `out` has room for `claimed` bytes (reserved by the caller). Stops after `claimed` bytes; the frame
/// yielding more is reported as `Ok(true)` (its size is wrong), without growing `out`, whose growth would
/// double an allocation that was sized to the byte.
fn decompress_zstd(input: &[u8], claimed: u64, out: &mut Vec<u8>, at: u64) -> Result<bool> {
    use ruzstd::decoding::StreamingDecoder;
    let stream_err = |_| Error::new(at, "fatbin entry zstd payload", "a valid zstd frame");
    let decoder = StreamingDecoder::new_with_max_window_size(input, zstd_window(claimed))
        .map_err(|_| Error::new(at, "fatbin entry zstd payload", "a valid zstd frame header"))?;
    let (_, longer) = crate::read::decode_at_most(decoder, claimed, out).map_err(stream_err)?;
    Ok(longer)
}

/// Iterator over the entries of one container; see [`Container::entries`].
#[derive(Clone, Debug)]
pub struct EntryIter<'a> {
    data: &'a [u8],
    /// Offset of `data` within the section.
    base: u64,
    pos: u64,
    count: u64,
    max: u64,
    done: bool,
}

impl<'a> EntryIter<'a> {
    fn parse_next(&mut self) -> Result<Option<Entry<'a>>> {
        let len = self.data.len() as u64;
        if self.pos >= len {
            return Ok(None);
        }
        let p = self.pos;
        if self.count >= self.max {
            return Err(Error::new(p, "fatbin entry count", EXPECT_ENTRIES_CAP));
        }
        let d = self.data;
        let kind = read::u16_at(d, p, "fatbin entry kind")?;
        let header_size = read::u32_at(d, p + 4, "fatbin entry header size")?;
        if header_size < ENTRY_HEADER_MIN {
            return Err(Error::new(p + 4, "fatbin entry header size", "at least 64 bytes"));
        }
        let header = read::slice_at(d, p, u64::from(header_size), "fatbin entry header size")
            .map_err(|_| Error::new(p + 4, "fatbin entry header size", "a header that ends inside the container"))?;
        let payload_size = read::u64_at(d, p + 8, "fatbin entry payload size")?;
        let compressed_size = read::u32_at(d, p + 16, "fatbin entry compressed size")?;
        let minor = read::u16_at(d, p + 24, "fatbin entry minor version")?;
        let major = read::u16_at(d, p + 26, "fatbin entry major version")?;
        let sm = read::u32_at(d, p + 28, "fatbin entry SM")?;
        let flags = read::u64_at(d, p + 40, "fatbin entry flags")?;
        let decompressed_size = read::u64_at(d, p + 56, "fatbin entry decompressed size")?;
        let header_extension = header.get(ENTRY_HEADER_MIN as usize..).unwrap_or(&[]);
        let payload_at = p + u64::from(header_size);
        let payload = read::slice_at(d, payload_at, payload_size, "fatbin entry payload size")
            .map_err(|_| Error::new(p + 8, "fatbin entry payload size", "a payload that ends inside the container"))?;
        // Progress is at least the 64-byte header, so the walk ends.
        self.pos = payload_at + payload_size;
        self.count += 1;
        Ok(Some(Entry {
            offset: self.base.saturating_add(p),
            kind: EntryKind::from_raw(kind),
            header_size,
            payload_size,
            compressed_size,
            version: (major, minor),
            sm,
            flags,
            decompressed_size,
            header_extension,
            payload,
        }))
    }
}

impl<'a> Iterator for EntryIter<'a> {
    type Item = Result<Entry<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let base = self.base;
        let step = self.parse_next().map_err(|e| e.at_base(base));
        read::fused_step(&mut self.done, step)
    }
}

impl FusedIterator for EntryIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry: kind, header size, payload, compressed size, flags, decompressed size.
    fn entry(kind: u16, header_size: u32, payload: &[u8], csize: u32, flags: u64, dsize: u64) -> Vec<u8> {
        let mut e = vec![0u8; header_size.max(64) as usize];
        e[0..2].copy_from_slice(&kind.to_le_bytes());
        e[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        e[4..8].copy_from_slice(&header_size.to_le_bytes());
        e[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        e[16..20].copy_from_slice(&csize.to_le_bytes());
        e[24..26].copy_from_slice(&7u16.to_le_bytes());
        e[26..28].copy_from_slice(&1u16.to_le_bytes());
        e[28..32].copy_from_slice(&86u32.to_le_bytes());
        e[40..48].copy_from_slice(&flags.to_le_bytes());
        e[56..64].copy_from_slice(&dsize.to_le_bytes());
        e.truncate(header_size as usize);
        e.extend_from_slice(payload);
        e
    }

    fn container(entries: &[u8]) -> Vec<u8> {
        let mut c = Vec::new();
        c.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        c.extend_from_slice(&1u16.to_le_bytes());
        c.extend_from_slice(&16u16.to_le_bytes());
        c.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        c.extend_from_slice(entries);
        c
    }

    /// LZ4 raw block holding only literals: token (len << 4), then the bytes (len < 15).
    fn lz4_literals(bytes: &[u8]) -> Vec<u8> {
        assert!(bytes.len() < 15);
        let mut b = vec![(bytes.len() as u8) << 4];
        b.extend_from_slice(bytes);
        b
    }

    /// zstd frame with one raw block: single-segment header with a 1-byte content size, no checksum.
    fn zstd_raw(bytes: &[u8], content_size: u8) -> Vec<u8> {
        let mut f = ZSTD_MAGIC.to_vec();
        f.push(0x20);
        f.push(content_size);
        let block_header = 1u32 | ((bytes.len() as u32) << 3);
        f.extend_from_slice(&block_header.to_le_bytes()[..3]);
        f.extend_from_slice(bytes);
        f
    }

    fn one_entry(e: &[u8]) -> Entry<'_> {
        let c = containers(e).next().expect("a container").expect("valid container");
        c.entries().next().expect("an entry").expect("valid entry")
    }

    #[test]
    fn walks_containers_entries_and_padding() {
        let mut lz4 = lz4_literals(b"hello");
        let csize = lz4.len() as u32;
        lz4.resize(8, 0); // payloads are 8-byte padded
        let mut e = entry(KIND_CUBIN, 64, b"\x7fELF\0\0\0\0", 0, FLAG_64BIT | FLAG_LINUX, 0);
        e.extend(entry(KIND_PTX, 80, &lz4, csize, 0x2011, 5));
        let mut section = container(&e);
        section.extend_from_slice(&[0u8; 16]); // zero padding, next container 8-aligned
        section.extend(container(&entry(0x40, 64, b"", 0, 0, 0)));
        section.extend_from_slice(&[0u8; 8]); // trailing padding
        let cs: Vec<_> = containers(&section).collect::<Result<_>>().unwrap();
        assert_eq!(cs.len(), 2);
        assert_eq!((cs[0].offset, cs[0].version, cs[0].header_size), (0, 1, 16));
        assert_eq!(cs[1].offset, 16 + e.len() as u64 + 16);
        let es: Vec<_> = cs[0].entries().collect::<Result<_>>().unwrap();
        assert_eq!(es.len(), 2);
        assert_eq!((es[0].offset, es[0].kind, es[0].sm, es[0].version), (16, EntryKind::Cubin, 86, (1, 7)));
        assert_eq!(es[0].compression(), Compression::None);
        assert_eq!(&*es[0].contents(&Limits::default()).unwrap(), b"\x7fELF\0\0\0\0");
        assert!(matches!(es[0].contents(&Limits::default()).unwrap(), Cow::Borrowed(_)));
        assert_eq!((es[1].offset, es[1].kind, es[1].header_size), (16 + 72, EntryKind::Ptx, 80));
        assert_eq!(es[1].header_extension.len(), 16);
        assert!(es[1].is_compressed());
        assert_eq!(es[1].compression(), Compression::Lz4);
        assert_eq!(&*es[1].contents(&Limits::default()).unwrap(), b"hello");
        let other: Vec<_> = cs[1].entries().collect::<Result<_>>().unwrap();
        assert_eq!(other[0].kind, EntryKind::Other(0x40));
        assert_eq!(other[0].kind.raw(), 0x40);
    }

    #[test]
    fn empty_and_all_zero_sections_have_no_containers() {
        assert_eq!(containers(&[]).count(), 0);
        assert_eq!(containers(&[0u8; 64]).count(), 0);
    }

    #[test]
    fn truncated_container_header_is_an_error_and_fuses() {
        let section = container(&[]);
        let mut it = containers(&section[..10]);
        let err = it.next().unwrap().unwrap_err();
        assert_eq!((err.offset, err.field), (8, "fatbin container fat size"));
        assert!(it.next().is_none());
        // Only the magic.
        let err = containers(&section[..4]).next().unwrap().unwrap_err();
        assert_eq!(err.offset, 4);
    }

    #[test]
    fn bad_magic_and_misaligned_padding() {
        let err = containers(b"\x01\x02\x03\x04\x05\x06\x07\x08").next().unwrap().unwrap_err();
        assert_eq!((err.offset, err.field), (0, "fatbin container magic"));
        let mut section = vec![0u8; 3];
        section.extend(container(&[]));
        let err = containers(&section).next().unwrap().unwrap_err();
        assert_eq!((err.offset, err.field), (3, "fatbin padding"));
        // Garbage after a valid container.
        let mut section = container(&[]);
        section.extend_from_slice(b"garbage!");
        let mut it = containers(&section);
        assert!(it.next().unwrap().is_ok());
        assert_eq!(it.next().unwrap().unwrap_err().offset, 16);
        assert!(it.next().is_none());
    }

    #[test]
    fn fat_size_past_the_end_and_small_header_size() {
        let mut section = container(&[0u8; 8]);
        section[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        let err = containers(&section).next().unwrap().unwrap_err();
        assert_eq!((err.offset, err.field), (8, "fatbin container fat size"));
        section[8..16].copy_from_slice(&9u64.to_le_bytes());
        assert_eq!(containers(&section).next().unwrap().unwrap_err().offset, 8);
        let mut section = container(&[]);
        section[6..8].copy_from_slice(&0u16.to_le_bytes());
        let err = containers(&section).next().unwrap().unwrap_err();
        assert_eq!((err.offset, err.field), (6, "fatbin container header size"));
        section[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(containers(&section).next().unwrap().unwrap_err().offset, 6);
    }

    #[test]
    fn entry_header_size_zero_is_an_error_not_a_loop() {
        let mut e = entry(KIND_CUBIN, 64, b"", 0, 0, 0);
        e[4..8].copy_from_slice(&0u32.to_le_bytes());
        e.extend(entry(KIND_CUBIN, 64, b"", 0, 0, 0));
        let section = container(&e);
        let c = containers(&section).next().unwrap().unwrap();
        let mut it = c.entries();
        let err = it.next().unwrap().unwrap_err();
        assert_eq!((err.offset, err.field), (16 + 4, "fatbin entry header size"));
        assert!(it.next().is_none());
        // An all-zero entries area is an error too, at its first byte.
        let section = container(&[0u8; 128]);
        let c = containers(&section).next().unwrap().unwrap();
        assert_eq!(c.entries().filter(Result::is_err).count(), 1);
    }

    #[test]
    fn entry_truncated_header_and_payload_past_the_end() {
        let e = entry(KIND_CUBIN, 64, b"12345678", 0, 0, 0);
        let section = container(&e[..40]);
        let c = containers(&section).next().unwrap().unwrap();
        let err = c.entries().next().unwrap().unwrap_err();
        assert_eq!((err.offset, err.field), (20, "fatbin entry header size"));
        // Header size larger than the container.
        let mut e2 = e.clone();
        e2[4..8].copy_from_slice(&1000u32.to_le_bytes());
        let section = container(&e2);
        let c = containers(&section).next().unwrap().unwrap();
        assert_eq!(c.entries().next().unwrap().unwrap_err().offset, 20);
        // Payload size past the end, and one that would overflow.
        for size in [9u64, u64::MAX, u64::MAX - 63] {
            let mut e3 = e.clone();
            e3[8..16].copy_from_slice(&size.to_le_bytes());
            let section = container(&e3);
            let c = containers(&section).next().unwrap().unwrap();
            let err = c.entries().next().unwrap().unwrap_err();
            assert_eq!((err.offset, err.field), (24, "fatbin entry payload size"));
        }
    }

    #[test]
    fn entry_and_container_counts_are_capped() {
        let mut e = Vec::new();
        for _ in 0..5 {
            e.extend(entry(KIND_PTX, 64, b"", 0, 0, 0));
        }
        let mut section = container(&e);
        section.extend(container(&[]));
        section.extend(container(&[]));
        let limits = Limits { max_entries: 3, ..Limits::default() };
        let mut it = containers_with_limits(&section, &limits);
        let c = it.next().unwrap().unwrap();
        let results: Vec<_> = c.entries().collect();
        assert_eq!(results.len(), 4);
        assert_eq!(results[3].unwrap_err().field, "fatbin entry count");
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_ok());
        assert!(it.by_ref().next().is_none());
        let mut four = section.clone();
        four.extend(container(&[]));
        let errs: Vec<_> = containers_with_limits(&four, &limits).filter_map(Result::err).collect();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "fatbin container count");
        // Without a cap the walk is bounded by the data: 5 entries of 64 bytes.
        assert_eq!(containers(&section).next().unwrap().unwrap().entries().count(), 5);
    }

    #[test]
    fn lz4_size_lies_are_errors() {
        let block = lz4_literals(b"hello");
        let csize = block.len() as u32;
        // Claims more than it yields.
        let e = entry(KIND_PTX, 64, &block, csize, FLAG_COMPRESSED_LZ4, 10);
        let err = one_entry(&container(&e)).contents(&Limits::default()).unwrap_err();
        assert_eq!((err.offset, err.field), (16 + 56, "fatbin entry decompressed size"));
        // Claims less than it yields.
        let e = entry(KIND_PTX, 64, &block, csize, FLAG_COMPRESSED_LZ4, 3);
        let err = one_entry(&container(&e)).contents(&Limits::default()).unwrap_err();
        assert_eq!((err.offset, err.field), (16 + 64, "fatbin entry LZ4 payload"));
        // A 1 TB claim is refused before anything is allocated.
        let e = entry(KIND_PTX, 64, &block, csize, FLAG_COMPRESSED_LZ4, 1 << 40);
        let err = one_entry(&container(&e)).contents(&Limits::default()).unwrap_err();
        assert_eq!((err.offset, err.field), (16 + 56, "fatbin entry decompressed size"));
        // A claim far beyond the ratio cap, within the absolute cap.
        let e = entry(KIND_PTX, 64, &block, csize, FLAG_COMPRESSED_LZ4, 100 << 20);
        assert!(one_entry(&container(&e)).contents(&Limits::default()).is_err());
        // Compressed size of 0, or past the payload.
        for bad in [0u32, 100] {
            let e = entry(KIND_PTX, 64, &block, bad, FLAG_COMPRESSED_LZ4, 5);
            let err = one_entry(&container(&e)).contents(&Limits::default()).unwrap_err();
            assert_eq!(err.offset, 16 + 16);
        }
        // Not LZ4 at all: a match offset before the start of the output.
        let garbage = [0x0fu8, 0xff, 0xff, 0xff, 0xff];
        let e = entry(KIND_PTX, 64, &garbage, 5, FLAG_COMPRESSED_LZ4, 64);
        assert!(one_entry(&container(&e)).contents(&Limits::default()).is_err());
    }

    #[test]
    fn zstd_payloads() {
        let frame = zstd_raw(b"hello", 5);
        let e = entry(KIND_CUBIN, 64, &frame, frame.len() as u32, 0x8011, 5);
        let section = container(&e);
        let en = one_entry(&section);
        assert_eq!(en.compression(), Compression::Zstd);
        assert_eq!(&*en.contents(&Limits::default()).unwrap(), b"hello");
        // Header claims more / less than the frame yields.
        for claim in [6u64, 4] {
            let e = entry(KIND_CUBIN, 64, &frame, frame.len() as u32, 0x8011, claim);
            let err = one_entry(&container(&e)).contents(&Limits::default()).unwrap_err();
            assert_eq!((err.offset, err.field), (16 + 56, "fatbin entry decompressed size"));
        }
        // Truncated frame and garbage.
        let e = entry(KIND_CUBIN, 64, &frame[..8], 8, 0x8011, 5);
        assert!(one_entry(&container(&e)).contents(&Limits::default()).is_err());
        let e = entry(KIND_CUBIN, 64, b"\x28\xb5\x2f\xfd\xff\xff\xff\xff", 8, 0x8011, 5);
        let err = one_entry(&container(&e)).contents(&Limits::default()).unwrap_err();
        assert_eq!(err.offset, 16 + 64);
    }

    #[test]
    fn compression_from_flags_and_magic() {
        let frame = zstd_raw(b"x", 1);
        let cases: [(u64, &[u8], Compression); 6] = [
            (0x11, b"\x7fELF", Compression::None),
            (FLAG_COMPRESSED_LZ4, b"\xa2\x7fELF", Compression::Lz4),
            (FLAG_COMPRESSED_ZSTD, &frame, Compression::Zstd),
            (FLAG_COMPRESSED_ZSTD, b"\xa2\x7fELF", Compression::Zstd),
            (FLAG_COMPRESSED_OLD, &frame, Compression::Zstd),
            (FLAG_COMPRESSED_OLD, b"\xa2\x7fELF", Compression::Lz4),
        ];
        for (flags, payload, expected) in cases {
            let e = entry(KIND_CUBIN, 64, payload, payload.len() as u32, flags, 1);
            let section = container(&e);
            assert_eq!(one_entry(&section).compression(), expected, "flags {flags:#x}");
        }
        // The 0x1000 flag alone with an LZ4 block decodes.
        let block = lz4_literals(b"abc");
        let e = entry(KIND_PTX, 64, &block, block.len() as u32, FLAG_COMPRESSED_OLD, 3);
        assert_eq!(&*one_entry(&container(&e)).contents(&Limits::default()).unwrap(), b"abc");
    }
}
