//! AMDGPU code objects: ELF64 files with e_machine 224 (EM_AMDGPU).
//!
//! What a scanner needs from one: the processor and feature modes from `e_flags`, the code object
//! version from `EI_ABIVERSION`, and the `NT_AMDGPU_METADATA` note. Only the ELF header, the section
//! header table and the note are touched, so scanning a 145 MB `.hip_fatbin` through a memory map reads a
//! few pages per code object rather than the code itself.

use object::elf::{FileHeader64, SHT_NOTE};
use object::read::elf::{FileHeader, SectionHeader};
use object::LittleEndian as LE;

use super::metadata::{self, Metadata};
use super::target::{processor_for_mach, Feature};
use crate::error::{Error, Result};
use crate::sniff::EM_AMDGPU;
use crate::Limits;

/// ELFOSABI_AMDGPU_HSA: HIP/ROCm code objects. 65 (PAL) and 66 (Mesa) are graphics drivers'.
pub const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// Note type of the MessagePack metadata (code object V3+), owner `AMDGPU`.
pub const NT_AMDGPU_METADATA: u32 = 32;

/// A decoded code object header plus access to its metadata note.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeObject<'a> {
    pub e_flags: u32,
    pub os_abi: u8,
    /// Code object version: 2..=6 (EI_ABIVERSION 0 = V2 … 4 = V6).
    pub version: u8,
    /// `EF_AMDGPU_MACH`, bits 0-7 of e_flags.
    pub mach: u8,
    /// Processor name from the mach value, or `None` for a value this build does not know.
    pub processor: Option<&'static str>,
    pub xnack: Feature,
    pub sramecc: Feature,
    /// V6 generic version (e_flags bits 24-31), meaningful for generic targets.
    pub generic_version: u8,
    /// The raw descriptor of the first metadata note, if the code object has one.
    pub metadata_note: Option<&'a [u8]>,
    /// Offset of `metadata_note` within the code object.
    pub metadata_offset: u64,
    /// Number of metadata notes. Linked code objects (Tensile's `.co` files) carry one note per input object,
    /// thousands of them; [`CodeObject::metadata`] merges them all.
    pub metadata_notes: u32,
    data: &'a [u8],
}

impl<'a> CodeObject<'a> {
    pub fn parse(data: &'a [u8]) -> Result<CodeObject<'a>> {
        let header = FileHeader64::<LE>::parse(data)
            .map_err(|_| Error::new(0, "ELF header", "a 64-bit little-endian ELF header"))?;
        let e = LE;
        if header.e_machine(e).0 != EM_AMDGPU {
            return Err(Error::new(18, "ELF e_machine", "224 (EM_AMDGPU)"));
        }
        let ident = header.e_ident();
        let e_flags = header.e_flags(e).0;
        let version = ident.abi_version.saturating_add(2);
        let mach = (e_flags & 0xff) as u8;
        let (xnack, sramecc) = features(version, e_flags);
        let mut co = CodeObject {
            e_flags,
            os_abi: ident.os_abi.0,
            version,
            mach,
            processor: processor_for_mach(mach),
            xnack,
            sramecc,
            generic_version: if version >= 6 { (e_flags >> 24) as u8 } else { 0 },
            metadata_note: None,
            metadata_offset: 0,
            metadata_notes: 0,
            data,
        };
        let (mut first, mut count) = (None, 0u32);
        co.for_each_metadata_note(|desc, offset| {
            first.get_or_insert((desc, offset));
            count += 1;
            Ok(())
        })?;
        if let Some((desc, offset)) = first {
            co.metadata_note = Some(desc);
            co.metadata_offset = offset;
        }
        co.metadata_notes = count;
        Ok(co)
    }

    /// Call `f(descriptor, offset)` for every `NT_AMDGPU_METADATA` note of every note section.
    fn for_each_metadata_note(&self, mut f: impl FnMut(&'a [u8], u64) -> Result<()>) -> Result<()> {
        let e = LE;
        let data = self.data;
        let header = FileHeader64::<LE>::parse(data)
            .map_err(|_| Error::new(0, "ELF header", "a 64-bit little-endian ELF header"))?;
        let sections = header
            .sections(e, data)
            .map_err(|_| Error::new(0x28, "ELF section header table", "a table inside the code object"))?;
        // Byte ranges of the note sections read so far. A note section that overlaps one of them (only a
        // hostile file has that) would yield the same notes again, multiplying the merged kernels and the
        // work by the number of section headers, so it is skipped.
        let mut taken = std::collections::BTreeMap::<u64, u64>::new();
        for section in sections.iter().filter(|s| s.sh_type(e) == SHT_NOTE) {
            let start = section.sh_offset(e);
            let end = start.saturating_add(section.sh_size(e));
            let overlaps_before = taken.range(..=start).next_back().is_some_and(|(_, &taken_end)| taken_end > start);
            let overlaps_after = taken.range(start..).next().is_some_and(|(&taken_start, _)| taken_start < end);
            if overlaps_before || overlaps_after {
                continue;
            }
            taken.insert(start, end);
            let Ok(Some(mut notes)) = section.notes(e, data) else {
                return Err(Error::new(section.sh_offset(e), "ELF note section", "well-formed notes"));
            };
            loop {
                match notes.next() {
                    Ok(Some(note)) => {
                        if note.name() == b"AMDGPU" && note.n_type(e).0 == NT_AMDGPU_METADATA {
                            let desc = note.desc();
                            let offset = (desc.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize) as u64;
                            f(desc, offset)?;
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        return Err(Error::new(
                            section.sh_offset(e),
                            "ELF note",
                            "notes whose sizes fit in their section",
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    /// Target ID as LLVM spells it, e.g. `gfx90a:sramecc+:xnack-`; unknown mach values read `mach:0x..`.
    pub fn target_id(&self) -> String {
        let mut s = match self.processor {
            Some(p) => p.to_string(),
            None => format!("mach:{:#04x}", self.mach),
        };
        for f in [self.sramecc.suffix("sramecc"), self.xnack.suffix("xnack")].into_iter().flatten() {
            s.push(':');
            s.push_str(&f);
        }
        s
    }

    /// Decode the metadata notes, merging the kernels of all of them (version and target come from the
    /// first); `Ok(None)` if there is none (code object V2 used YAML notes). At most [`Limits::DEFAULT`]'s
    /// `max_kernels` kernels; see [`CodeObject::metadata_with_limit`].
    pub fn metadata(&self) -> Result<Option<Metadata<'a>>> {
        self.metadata_with_limit(Limits::DEFAULT.max_kernels)
    }

    /// [`CodeObject::metadata`], failing with [`crate::EXPECT_KERNELS_CAP`] (at the `amdhsa.kernels` array
    /// of the note that goes over) if the notes hold more than `max_kernels` kernels together.
    pub fn metadata_with_limit(&self, max_kernels: u64) -> Result<Option<Metadata<'a>>> {
        let Some(first) = self.metadata_note else { return Ok(None) };
        let mut merged = metadata::parse_with_limit(first, max_kernels).map_err(|e| e.at_base(self.metadata_offset))?;
        if self.metadata_notes > 1 {
            let mut seen_first = false;
            self.for_each_metadata_note(|desc, offset| {
                if !seen_first {
                    seen_first = true;
                    return Ok(());
                }
                let left = max_kernels.saturating_sub(merged.kernels.len() as u64);
                let more = metadata::parse_with_limit(desc, left).map_err(|e| e.at_base(offset))?;
                merged.kernels.extend(more.kernels);
                Ok(())
            })?;
        }
        Ok(Some(merged))
    }
}

/// xnack/sramecc modes from e_flags, whose layout depends on the code object version
/// (LLVM ELF.h: V4+ use two-bit fields, V3 single bits, V2 only an xnack bit).
fn features(version: u8, flags: u32) -> (Feature, Feature) {
    let two_bit = |v: u32, any: u32, off: u32, on: u32| match v {
        x if x == any => Feature::Any,
        x if x == off => Feature::Off,
        x if x == on => Feature::On,
        _ => Feature::Unsupported,
    };
    match version {
        0..=2 => (if flags & 0x01 != 0 { Feature::On } else { Feature::Unsupported }, Feature::Unsupported),
        3 => (
            if flags & 0x100 != 0 { Feature::On } else { Feature::Off },
            if flags & 0x200 != 0 { Feature::On } else { Feature::Off },
        ),
        _ => (two_bit(flags & 0x300, 0x100, 0x200, 0x300), two_bit(flags & 0xc00, 0x400, 0x800, 0xc00)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_feature_fields_like_llvm() {
        // Verified values from formats.md §3.2: gfx90a 0x53f (xnack any, sramecc any), gfx1100 0x41.
        assert_eq!(features(5, 0x53f), (Feature::Any, Feature::Any));
        assert_eq!(features(5, 0x41), (Feature::Unsupported, Feature::Unsupported));
        assert_eq!(features(5, 0xe3f), (Feature::Off, Feature::On));
        assert_eq!(features(3, 0x100), (Feature::On, Feature::Off));
    }

    #[test]
    fn rejects_non_amdgpu_and_garbage() {
        assert!(CodeObject::parse(b"").is_err());
        assert!(CodeObject::parse(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 64, 3]).is_err());
        let mut hdr = vec![0u8; 64];
        hdr[..4].copy_from_slice(b"\x7fELF");
        hdr[4] = 2;
        hdr[5] = 1;
        hdr[6] = 1;
        hdr[18] = 62;
        assert_eq!(CodeObject::parse(&hdr).unwrap_err().field, "ELF e_machine");
        hdr[18] = 224;
        hdr[48..56].copy_from_slice(&[0xff; 8]);
        let _ = CodeObject::parse(&hdr);
    }
}
