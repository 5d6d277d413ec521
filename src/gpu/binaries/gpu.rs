//! Decode one file's GPU code into records: `.hip_fatbin` offload bundles (compressed or not), CUDA
//! fatbins, standalone AMDGPU code objects, bundles and cubins. Files are memory-mapped (through
//! [`MappedFile`], which survives a truncation underneath): only the pages the decoders touch (headers,
//! notes, symbol tables) are read, never a whole 500 MB library.
//!
//! Work and memory are bounded by [`ScanLimits`]: decompressed payloads take their bytes from the
//! process-wide [`DECOMPRESSION`] budget before they are allocated, each file has a kernel budget, entries
//! of a bundle that share their bytes (aliases) are decoded once, and a bundle decodes at most its own
//! length. Problems name a file offset: for bytes inside a decompressed payload, the offset of the
//! compressed container in the file, with the offset inside the payload in the message.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use binfmt::amdgpu::code_object::CodeObject;
use binfmt::amdgpu::metadata::KernelMeta;
use binfmt::amdgpu::target::TargetId;
use binfmt::bundle::{self, Bundle, FatbinItem};
use binfmt::ccob::Method;
use binfmt::cuda::cubin::Cubin;
use binfmt::cuda::fatbin::{self, Entry, EntryKind};
use binfmt::cuda::ptx;
use binfmt::elf::HostElf;
use binfmt::sniff::{self, Kind};
use binfmt::EXPECT_KERNELS_CAP;
use rayon::prelude::*;

use super::limits::{ScanLimits, DECOMPRESSION};
use super::records::*;
use super::tree;
use crate::gpu::kernels;
use crate::host::inputs::{MapError, MappedFile};

/// Bundles (or fatbin entries) of one file decoded side by side. The file's kernel budget is shared out
/// per group, each member getting an equal part of what is left, so the result does not depend on the
/// thread count or on timing, and a group holds at most the file's budget of kernels at once. The real
/// maximum per bundle (9,760 kernels) is well inside `kernels_per_file / GROUP`.
const GROUP: usize = 16;

/// Scan one file. Returns its record (if it is an ELF or carries GPU code) and the problems met.
pub fn scan_file(path: &Path, want_kernels: bool, limits: &ScanLimits) -> (Option<FileRecord>, Vec<Problem>) {
    let mut problems = Vec::new();
    let shown = path.display().to_string();
    let mapped = match MappedFile::open(path) {
        Ok(m) => m,
        Err(e) => {
            let message = match e {
                MapError::NotRegular(kind) => format!("not a regular file ({kind}) when it was opened; not read"),
                e => format!("cannot open or map: {e}"),
            };
            problems.push(Problem { path: shown, offset: None, severity: Severity::Warning, message });
            return (None, problems);
        }
    };
    let data = mapped.bytes();
    let mut scanner = FileScanner {
        path: &shown,
        want_kernels,
        problems: &mut problems,
        limits: *limits,
        kernels_left: limits.kernels_per_file,
    };
    let record = scanner.scan(data);
    if let Some(at) = mapped.cut_at() {
        // Whatever was decoded past the cut came from zero pages and describes nothing.
        problems.retain(|p| p.path != shown);
        problems.push(Problem {
            path: shown,
            offset: Some(at),
            severity: Severity::Error,
            message: format!(
                "the file changed while it was read (truncated, or a read error): bytes from {at:#x} on read as \
                 zeros, so its records are left out"
            ),
        });
        return (None, problems);
    }
    (record, problems)
}

struct FileScanner<'p> {
    path: &'p str,
    want_kernels: bool,
    problems: &'p mut Vec<Problem>,
    limits: ScanLimits,
    /// Kernels this scanner may still decode: its file's budget, or the share of it a part was given.
    kernels_left: u64,
}

/// Where the bytes a decoder reads lie, so that its errors point into the file.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// In the file; `base` is the file offset of the decoder's input.
    File { base: u64 },
    /// Inside a decompressed payload: `container` is the file offset of the compressed bundle or fatbin
    /// entry that holds it, `what` names that container, `base` is the offset of the decoder's input in
    /// the decompressed bytes.
    Decompressed { container: u64, what: &'static str, base: u64 },
}

impl Place {
    /// The same place, `delta` bytes further in.
    fn at(self, delta: u64) -> Place {
        match self {
            Place::File { base } => Place::File { base: base.saturating_add(delta) },
            Place::Decompressed { container, what, base } => {
                Place::Decompressed { container, what, base: base.saturating_add(delta) }
            }
        }
    }

    fn in_file(self) -> bool {
        matches!(self, Place::File { .. })
    }

    /// The offset a record shows: a file offset, or an offset inside the decompressed payload.
    fn offset(self) -> u64 {
        match self {
            Place::File { base } | Place::Decompressed { base, .. } => base,
        }
    }

    /// The file offset a problem shows: the place itself, or the container that holds it.
    fn file_offset(self) -> u64 {
        match self {
            Place::File { base } => base,
            Place::Decompressed { container, .. } => container,
        }
    }
}

/// `len` zero bytes from the allocator's zeroed memory, or `None` if it refuses them (under a memory limit:
/// `vec![0; len]` would abort). Large buffers come as fresh pages the kernel has zeroed, so this costs no
/// pass over them, unlike writing the zeros after a fallible reservation (5% of scanning a CUDA library,
/// whose LZ4 entries decode into these).
fn zeroed_from_allocator(len: usize) -> Option<Vec<u8>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(len).ok()?;
    // SAFETY: the layout's size is non-zero. A non-null pointer from the global allocator for this layout
    // (size `len`, alignment 1) holds `len` initialised (zero) bytes, which is what `Vec::from_raw_parts`
    // needs with length and capacity `len`; the Vec frees it with the same allocator and layout.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout);
        (!ptr.is_null()).then(|| Vec::from_raw_parts(ptr, len, len))
    }
}

/// Threads per CUDA kernel from `__launch_bounds__`/REQNTID (x·y·z); `None` when the product of three
/// 32-bit values from the file does not fit in 64 bits.
fn launch_bound_threads([x, y, z]: [u32; 3]) -> Option<u64> {
    u64::from(x).checked_mul(u64::from(y))?.checked_mul(u64::from(z))
}

/// `path` is named like something a scan should decode: a shared library or a GPU code object.
fn named_like_binary(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.ends_with(".so")
        || name.contains(".so.")
        || [".hsaco", ".co", ".cubin", ".fatbin"].iter().any(|ext| name.ends_with(ext))
}

impl FileScanner<'_> {
    /// A problem from a decoder error at `place`, naming the limit when a cap caused it.
    fn problem(&mut self, place: Place, what: &str, e: binfmt::Error) {
        let limit = self.limits.decode.explain(&e).map(|l| format!("; {l}")).unwrap_or_default();
        self.push_problem(place, what, e, limit);
    }

    /// A problem from a decoder that was allowed `allowed` kernels: a kernel cap error says which budget
    /// stopped it (the per-code-object cap, or what is left of the file's).
    fn kernel_problem(&mut self, place: Place, what: &str, e: binfmt::Error, allowed: u64) {
        if e.expected != EXPECT_KERNELS_CAP {
            return self.problem(place, what, e);
        }
        let limit = if allowed == self.limits.decode.max_kernels {
            format!("; limit: {allowed} kernels per code object or cubin (binfmt::Limits::max_kernels)")
        } else {
            format!(
                "; limit: {} kernels per file (ScanLimits::kernels_per_file), {allowed} of them left for this part",
                self.limits.kernels_per_file
            )
        };
        self.push_problem(place, what, e, limit);
    }

    fn push_problem(&mut self, place: Place, what: &str, e: binfmt::Error, limit: String) {
        let (offset, message) = match place {
            Place::File { base } => {
                let e = e.at_base(base);
                (e.offset, format!("{what}: {e}{limit}"))
            }
            Place::Decompressed { container, what: holder, base } => (
                container,
                format!(
                    "{what} in the decompressed payload of the {holder} at {container:#x}: at byte offset {:#x} of \
                     the payload: {}: expected {}{limit}",
                    base.saturating_add(e.offset),
                    e.field,
                    e.expected
                ),
            ),
        };
        self.problems.push(Problem {
            path: self.path.to_string(),
            offset: Some(offset),
            severity: Severity::Error,
            message,
        });
    }

    fn scan(&mut self, data: &[u8]) -> Option<FileRecord> {
        let size = data.len() as u64;
        let mut record = FileRecord {
            path: self.path.to_string(),
            size,
            format: "elf",
            elf: None,
            backend: None,
            amdgpu: None,
            cuda: None,
            vulkan: None,
            dependencies: Vec::new(),
        };
        match sniff::sniff(data) {
            Kind::Elf { machine: sniff::EM_AMDGPU, .. } => {
                record.format = "amdgpu-code-object";
                let co = self.code_object(data, Place::File { base: 0 }, 0, None, "");
                record.amdgpu =
                    Some(AmdGpuCode { section: None, bundles: 0, compressed_bundles: 0, code_objects: vec![co] });
            }
            Kind::Elf { machine: sniff::EM_CUDA, .. } => {
                record.format = "cubin";
                let entry = self.cubin_entry(data, Place::File { base: 0 }, 0, None, size);
                record.cuda = Some(CudaCode { section: None, containers: 0, entries: vec![entry] });
            }
            Kind::Elf { .. } => {
                let elf = match HostElf::parse(data) {
                    Ok(e) => e,
                    Err(e) => {
                        self.problem(Place::File { base: 0 }, "ELF", e);
                        return None;
                    }
                };
                record.elf = Some(ElfSummary {
                    class: if elf.is_64 { 64 } else { 32 },
                    machine: elf.machine,
                    e_type: elf.e_type,
                    soname: elf.soname.map(str::to_string),
                    needed: elf.needed.iter().map(|s| s.to_string()).collect(),
                    rpath: elf.rpath.iter().map(|s| s.to_string()).collect(),
                    runpath: elf.runpath.iter().map(|s| s.to_string()).collect(),
                    compilers: elf.comments.iter().take(8).map(|s| s.to_string()).collect(),
                });
                if let Some(s) = elf.section(".hip_fatbin") {
                    let section = SectionRef { name: s.name.to_string(), offset: s.offset, size: s.size };
                    record.amdgpu = Some(self.hip_fatbin(s.data, s.offset, Some(section)));
                }
                if let Some(s) = elf.section(".nv_fatbin").or_else(|| elf.section("__nv_relfatbin")) {
                    let section = SectionRef { name: s.name.to_string(), offset: s.offset, size: s.size };
                    record.cuda = Some(self.cuda_fatbin(s.data, s.offset, Some(section)));
                }
                record.vulkan = self.vulkan_shaders(data);
                record.backend = tree::identify_backend(&record, &elf);
            }
            Kind::OffloadBundle | Kind::CompressedBundle => {
                record.format =
                    if data.starts_with(sniff::CCOB_MAGIC) { "compressed-bundle" } else { "offload-bundle" };
                record.amdgpu = Some(self.hip_fatbin(data, 0, None));
            }
            Kind::CudaFatbin => {
                record.format = "cuda-fatbin";
                record.cuda = Some(self.cuda_fatbin(data, 0, None));
            }
            Kind::OffloadBinary => {
                self.problems.push(Problem {
                    path: self.path.to_string(),
                    offset: Some(0),
                    severity: Severity::Warning,
                    message: "LLVM offload binary (0x10FF10AD): recognised but not decoded by this version".into(),
                });
                return None;
            }
            Kind::Unknown => {
                self.unknown(data);
                return None;
            }
        }
        Some(record)
    }

    /// The SPIR-V shaders a 64-bit host ELF embeds the way ggml-vulkan does; `None` when it has none. A file
    /// whose symbol table cannot be read is a problem, not a scan failure: its other records stand.
    fn vulkan_shaders(&mut self, data: &[u8]) -> Option<VulkanCode> {
        // A 32-bit host library carries no ggml-vulkan build (the reader is for 64-bit little-endian ELF).
        if data.get(4) != Some(&2) || data.get(5) != Some(&1) {
            return None;
        }
        let shaders = match binfmt::spirv::embedded_shaders(data) {
            Ok(s) => s,
            Err(e) => {
                self.problem(Place::File { base: 0 }, "embedded SPIR-V", e);
                return None;
            }
        };
        if shaders.is_empty() {
            return None;
        }
        Some(super::vulkan::summarize(&shaders, self.want_kernels))
    }

    /// A file of no known format. Most are data and say nothing; one named like a library or code object
    /// is reported, as an error when it is an ELF file whose magic alone was damaged. Text (linker scripts
    /// such as `libc.so`) is left alone.
    fn unknown(&mut self, data: &[u8]) {
        if !named_like_binary(self.path) {
            return;
        }
        let head = data.get(..64).unwrap_or(data);
        if !head.is_empty() && head.iter().all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace()) {
            return;
        }
        let first: Vec<String> = data.iter().take(4).map(|b| format!("{b:02x}")).collect();
        let first = first.join(" ");
        // e_ident after the magic: class 1|2, data 1|2, version 1.
        let ident_intact = matches!(data.get(4..7), Some([1 | 2, 1 | 2, 1])) && data.len() >= 64;
        let (severity, message) = if ident_intact {
            (
                Severity::Error,
                format!(
                    "ELF magic damaged: the file starts with {first} where 7f 45 4c 46 belongs, but the rest of its \
                     ELF identification is intact; not decoded"
                ),
            )
        } else if data.len() < 4 {
            (Severity::Warning, format!("named like a library or code object, but only {} bytes long", data.len()))
        } else {
            (
                Severity::Warning,
                format!(
                    "named like a library or code object, but neither ELF nor a GPU binary format (it starts with \
                     {first}); not decoded"
                ),
            )
        };
        self.problems.push(Problem { path: self.path.to_string(), offset: Some(0), severity, message });
    }

    /// A scanner for one part of this file (a bundle, a fatbin entry) decoded on another thread, with
    /// `kernels` of the file's kernel budget.
    fn part<'q>(&self, problems: &'q mut Vec<Problem>, kernels: u64) -> FileScanner<'q>
    where
        Self: 'q,
    {
        FileScanner {
            path: self.path,
            want_kernels: self.want_kernels,
            problems,
            limits: self.limits,
            kernels_left: kernels,
        }
    }

    /// Every bundle of a `.hip_fatbin` (or a standalone bundle file), decoded in parallel groups.
    fn hip_fatbin(&mut self, data: &[u8], base: u64, section: Option<SectionRef>) -> AmdGpuCode {
        let mut code = AmdGpuCode { section, ..Default::default() };
        let items: Vec<_> = bundle::walk_with_limits(data, &self.limits.decode).collect();
        for group in items.chunks(GROUP) {
            let share = self.kernels_left / group.len() as u64;
            let this = &*self;
            let decoded: Vec<(Vec<CodeObjectRecord>, Vec<Problem>, u64)> = group
                .par_iter()
                .map(|item| {
                    let mut problems = Vec::new();
                    let mut part = this.part(&mut problems, share);
                    let cos = match item {
                        Ok(located) => part.fatbin_item(&located.item, base + located.offset),
                        Err(e) => {
                            part.problem(Place::File { base }, "offload bundle", *e);
                            Vec::new()
                        }
                    };
                    let used = share - part.kernels_left;
                    (cos, problems, used)
                })
                .collect();
            for (item, (mut cos, mut problems, used)) in group.iter().zip(decoded) {
                if let Ok(located) = item {
                    code.bundles += 1;
                    if matches!(located.item, FatbinItem::Compressed(_)) {
                        code.compressed_bundles += 1;
                    }
                }
                code.code_objects.append(&mut cos);
                self.problems.append(&mut problems);
                self.kernels_left -= used;
            }
        }
        code
    }

    fn fatbin_item(&mut self, item: &FatbinItem<'_>, file_offset: u64) -> Vec<CodeObjectRecord> {
        let here = Place::File { base: file_offset };
        let c = match item {
            FatbinItem::Bundle(b) => return self.bundle_entries(b, here, file_offset, None),
            FatbinItem::Compressed(c) => c,
        };
        let compression = Some(Compression {
            format: format!("ccob-v{}", c.version),
            method: match c.method {
                Method::Zlib => "zlib",
                Method::Zstd => "zstd",
            },
            compressed_size: c.payload.len() as u64,
            uncompressed_size: c.uncompressed_size,
        });
        let cost = match c.decode_cost(&self.limits.decode) {
            Ok(cost) => cost,
            Err(e) => {
                self.problem(here, "compressed bundle", e);
                return Vec::new();
            }
        };
        // Held until the decompressed bytes are dropped, at the end of this function.
        let Some(_reservation) = DECOMPRESSION.reserve(cost) else {
            self.over_budget(here, "compressed bundle", cost);
            return Vec::new();
        };
        let inner = match c.decompress_bundle(&self.limits.decode) {
            Ok(v) => v,
            Err(e) => {
                self.problem(here, "compressed bundle", e);
                return Vec::new();
            }
        };
        let inside = Place::Decompressed { container: file_offset, what: "compressed bundle", base: 0 };
        match Bundle::parse_with_limits(&inner.bytes, &self.limits.decode) {
            Ok(b) => {
                if inner.skipped > 0 {
                    self.problems.push(Problem {
                        path: self.path.to_string(),
                        offset: Some(file_offset),
                        severity: Severity::Warning,
                        message: format!(
                            "compressed bundle: its offload bundle has {} entries, which end at byte {} of the {} bytes the CCOB \
                             header announces (field at {:#x}); the other {} bytes are not decompressed",
                            b.entries.len(),
                            inner.bytes.len(),
                            c.uncompressed_size,
                            file_offset + c.uncompressed_size_at(),
                            inner.skipped
                        ),
                    });
                }
                self.bundle_entries(&b, inside, file_offset, compression)
            }
            Err(e) => {
                self.problem(inside, "offload bundle", e);
                Vec::new()
            }
        }
    }

    /// A payload whose decoding needs more memory than the whole process-wide budget.
    fn over_budget(&mut self, place: Place, what: &str, cost: u64) {
        self.problems.push(Problem {
            path: self.path.to_string(),
            offset: Some(place.file_offset()),
            severity: Severity::Error,
            message: format!(
                "{what}: decoding needs {cost} bytes at once, more than the process-wide decompression budget \
                 (limit: {} bytes, limits::DECOMPRESSED_IN_FLIGHT); not decoded",
                DECOMPRESSION.capacity()
            ),
        });
    }

    /// The device entries of a bundle that starts at `place`. Entries with the same (offset, size) are the
    /// same code object: decoded once, the others get a copy of its record marked `alias`, without the
    /// per-kernel records. Distinct entries are decoded until their sizes add up to the bundle's length,
    /// which real bundles (whose entries do not overlap) never exceed.
    fn bundle_entries(
        &mut self,
        b: &Bundle<'_>,
        place: Place,
        bundle_offset: u64,
        compression: Option<Compression>,
    ) -> Vec<CodeObjectRecord> {
        let mut out: Vec<CodeObjectRecord> = Vec::new();
        // (offset, size) → the record decoded for it and the target its code object names.
        let mut decoded: HashMap<(u64, u64), (usize, String)> = HashMap::new();
        let mut decoded_bytes = 0u64;
        let length = b.data.len() as u64;
        let device: Vec<_> = b.device_entries().collect();
        for (i, entry) in device.iter().enumerate() {
            let entry_target = entry.id.target_id().map(|t| t.canonical());
            if let Some((first, co_target)) = decoded.get(&(entry.offset, entry.size)) {
                let original = &mut out[*first];
                let kernels = original.kernels.take();
                let mut rec = original.clone();
                original.kernels = kernels;
                rec.entry_id = entry.id.raw.to_string();
                rec.target = entry_target.unwrap_or_else(|| co_target.clone());
                rec.alias = true;
                out.push(rec);
                continue;
            }
            decoded_bytes = decoded_bytes.saturating_add(entry.size);
            if decoded_bytes > length {
                let inside = match place {
                    Place::File { .. } => String::new(),
                    Place::Decompressed { container, what, base } => {
                        format!(" at byte offset {base:#x} of the decompressed payload of the {what} at {container:#x}")
                    }
                };
                self.problems.push(Problem {
                    path: self.path.to_string(),
                    offset: Some(place.file_offset()),
                    severity: Severity::Error,
                    message: format!(
                        "offload bundle{inside}: its entries overlap, so their distinct byte ranges add up to more \
                         than the bundle's {length} bytes (limit: a bundle decodes at most its own length); the {} \
                         entries from entry {i} (ID {:?}) on are not decoded",
                        device.len() - i,
                        entry.id.raw
                    ),
                });
                break;
            }
            let mut rec =
                self.code_object(entry.data, place.at(entry.offset), bundle_offset, compression.clone(), entry.id.raw);
            decoded.insert((entry.offset, entry.size), (out.len(), rec.target.clone()));
            if let Some(t) = entry_target {
                rec.target = t;
            }
            out.push(rec);
        }
        out
    }

    fn code_object(
        &mut self,
        data: &[u8],
        place: Place,
        bundle_offset: u64,
        bundle_compression: Option<Compression>,
        entry_id: &str,
    ) -> CodeObjectRecord {
        let mut rec = CodeObjectRecord {
            bundle_offset,
            bundle_compression,
            entry_id: entry_id.to_string(),
            target: String::new(),
            processor: String::new(),
            offset: place.offset(),
            in_file: place.in_file(),
            alias: false,
            size: data.len() as u64,
            code_object_version: 0,
            kernel_count: 0,
            families: BTreeMap::new(),
            ggml_types: BTreeMap::new(),
            kernels: None,
            error: None,
        };
        if !data.starts_with(sniff::ELF_MAGIC) {
            // Bundle entries for other offload kinds (or empty ones) are not code objects.
            if let Some(t) = binfmt::bundle::BundleId::parse(entry_id).target {
                rec.processor = TargetId::parse(t).processor.to_string();
                rec.target = t.to_string();
            }
            rec.error = Some("entry is not an ELF code object".into());
            return rec;
        }
        let co = match CodeObject::parse(data) {
            Ok(co) => co,
            Err(e) => {
                self.problem(place, "AMDGPU code object", e);
                rec.error = Some(e.to_string());
                return rec;
            }
        };
        rec.target = co.target_id();
        rec.processor = co.processor.map(str::to_string).unwrap_or_else(|| format!("mach:{:#04x}", co.mach));
        rec.code_object_version = co.version;
        let allowed = self.kernels_left.min(self.limits.decode.max_kernels);
        match co.metadata_with_limit(allowed) {
            Ok(Some(meta)) => {
                self.kernels_left -= meta.kernels.len() as u64;
                rec.kernel_count = meta.kernels.len() as u64;
                rec.kernels = classify_kernels(
                    &meta.kernels,
                    |k| k.name,
                    amd_resources,
                    self.want_kernels,
                    &mut rec.families,
                    &mut rec.ggml_types,
                );
            }
            Ok(None) => rec.error = Some(format!("code object v{} has no MessagePack metadata note", co.version)),
            Err(e) => {
                self.kernel_problem(place, "AMDGPU metadata note", e, allowed);
                rec.error = Some(e.to_string());
            }
        }
        rec
    }

    fn cuda_fatbin(&mut self, data: &[u8], base: u64, section: Option<SectionRef>) -> CudaCode {
        let here = Place::File { base };
        let mut code = CudaCode { section, ..Default::default() };
        let mut entries: Vec<Entry<'_>> = Vec::new();
        for container in fatbin::containers_with_limits(data, &self.limits.decode) {
            match container {
                Ok(c) => {
                    code.containers += 1;
                    for entry in c.entries() {
                        match entry {
                            Ok(e) => entries.push(e),
                            Err(e) => self.problem(here, "CUDA fatbin entry", e),
                        }
                    }
                }
                Err(e) => self.problem(here, "CUDA fatbin container", e),
            }
        }
        for group in entries.chunks(GROUP) {
            let share = self.kernels_left / group.len() as u64;
            let this = &*self;
            let decoded: Vec<(CudaEntryRecord, Vec<Problem>, u64)> = group
                .par_iter()
                .map(|e| {
                    let mut problems = Vec::new();
                    let mut part = this.part(&mut problems, share);
                    let rec = part.fatbin_entry(e, base);
                    let used = share - part.kernels_left;
                    (rec, problems, used)
                })
                .collect();
            for (rec, mut problems, used) in decoded {
                code.entries.push(rec);
                self.problems.append(&mut problems);
                self.kernels_left -= used;
            }
        }
        code
    }

    fn fatbin_entry(&mut self, e: &Entry<'_>, base: u64) -> CudaEntryRecord {
        let offset = base + e.offset;
        let here = Place::File { base };
        let compression = e.is_compressed().then(|| {
            let method = match e.compression() {
                fatbin::Compression::Zstd => "zstd",
                _ => "lz4",
            };
            Compression {
                format: method.to_string(),
                method,
                compressed_size: u64::from(e.compressed_size),
                uncompressed_size: e.decompressed_size,
            }
        });
        let failed = |compression: Option<Compression>, error: String| {
            let mut rec = empty_entry(
                offset,
                &format!("kind-{}", e.kind.raw()),
                format!("sm_{}", e.sm),
                e.sm,
                compression,
                e.payload_size,
            );
            rec.error = Some(error);
            rec
        };
        let cost = match e.decode_cost(&self.limits.decode) {
            Ok(cost) => cost,
            Err(err) => {
                self.problem(here, "CUDA fatbin entry payload", err);
                return failed(compression, err.to_string());
            }
        };
        // Held until the decompressed contents are dropped, at the end of this function.
        let _reservation = match cost {
            0 => None,
            cost => match DECOMPRESSION.reserve(cost) {
                Some(r) => Some(r),
                None => {
                    self.over_budget(Place::File { base: offset }, "CUDA fatbin entry payload", cost);
                    return failed(compression, "not decoded: over the decompression budget".into());
                }
            },
        };
        let contents = match e.contents_with(&self.limits.decode, &zeroed_from_allocator) {
            Ok(c) => c,
            Err(err) => {
                self.problem(here, "CUDA fatbin entry payload", err);
                return failed(compression, err.to_string());
            }
        };
        let payload = if e.is_compressed() {
            Place::Decompressed { container: offset, what: "compressed fatbin entry", base: 0 }
        } else {
            Place::File { base: base + e.payload_offset() }
        };
        match e.kind {
            EntryKind::Cubin => {
                let rec = self.cubin_entry(&contents, payload, offset, compression, e.payload_size);
                CudaEntryRecord { sm: e.sm, target: format!("sm_{}", e.sm), ..rec }
            }
            EntryKind::Ptx => {
                let p = ptx::parse(&contents);
                let mut rec =
                    empty_entry(offset, "ptx", format!("compute_{}", e.sm), e.sm, compression, e.payload_size);
                let allowed = self.kernels_left.min(self.limits.decode.max_kernels);
                let names = match p.entries.get(..allowed as usize) {
                    Some(first) if (p.entries.len() as u64) > allowed => {
                        self.problems.push(Problem {
                            path: self.path.to_string(),
                            offset: Some(payload.file_offset()),
                            severity: Severity::Error,
                            message: format!(
                                "PTX of the fatbin entry at {offset:#x}: more than {allowed} .entry names; the first \
                                 {allowed} are kept (limit: {} kernels per code object, {} per file)",
                                self.limits.decode.max_kernels, self.limits.kernels_per_file
                            ),
                        });
                        first
                    }
                    _ => &p.entries[..],
                };
                self.kernels_left -= names.len() as u64;
                rec.kernel_count = names.len() as u64;
                rec.kernels = classify_kernels(
                    names,
                    |name| name,
                    |_| KernelRecord::default(),
                    self.want_kernels,
                    &mut rec.families,
                    &mut rec.ggml_types,
                );
                rec
            }
            EntryKind::Other(k) => {
                empty_entry(offset, &format!("kind-{k}"), format!("sm_{}", e.sm), e.sm, compression, e.payload_size)
            }
        }
    }

    /// A cubin at `place` (inside a fatbin entry whose header is at file offset `offset`, or a standalone
    /// file).
    fn cubin_entry(
        &mut self,
        data: &[u8],
        place: Place,
        offset: u64,
        compression: Option<Compression>,
        size: u64,
    ) -> CudaEntryRecord {
        let mut rec = empty_entry(offset, "cubin", String::new(), 0, compression, size.max(data.len() as u64));
        let cubin = match Cubin::parse(data) {
            Ok(c) => c,
            Err(e) => {
                self.problem(place, "cubin", e);
                rec.error = Some(e.to_string());
                return rec;
            }
        };
        rec.sm = cubin.sm;
        rec.target = format!("sm_{}", cubin.sm);
        rec.toolkit = cubin.toolkit.map(str::to_string);
        let allowed = self.kernels_left.min(self.limits.decode.max_kernels);
        match cubin.kernels_with_limit(allowed) {
            Ok(ks) => {
                self.kernels_left -= ks.len() as u64;
                rec.kernel_count = ks.len() as u64;
                rec.kernels = classify_kernels(
                    &ks,
                    |k| k.name,
                    |k| KernelRecord {
                        registers: k.registers.map(u64::from),
                        shared_bytes: Some(k.static_shared),
                        scratch_bytes: k.frame_size.map(u64::from),
                        max_threads: k.max_threads.and_then(launch_bound_threads),
                        arg_bytes: k.param_size.map(u64::from),
                        ..Default::default()
                    },
                    self.want_kernels,
                    &mut rec.families,
                    &mut rec.ggml_types,
                );
            }
            Err(e) => {
                self.kernel_problem(place, "cubin kernels", e, allowed);
                rec.error = Some(e.to_string());
            }
        }
        rec
    }
}

fn empty_entry(
    offset: u64,
    kind: &str,
    target: String,
    sm: u32,
    compression: Option<Compression>,
    size: u64,
) -> CudaEntryRecord {
    CudaEntryRecord {
        offset,
        kind: kind.to_string(),
        target,
        sm,
        compression,
        size,
        kernel_count: 0,
        families: BTreeMap::new(),
        ggml_types: BTreeMap::new(),
        toolkit: None,
        kernels: None,
        error: None,
    }
}

/// Count every kernel into the family and (for the matrix-multiply families) ggml-type tallies and, when
/// per-kernel records are wanted, make them: `resources` fills in what the format reports, this adds name,
/// family and type, classifying each name once for both. Works on the mangled names only: no demangling
/// on this path, which runs for every kernel of every scan ([`super::demangle::fill_demangled`] adds the demangled names
/// afterwards, once per distinct name: a ggml HIP library repeats each name in every target and many TUs).
fn classify_kernels<K>(
    kernels: &[K],
    name: impl Fn(&K) -> &str,
    resources: impl Fn(&K) -> KernelRecord,
    want_records: bool,
    families: &mut BTreeMap<String, u64>,
    ggml_types: &mut BTreeMap<String, u64>,
) -> Option<Vec<KernelRecord>> {
    fn count(tally: &mut BTreeMap<String, u64>, key: &str) {
        match tally.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                tally.insert(key.to_string(), 1);
            }
        }
    }
    let mut records = Vec::with_capacity(if want_records { kernels.len() } else { 0 });
    for k in kernels {
        let raw = name(k);
        let family = kernels::family(kernels::base_name(raw).unwrap_or(raw), raw);
        let counts_type = matches!(family, "MMVQ" | "MMQ");
        let ggml_type = if counts_type || want_records {
            kernels::ggml_type_value(raw).and_then(|v| crate::gpu::knowledge::ggml_types().name_static(v))
        } else {
            None
        };
        count(families, family);
        if let (true, Some(t)) = (counts_type, ggml_type) {
            count(ggml_types, t);
        }
        if want_records {
            records.push(KernelRecord { name: raw.to_string(), family, ggml_type, ..resources(k) });
        }
    }
    want_records.then_some(records)
}

/// What the metadata note reports about a kernel's resources.
fn amd_resources(k: &KernelMeta<'_>) -> KernelRecord {
    KernelRecord {
        sgpr: k.sgpr_count,
        vgpr: k.vgpr_count,
        agpr: k.agpr_count,
        sgpr_spills: k.sgpr_spill_count,
        vgpr_spills: k.vgpr_spill_count,
        shared_bytes: k.lds_bytes,
        scratch_bytes: k.scratch_bytes,
        wavefront_size: k.wavefront_size,
        max_threads: k.max_flat_workgroup_size,
        arg_bytes: k.kernarg_size,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_buffers_or_none() {
        for len in [0, 1, 4096, 3 << 20] {
            let v = zeroed_from_allocator(len).unwrap();
            assert_eq!((v.len(), v.capacity()), (len, len));
            assert!(v.iter().all(|&b| b == 0));
        }
        assert!(zeroed_from_allocator(usize::MAX).is_none(), "larger than any layout");
        assert!(zeroed_from_allocator(1 << 62).is_none(), "refused by the allocator");
    }

    #[test]
    fn launch_bounds_that_overflow_are_unknown() {
        assert_eq!(launch_bound_threads([128, 2, 1]), Some(256));
        // Three u32 values can reach 2^96; the product must not wrap.
        assert_eq!(launch_bound_threads([u32::MAX, u32::MAX, 2]), None);
        assert_eq!(launch_bound_threads([u32::MAX, u32::MAX, 1]), Some(u64::from(u32::MAX) * u64::from(u32::MAX)));
    }

    #[test]
    fn names_that_look_like_binaries() {
        for yes in
            ["/a/libggml-hip.so", "libcudart.so.12", "x/Kernels.so-000-gfx900.hsaco", "TensileLibrary.co", "k.cubin"]
        {
            assert!(named_like_binary(yes), "{yes}");
        }
        for no in ["notes.txt", "TensileLibrary_gfx906.dat", "so", "lib.soap"] {
            assert!(!named_like_binary(no), "{no}");
        }
    }
}
