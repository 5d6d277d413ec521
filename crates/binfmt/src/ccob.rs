//! Compressed clang offload bundles (`CCOB`), as emitted by `clang --offload-compress` and shipped by
//! rocBLAS, RCCL, rocSPARSE, Tensile `.co` files and JAX's ROCm plugin.
//!
//! Header (LLVM `OffloadBundle.h`/`.cpp`): `CCOB`, u16 version, u16 method (0 zlib, 1 zstd), then
//! v1: u32 uncompressed size, u64 hash (20 bytes); v2: u32 total size, u32 uncompressed size, u64 hash
//! (24 bytes); v3: u64 total size, u64 uncompressed size, u64 hash (32 bytes). The payload decompresses
//! to an ordinary `__CLANG_OFFLOAD_BUNDLE__`.

use std::io::Read;

use crate::bundle_layout::{self as layout, Extent};
use crate::error::{Error, Result};
use crate::read;
use crate::sniff::{BUNDLE_MAGIC, CCOB_MAGIC};
use crate::{Limits, EXPECT_ALLOCATION};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Zlib,
    Zstd,
}

/// A compressed bundle's header and payload, borrowed from the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompressedBundle<'a> {
    pub version: u16,
    pub method: Method,
    pub header_size: u64,
    /// Total size from the header (v2/v3). v1 has none: its payload runs to the next bundle magic.
    pub total_size: Option<u64>,
    pub uncompressed_size: u64,
    /// MD5 of the uncompressed bytes truncated to 64 bits (LLVM `MD5Result::low()`).
    pub hash: u64,
    pub payload: &'a [u8],
}

impl<'a> CompressedBundle<'a> {
    /// Parse a `CCOB` that starts at `data[0]`; `data` may run past its end (a section of many bundles).
    pub fn parse(data: &'a [u8]) -> Result<CompressedBundle<'a>> {
        if !data.starts_with(CCOB_MAGIC) {
            return Err(Error::new(0, "compressed bundle magic", "`CCOB`"));
        }
        let version = read::u16_at(data, 4, "CCOB version")?;
        let method = match read::u16_at(data, 6, "CCOB compression method")? {
            0 => Method::Zlib,
            1 => Method::Zstd,
            _ => return Err(Error::new(6, "CCOB compression method", "0 (zlib) or 1 (zstd)")),
        };
        // Check the version before computing the header size: LLVM once hit `llvm_unreachable` here.
        let (header_size, total_size, uncompressed_size, hash) = match version {
            1 => (
                20,
                None,
                u64::from(read::u32_at(data, 8, "CCOB v1 uncompressed size")?),
                read::u64_at(data, 12, "CCOB v1 hash")?,
            ),
            2 => (
                24,
                Some(u64::from(read::u32_at(data, 8, "CCOB v2 total size")?)),
                u64::from(read::u32_at(data, 12, "CCOB v2 uncompressed size")?),
                read::u64_at(data, 16, "CCOB v2 hash")?,
            ),
            3 => (
                32,
                Some(read::u64_at(data, 8, "CCOB v3 total size")?),
                read::u64_at(data, 16, "CCOB v3 uncompressed size")?,
                read::u64_at(data, 24, "CCOB v3 hash")?,
            ),
            _ => return Err(Error::new(4, "CCOB version", "1, 2 or 3")),
        };
        let end = match total_size {
            Some(total) if total < header_size => {
                return Err(Error::new(8, "CCOB total size", "a total size that covers the header"))
            }
            Some(total) => {
                read::slice_at(data, 0, total, "CCOB total size").map_err(|e| Error { offset: 8, ..e })?;
                total
            }
            // v1: the zstd/zlib payload may contain the magic itself, which is why v2 added the total
            // size; for v1 a scan is the only option (what LLVM's unbundler does).
            None => next_magic(data, header_size as usize) as u64,
        };
        let payload = read::slice_at(data, header_size, end - header_size, "CCOB payload")?;
        Ok(CompressedBundle { version, method, header_size, total_size, uncompressed_size, hash, payload })
    }

    /// Bytes from the magic to the end of the payload.
    pub fn total_len(&self) -> usize {
        self.header_size as usize + self.payload.len()
    }

    /// Offset of the uncompressed-size field in the header: 8 in v1, 12 in v2, 16 in v3.
    pub fn uncompressed_size_at(&self) -> u64 {
        match self.version {
            1 => 8,
            2 => 12,
            _ => 16,
        }
    }

    /// The most memory [`CompressedBundle::decompress`] holds at once, in bytes: the output buffer, plus for
    /// zstd the decoder's window (at most the output size, and at most ruzstd's default cap). Errors as
    /// `decompress` would for a size the limits refuse, so a caller can budget the memory before any is
    /// allocated.
    pub fn decode_cost(&self, limits: &Limits) -> Result<u64> {
        let at = self.uncompressed_size_at();
        limits.check_decompressed(self.uncompressed_size, self.payload.len() as u64, at, UNCOMPRESSED_SIZE)?;
        let want = self.uncompressed_size;
        Ok(match self.method {
            Method::Zlib => want,
            Method::Zstd => want.saturating_add(want.min(ruzstd::decoding::DEFAULT_MAX_WINDOW_SIZE)),
        })
    }

    /// Decompress into a new buffer of exactly `uncompressed_size` bytes, after checking that size
    /// against `limits`. Errors if the stream yields more or fewer bytes than the header announced, or if
    /// the allocator refuses the buffer (under a memory limit) instead of aborting.
    pub fn decompress(&self, limits: &Limits) -> Result<Vec<u8>> {
        let at = self.uncompressed_size_at();
        self.decode_cost(limits)?;
        let want = self.uncompressed_size;
        let mut out = Vec::new();
        out.try_reserve_exact(usize::try_from(want).unwrap_or(usize::MAX))
            .map_err(|_| Error::new(at, UNCOMPRESSED_SIZE, EXPECT_ALLOCATION))?;
        // Read at most the announced size into the exact buffer, and notice a stream that is longer than its
        // header says.
        let got = match self.method {
            Method::Zlib => read::decode_at_most(flate2::read::ZlibDecoder::new(self.payload), want, &mut out),
            Method::Zstd => {
                let mut src = self.payload;
                let decoder = ruzstd::decoding::StreamingDecoder::new(&mut src)
                    .map_err(|_| Error::new(self.header_size, "CCOB zstd frame header", "a valid zstd frame"))?;
                read::decode_at_most(decoder, want, &mut out)
            }
        };
        match got {
            Ok((n, false)) if n as u64 == want => Ok(out),
            Ok(_) => Err(Error::new(at, UNCOMPRESSED_SIZE, "the number of bytes the compressed stream decodes to")),
            Err(_) => Err(Error::new(self.header_size, "CCOB payload", "a valid zlib/zstd stream")),
        }
    }
}

const UNCOMPRESSED_SIZE: &str = "CCOB uncompressed size";
/// Bytes decoded at least at a time while the bundle's header and entry table are read.
const READ_AHEAD: u64 = 64 << 10;

/// What [`CompressedBundle::decompress_bundle`] decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecompressedBundle {
    /// The decompressed bytes up to where the bundle inside ends ([`crate::bundle::extent`]).
    pub bytes: Vec<u8>,
    /// Bytes the header announces past that end, left undecompressed (0 when the whole payload was decoded).
    pub skipped: u64,
}

impl<'a> CompressedBundle<'a> {
    /// Decompress as far as the offload bundle inside reaches, and no further: the bundle header and entry
    /// table are read as they are decoded, and decoding stops where the last entry ends (or at once, when the
    /// header already shows the bundle is malformed or over the caps), so an empty bundle header in front of a
    /// gibibyte of zeros costs 32 bytes. [`Bundle::parse_with_limits`] on `bytes` gives the same bundle, or the
    /// same error, as on the whole payload. Sizes are checked against `limits` first, as for
    /// [`CompressedBundle::decompress`]; a stream shorter than the bytes the bundle needs is an error, and one
    /// longer than the header's size is noticed when the bundle reaches that size.
    ///
    /// [`Bundle::parse_with_limits`]: crate::bundle::Bundle::parse_with_limits
    pub fn decompress_bundle(&self, limits: &Limits) -> Result<DecompressedBundle> {
        let at = self.uncompressed_size_at();
        self.decode_cost(limits)?;
        let want = self.uncompressed_size;
        let stream_error = || Error::new(self.header_size, "CCOB payload", "a valid zlib/zstd stream");
        let mut src = self.payload;
        let mut decoder: Box<dyn std::io::Read + '_> = match self.method {
            Method::Zlib => Box::new(flate2::read::ZlibDecoder::new(self.payload)),
            Method::Zstd => Box::new(
                ruzstd::decoding::StreamingDecoder::new(&mut src)
                    .map_err(|_| Error::new(self.header_size, "CCOB zstd frame header", "a valid zstd frame"))?,
            ),
        };
        let mut out: Vec<u8> = Vec::new();
        // Decode up to `upto` bytes in all; false when the stream ended first.
        let mut fill = |out: &mut Vec<u8>, upto: u64, exact: bool| -> Result<bool> {
            let more = usize::try_from(upto).unwrap_or(usize::MAX).saturating_sub(out.len());
            let reserved = if exact { out.try_reserve_exact(more) } else { out.try_reserve(more) };
            reserved.map_err(|_| Error::new(at, UNCOMPRESSED_SIZE, EXPECT_ALLOCATION))?;
            (&mut decoder).take(more as u64).read_to_end(out).map_err(|_| stream_error())?;
            Ok(out.len() as u64 == upto)
        };
        let short = || Error::new(at, UNCOMPRESSED_SIZE, "the number of bytes the compressed stream decodes to");
        let end = loop {
            match layout::extent(&out, want, limits) {
                Extent::NeedMore(n) => {
                    // Read ahead (within the announced size), so that a long entry table is walked a few times, not
                    // once per entry.
                    let ahead = n.max(2 * out.len() as u64).max(READ_AHEAD).min(want);
                    fill(&mut out, ahead, false)?;
                    if (out.len() as u64) < n {
                        return Err(short());
                    }
                }
                Extent::Ends(end) => break end,
            }
        };
        if end > out.len() as u64 && !fill(&mut out, end, true)? {
            return Err(short());
        }
        out.truncate(usize::try_from(end).unwrap_or(usize::MAX));
        if end == want {
            // The whole payload: a stream that goes on past the header's size is as wrong as one that stops short.
            let mut extra = [0u8; 1];
            if decoder.read(&mut extra).map_err(|_| stream_error())? != 0 {
                return Err(short());
            }
        }
        Ok(DecompressedBundle { bytes: out, skipped: want - end })
    }
}

/// The first bundle magic (compressed or not) at or after `from`, or the end of `data`.
fn next_magic(data: &[u8], from: usize) -> usize {
    read::find_any(data, &[CCOB_MAGIC, BUNDLE_MAGIC], from).unwrap_or(data.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    fn v2(method: u16, payload: &[u8], uncompressed: u32) -> Vec<u8> {
        let mut out = b"CCOB".to_vec();
        out.extend(2u16.to_le_bytes());
        out.extend(method.to_le_bytes());
        out.extend((24 + payload.len() as u32).to_le_bytes());
        out.extend(uncompressed.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend(payload);
        out
    }

    #[test]
    fn zlib_round_trip_and_size_checks() {
        let inner = b"__CLANG_OFFLOAD_BUNDLE__ and some more bytes to compress".repeat(10);
        let packed = v2(0, &zlib(&inner), inner.len() as u32);
        let c = CompressedBundle::parse(&packed).unwrap();
        assert_eq!((c.version, c.method, c.total_len()), (2, Method::Zlib, packed.len()));
        assert_eq!(c.decompress(&Limits::default()).unwrap(), inner);

        // The header claims one byte more (or less) than the stream holds.
        for claimed in [inner.len() as u32 + 1, inner.len() as u32 - 1] {
            let lie = v2(0, &zlib(&inner), claimed);
            let err = CompressedBundle::parse(&lie).unwrap().decompress(&Limits::default()).unwrap_err();
            assert_eq!(err.field, "CCOB uncompressed size");
        }
    }

    /// A bundle (clang's layout: magic, u64 count, then u64 offset, u64 size, u64 ID length and the ID per entry)
    /// of one 5-byte `host` entry at 64, followed by `padding` zero bytes.
    fn one_entry_bundle(padding: usize) -> Vec<u8> {
        let mut inner = BUNDLE_MAGIC.to_vec();
        inner.extend(1u64.to_le_bytes());
        inner.extend(64u64.to_le_bytes());
        inner.extend(5u64.to_le_bytes());
        inner.extend(4u64.to_le_bytes());
        inner.extend(b"host");
        inner.resize(64, 0);
        inner.extend(b"hello");
        inner.resize(69 + padding, 0);
        inner
    }

    #[test]
    fn decompress_bundle_stops_where_the_bundle_ends() {
        use crate::bundle::Bundle;
        // Zeros compress far beyond the ratio cap.
        let loose = Limits { max_ratio: 1 << 20, ..Limits::default() };
        let mut empty = BUNDLE_MAGIC.to_vec();
        empty.extend(0u64.to_le_bytes());
        empty.resize(300_000, 0);
        for method in [0u16, 1] {
            let pack = |inner: &[u8]| {
                let stream = match method {
                    0 => zlib(inner),
                    _ => ruzstd::encoding::compress_to_vec(inner, ruzstd::encoding::CompressionLevel::Fastest),
                };
                v2(method, &stream, inner.len() as u32)
            };
            let padded = one_entry_bundle(100_000);
            let packed = pack(&padded);
            let d = CompressedBundle::parse(&packed).unwrap().decompress_bundle(&loose).unwrap();
            assert_eq!((&d.bytes[..], d.skipped), (&padded[..69], 100_000));
            assert_eq!(Bundle::parse(&d.bytes).unwrap(), Bundle::parse(&padded).unwrap());
            // An entry count of 0: the 32-byte header is all there is.
            let packed = pack(&empty);
            let d = CompressedBundle::parse(&packed).unwrap().decompress_bundle(&loose).unwrap();
            assert_eq!((d.bytes.len(), d.skipped), (32, 300_000 - 32));
            // No padding: the whole payload. A header that claims less than the stream holds is an error as for
            // `decompress`; one that claims more is not noticed, since the bytes past the bundle are not decoded
            // (they are reported as skipped).
            let exact = one_entry_bundle(0);
            let packed = pack(&exact);
            let c = CompressedBundle::parse(&packed).unwrap();
            assert_eq!(c.decompress_bundle(&loose).unwrap().bytes, exact);
            let with_claim = |claimed: u32| {
                let mut lie = packed.clone();
                lie[12..16].copy_from_slice(&claimed.to_le_bytes());
                lie
            };
            let short = with_claim(68);
            let err = CompressedBundle::parse(&short).unwrap().decompress_bundle(&loose).unwrap_err();
            assert_eq!((err.offset, err.field), (12, "CCOB uncompressed size"), "method {method}");
            let long = with_claim(70);
            let d = CompressedBundle::parse(&long).unwrap().decompress_bundle(&loose).unwrap();
            assert_eq!((d.bytes, d.skipped), (exact.clone(), 1));
        }
    }

    #[test]
    fn size_errors_name_the_field_of_each_version() {
        // LLVM OffloadBundle.cpp: the uncompressed size follows the u32 total size in v2 (bytes 12..16), the
        // version and method in v1 (8..12) and the u64 total size in v3 (16..24).
        let lie = v2(0, &zlib(b"x"), u32::MAX);
        let c = CompressedBundle::parse(&lie).unwrap();
        let err = c.decompress(&Limits::default()).unwrap_err();
        assert_eq!((err.offset, err.field), (12, "CCOB uncompressed size"));
        assert_eq!(c.decode_cost(&Limits::default()).unwrap_err(), err);
        let mut v1 = b"CCOB".to_vec();
        v1.extend(1u16.to_le_bytes());
        v1.extend(0u16.to_le_bytes());
        v1.extend(u32::MAX.to_le_bytes());
        v1.extend(0u64.to_le_bytes());
        v1.extend(zlib(b"x"));
        let err = CompressedBundle::parse(&v1).unwrap().decompress(&Limits::default()).unwrap_err();
        assert_eq!((err.offset, err.field), (8, "CCOB uncompressed size"));
    }

    #[test]
    fn decode_cost_counts_the_output_and_the_zstd_window() {
        let inner = vec![7u8; 3000];
        let packed = v2(0, &zlib(&inner), inner.len() as u32);
        assert_eq!(CompressedBundle::parse(&packed).unwrap().decode_cost(&Limits::default()), Ok(3000));
        let mut zstd = packed.clone();
        zstd[6] = 1;
        assert_eq!(CompressedBundle::parse(&zstd).unwrap().decode_cost(&Limits::default()), Ok(6000));
    }

    #[test]
    fn rejects_hostile_headers() {
        // v3 announcing a 1 TB payload.
        let mut v3 = b"CCOB".to_vec();
        v3.extend(3u16.to_le_bytes());
        v3.extend(1u16.to_le_bytes());
        v3.extend(40u64.to_le_bytes());
        v3.extend((1u64 << 40).to_le_bytes());
        v3.extend(0u64.to_le_bytes());
        v3.extend([0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0]);
        let c = CompressedBundle::parse(&v3).unwrap();
        let err = c.decompress(&Limits::default()).unwrap_err();
        assert_eq!((err.offset, err.field), (16, "CCOB uncompressed size"));

        let mut bad_version = v3.clone();
        bad_version[4] = 9;
        assert_eq!(CompressedBundle::parse(&bad_version).unwrap_err().field, "CCOB version");
        let mut bad_method = v3.clone();
        bad_method[6] = 7;
        assert_eq!(CompressedBundle::parse(&bad_method).unwrap_err().field, "CCOB compression method");
        let mut past_end = v3.clone();
        past_end[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(CompressedBundle::parse(&past_end).unwrap_err().offset, 8);
        for n in 0..v3.len() {
            let _ = CompressedBundle::parse(&v3[..n]).map(|c| c.decompress(&Limits::default()));
        }
        // Garbage zstd payload.
        let mut garbage = v3.clone();
        garbage[16..24].copy_from_slice(&64u64.to_le_bytes());
        assert!(CompressedBundle::parse(&garbage).unwrap().decompress(&Limits::default()).is_err());
    }
}
