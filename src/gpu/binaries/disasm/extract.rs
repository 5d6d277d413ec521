//! The bytes of one code object or cubin, found again from the scan's records: where the record says the bytes
//! lie in the file they are borrowed from the map; inside a compressed bundle or a compressed fatbin entry the
//! container is decoded again (through `binfmt`, with its caps on decompression; a compressed bundle once for all
//! its selected code objects, within the scan's process-wide decompression budget).

use std::borrow::Cow;

use binfmt::bundle::{self, Bundle, FatbinItem};
use binfmt::cuda::fatbin;
use binfmt::read::slice_at;
use binfmt::Limits;

use crate::gpu::binaries::limits::{Reservation, DECOMPRESSION};
use crate::gpu::binaries::records::{CodeObjectRecord, CudaEntryRecord, FileRecord};

/// Why the bytes could not be found again; the message names the file offset.
pub type ExtractError = String;

/// An AMDGPU code object's bytes, where the record says they lie in the file (`co.in_file`).
pub fn amd_code_object<'a>(file: &'a [u8], co: &CodeObjectRecord) -> Result<Cow<'a, [u8]>, ExtractError> {
    slice_at(file, co.offset, co.size, "code object").map(Cow::Borrowed).map_err(|e| e.to_string())
}

/// The offload bundle inside the compressed bundle at file offset `at`, decompressed as far as the bundle reaches,
/// with the bytes taken from the process-wide decompression budget until it is dropped.
pub struct Decompressed {
    pub bytes: Vec<u8>,
    _reservation: Reservation<'static>,
}

pub fn compressed_bundle(file: &[u8], at: u64) -> Result<Decompressed, ExtractError> {
    let rest = usize::try_from(at).ok().and_then(|a| file.get(a..)).ok_or_else(|| {
        format!("compressed bundle at {at:#x}: the offset lies past the end of the file ({} bytes)", file.len())
    })?;
    let item = bundle::walk(rest)
        .next()
        .ok_or_else(|| format!("compressed bundle at {at:#x}: no bundle there"))?
        .map_err(|e| format!("compressed bundle: {}", e.at_base(at)))?;
    let FatbinItem::Compressed(c) = item.item else {
        return Err(format!("bundle at {at:#x}: expected a compressed bundle (CCOB), found an uncompressed one"));
    };
    let limits = Limits::default();
    let cost = c.decode_cost(&limits).map_err(|e| format!("compressed bundle: {}", e.at_base(at)))?;
    let reservation = DECOMPRESSION.reserve(cost).ok_or_else(|| {
        format!(
            "compressed bundle at {at:#x}: decoding needs {cost} bytes at once, more than the process-wide \
             decompression budget ({} bytes)",
            DECOMPRESSION.capacity()
        )
    })?;
    let bytes = c.decompress_bundle(&limits).map_err(|e| format!("compressed bundle: {}", e.at_base(at)))?.bytes;
    Ok(Decompressed { bytes, _reservation: reservation })
}

/// The bytes of the code object `co` names inside a decompressed bundle (from [`compressed_bundle`]).
pub fn entry_in(inner: &Decompressed, co: &CodeObjectRecord) -> Result<Vec<u8>, ExtractError> {
    let at = co.bundle_offset;
    let b = Bundle::parse(&inner.bytes).map_err(|e| format!("bundle inside the compressed bundle at {at:#x}: {e}"))?;
    let entry = b
        .device_entries()
        .find(|e| e.id.raw == co.entry_id && e.offset == co.offset)
        .ok_or_else(|| format!("compressed bundle at {at:#x}: no entry {} at {:#x}", co.entry_id, co.offset))?;
    Ok(entry.data.to_vec())
}

/// A cubin's bytes: a standalone cubin file, or a cubin entry of a fatbin (in a host library's section or a bare
/// fatbin file), decompressed if it is stored compressed.
pub fn cubin<'a>(file: &'a [u8], record: &FileRecord, entry: &CudaEntryRecord) -> Result<Cow<'a, [u8]>, ExtractError> {
    if record.format == "cubin" {
        return Ok(Cow::Borrowed(file));
    }
    let (base, section) = match record.cuda.as_ref().and_then(|c| c.section.as_ref()) {
        Some(s) => (s.offset, slice_at(file, s.offset, s.size, "fatbin section").map_err(|e| e.to_string())?),
        None => (0, file),
    };
    for container in fatbin::containers(section) {
        let container = container.map_err(|e| format!("fatbin container: {}", e.at_base(base)))?;
        for e in container.entries() {
            let e = e.map_err(|e| format!("fatbin entry: {}", e.at_base(base)))?;
            if base.saturating_add(e.offset) == entry.offset {
                return e
                    .contents(&Limits::default())
                    .map_err(|err| format!("fatbin entry payload: {}", err.at_base(base)));
            }
        }
    }
    Err(format!("no fatbin entry at {:#x}", entry.offset))
}
