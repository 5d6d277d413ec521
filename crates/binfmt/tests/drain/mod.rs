//! Drain logic shared by the cargo-fuzz targets in `fuzz/fuzz_targets/` (each includes this file with
//! `#[path]`) and by `tests/fuzz_regressions.rs`, which replays every committed crash input through it.
//!
//! Each public function runs one family of decoders over arbitrary bytes and consumes everything they
//! return: every item of every iterator and every nested object (bundle entries through the code object
//! and its metadata notes, compressed payloads through decompression and the inner decoder). Along the way
//! it asserts cheap consistency properties: every returned slice lies inside the bytes it was cut from and
//! at the offset the decoder reports, sizes agree with lengths, iteration moves forward, and error offsets
//! stay near the input (an error names the position of a field, and fields sit inside or just past the
//! end of the input). A panic here is a finding, whether it comes from a decoder or from a property.
//!
//! Kept in `tests/` rather than in the library so that the published crate has no fuzzing API; the fuzz
//! package is outside the main workspace and reaches this file by path.

#![allow(dead_code)] // each fuzz target uses one entry point

use std::borrow::Cow;

use binfmt::amdgpu::code_object::CodeObject;
use binfmt::amdgpu::metadata::{self, Metadata};
use binfmt::bundle::{self, Bundle, BundleId, FatbinItem};
use binfmt::ccob::CompressedBundle;
use binfmt::cuda::cubin::{self, eifmt, Cubin, InfoRecords};
use binfmt::cuda::fatbin::{self, EntryKind};
use binfmt::cuda::ptx;
use binfmt::elf::HostElf;
use binfmt::sniff::BUNDLE_MAGIC;
use binfmt::{Error, Limits};

/// A drain entry point: decode everything in the input, panic on a broken property.
pub type Drain = fn(&[u8]);

/// Every drain entry point by fuzz target name; regression files are named `<target>-<hash>.bin`.
pub const TARGETS: &[(&str, Drain)] = &[
    ("offload_bundle", offload_bundle),
    ("ccob", ccob),
    ("nv_fatbin", nv_fatbin),
    ("amdgpu_note", amdgpu_note),
    ("cubin_info", cubin_info),
    ("host_elf", host_elf),
];

/// Small caps, so a lying header cannot make one execution slow or large.
pub fn limits() -> Limits {
    Limits {
        max_decompressed: 64 << 20,
        max_ratio: 256,
        max_entries: 1 << 16,
        max_bundle_entries: 1 << 10,
        max_kernels: 1 << 16,
    }
}

/// `SHT_NOBITS`: a section with no bytes in the file.
const SHT_NOBITS: u32 = 8;

/// How far past the end of its input an error may point: the widest fixed header read at a position
/// inside the input (a fatbin entry header) is 64 bytes.
const ERROR_SLACK: u64 = 64;

/// Section names looked up by name per cubin (each lookup is linear in the section count).
const MAX_NAMED_SECTIONS: usize = 64;

// ---------------------------------------------------------------------------------------------------
// Fuzz targets
// ---------------------------------------------------------------------------------------------------

/// `offload_bundle`: the input as a `.hip_fatbin` section (walk), and as one bundle at offset 0.
pub fn offload_bundle(data: &[u8]) {
    hip_fatbin(data);
    match Bundle::parse_with_limits(data, &limits()) {
        Ok(b) => bundle(data, &b),
        Err(e) => check_error(&e, data),
    }
}

/// `ccob`: the input as one compressed bundle at offset 0, decompressed and parsed as a bundle.
pub fn ccob(data: &[u8]) {
    match CompressedBundle::parse(data) {
        Ok(c) => compressed(data, &c),
        Err(e) => check_error(&e, data),
    }
}

/// `nv_fatbin`: the input as a `.nv_fatbin` section: containers, entries, decompressed contents, and
/// each payload as a cubin or PTX.
pub fn nv_fatbin(section: &[u8]) {
    let limits = limits();
    let len = section.len() as u64;
    let mut container_end = 0u64;
    for c in fatbin::containers_with_limits(section, &limits) {
        let c = match c {
            Ok(c) => c,
            Err(e) => {
                check_error(&e, section);
                continue;
            }
        };
        assert!(c.offset >= container_end, "containers overlap or go backwards");
        container_end = c.offset.checked_add(c.total_size()).expect("container end overflows");
        assert!(container_end <= len, "container ends past the section");
        assert_eq!(c.data.len() as u64, c.fat_size);
        assert_at(section, c.data, c.entries_offset());
        let mut entry_end = c.entries_offset();
        for e in c.entries() {
            let e = match e {
                Ok(e) => e,
                Err(err) => {
                    check_error(&err, section);
                    continue;
                }
            };
            assert!(e.offset >= entry_end, "entries overlap or go backwards");
            assert!(e.header_size >= fatbin::ENTRY_HEADER_MIN);
            assert_eq!(e.payload.len() as u64, e.payload_size);
            assert_at(section, e.payload, e.payload_offset());
            assert_eq!(e.header_extension.len() as u64, u64::from(e.header_size - fatbin::ENTRY_HEADER_MIN));
            assert_at(section, e.header_extension, e.offset + u64::from(fatbin::ENTRY_HEADER_MIN));
            entry_end = e.payload_offset().checked_add(e.payload_size).expect("payload end overflows");
            assert!(entry_end <= container_end, "entry payload ends past its container");
            assert_eq!(EntryKind::from_raw(e.kind.raw()), e.kind);
            let _ = e.compression();
            match e.contents(&limits) {
                Ok(Cow::Borrowed(bytes)) => {
                    assert!(!e.is_compressed(), "a compressed entry was returned as stored");
                    assert!(std::ptr::eq(bytes, e.payload));
                    fatbin_payload(bytes, e.kind);
                }
                Ok(Cow::Owned(bytes)) => {
                    assert!(e.is_compressed(), "an uncompressed entry was copied");
                    assert_eq!(bytes.len() as u64, e.decompressed_size);
                    assert!(bytes.len() as u64 <= limits.max_decompressed);
                    fatbin_payload(&bytes, e.kind);
                }
                Err(err) => check_error(&err, section),
            }
        }
    }
}

/// `amdgpu_note`: the input as a metadata note descriptor, and as a code object.
pub fn amdgpu_note(data: &[u8]) {
    match metadata::parse_with_limit(data, limits().max_kernels) {
        Ok(m) => check_metadata(data, &m),
        Err(e) => check_error(&e, data),
    }
    code_object(data);
}

/// `cubin_info`: the input as `.nv.info` records, and as a cubin with its kernels.
pub fn cubin_info(data: &[u8]) {
    info_records(data);
    cubin(data);
}

/// `host_elf`: the input as a host library; its `.hip_fatbin` and `.nv_fatbin` are drained too.
pub fn host_elf(data: &[u8]) {
    let Ok(elf) = HostElf::parse(data) else { return };
    for s in &elf.sections {
        assert_within(data, s.name.as_bytes());
        if s.sh_type == SHT_NOBITS {
            assert!(s.data.is_empty());
        } else {
            assert_eq!(s.data.len() as u64, s.size);
            assert_at(data, s.data, s.offset);
        }
    }
    let strings = elf.needed.iter().chain(&elf.rpath).chain(&elf.runpath).chain(&elf.comments).chain(&elf.soname);
    for s in strings {
        assert_within(data, s.as_bytes());
    }
    if let Some(s) = elf.section(".hip_fatbin") {
        hip_fatbin(s.data);
    }
    if let Some(s) = elf.section(".nv_fatbin") {
        nv_fatbin(s.data);
    }
    // ggml-vulkan's embedded SPIR-V arrays, by symbol: each a SPIR-V module inside the file, where it says.
    if let Ok(shaders) = binfmt::spirv::embedded_shaders(data) {
        assert!(shaders.len() <= binfmt::spirv::MAX_SHADERS);
        for s in &shaders {
            assert_within(data, s.name.as_bytes());
            assert_at(data, s.code, s.offset);
            assert!(s.code.starts_with(&[0x03, 0x02, 0x23, 0x07]), "an embedded shader is a SPIR-V module");
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Shared drains
// ---------------------------------------------------------------------------------------------------

/// Walk a `.hip_fatbin` section and drain every bundle and compressed bundle in it.
pub fn hip_fatbin(section: &[u8]) {
    let mut prev: Option<u64> = None;
    let limits = limits();
    for item in bundle::walk_with_limits(section, &limits) {
        let located = match item {
            Ok(located) => located,
            Err(e) => {
                check_error(&e, section);
                continue;
            }
        };
        assert!(prev.is_none_or(|p| located.offset > p), "walk went backwards");
        prev = Some(located.offset);
        let here = usize::try_from(located.offset).ok().and_then(|o| section.get(o..)).expect("item inside section");
        match located.item {
            FatbinItem::Bundle(b) => {
                assert!(std::ptr::eq(b.data.as_ptr(), here.as_ptr()), "bundle does not start at its offset");
                bundle(here, &b);
            }
            FatbinItem::Compressed(c) => compressed(here, &c),
        }
    }
}

/// A parsed bundle that starts at `input[0]`: entries inside it, IDs split into substrings, and every
/// device entry through the code object decoder.
fn bundle(input: &[u8], b: &Bundle<'_>) {
    assert_at(input, b.data, 0);
    assert!(b.data.starts_with(BUNDLE_MAGIC));
    assert!(b.header_size <= b.data.len() as u64);
    assert!(b.entries.len() as u64 <= limits().max_bundle_entries);
    for e in &b.entries {
        assert_eq!(e.data.len() as u64, e.size);
        let end = e.offset.checked_add(e.size).expect("entry end overflows");
        assert!(end <= b.data.len() as u64, "entry ends past its bundle");
        assert_at(b.data, e.data, e.offset);
        bundle_id(&e.id);
    }
    for e in b.device_entries() {
        code_object(e.data);
    }
}

fn bundle_id(id: &BundleId<'_>) {
    let raw = id.raw.as_bytes();
    assert_within(raw, id.kind.as_bytes());
    assert_within(raw, id.triple.as_bytes());
    if let Some(t) = id.target {
        assert_within(raw, t.as_bytes());
    }
    if let Some(t) = id.target_id() {
        assert_within(raw, t.processor.as_bytes());
        let _ = t.canonical();
    }
}

/// A compressed bundle that starts at `input[0]`: header consistent with the payload, decompressed under
/// the small limits, the result parsed as a bundle and drained.
fn compressed(input: &[u8], c: &CompressedBundle<'_>) {
    assert_eq!(c.total_len() as u64, c.header_size + c.payload.len() as u64);
    assert!(c.total_len() <= input.len(), "compressed bundle ends past its input");
    assert_at(input, c.payload, c.header_size);
    if let Some(total) = c.total_size {
        assert_eq!(total, c.total_len() as u64);
    }
    let limits = limits();
    let whole = c.decompress(&limits);
    let prefix = c.decompress_bundle(&limits);
    if let Ok(p) = &prefix {
        assert_eq!(p.bytes.len() as u64 + p.skipped, c.uncompressed_size);
    }
    match whole {
        Ok(out) => {
            assert_eq!(out.len() as u64, c.uncompressed_size);
            assert!(out.len() as u64 <= limits.max_decompressed);
            let parsed = Bundle::parse_with_limits(&out, &limits);
            // Decompressing only as far as the bundle reaches parses to the same bundle, or the same error.
            let p = prefix.expect("the prefix decodes where the whole payload does");
            assert_eq!(p.bytes[..], out[..p.bytes.len()]);
            let from_prefix = Bundle::parse_with_limits(&p.bytes, &limits);
            match (&parsed, &from_prefix) {
                (Ok(a), Ok(b)) => assert_eq!((&a.entries, a.header_size, a.data), (&b.entries, b.header_size, b.data)),
                (Err(a), Err(b)) => assert_eq!((a.offset, a.field), (b.offset, b.field)),
                _ => panic!("the whole payload and its prefix parse differently: {parsed:?} vs {from_prefix:?}"),
            }
            match parsed {
                Ok(b) => bundle(&out, &b),
                Err(e) => check_error(&e, &out),
            }
        }
        Err(e) => check_error(&e, input),
    }
}

/// An AMDGPU code object: header facts, its metadata notes, and their kernels decoded and merged.
pub fn code_object(data: &[u8]) {
    // Parse errors may name a position the file claims (a section's sh_offset), so their offsets are not
    // checked against the input length.
    let Ok(co) = CodeObject::parse(data) else { return };
    let _ = co.target_id();
    assert_eq!(co.metadata_note.is_some(), co.metadata_notes > 0);
    if let Some(note) = co.metadata_note {
        assert_at(data, note, co.metadata_offset);
    }
    match co.metadata_with_limit(limits().max_kernels) {
        // The kernels of every note are merged, so they are checked against the whole code object: each
        // kernel map takes at least one byte of some note, and every note lies inside the object.
        Ok(Some(m)) => check_metadata(data, &m),
        Ok(None) => assert!(co.metadata_note.is_none()),
        Err(e) => check_error(&e, data),
    }
}

/// Kernels and strings decoded from metadata notes that lie in `bytes` (one note, or a code object).
fn check_metadata(bytes: &[u8], m: &Metadata<'_>) {
    assert!(m.kernels.len() <= bytes.len(), "more kernels than note bytes");
    assert!(m.kernels.len() as u64 <= limits().max_kernels, "more kernels than the cap");
    if let Some(t) = m.target {
        assert_within(bytes, t.as_bytes());
    }
    for k in &m.kernels {
        assert_within(bytes, k.name.as_bytes());
        assert_within(bytes, k.symbol.as_bytes());
        assert!(k.arg_count <= bytes.len() as u64, "more arguments than note bytes");
    }
}

/// A fatbin entry's contents by kind; unknown kinds are tried as both.
fn fatbin_payload(bytes: &[u8], kind: EntryKind) {
    match kind {
        EntryKind::Ptx => ptx_text(bytes),
        EntryKind::Cubin => cubin(bytes),
        EntryKind::Other(_) => {
            ptx_text(bytes);
            cubin(bytes);
        }
    }
}

fn ptx_text(text: &[u8]) {
    let p = ptx::parse(text);
    for s in p.version.iter().chain(&p.target).chain(&p.entries) {
        assert_within(text, s.as_bytes());
    }
    assert!(p.entries.len() <= ptx::MAX_ENTRIES);
    assert!(!p.truncated || p.entries.len() == ptx::MAX_ENTRIES);
}

/// A cubin: header facts, section names and bytes, `.nv.info*` records, kernels.
pub fn cubin(data: &[u8]) {
    // As for code objects, parse errors may name positions the file claims; they are not checked.
    let Ok(c) = Cubin::parse(data) else { return };
    assert!(std::ptr::eq(c.data(), data));
    assert_eq!(cubin::decode_e_flags(c.abi_version, c.e_flags).sm, c.sm);
    if let Some(t) = c.toolkit {
        assert_within(data, t.as_bytes());
    }
    let names: Vec<&[u8]> = c.sections().map(|(name, _, _)| name).collect();
    assert!(names.len() <= c.section_count());
    for name in names.iter().take(MAX_NAMED_SECTIONS) {
        assert_within(data, name);
        let Some(Ok(bytes)) = c.section_data(name) else { continue };
        assert_within(data, bytes);
        if name.starts_with(b".nv.info") {
            info_records(bytes);
        }
    }
    if let Ok(kernels) = c.kernels_with_limit(limits().max_kernels) {
        assert!(kernels.len() as u64 <= limits().max_kernels, "more kernels than the cap");
        // A kernel is a 24-byte ELF64 symbol in a table inside the data.
        assert!(kernels.len() <= data.len() / 24, "more kernels than symbols fit");
        for k in &kernels {
            assert_within(data, k.name.as_bytes());
        }
    }
}

/// `.nv.info` records: contiguous, inside the data, SVAL payloads of the announced size.
pub fn info_records(data: &[u8]) {
    let mut next = 0u64;
    for r in InfoRecords::new(data) {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                check_error(&e, data);
                continue;
            }
        };
        assert_eq!(r.offset, next, "records are not contiguous");
        if r.format == eifmt::SVAL {
            assert_eq!(r.payload.len(), usize::from(r.value));
            assert_at(data, r.payload, r.offset + 4);
        } else {
            assert!(r.payload.is_empty());
        }
        next = r.offset + 4 + r.payload.len() as u64;
        assert!(next <= data.len() as u64, "record ends past the section");
        let _ = (r.scalar(), r.symbol_value(), r.payload_u32(2));
    }
}

// ---------------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------------

/// `inner` lies inside `outer` (empty slices may point anywhere).
fn within(outer: &[u8], inner: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    inner.is_empty() || (i >= o && i + inner.len() <= o + outer.len())
}

fn assert_within(outer: &[u8], inner: &[u8]) {
    assert!(within(outer, inner), "a returned slice lies outside its input");
}

/// `inner` lies inside `outer`, starting `offset` bytes in (unchecked for empty slices).
fn assert_at(outer: &[u8], inner: &[u8], offset: u64) {
    assert_within(outer, inner);
    if !inner.is_empty() {
        let at = inner.as_ptr() as usize - outer.as_ptr() as usize;
        assert_eq!(at as u64, offset, "a returned slice is not at the offset reported for it");
    }
}

/// An error names a field at or near the input; its message renders.
fn check_error(e: &Error, input: &[u8]) {
    assert!(
        e.offset <= (input.len() as u64).saturating_add(ERROR_SLACK),
        "error offset {:#x} is far past the {}-byte input: {e}",
        e.offset,
        input.len()
    );
    assert!(!e.field.is_empty() && !e.expected.is_empty());
    let _ = e.to_string();
}
