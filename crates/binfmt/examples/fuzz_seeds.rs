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
