//! Seed corpora for the cargo-fuzz targets in `fuzz/`, cut from the real fixtures:
//!
//! ```text
//! cargo run -p backscope-binfmt --example fuzz_seeds -- FIXTURES_DIR OUT_DIR
//! ```
//!
//! FIXTURES_DIR is what `scripts/fixtures.sh` fills (`~/.cache/backscope/fixtures`, which holds
//! `unpacked/`); OUT_DIR receives one directory per fuzz target (`fuzz/corpus` for `scripts/fuzz.sh`).
//! Seeds are real structures, small (at most [`MAX_SEED`] bytes, under the fuzzers' 1 MiB `-max_len`),
//! and named by a hash of their bytes, so running this twice writes nothing new. Where the real
//! structures are too big, seeds are rebuilt from real parts: a bundle with one real code object, a
//! fatbin container with one real entry, a real code object re-compressed into every CCOB version.
//! A missing fixture is reported and skipped; the targets then start from fewer seeds.
//!
//! A last group of seeds has the shapes whose every field is in bounds but whose counts multiply (the
//! scanner's budgets exist for them): bundles whose entries all alias one real code object or overlap,
//! entry and kernel floods past the caps, kernel names that demangle to megabytes, and host libraries
//! whose `DT_NEEDED` names and RPATH directories multiply into millions of lookups.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use binfmt::amdgpu::code_object::CodeObject;
use binfmt::bundle::{self, Bundle, FatbinItem};
use binfmt::ccob::CompressedBundle;
use binfmt::cuda::cubin::Cubin;
use binfmt::cuda::fatbin::{self, EntryKind};
use binfmt::elf::HostElf;
use binfmt::sniff::BUNDLE_MAGIC;
use binfmt::Limits;

/// Largest seed written.
const MAX_SEED: usize = 600 << 10;
/// Largest seed for targets that decode everything nested in it on every execution.
const SMALL_SEED: usize = 128 << 10;
/// Seeds per target, at most.
const PER_TARGET: usize = 96;
/// Seeds per target from one kind of source (the label given to [`Seeds::add`]), at most.
const PER_LABEL: usize = 12;

const GGML_HIP: &str = "unpacked/cyllama_rocm/cyllama_rocm.libs/libggml-hip-f822f971.so";
const GGML_HOST: &str = "unpacked/cyllama_rocm/cyllama_rocm.libs/libggml-cee774fd.so.0.12.0";
const JAX_DIR: &str = "unpacked/jax_rocm7_plugin/jax_rocm7_plugin";
const JAX_SMALL: [&str; 6] = ["_prng.so", "_rnn.so", "_linalg.so", "_hybrid.so", "_sparse.so", "_solver.so"];
const ROCBLAS_DIR: &str = "unpacked/librocblas0/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library";
/// The smallest Tensile library (60 MB): a linked code object with one metadata note per kernel.
const ROCBLAS_TENSILE: &str = "TensileLibrary_gfx900.co";
const NVJPEG12: &str = "unpacked/nvidia_nvjpeg_cu12/nvidia/nvjpeg/lib/libnvjpeg.so.12";
const NVJPEG13: &str = "unpacked/nvidia_nvjpeg/nvidia/cu13/lib/libnvjpeg.so.13";

fn main() {
    let mut args = std::env::args_os().skip(1);
    let (Some(fixtures), Some(out)) = (args.next(), args.next()) else {
        eprintln!("usage: fuzz_seeds FIXTURES_DIR OUT_DIR");
        std::process::exit(2);
    };
    let fixtures = PathBuf::from(fixtures);
    let mut seeds = Seeds::new(PathBuf::from(out));
    // First, so that the per-target caps leave room for them.
    multipliers(&fixtures, &mut seeds);
    rocblas(&fixtures, &mut seeds);
    hip(&fixtures, &mut seeds);
    cuda(&fixtures, &mut seeds);
    host(&fixtures, &mut seeds);
    for (target, n) in &seeds.count {
        eprintln!("fuzz_seeds: {target}: {n} seeds");
    }
}

/// Seed files per target, deduplicated by content.
struct Seeds {
    out: PathBuf,
    seen: HashSet<u64>,
    count: BTreeMap<&'static str, usize>,
    per_label: BTreeMap<(&'static str, String), usize>,
}

impl Seeds {
    fn new(out: PathBuf) -> Self {
        Seeds { out, seen: HashSet::new(), count: BTreeMap::new(), per_label: BTreeMap::new() }
    }

    /// Write `bytes` as a seed of `target`, named `<label>-<hash>`, unless it is too big, a duplicate, or
    /// the target or the label has enough.
    fn add(&mut self, target: &'static str, label: &str, bytes: &[u8]) {
        self.add_capped(target, label, bytes, PER_LABEL);
    }

    /// [`Seeds::add`] with its own cap on seeds per label.
    fn add_capped(&mut self, target: &'static str, label: &str, bytes: &[u8], cap: usize) {
        let n_target = self.count.get(target).copied().unwrap_or(0);
        let n_label = self.per_label.entry((target, label.to_string())).or_default();
        if bytes.is_empty() || bytes.len() > MAX_SEED || n_target >= PER_TARGET || *n_label >= cap {
            return;
        }
        let hash = fnv1a(target.as_bytes(), bytes);
        if !self.seen.insert(hash) {
            return;
        }
        *n_label += 1;
        let dir = self.out.join(target);
        let path = dir.join(format!("{label}-{hash:016x}"));
        let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, bytes));
        if let Err(e) = written {
            eprintln!("fuzz_seeds: cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
        *self.count.entry(target).or_default() += 1;
    }
}

fn fnv1a(salt: &[u8], bytes: &[u8]) -> u64 {
    salt.iter().chain(bytes).fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn read_fixture(root: &Path, rel: &str) -> Option<Vec<u8>> {
    let path = root.join(rel);
    match std::fs::read(&path) {
        Ok(data) => Some(data),
        Err(e) => {
            eprintln!("fuzz_seeds: skipping {}: {e} (scripts/fixtures.sh fetches it)", path.display());
            None
        }
    }
}

/// A named section of a host library, or a note on stderr.
fn section<'a>(elf: &HostElf<'a>, name: &str, file: &str) -> Option<&'a [u8]> {
    let s = elf.section(name).map(|s| s.data);
    if s.is_none() {
        eprintln!("fuzz_seeds: {file} has no {name}");
    }
    s
}

/// An uncompressed offload bundle holding `entries` (ID, bytes), laid out as clang does.
fn build_bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = BUNDLE_MAGIC.to_vec();
    out.extend((entries.len() as u64).to_le_bytes());
    let header: usize = 32 + entries.iter().map(|(id, _)| 24 + id.len()).sum::<usize>();
    let mut at = header as u64;
    for (id, bytes) in entries {
        out.extend(at.to_le_bytes());
        out.extend((bytes.len() as u64).to_le_bytes());
        out.extend((id.len() as u64).to_le_bytes());
        out.extend(id.as_bytes());
        at += bytes.len() as u64;
    }
    for (_, bytes) in entries {
        out.extend(*bytes);
    }
    out
}

/// A CCOB of the given version (1, 2, 3) and method (0 zlib, 1 zstd) around `inner`.
fn build_ccob(version: u16, method: u16, inner: &[u8]) -> Vec<u8> {
    let payload = match method {
        0 => {
            let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            enc.write_all(inner).expect("compress into memory");
            enc.finish().expect("compress into memory")
        }
        _ => ruzstd::encoding::compress_to_vec(inner, ruzstd::encoding::CompressionLevel::Fastest),
    };
    let mut out = b"CCOB".to_vec();
    out.extend(version.to_le_bytes());
    out.extend(method.to_le_bytes());
    let (header, unc) = match version {
        1 => (20u64, inner.len() as u64),
        2 => (24, inner.len() as u64),
        _ => (32, inner.len() as u64),
    };
    let total = header + payload.len() as u64;
    match version {
        1 => out.extend((unc as u32).to_le_bytes()),
        2 => {
            out.extend((total as u32).to_le_bytes());
            out.extend((unc as u32).to_le_bytes());
        }
        _ => {
            out.extend(total.to_le_bytes());
            out.extend(unc.to_le_bytes());
        }
    }
    out.extend(fnv1a(b"", inner).to_le_bytes()); // stands in for the MD5, which no decoder checks
    out.extend(payload);
    out
}

/// Seeds from one code object: itself (amdgpu_note, host_elf) and its metadata note (amdgpu_note).
fn code_object_seeds(seeds: &mut Seeds, label: &str, co_bytes: &[u8]) {
    let Ok(co) = CodeObject::parse(co_bytes) else { return };
    if let Some(note) = co.metadata_note {
        seeds.add("amdgpu_note", &format!("{label}-note"), note);
    }
    if co_bytes.len() <= SMALL_SEED {
        seeds.add("amdgpu_note", &format!("{label}-co"), co_bytes);
        seeds.add_capped("host_elf", "amdgpu-co", co_bytes, 4);
    }
}

fn hip(root: &Path, seeds: &mut Seeds) {
    // libggml-hip: ~130 uncompressed bundles, 25 KB to 5 MB, each with one code object per GPU target.
    if let Some(data) = read_fixture(root, GGML_HIP) {
        if let Some(sec) = HostElf::parse(&data).ok().and_then(|elf| section(&elf, ".hip_fatbin", GGML_HIP)) {
            let mut found: Vec<(usize, Bundle<'_>)> = bundle::walk(sec)
                .filter_map(|item| match item.ok()? {
                    bundle::Located { offset, item: FatbinItem::Bundle(b) } => Some((offset as usize, b)),
                    bundle::Located { item: FatbinItem::Compressed(_), .. } => None,
                })
                .collect();
            let by_offset: Vec<(usize, usize)> = found.iter().map(|(o, b)| (*o, b.data.len())).collect();
            found.sort_by_key(|(_, b)| b.data.len());
            // The smallest whole bundles.
            for (_, b) in found.iter().take(10) {
                seeds.add("offload_bundle", "ggml-bundle", b.data);
            }
            // Two neighbouring bundles with the zero padding between them, as the section has them.
            for pair in by_offset.windows(2) {
                let (start, end) = (pair[0].0, pair[1].0 + pair[1].1);
                if end - start <= SMALL_SEED {
                    seeds.add("offload_bundle", "ggml-two-bundles", &sec[start..end]);
                }
            }
            // A bundle's header alone (the entries cut off).
            if let Some((_, b)) = found.first() {
                seeds.add("offload_bundle", "ggml-bundle-header", &b.data[..b.header_size as usize]);
            }
            // Host entry + one real code object, for each GPU target; and the code objects themselves.
            let mut targets_seen = HashSet::new();
            for (_, b) in &found {
                let host = b.entries.iter().find(|e| e.id.kind == "host");
                for e in b.device_entries() {
                    if !targets_seen.insert(e.id.raw) {
                        continue;
                    }
                    let mut parts = Vec::new();
                    if let Some(h) = host {
                        parts.push((h.id.raw, h.data));
                    }
                    parts.push((e.id.raw, e.data));
                    seeds.add("offload_bundle", "ggml-one-target", &build_bundle(&parts));
                    code_object_seeds(seeds, "ggml", e.data);
                }
            }
            // More metadata notes of different sizes and kernel counts.
            for (_, b) in found.iter().step_by(7) {
                if let Some(e) = b.device_entries().next() {
                    code_object_seeds(seeds, "ggml", e.data);
                }
            }
        }
    }

    // JAX's ROCm plugin: each library's .hip_fatbin is one CCOB v3 (zstd).
    for lib in JAX_SMALL {
        let rel = format!("{JAX_DIR}/{lib}");
        let Some(data) = read_fixture(root, &rel) else { continue };
        let Some(sec) = HostElf::parse(&data).ok().and_then(|elf| elf.section(".hip_fatbin").map(|s| s.data)) else {
            continue;
        };
        let stem = lib.trim_start_matches('_').trim_end_matches(".so");
        if sec.len() <= SMALL_SEED / 8 {
            seeds.add("offload_bundle", &format!("jax-{stem}-section"), sec);
        }
        for item in bundle::walk(sec).filter_map(Result::ok) {
            let FatbinItem::Compressed(c) = item.item else { continue };
            let raw = &sec[item.offset as usize..item.offset as usize + c.total_len()];
            // Decompressing is most of an execution's time: keep the fuzzers fast.
            if c.uncompressed_size <= 2 * SMALL_SEED as u64 {
                seeds.add("ccob", &format!("jax-{stem}-ccob-v{}", c.version), raw);
            }
            let Ok(inner) = c.decompress(&Limits::default()) else { continue };
            let Ok(b) = Bundle::parse(&inner) else { continue };
            if inner.len() <= SMALL_SEED {
                seeds.add("offload_bundle", &format!("jax-{stem}-bundle"), &inner);
            }
            let host = b.entries.iter().find(|e| e.id.kind == "host");
            for (i, e) in b.device_entries().enumerate() {
                code_object_seeds(seeds, &format!("jax-{stem}"), e.data);
                if i > 1 {
                    continue;
                }
                // Small bundles of real parts, re-compressed into every CCOB version and method.
                let mut parts = Vec::new();
                if let Some(h) = host {
                    parts.push((h.id.raw, h.data));
                }
                parts.push((e.id.raw, e.data));
                let small = build_bundle(&parts);
                seeds.add("offload_bundle", &format!("jax-{stem}-one-target"), &small);
                for version in [1u16, 2, 3] {
                    for method in [0u16, 1] {
                        let packed = build_ccob(version, method, &small);
                        if CompressedBundle::parse(&packed).and_then(|c| c.decompress(&Limits::default())).is_ok() {
                            seeds.add("ccob", &format!("jax-{stem}-v{version}-m{method}"), &packed);
                            if version == 3 && method == 1 {
                                seeds.add("offload_bundle", &format!("jax-{stem}-ccob"), &packed);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The `NT_AMDGPU_METADATA` descriptors of a code object, in file order (read with `object`, not binfmt).
fn metadata_notes(co: &[u8]) -> Vec<&[u8]> {
    use object::read::elf::{FileHeader as _, SectionHeader as _};
    let e = object::LittleEndian;
    let mut out = Vec::new();
    let Ok(header) = object::elf::FileHeader64::<object::LittleEndian>::parse(co) else { return out };
    let Ok(sections) = header.sections(e, co) else { return out };
    for section in sections.iter() {
        let Ok(Some(mut notes)) = section.notes(e, co) else { continue };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == b"AMDGPU" && note.n_type(e).0 == 32 {
                out.push(note.desc());
            }
        }
    }
    out
}

/// A code object made of a real one's ELF header and one SHT_NOTE section per group of `notes`, each
/// holding those metadata notes: the shape of a linked Tensile library, a few kernels long.
fn build_multi_note_code_object(real_header: &[u8], groups: &[&[&[u8]]]) -> Vec<u8> {
    let mut out = real_header.get(..64).unwrap_or_default().to_vec();
    let mut shstrtab = b"\0.note\0.shstrtab\0".to_vec();
    let mut note_sections = Vec::new();
    for notes in groups {
        let start = out.len() as u64;
        for desc in *notes {
            out.extend(7u32.to_le_bytes());
            out.extend((desc.len() as u32).to_le_bytes());
            out.extend(32u32.to_le_bytes());
            out.extend(b"AMDGPU\0\0");
            out.extend(*desc);
            out.resize(out.len().next_multiple_of(4), 0);
        }
        note_sections.push((start, out.len() as u64 - start));
    }
    let strtab_at = out.len() as u64;
    out.append(&mut shstrtab);
    let strtab_len = out.len() as u64 - strtab_at;
    out.resize(out.len().next_multiple_of(8), 0);
    let shoff = out.len() as u64;
    let section = |name: u32, ty: u32, offset: u64, size: u64, align: u64| {
        let mut sh = Vec::with_capacity(64);
        sh.extend(name.to_le_bytes());
        sh.extend(ty.to_le_bytes());
        sh.extend(0u64.to_le_bytes()); // flags
        sh.extend(0u64.to_le_bytes()); // addr
        sh.extend(offset.to_le_bytes());
        sh.extend(size.to_le_bytes());
        sh.extend([0u8; 8]); // link, info
        sh.extend(align.to_le_bytes());
        sh.extend(0u64.to_le_bytes()); // entsize
        sh
    };
    out.extend(section(0, 0, 0, 0, 0));
    for &(offset, size) in &note_sections {
        out.extend(section(1, 7, offset, size, 4));
    }
    out.extend(section(7, 3, strtab_at, strtab_len, 1));
    let shnum = 2 + note_sections.len() as u16;
    // The real e_ident, e_type, e_machine and e_flags; no program headers; the new section table.
    out[0x20..0x28].fill(0); // e_phoff
    out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    out[0x38..0x3a].fill(0); // e_phnum
    out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    out[0x3c..0x3e].copy_from_slice(&shnum.to_le_bytes());
    out[0x3e..0x40].copy_from_slice(&(shnum - 1).to_le_bytes()); // e_shstrndx
    out
}

fn rocblas(root: &Path, seeds: &mut Seeds) {
    let rel = format!("{ROCBLAS_DIR}/{ROCBLAS_TENSILE}");
    let Some(data) = read_fixture(root, &rel) else { return };
    let notes = metadata_notes(&data);
    let mut sized: Vec<&[u8]> = notes.iter().copied().filter(|n| n.len() <= SMALL_SEED).collect();
    sized.sort_by_key(|n| n.len());
    // Notes of different sizes (the kernels' argument lists differ).
    for n in sized.iter().step_by((sized.len() / 12).max(1)) {
        seeds.add("amdgpu_note", "rocblas-note", n);
    }
    // Small linked code objects: several notes in one section, and notes spread over two sections.
    for (i, window) in notes.chunks(4).take(4).enumerate() {
        let groups: Vec<&[&[u8]]> = if i % 2 == 0 { vec![window] } else { window.chunks(2).collect() };
        let co = build_multi_note_code_object(&data, &groups);
        if CodeObject::parse(&co).is_ok_and(|c| c.metadata_notes as usize == window.len()) {
            seeds.add("amdgpu_note", "rocblas-multi-note-co", &co);
            seeds.add_capped("host_elf", "rocblas-multi-note-co", &co, 2);
            let id = "hipv4-amdgcn-amd-amdhsa--gfx900";
            seeds.add_capped("offload_bundle", "rocblas-multi-note", &build_bundle(&[(id, &co)]), 2);
        } else {
            eprintln!("fuzz_seeds: a rebuilt multi-note code object did not parse back; skipped");
        }
    }
}

fn cuda(root: &Path, seeds: &mut Seeds) {
    for (rel, label) in [(NVJPEG12, "cu12"), (NVJPEG13, "cu13")] {
        let Some(data) = read_fixture(root, rel) else { continue };
        let Some(sec) = HostElf::parse(&data).ok().and_then(|elf| section(&elf, ".nv_fatbin", rel)) else {
            continue;
        };
        let containers: Vec<_> = fatbin::containers(sec).filter_map(Result::ok).collect();
        // Whole containers (one per translation unit) that are small enough.
        for c in containers.iter().filter(|c| c.total_size() as usize <= SMALL_SEED) {
            let start = c.offset as usize;
            seeds.add("nv_fatbin", &format!("{label}-container"), &sec[start..start + c.total_size() as usize]);
        }
        // The first two containers back to back.
        if let Some(second) = containers.get(1) {
            let end = (second.offset + second.total_size()) as usize;
            if end <= SMALL_SEED {
                seeds.add("nv_fatbin", &format!("{label}-two-containers"), &sec[..end]);
            }
        }
        // The first entries of a container, with the fat size cut to match.
        for c in containers.iter().take(4) {
            let ends: Vec<u64> =
                c.entries().filter_map(Result::ok).map(|e| e.payload_offset() + e.payload_size).collect();
            for &end in ends.iter().take(3) {
                let mut cut = sec[c.offset as usize..end as usize].to_vec();
                cut[8..16].copy_from_slice(&(end - c.entries_offset()).to_le_bytes());
                if cut.len() <= SMALL_SEED {
                    seeds.add("nv_fatbin", &format!("{label}-first-entries"), &cut);
                }
            }
        }
        // One real entry per (kind, compression, header size, SM) in a container of its own, smallest
        // first; and the decompressed cubins with their .nv.info sections.
        let mut entries: Vec<_> =
            containers.iter().flat_map(|c| c.entries().filter_map(Result::ok).map(move |e| (*c, e))).collect();
        entries.sort_by_key(|(_, e)| e.payload_size);
        let mut shapes = HashSet::new();
        let mut cubin_shapes = HashSet::new();
        for (c, e) in &entries {
            let start = e.offset as usize;
            let end = (e.payload_offset() + e.payload_size) as usize;
            if shapes.insert((e.kind, e.compression(), e.header_size, e.sm)) {
                let mut one = sec[c.offset as usize..c.entries_offset() as usize].to_vec();
                one[8..16].copy_from_slice(&((end - start) as u64).to_le_bytes());
                one.extend_from_slice(&sec[start..end]);
                seeds.add("nv_fatbin", &format!("{label}-one-entry"), &one);
            }
            if e.kind != EntryKind::Cubin {
                continue;
            }
            let Ok(contents) = e.contents(&Limits::default()) else { continue };
            let Ok(cubin) = Cubin::parse(&contents) else { continue };
            if contents.len() > SMALL_SEED || !cubin_shapes.insert((cubin.sm, cubin.abi_version, e.compression())) {
                continue;
            }
            seeds.add("cubin_info", &format!("{label}-cubin"), &contents);
            seeds.add_capped("host_elf", &format!("{label}-cubin"), &contents, 3);
            let names: Vec<Vec<u8>> = cubin.sections().map(|(n, _, _)| n.to_vec()).collect();
            for name in names.iter().filter(|n| n.starts_with(b".nv.info")) {
                if let Some(Ok(bytes)) = cubin.section_data(name) {
                    let kind = if name.as_slice() == b".nv.info" { "nvinfo" } else { "nvinfo-kernel" };
                    seeds.add("cubin_info", &format!("{label}-{kind}"), bytes);
                }
            }
        }
    }
}

fn host(root: &Path, seeds: &mut Seeds) {
    for rel in std::iter::once(GGML_HOST.to_string()).chain(JAX_SMALL.iter().map(|l| format!("{JAX_DIR}/{l}"))) {
        let Some(data) = read_fixture(root, &rel) else { continue };
        let name = rel.rsplit('/').next().unwrap_or("lib").trim_start_matches('_');
        seeds.add("host_elf", &format!("host-{}", name.split('.').next().unwrap_or(name)), &data);
    }
}

/// An offload bundle whose `n` entries all name the same bytes: one real code object.
fn build_alias_bundle(id: &str, co: &[u8], n: usize) -> Vec<u8> {
    let mut out = BUNDLE_MAGIC.to_vec();
    out.extend((n as u64).to_le_bytes());
    let payload_at = (32 + n * (24 + id.len())) as u64;
    for _ in 0..n {
        out.extend(payload_at.to_le_bytes());
        out.extend((co.len() as u64).to_le_bytes());
        out.extend((id.len() as u64).to_le_bytes());
        out.extend(id.as_bytes());
    }
    out.extend(co);
    out
}

/// An offload bundle whose `n` entries overlap: entry `i` starts `i` bytes into one real code object and
/// runs to its end.
fn build_overlapping_bundle(id: &str, co: &[u8], n: usize) -> Vec<u8> {
    let mut out = BUNDLE_MAGIC.to_vec();
    out.extend((n as u64).to_le_bytes());
    let payload_at = (32 + n * (24 + id.len())) as u64;
    for i in 0..n as u64 {
        out.extend((payload_at + i).to_le_bytes());
        out.extend((co.len() as u64 - i).to_le_bytes());
        out.extend((id.len() as u64).to_le_bytes());
        out.extend(id.as_bytes());
    }
    out.extend(co);
    out
}

/// A metadata note: `{amdhsa.kernels: [{.name: n}…]}`.
fn note_with_names(names: &[String]) -> Vec<u8> {
    let mut out = vec![0x81, 0xae];
    out.extend(b"amdhsa.kernels");
    out.push(0xdd);
    out.extend((names.len() as u32).to_be_bytes());
    for n in names {
        out.extend([0x81, 0xa5]);
        out.extend(b".name");
        out.push(0xd9);
        out.push(n.len() as u8);
        out.extend(n.as_bytes());
    }
    out
}

/// A kernel name of `levels` nested back-references, each doubling the demangled text (20 levels: 27 MB).
fn demangle_bomb(levels: usize) -> String {
    let mut name = String::from("_Z1fI1AI1B1BE");
    for k in 0..levels {
        // Substitution k + 4 is spelled S<k + 3 in base 36>_.
        let sub = std::char::from_digit((k + 3) as u32, 36).map(|c| c.to_ascii_uppercase()).unwrap_or('Z');
        name.push_str(&format!("S0_IS{sub}_S{sub}_E"));
    }
    name.push_str("Evv");
    name
}

/// A little-endian x86-64 ELF64 whose dynamic section names `needed` and one RPATH of `rpath` directories.
fn build_host_library(needed: usize, rpath: usize) -> Vec<u8> {
    let mut dynstr = vec![0u8];
    let mut dynamic = Vec::new();
    let mut add = |tag: u64, s: &str, dynstr: &mut Vec<u8>| {
        dynamic.extend(tag.to_le_bytes());
        dynamic.extend((dynstr.len() as u64).to_le_bytes());
        dynstr.extend(s.as_bytes());
        dynstr.push(0);
    };
    for i in 0..needed {
        add(1, &format!("lib{i}.so"), &mut dynstr);
    }
    let dirs: Vec<String> = (0..rpath).map(|i| format!("/d{i}")).collect();
    add(15, &dirs.join(":"), &mut dynstr);
    dynamic.extend([0u8; 16]);
    let shstrtab = b"\0.dynstr\0.dynamic\0.shstrtab\0".to_vec();
    let mut out = vec![0u8; 64];
    let place = |bytes: &[u8], out: &mut Vec<u8>| {
        out.resize(out.len().next_multiple_of(8), 0);
        let at = out.len() as u64;
        out.extend(bytes);
        at
    };
    let (dynstr_at, dynamic_at, shstrtab_at) =
        (place(&dynstr, &mut out), place(&dynamic, &mut out), place(&shstrtab, &mut out));
    out.resize(out.len().next_multiple_of(8), 0);
    let shoff = out.len() as u64;
    let section = |name: u32, ty: u32, offset: u64, size: u64, link: u32, entsize: u64| {
        let mut sh = Vec::with_capacity(64);
        sh.extend(name.to_le_bytes());
        sh.extend(ty.to_le_bytes());
        sh.extend([0u8; 16]); // flags, addr
        sh.extend(offset.to_le_bytes());
        sh.extend(size.to_le_bytes());
        sh.extend(link.to_le_bytes());
        sh.extend(0u32.to_le_bytes());
        sh.extend(8u64.to_le_bytes());
        sh.extend(entsize.to_le_bytes());
        sh
    };
    out.extend([0u8; 64]);
    out.extend(section(1, 3, dynstr_at, dynstr.len() as u64, 0, 0));
    out.extend(section(9, 6, dynamic_at, dynamic.len() as u64, 1, 16));
    out.extend(section(18, 3, shstrtab_at, shstrtab.len() as u64, 0, 0));
    out[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
    out[16..18].copy_from_slice(&3u16.to_le_bytes());
    out[18..20].copy_from_slice(&62u16.to_le_bytes());
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    out[40..48].copy_from_slice(&shoff.to_le_bytes());
    out[52..54].copy_from_slice(&64u16.to_le_bytes());
    out[58..60].copy_from_slice(&64u16.to_le_bytes());
    out[60..62].copy_from_slice(&4u16.to_le_bytes());
    out[62..64].copy_from_slice(&3u16.to_le_bytes());
    out
}

/// The shapes that multiply: aliases and overlaps of a real code object, floods past the caps, demangling
/// bombs, dependency products.
fn multipliers(root: &Path, seeds: &mut Seeds) {
    let id = "hipv4-amdgcn-amd-amdhsa--gfx900";
    // The smallest real code object of the jax plugin (a few KB).
    let real_co = read_fixture(root, &format!("{JAX_DIR}/_prng.so")).and_then(|data| {
        let sec = HostElf::parse(&data).ok()?.section(".hip_fatbin")?.data;
        let FatbinItem::Compressed(c) = bundle::walk(sec).next()?.ok()?.item else { return None };
        let inner = c.decompress(&Limits::default()).ok()?;
        let b = Bundle::parse(&inner).ok()?;
        b.device_entries().map(|e| e.data.to_vec()).min_by_key(Vec::len)
    });
    if let Some(co) = &real_co {
        for n in [2, 64, 1025] {
            seeds.add("offload_bundle", "alias-bundle", &build_alias_bundle(id, co, n));
        }
        seeds.add("offload_bundle", "overlapping-bundle", &build_overlapping_bundle(id, co, 48));
        let small = build_alias_bundle(id, co, 16);
        seeds.add("ccob", "alias-bundle-ccob", &build_ccob(3, 0, &small));
    }
    // Bundles with more entries than the fuzzers' cap (1024), empty ones, plain and compressed.
    let mut flood = BUNDLE_MAGIC.to_vec();
    flood.extend(2000u64.to_le_bytes());
    flood.resize(32 + 2000 * 24, 0);
    seeds.add("offload_bundle", "entry-flood", &flood);
    seeds.add("ccob", "entry-flood-ccob", &build_ccob(3, 0, &flood));
    // A bundle header that says nothing is there (entry count 0), then zeros the header still announces: the
    // decompressor stops after the header (the issue's shape was 1 GiB of them; 256 KiB here).
    let mut empty = BUNDLE_MAGIC.to_vec();
    empty.extend(0u64.to_le_bytes());
    empty.resize(256 << 10, 0);
    for method in [0, 1] {
        seeds.add("ccob", &format!("empty-bundle-ccob-m{method}"), &build_ccob(3, method, &empty));
    }
    // More kernel maps than the fuzzers' cap (65536), one byte each.
    let mut note_flood = vec![0x81, 0xae];
    note_flood.extend(b"amdhsa.kernels");
    note_flood.push(0xdd);
    note_flood.extend(70_000u32.to_be_bytes());
    note_flood.resize(note_flood.len() + 70_000, 0x80);
    seeds.add("amdgpu_note", "kernel-flood", &note_flood);
    // Kernel names built from nested back-references.
    let bombs: Vec<String> = (8..20).map(demangle_bomb).collect();
    seeds.add("amdgpu_note", "demangle-bombs", &note_with_names(&bombs));
    // Names × directories: every name is looked up in every directory.
    for (needed, rpath) in [(64, 64), (2000, 2000)] {
        seeds.add("host_elf", "dependency-product", &build_host_library(needed, rpath));
    }
}
