//! Compressed clang offload bundles (`CCOB`), as emitted by `clang --offload-compress` and shipped by
//! rocBLAS, RCCL, rocSPARSE, Tensile `.co` files and JAX's ROCm plugin.
//!
//! Header (LLVM `OffloadBundle.h`/`.cpp`): `CCOB`, u16 version, u16 method (0 zlib, 1 zstd), then
//! v1: u32 uncompressed size, u64 hash (20 bytes); v2: u32 total size, u32 uncompressed size, u64 hash
//! (24 bytes); v3: u64 total size, u64 uncompressed size, u64 hash (32 bytes). The payload decompresses
//! to an ordinary `__CLANG_OFFLOAD_BUNDLE__`.

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
    fn uncompressed_size_at(&self) -> u64 {
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
