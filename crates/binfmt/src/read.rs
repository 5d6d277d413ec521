//! Bounds-checked little-endian reads over borrowed bytes.
//!
//! Every decoder goes through these helpers instead of indexing, so a length or offset taken from the
//! file can never index past the end or overflow: each read either returns the value or an [`Error`]
//! naming the field. Counts read from a file slice the input; they never size an allocation.

use crate::error::{Error, Result};

/// `data[offset..offset + len]`, or an error naming `field` if any part lies outside `data`.
pub fn slice_at<'a>(data: &'a [u8], offset: u64, len: u64, field: &'static str) -> Result<&'a [u8]> {
    let start = usize::try_from(offset).map_err(|_| Error::new(offset, field, "an offset inside the input"))?;
    let len_usize = usize::try_from(len).map_err(|_| Error::new(offset, field, "a length that fits in memory"))?;
    let end =
        start.checked_add(len_usize).ok_or(Error::new(offset, field, "an offset + size that does not overflow"))?;
    data.get(start..end).ok_or(Error::new(offset, field, "a range that ends inside the input"))
}

fn array_at<const N: usize>(data: &[u8], offset: u64, field: &'static str) -> Result<[u8; N]> {
    let bytes = slice_at(data, offset, N as u64, field)?;
    // slice_at returned exactly N bytes
    Ok(bytes.try_into().unwrap_or([0; N]))
}

pub fn u8_at(data: &[u8], offset: u64, field: &'static str) -> Result<u8> {
    Ok(array_at::<1>(data, offset, field)?[0])
}

pub fn u16_at(data: &[u8], offset: u64, field: &'static str) -> Result<u16> {
    Ok(u16::from_le_bytes(array_at(data, offset, field)?))
}

pub fn u32_at(data: &[u8], offset: u64, field: &'static str) -> Result<u32> {
    Ok(u32::from_le_bytes(array_at(data, offset, field)?))
}

pub fn u64_at(data: &[u8], offset: u64, field: &'static str) -> Result<u64> {
    Ok(u64::from_le_bytes(array_at(data, offset, field)?))
}

pub fn i64_at(data: &[u8], offset: u64, field: &'static str) -> Result<i64> {
    Ok(i64::from_le_bytes(array_at(data, offset, field)?))
}

/// `a + b` for offsets read from a file, or an error naming `field`.
pub fn add(a: u64, b: u64, at: u64, field: &'static str) -> Result<u64> {
    a.checked_add(b).ok_or(Error::new(at, field, "an offset + size that does not overflow"))
}

/// Round `value` up to a multiple of `align` (a power of two), saturating at `u64::MAX`.
pub fn align_up(value: u64, align: u64) -> u64 {
    debug_assert!(align.is_power_of_two());
    match value.checked_add(align - 1) {
        Some(v) => v & !(align - 1),
        None => u64::MAX,
    }
}

/// One step of an iterator over an untrusted table that stops for good after its first error: yields the
/// item, or the error once, then `None` (the iterators set `done` and check it first).
pub fn fused_step<T>(done: &mut bool, step: Result<Option<T>>) -> Option<Result<T>> {
    match step {
        Ok(Some(item)) => Some(Ok(item)),
        Ok(None) => {
            *done = true;
            None
        }
        Err(e) => {
            *done = true;
            Some(Err(e))
        }
    }
}

/// The first position at or after `from` where any of `needles` starts. One pass, so a caller that
/// resynchronises after every error stays linear even when one of the needles never occurs (two separate
/// [`find`]s would each scan to the end of the data every time).
pub fn find_any(haystack: &[u8], needles: &[&[u8]], from: usize) -> Option<usize> {
    let rest = haystack.get(from..)?;
    (0..rest.len())
        .find(|&i| {
            let tail = rest.get(i..).unwrap_or_default();
            // Compare the first byte before the whole needle: most positions fail there, without a memcmp.
            needles.iter().any(|n| n.first().is_some_and(|b| tail.first() == Some(b)) && tail.starts_with(n))
        })
        .map(|p| p + from)
}

/// Find `needle` in `haystack` starting at `from`; used to resynchronise after padding.
pub fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from >= haystack.len() {
        return None;
    }
    haystack.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

/// Decodes at most `want` bytes of `decoder` into `out` (reserved to the byte by the caller), then tries one byte
/// more: `(bytes decoded, whether the stream goes on past `want`)`. The extra byte is not kept, because growing
/// `out` for it would double an allocation sized exactly to the claimed size.
pub fn decode_at_most(mut decoder: impl std::io::Read, want: u64, out: &mut Vec<u8>) -> std::io::Result<(usize, bool)> {
    use std::io::Read;
    let n = (&mut decoder).take(want).read_to_end(out)?;
    let mut extra = [0u8; 1];
    Ok((n, decoder.read(&mut extra)? != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounded() {
        let data = [1u8, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(u32_at(&data, 0, "x").unwrap(), 0x0403_0201);
        assert_eq!(u64_at(&data, 0, "x").unwrap(), 0x0807_0605_0403_0201);
        let err = u32_at(&data, 6, "field name").unwrap_err();
        assert_eq!(err.offset, 6);
        assert_eq!(err.field, "field name");
        assert!(slice_at(&data, u64::MAX, 2, "x").is_err());
        assert!(slice_at(&data, 4, u64::MAX, "x").is_err());
        assert_eq!(slice_at(&data, 8, 0, "x").unwrap(), &[] as &[u8]);
    }

    #[test]
    fn align_and_find() {
        assert_eq!(align_up(0, 4096), 0);
        assert_eq!(align_up(1, 4096), 4096);
        assert_eq!(align_up(4096, 4096), 4096);
        assert_eq!(align_up(u64::MAX - 3, 8), u64::MAX);
        assert_eq!(find(b"xxabcab", b"ab", 3), Some(5));
        assert_eq!(find(b"xx", b"ab", 5), None);
    }
}
