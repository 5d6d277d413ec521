//! Decode one file's GPU code into records: `.hip_fatbin` offload bundles (compressed or not), CUDA
//! fatbins, standalone AMDGPU code objects, bundles and cubins. Files are memory-mapped: only the pages
//! the decoders touch (headers, notes, symbol tables) are read, never a whole 500 MB library.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

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
use binfmt::Limits;
use rayon::prelude::*;

use super::records::*;
use super::tree;
use crate::kernels;

/// Scan one file. Returns its record (if it is an ELF or carries GPU code) and the problems met.
pub fn scan_file(path: &Path, want_kernels: bool) -> (Option<FileRecord>, Vec<Problem>) {
    let mut problems = Vec::new();
    let shown = path.display().to_string();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => {
            problems.push(Problem {
                path: shown,
                offset: None,
                severity: Severity::Warning,
                message: format!("cannot open: {e}"),
            });
            return (None, problems);
        }
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size < 4 {
        return (None, problems);
    }
    // SAFETY: the map is read-only and private to this scan. If another process truncates the file while
    // we read it, the kernel raises SIGBUS; backscope accepts that risk for installed libraries, which are
    // not rewritten in place (package managers replace them by rename).
    let map = match unsafe { memmap2::Mmap::map(&file) } {
        Ok(m) => m,
        Err(e) => {
            problems.push(Problem {
                path: shown,
                offset: None,
                severity: Severity::Warning,
                message: format!("cannot map: {e}"),
            });
            return (None, problems);
        }
    };
    let data: &[u8] = &map;
    let mut scanner = FileScanner { path: &shown, want_kernels, problems: &mut problems, limits: Limits::default() };
    let record = scanner.scan(data, size);
    (record, problems)
}

struct FileScanner<'p> {
    path: &'p str,
    want_kernels: bool,
    problems: &'p mut Vec<Problem>,
    limits: Limits,
}

fn err_problem(path: &str, base: u64, what: &str, e: binfmt::Error) -> Problem {
    let e = e.at_base(base);
    Problem {
        path: path.to_string(),
        offset: Some(e.offset),
        severity: Severity::Error,
        message: format!("{what}: {e}"),
    }
}

impl FileScanner<'_> {
    fn scan(&mut self, data: &[u8], size: u64) -> Option<FileRecord> {
        let mut record = FileRecord {
            path: self.path.to_string(),
            size,
            format: "elf",
            elf: None,
            backend: None,
            amdgpu: None,
            cuda: None,
            dependencies: Vec::new(),
        };
        match sniff::sniff(data) {
            Kind::Elf { machine: sniff::EM_AMDGPU, .. } => {
                record.format = "amdgpu-code-object";
                let co = self.code_object(data, 0, true, 0, None, "");
                record.amdgpu =
                    Some(AmdGpuCode { section: None, bundles: 0, compressed_bundles: 0, code_objects: vec![co] });
            }
            Kind::Elf { machine: sniff::EM_CUDA, .. } => {
                record.format = "cubin";
                let (entry, _) = self.cubin_entry(data, 0, "cubin", None, 0);
                record.cuda = Some(CudaCode { section: None, containers: 0, entries: vec![entry] });
            }
            Kind::Elf { .. } => {
                let elf = match HostElf::parse(data) {
                    Ok(e) => e,
                    Err(e) => {
                        self.problems.push(err_problem(self.path, 0, "ELF", e));
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
            Kind::Unknown => return None,
        }
        Some(record)
    }

    /// Every bundle of a `.hip_fatbin` (or a standalone bundle file), decoded in parallel.
    fn hip_fatbin(&mut self, data: &[u8], base: u64, section: Option<SectionRef>) -> AmdGpuCode {
        let mut code = AmdGpuCode { section, ..Default::default() };
        let items: Vec<_> = bundle::walk(data).collect();
        let path = self.path;
        let want_kernels = self.want_kernels;
        let limits = self.limits;
        let decoded: Vec<(Vec<CodeObjectRecord>, Vec<Problem>)> = items
            .par_iter()
            .map(|item| {
                let mut problems = Vec::new();
                let mut scanner = FileScanner { path, want_kernels, problems: &mut problems, limits };
                let cos = match item {
                    Ok(located) => scanner.fatbin_item(&located.item, base + located.offset),
                    Err(e) => {
                        problems.push(err_problem(path, base, "offload bundle", *e));
                        Vec::new()
                    }
                };
                (cos, problems)
            })
            .collect();
        for (item, (mut cos, mut problems)) in items.iter().zip(decoded) {
            if let Ok(located) = item {
                code.bundles += 1;
                if matches!(located.item, FatbinItem::Compressed(_)) {
                    code.compressed_bundles += 1;
                }
            }
            code.code_objects.append(&mut cos);
            self.problems.append(&mut problems);
        }
        code
    }

    fn fatbin_item(&mut self, item: &FatbinItem<'_>, file_offset: u64) -> Vec<CodeObjectRecord> {
        match item {
            FatbinItem::Bundle(b) => self.bundle_entries(b, file_offset, true, None),
            FatbinItem::Compressed(c) => {
                let compression = Some(Compression {
                    format: format!("ccob-v{}", c.version),
                    method: match c.method {
                        Method::Zlib => "zlib",
                        Method::Zstd => "zstd",
                    },
                    compressed_size: c.payload.len() as u64,
                    uncompressed_size: c.uncompressed_size,
                });
                let inner = match c.decompress(&self.limits) {
                    Ok(v) => v,
                    Err(e) => {
                        self.problems.push(err_problem(self.path, file_offset, "compressed bundle", e));
                        return Vec::new();
                    }
                };
                match Bundle::parse(&inner) {
                    Ok(b) => self.bundle_entries(&b, file_offset, false, compression),
                    Err(e) => {
                        let p = Problem {
                            path: self.path.to_string(),
                            offset: Some(file_offset),
                            severity: Severity::Error,
                            message: format!("bundle inside the compressed bundle at {file_offset:#x}: {e} (offset within the decompressed bytes)"),
                        };
                        self.problems.push(p);
                        Vec::new()
                    }
                }
            }
        }
    }

    fn bundle_entries(
        &mut self,
        b: &Bundle<'_>,
        bundle_offset: u64,
        in_file: bool,
        compression: Option<Compression>,
    ) -> Vec<CodeObjectRecord> {
        let mut out = Vec::new();
        for entry in b.device_entries() {
            let offset = if in_file { bundle_offset + entry.offset } else { entry.offset };
            let mut rec =
                self.code_object(entry.data, offset, in_file, bundle_offset, compression.clone(), entry.id.raw);
            if let Some(t) = entry.id.target_id() {
                rec.target = t.canonical();
            }
            out.push(rec);
        }
        out
    }

    fn code_object(
        &mut self,
        data: &[u8],
        offset: u64,
        in_file: bool,
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
            offset,
            in_file,
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
                let base = if in_file { offset } else { 0 };
                self.problems.push(err_problem(self.path, base, "AMDGPU code object", e));
                rec.error = Some(e.to_string());
                return rec;
            }
        };
        rec.target = co.target_id();
        rec.processor = co.processor.map(str::to_string).unwrap_or_else(|| format!("mach:{:#04x}", co.mach));
        rec.code_object_version = co.version;
        match co.metadata() {
            Ok(Some(meta)) => {
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
                let base = if in_file { offset } else { 0 };
                self.problems.push(err_problem(self.path, base, "AMDGPU metadata note", e));
                rec.error = Some(e.to_string());
            }
        }
        rec
    }

    fn cuda_fatbin(&mut self, data: &[u8], base: u64, section: Option<SectionRef>) -> CudaCode {
        let mut code = CudaCode { section, ..Default::default() };
        let mut entries: Vec<Entry<'_>> = Vec::new();
        for container in fatbin::containers(data) {
            match container {
                Ok(c) => {
                    code.containers += 1;
                    for entry in c.entries() {
                        match entry {
                            Ok(e) => entries.push(e),
                            Err(e) => self.problems.push(err_problem(self.path, base, "CUDA fatbin entry", e)),
                        }
                    }
                }
                Err(e) => self.problems.push(err_problem(self.path, base, "CUDA fatbin container", e)),
            }
        }
        let path = self.path;
        let want_kernels = self.want_kernels;
        let limits = self.limits;
        let decoded: Vec<(CudaEntryRecord, Vec<Problem>)> = entries
            .par_iter()
            .map(|e| {
                let mut problems = Vec::new();
                let mut scanner = FileScanner { path, want_kernels, problems: &mut problems, limits };
                (scanner.fatbin_entry(e, base), problems)
            })
            .collect();
        for (rec, mut problems) in decoded {
            code.entries.push(rec);
            self.problems.append(&mut problems);
        }
        code
    }

    fn fatbin_entry(&mut self, e: &Entry<'_>, base: u64) -> CudaEntryRecord {
        let offset = base + e.offset;
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
        let contents = match e.contents(&self.limits) {
            Ok(c) => c,
            Err(err) => {
                self.problems.push(err_problem(self.path, base, "CUDA fatbin entry payload", err));
                let kind = format!("kind-{}", e.kind.raw());
                return CudaEntryRecord {
                    offset,
                    kind,
                    target: format!("sm_{}", e.sm),
                    sm: e.sm,
                    compression,
                    size: e.payload_size,
                    kernel_count: 0,
                    families: BTreeMap::new(),
                    ggml_types: BTreeMap::new(),
                    toolkit: None,
                    kernels: None,
                    error: Some(err.to_string()),
                };
            }
        };
        match e.kind {
            EntryKind::Cubin => {
                let (rec, _) = self.cubin_entry(&contents, offset, "cubin", compression, e.payload_size);
                CudaEntryRecord { sm: e.sm, target: format!("sm_{}", e.sm), ..rec }
            }
            EntryKind::Ptx => {
                let p = ptx::parse(&contents);
                let mut rec =
                    empty_entry(offset, "ptx", format!("compute_{}", e.sm), e.sm, compression, e.payload_size);
                rec.kernel_count = p.entries.len() as u64;
                rec.kernels = classify_kernels(
                    &p.entries,
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

    /// A cubin (inside a fatbin entry or a standalone file).
    fn cubin_entry(
        &mut self,
        data: &[u8],
        offset: u64,
        kind: &str,
        compression: Option<Compression>,
        size: u64,
    ) -> (CudaEntryRecord, bool) {
        let mut rec = empty_entry(offset, kind, String::new(), 0, compression, size.max(data.len() as u64));
        let cubin = match Cubin::parse(data) {
            Ok(c) => c,
            Err(e) => {
                self.problems.push(err_problem(
                    self.path,
                    if rec.compression.is_none() { offset } else { 0 },
                    "cubin",
                    e,
                ));
                rec.error = Some(e.to_string());
                return (rec, false);
            }
        };
        rec.sm = cubin.sm;
        rec.target = format!("sm_{}", cubin.sm);
        rec.toolkit = cubin.toolkit.map(str::to_string);
        match cubin.kernels() {
            Ok(ks) => {
                rec.kernel_count = ks.len() as u64;
                rec.kernels = classify_kernels(
                    &ks,
                    |k| k.name,
                    |k| KernelRecord {
                        registers: k.registers.map(u64::from),
                        shared_bytes: Some(k.static_shared),
                        scratch_bytes: k.frame_size.map(u64::from),
                        max_threads: k.max_threads.map(|[x, y, z]| u64::from(x) * u64::from(y) * u64::from(z)),
                        arg_bytes: k.param_size.map(u64::from),
                        ..Default::default()
                    },
                    self.want_kernels,
                    &mut rec.families,
                    &mut rec.ggml_types,
                );
            }
            Err(e) => {
                self.problems.push(err_problem(self.path, 0, "cubin kernels", e));
                rec.error = Some(e.to_string());
            }
        }
        (rec, true)
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
/// on this path, which runs for every kernel of every scan ([`fill_demangled`] adds the demangled names
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
            kernels::ggml_type_value(raw).and_then(|v| crate::knowledge::ggml_types().name_static(v))
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

/// Demangle every distinct kernel name of the scanned files in parallel and fill the records, which share
/// one copy of each demangled name.
pub fn fill_demangled(files: &mut [FileRecord]) {
    let mut slot_of: HashMap<&str, usize> = HashMap::new();
    let mut distinct: Vec<&str> = Vec::new();
    // For every record in order, the index of its name in `distinct`.
    let slots: Vec<usize> = files
        .iter()
        .flat_map(kernel_records)
        .map(|k| {
            *slot_of.entry(&k.name).or_insert_with(|| {
                distinct.push(&k.name);
                distinct.len() - 1
            })
        })
        .collect();
    let demangled: Vec<Arc<str>> = distinct.par_iter().map(|n| Arc::from(kernels::display_name(n))).collect();
    for (k, slot) in files.iter_mut().flat_map(kernel_records_mut).zip(slots) {
        k.demangled = Arc::clone(&demangled[slot]);
    }
}

fn kernel_records(f: &FileRecord) -> impl Iterator<Item = &KernelRecord> {
    let amd = f.amdgpu.iter().flat_map(|a| a.code_objects.iter()).flat_map(|c| c.kernels.iter().flatten());
    let cuda = f.cuda.iter().flat_map(|c| c.entries.iter()).flat_map(|e| e.kernels.iter().flatten());
    amd.chain(cuda)
}

/// [`kernel_records`], mutable, in the same order.
fn kernel_records_mut(f: &mut FileRecord) -> impl Iterator<Item = &mut KernelRecord> {
    let amd = f.amdgpu.iter_mut().flat_map(|a| a.code_objects.iter_mut()).flat_map(|c| c.kernels.iter_mut().flatten());
    let cuda = f.cuda.iter_mut().flat_map(|c| c.entries.iter_mut()).flat_map(|e| e.kernels.iter_mut().flatten());
    amd.chain(cuda)
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
