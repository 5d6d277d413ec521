//! `scan --disasm`: what each kernel's code is made of. Works from the scan's records: every selected AMDGPU code
//! object or cubin is found again in its file ([`extract`]), disassembled by the vendor's tool ([`tools`], in
//! parallel, cached by content hash in [`cache`]), read into per-function mnemonic counts ([`listing`]) and
//! classified ([`classes`]: broad classes plus the instructions that decide a kernel path — MFMA, WMMA, dot,
//! packed fp16; HMMA, IMMA, DP4A, LDGSTS, TMA, WGMMA).
//!
//! A missing disassembler or a code object that cannot be disassembled leaves the rest of the scan as it is: the
//! first is one Limited claim per vendor, the second a problem and a Limited claim.

mod cache;
pub mod classes;
mod extract;
mod listing;
pub(crate) mod report;
pub mod tools;
pub mod view;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use binfmt::amdgpu::code_object::CodeObject;
use binfmt::amdgpu::target::{compat, Compat, TargetId};
use binfmt::cuda::cubin::Cubin;
use rayon::prelude::*;

use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::arch::{cubin_runs_on, DeviceArch};
use crate::gpu::binaries::records::{CodeObjectRecord, CudaEntryRecord, FileRecord, Problem, Severity};
use crate::gpu::kernels;
use crate::host::inputs::MappedFile;
use classes::{Classifier, Vendor};
use listing::Listing;
pub use report::{CodeObjectMix, DisasmReport, DisasmStats, KernelMix};
use tools::Tool;

/// Most bytes of one disassembler's output that are read; past it the listing is marked truncated. Far above real
/// listings: the largest gfx942 code object of the 168 MB cyllama-rocm library prints about 210,000 lines.
pub const OUTPUT_BUDGET: u64 = 2 << 30;
/// Bytes of output read per byte of the code object, above [`OUTPUT_FLOOR`]. llvm-objdump 19 prints 10–11 bytes per
/// byte of the cyllama-rocm library's largest code objects (1.6–2.1 MB each) and 5 for its smallest; a code object
/// whose symbols share one long name prints that name once per symbol, hundreds of bytes per byte.
pub const OUTPUT_PER_BYTE: u64 = 32;
/// Output read for any code object, however small.
pub const OUTPUT_FLOOR: u64 = 16 << 20;

/// The output budget of one code object of `size` bytes: [`OUTPUT_FLOOR`] + [`OUTPUT_PER_BYTE`] × `size`, at most
/// [`OUTPUT_BUDGET`].
pub fn output_budget(size: u64) -> u64 {
    OUTPUT_FLOOR.saturating_add(size.saturating_mul(OUTPUT_PER_BYTE)).min(OUTPUT_BUDGET)
}
/// Longest one disassembler may run on one code object.
pub const TIME_LIMIT: Duration = Duration::from_secs(600);

/// What to disassemble and with what.
#[derive(Clone, Debug, Default)]
pub struct DisasmOptions {
    /// Report only kernels whose mangled or demangled name contains this, or whose family is this (`MMQ`).
    pub kernel: Option<String>,
    /// An `llvm-objdump` to use instead of looking for one.
    pub llvm_objdump: Option<PathBuf>,
    /// An `nvdisasm` or `cuobjdump` to use instead of looking for one.
    pub nvdisasm: Option<PathBuf>,
    /// Where listings are cached (default: `$BACKSCOPE_CACHE/disasm` or `~/.cache/backscope/disasm`).
    pub cache_dir: Option<PathBuf>,
    /// Do not read or write the cache.
    pub no_cache: bool,
}

/// Check the disassemblers named on the command line before anything runs: naming one that does not work is a
/// usage error, not a finding.
pub fn check_named_tools(opts: &DisasmOptions) -> Result<(), tools::ToolError> {
    if let Some(p) = &opts.llvm_objdump {
        tools::check_llvm_objdump(p)?;
    }
    if let Some(p) = &opts.nvdisasm {
        tools::check_nvidia(p)?;
    }
    Ok(())
}

/// The disassembly's records, claims and problems, for the scan to add to its report.
#[derive(Debug, Default)]
pub struct Outcome {
    pub report: DisasmReport,
    pub claims: Vec<Claim>,
    pub problems: Vec<Problem>,
}

/// A code object the scan found, chosen for disassembly.
#[derive(Clone, Copy)]
enum Item<'r> {
    Amd { file: &'r FileRecord, co: &'r CodeObjectRecord },
    Cuda { file: &'r FileRecord, entry: &'r CudaEntryRecord },
}

impl Item<'_> {
    fn file(&self) -> &FileRecord {
        match self {
            Item::Amd { file, .. } | Item::Cuda { file, .. } => file,
        }
    }

    /// The file offset a problem about the item names, and its target.
    fn place(&self) -> (u64, &str) {
        match self {
            Item::Amd { co, .. } => (if co.in_file { co.offset } else { co.bundle_offset }, &co.target),
            Item::Cuda { entry, .. } => (entry.offset, &entry.target),
        }
    }

    /// Where the item's bytes end in its file, as far as the scan's record tells: exactly for a code object stored
    /// as it is, the whole file for one inside a compressed container.
    fn file_end(&self) -> u64 {
        match self {
            Item::Amd { co, .. } if co.in_file => co.offset.saturating_add(co.size),
            _ => u64::MAX,
        }
    }

    fn vendor(&self) -> Vendor {
        match self {
            Item::Amd { .. } => Vendor::Amd,
            Item::Cuda { .. } => Vendor::Nvidia,
        }
    }
}

/// The code objects that run on `arch` (all of them without one): AMD code objects by the ROCm loader's rule,
/// cubins of the same major compute capability at or below it. PTX has no machine code to disassemble.
fn select<'r>(files: &'r [FileRecord], arch: Option<&DeviceArch>) -> Vec<Item<'r>> {
    let mut out = Vec::new();
    for file in files {
        if let Some(a) = &file.amdgpu {
            for co in &a.code_objects {
                let runs = match arch {
                    None => true,
                    Some(DeviceArch::Amd { id }) => {
                        compat(&TargetId::parse(&co.target), &TargetId::parse(id)) == Compat::Runs
                    }
                    Some(_) => false,
                };
                if runs && co.error.is_none() && co.kernel_count > 0 {
                    out.push(Item::Amd { file, co });
                }
            }
        }
        if let Some(c) = &file.cuda {
            for entry in &c.entries {
                let runs = match arch {
                    None => true,
                    Some(DeviceArch::Nvidia { sm }) => cubin_runs_on(entry.sm, *sm),
                    Some(_) => false,
                };
                if runs && entry.kind == "cubin" && entry.error.is_none() && entry.kernel_count > 0 {
                    out.push(Item::Cuda { file, entry });
                }
            }
        }
    }
    out
}

/// A kernel as the code object's own tables describe it.
struct KernelInfo {
    name: String,
    wavefront_size: Option<u64>,
    sgpr: Option<u64>,
    vgpr: Option<u64>,
    agpr: Option<u64>,
    registers: Option<u64>,
}

fn kernel_infos(item: &Item<'_>, bytes: &[u8]) -> Result<Vec<KernelInfo>, String> {
    match item {
        Item::Amd { .. } => {
            let co = CodeObject::parse(bytes).map_err(|e| format!("AMDGPU code object: {e}"))?;
            let meta = co.metadata().map_err(|e| format!("AMDGPU metadata note: {e}"))?.unwrap_or_default();
            Ok(meta
                .kernels
                .iter()
                .map(|k| KernelInfo {
                    name: k.name.to_string(),
                    wavefront_size: k.wavefront_size,
                    sgpr: k.sgpr_count,
                    vgpr: k.vgpr_count,
                    agpr: k.agpr_count,
                    registers: None,
                })
                .collect())
        }
        Item::Cuda { .. } => {
            let cubin = Cubin::parse(bytes).map_err(|e| format!("cubin: {e}"))?;
            let ks = cubin.kernels().map_err(|e| format!("cubin kernels: {e}"))?;
            Ok(ks
                .iter()
                .map(|k| KernelInfo {
                    name: k.name.to_string(),
                    wavefront_size: None,
                    sgpr: None,
                    vgpr: None,
                    agpr: None,
                    registers: k.registers.map(u64::from),
                })
                .collect())
        }
    }
}

/// Whether a kernel is wanted: no pattern, the pattern names its family, or its mangled or demangled name holds it.
fn wanted(pattern: Option<&str>, raw: &str, demangled: &str, family: &str) -> bool {
    match pattern {
        None => true,
        Some(p) => family.eq_ignore_ascii_case(p) || raw.contains(p) || demangled.contains(p),
    }
}

struct Context<'a> {
    opts: &'a DisasmOptions,
    amd: Option<Tool>,
    nvidia: Option<Tool>,
    cache: Option<PathBuf>,
    scratch: PathBuf,
}

/// What became of one item.
#[derive(Clone)]
enum Done {
    Mix(CodeObjectMix),
    NoMatch,
    NoTool,
}

/// The checked cache root ([`crate::host::cache::root`]). It holds disassemblers that are run (scripts/fixtures.sh's
/// wheels) and listings that are believed: a root that is not this user's own is not used, and a warning says why.
fn cache_root(problems: &mut Vec<Problem>) -> Option<PathBuf> {
    crate::host::cache::root()
        .map_err(|e| {
            problems.push(Problem {
                path: String::new(),
                offset: None,
                severity: Severity::Warning,
                message: format!("{e}: its tools and listings are not used"),
            })
        })
        .ok()
}

/// Disassemble the files the scan found (restricted to `arch` when given) and classify every kernel's instructions.
pub fn disassemble(files: &[FileRecord], arch: Option<&DeviceArch>, opts: &DisasmOptions) -> Outcome {
    let started = Instant::now();
    let items = select(files, arch);
    let mut outcome = Outcome::default();
    outcome.report.kernel_pattern = opts.kernel.clone();
    let want = |v: Vendor| items.iter().any(|i| i.vendor() == v);
    let need_root = (want(Vendor::Nvidia) && opts.nvdisasm.is_none()) || (!opts.no_cache && opts.cache_dir.is_none());
    let base = if need_root { cache_root(&mut outcome.problems) } else { None };
    let find_error = |vendor: &str, e: tools::ToolError| Problem {
        path: String::new(),
        offset: None,
        severity: Severity::Warning,
        message: format!("{vendor} disassembler: {e}"),
    };
    let amd = if want(Vendor::Amd) {
        tools::find_amd(opts.llvm_objdump.as_deref()).unwrap_or_else(|e| {
            outcome.problems.push(find_error("AMDGPU", e));
            None
        })
    } else {
        None
    };
    let nvidia = if want(Vendor::Nvidia) {
        tools::find_nvidia(opts.nvdisasm.as_deref(), base.as_deref().unwrap_or(Path::new("/nonexistent")))
            .unwrap_or_else(|e| {
                outcome.problems.push(find_error("NVIDIA", e));
                None
            })
    } else {
        None
    };
    outcome.report.tools = amd.iter().chain(nvidia.iter()).cloned().collect();
    let cache =
        if opts.no_cache { None } else { opts.cache_dir.clone().or_else(|| base.as_ref().map(|b| b.join("disasm"))) };
    let scratch = match tempfile::Builder::new().prefix("backscope-disasm-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            outcome.problems.push(Problem {
                path: std::env::temp_dir().display().to_string(),
                offset: None,
                severity: Severity::Error,
                message: format!("cannot create a scratch directory for code objects: {e}"),
            });
            return outcome;
        }
    };
    let ctx = Context { opts, amd, nvidia, cache, scratch: scratch.path().to_path_buf() };

    // Map every file that holds a selected item once; the items share the map. The maps are guarded as the scan's
    // are: a file truncated while it is read reads zeros past its new end, and the item is then left out.
    let mut maps: BTreeMap<&str, Result<Arc<MappedFile>, String>> = BTreeMap::new();
    for item in &items {
        let path = item.file().path.as_str();
        maps.entry(path).or_insert_with(|| {
            MappedFile::open(Path::new(path)).map(Arc::new).map_err(|e| format!("cannot map the file: {e}"))
        });
    }
    // Items that name the same bytes (aliased bundle entries) are disassembled once; the code objects of one
    // compressed bundle are taken from one decompression of it.
    let mut groups: BTreeMap<GroupKey<'_>, BTreeMap<UnitKey, Vec<usize>>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let (bundle, unit) = match item {
            Item::Amd { co, .. } if !co.in_file => (Some(co.bundle_offset), UnitKey::Amd(co.offset, co.size)),
            Item::Amd { co, .. } => (None, UnitKey::Amd(co.offset, co.size)),
            Item::Cuda { entry, .. } => (None, UnitKey::Cuda(entry.offset)),
        };
        groups.entry((item.file().path.as_str(), bundle)).or_default().entry(unit).or_default().push(i);
    }
    let mut results: Vec<(usize, Result<Done, String>, Option<u64>)> = groups
        .par_iter()
        .flat_map_iter(|((path, bundle), units)| {
            let units: Vec<&Vec<usize>> = units.values().collect();
            group(&ctx, &items, &maps[path], *bundle, &units)
        })
        .collect();
    results.sort_by_key(|(i, ..)| *i);
    let results = results.into_iter().map(|(i, done, cut)| (items[i], done, cut));

    let stats = &mut outcome.report.stats;
    stats.selected = items.len() as u64;
    stats.parallel = rayon::current_num_threads() as u64;
    let mut failures: Vec<String> = Vec::new();
    let mut no_tool: BTreeMap<Vendor, u64> = BTreeMap::new();
    for (item, done, cut) in results {
        if let Some(at) = cut {
            stats.failed += 1;
            let (offset, what) = item.place();
            outcome.problems.push(Problem {
                path: item.file().path.clone(),
                offset: Some(at),
                severity: Severity::Error,
                message: format!(
                    "the file changed while it was read for disassembly: its bytes from {at:#x} on were gone, inside \
                     the {what} code at {offset:#x}, which is left out"
                ),
            });
            failures.push(format!("{} @ {offset:#x} ({what}): the file changed while it was read", item.file().path));
            continue;
        }
        match done {
            Ok(Done::Mix(mix)) => {
                if mix.truncated {
                    let (offset, what) = item.place();
                    outcome.problems.push(Problem {
                        path: item.file().path.clone(),
                        offset: Some(offset),
                        severity: Severity::Warning,
                        message: format!(
                            "disassembly of the {what} code at {offset:#x}: the disassembler's output was cut at {} \
                             bytes (limit: {OUTPUT_FLOOR} bytes + {OUTPUT_PER_BYTE} per byte of the {}-byte code \
                             object, disasm::output_budget); its counts are lower bounds and the listing is not cached",
                            output_budget(mix.size),
                            mix.size
                        ),
                    });
                }
                stats.disassembled += u64::from(!mix.cached);
                stats.from_cache += u64::from(mix.cached);
                stats.kernels += mix.kernels.len() as u64;
                stats.instructions += mix.instructions;
                outcome.report.code_objects.push(mix);
            }
            Ok(Done::NoMatch) => stats.no_matching_kernel += 1,
            Ok(Done::NoTool) => {
                stats.no_tool += 1;
                *no_tool.entry(item.vendor()).or_default() += 1;
            }
            Err(e) => {
                stats.failed += 1;
                let (offset, what) = item.place();
                outcome.problems.push(Problem {
                    path: item.file().path.clone(),
                    offset: Some(offset),
                    severity: Severity::Warning,
                    message: format!("disassembly of the {what} code at {offset:#x}: {e}"),
                });
                failures.push(format!("{} @ {offset:#x} ({what}): {e}", item.file().path));
            }
        }
    }
    stats.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    outcome.claims = claims(&outcome.report, &ctx, &no_tool, &failures);
    drop(scratch);
    outcome
}

/// Find one item's bytes, disassemble them (or take the cached listing) and classify its kernels.
/// A file, and the file offset of a compressed bundle in it whose code objects are decompressed together.
type GroupKey<'r> = (&'r str, Option<u64>);

/// The bytes one item names: a code object by its place in the file or in its decompressed bundle, a cubin by
/// its fatbin entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum UnitKey {
    Amd(u64, u64),
    Cuda(u64),
}

/// The items of one file, or of one compressed bundle of it (`bundle`, decompressed once here), in units that name
/// the same bytes: each unit's result per item, with the offset where the file was found cut if that is below the
/// item's bytes.
fn group(
    ctx: &Context<'_>,
    items: &[Item<'_>],
    map: &Result<Arc<MappedFile>, String>,
    bundle: Option<u64>,
    units: &[&Vec<usize>],
) -> Vec<(usize, Result<Done, String>, Option<u64>)> {
    let failed = |e: &String| units.iter().flat_map(|u| u.iter()).map(|&i| (i, Err(e.clone()), None)).collect();
    let map = match map {
        Ok(m) => m,
        Err(e) => return failed(e),
    };
    let file_bytes = map.bytes();
    let bytes: Vec<Result<Cow<'_, [u8]>, String>> = match bundle {
        None => units.iter().map(|u| plain_bytes(&items[u[0]], file_bytes)).collect(),
        // The decompressed bundle (and its share of the decompression budget) is dropped once its code objects are
        // copied out, before any disassembler runs.
        Some(at) => match extract::compressed_bundle(file_bytes, at) {
            Ok(inner) => units
                .iter()
                .map(|u| match &items[u[0]] {
                    Item::Amd { co, .. } => extract::entry_in(&inner, co).map(Cow::Owned),
                    Item::Cuda { .. } => Err("a cubin inside a compressed bundle".to_string()),
                })
                .collect(),
            Err(e) => return failed(&e),
        },
    };
    units
        .par_iter()
        .zip(bytes)
        .flat_map_iter(|(unit, bytes)| {
            let unit_items: Vec<Item<'_>> = unit.iter().map(|&i| items[i]).collect();
            let done = match bytes {
                Ok(b) => analyze(ctx, &unit_items, &b),
                Err(e) => unit_items.iter().map(|_| Err(e.clone())).collect(),
            };
            // Read after the unit's bytes were: a cut below their end means some of them were zeros.
            let cut = map.cut_at();
            unit.iter()
                .zip(done)
                .map(move |(&i, done)| (i, done, cut.filter(|&at| at < items[i].file_end())))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The bytes of a code object that is not inside a compressed bundle: borrowed from the map, or (a compressed
/// fatbin entry) decompressed.
fn plain_bytes<'a>(item: &Item<'_>, file_bytes: &'a [u8]) -> Result<Cow<'a, [u8]>, String> {
    match item {
        Item::Amd { co, .. } => extract::amd_code_object(file_bytes, co),
        Item::Cuda { file, entry } => extract::cubin(file_bytes, file, entry),
    }
}

/// Disassemble one code object (or take the cached listing) and classify its kernels, once for every item that
/// names these bytes (bundle entries that alias one code object): one result per item, in order.
fn analyze(ctx: &Context<'_>, unit: &[Item<'_>], bytes: &[u8]) -> Vec<Result<Done, String>> {
    let all = |r: Result<Done, String>| vec![r; unit.len()];
    let first = &unit[0];
    let infos = match kernel_infos(first, bytes) {
        Ok(i) => i,
        Err(e) => return all(Err(e)),
    };
    let pattern = ctx.opts.kernel.as_deref();
    let described: Vec<(KernelInfo, String, &'static str)> = infos
        .into_iter()
        .filter_map(|k| {
            let family = kernels::family(kernels::base_name(&k.name).unwrap_or(&k.name), &k.name);
            let demangled = kernels::display_name(&k.name);
            wanted(pattern, &k.name, &demangled, family).then_some((k, demangled, family))
        })
        .collect();
    if described.is_empty() {
        return all(Ok(Done::NoMatch));
    }
    let (tool, cpu) = match first {
        Item::Amd { co, .. } => (ctx.amd.as_ref(), co.processor.clone()),
        Item::Cuda { entry, .. } => (ctx.nvidia.as_ref(), entry.target.clone()),
    };
    let Some(tool) = tool else { return all(Ok(Done::NoTool)) };
    let sha = cache::sha256_hex(bytes);
    let cached = ctx.cache.as_deref().and_then(|dir| cache::load(dir, tool, &cpu, &sha));
    let was_cached = cached.is_some();
    let listing = match cached {
        Some(l) => l,
        None => match disassemble_bytes(ctx, first, tool, &cpu, bytes) {
            Ok(l) => {
                if let Some(dir) = &ctx.cache {
                    cache::store(dir, tool, &cpu, &sha, &l);
                }
                l
            }
            Err(e) => return all(Err(e)),
        },
    };
    unit.iter().map(|item| Ok(Done::Mix(mix(item, bytes, sha.clone(), was_cached, &listing, &described)))).collect()
}

/// Run the disassembler on `bytes` (written to a scratch file).
fn disassemble_bytes(
    ctx: &Context<'_>,
    item: &Item<'_>,
    tool: &Tool,
    cpu: &str,
    bytes: &[u8],
) -> Result<Listing, String> {
    let suffix = if item.vendor() == Vendor::Amd { ".co" } else { ".cubin" };
    let mut tmp = tempfile::Builder::new()
        .suffix(suffix)
        .tempfile_in(&ctx.scratch)
        .map_err(|e| format!("cannot write the code object to a scratch file: {e}"))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(|e| format!("cannot write a scratch file: {e}"))?;
    let mcpu = (item.vendor() == Vendor::Amd).then_some(cpu);
    let budget = output_budget(bytes.len() as u64);
    tools::run(tool, tmp.path(), mcpu, budget, TIME_LIMIT).map_err(|e| e.to_string())
}

fn mix(
    item: &Item<'_>,
    bytes: &[u8],
    sha256: String,
    cached: bool,
    listing: &Listing,
    kernels_wanted: &[(KernelInfo, String, &'static str)],
) -> CodeObjectMix {
    let vendor = item.vendor();
    let table = classes::classes();
    let mut classifier = Classifier::new(table, vendor);
    let total_of = |f: &listing::FunctionMnemonics| f.mnemonics.values().sum::<u64>();
    let instructions = listing.unattributed + listing.functions.iter().map(total_of).sum::<u64>();
    let by_name: BTreeMap<&str, &listing::FunctionMnemonics> =
        listing.functions.iter().map(|f| (f.name.as_str(), f)).collect();
    let all_kernels: std::collections::BTreeSet<&str> = kernels_wanted.iter().map(|(k, ..)| k.name.as_str()).collect();
    let mut kernels = Vec::new();
    for (info, demangled, family) in kernels_wanted.iter() {
        let mut k = KernelMix {
            name: info.name.clone(),
            demangled: demangled.clone(),
            family,
            ggml_type: kernels::ggml_type_value(&info.name)
                .and_then(|v| crate::gpu::knowledge::ggml_types().name_static(v)),
            instructions: 0,
            classes: BTreeMap::new(),
            paths: table.path_kinds(vendor).map(|p| (p.to_string(), 0)).collect(),
            path_mnemonics: BTreeMap::new(),
            wavefront_size: info.wavefront_size,
            sgpr: info.sgpr,
            vgpr: info.vgpr,
            agpr: info.agpr,
            registers: info.registers,
        };
        if let Some(f) = by_name.get(info.name.as_str()) {
            for (m, n) in &f.mnemonics {
                let c = classifier.classify(m);
                k.instructions += n;
                *k.classes.entry(c.class.to_string()).or_default() += n;
                if let Some(p) = c.path {
                    *k.paths.entry(p.to_string()).or_default() += n;
                    *k.path_mnemonics.entry(m.clone()).or_default() += n;
                }
            }
        }
        kernels.push(k);
    }
    // Functions that are not the wanted kernels: device functions, and kernels filtered out by --kernel.
    let other_functions =
        listing.functions.iter().filter(|f| !all_kernels.contains(f.name.as_str())).map(total_of).sum();
    let (target, offset, in_file, container_offset) = match item {
        Item::Amd { co, .. } => (co.target.clone(), co.offset, co.in_file, (!co.in_file).then_some(co.bundle_offset)),
        Item::Cuda { file, entry } => {
            let standalone = file.format == "cubin";
            (entry.target.clone(), entry.offset, standalone, (!standalone).then_some(entry.offset))
        }
    };
    CodeObjectMix {
        path: item.file().path.clone(),
        vendor,
        target,
        offset,
        in_file,
        container_offset,
        size: bytes.len() as u64,
        sha256,
        cached,
        truncated: listing.truncated,
        instructions,
        other_functions,
        kernels,
        error: None,
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Families whose instruction mix is reported as a claim even when no path-deciding instruction is in it: the
/// matrix-multiply and attention paths, where an absent MFMA/WMMA/HMMA is itself the finding.
fn always_claimed(family: &str) -> bool {
    matches!(family, "MMQ" | "MMVQ" | "MMF" | "MMVF") || family.starts_with("FA-")
}

fn claims(
    report: &DisasmReport,
    ctx: &Context<'_>,
    no_tool: &BTreeMap<Vendor, u64>,
    failures: &[String],
) -> Vec<Claim> {
    let mut out = Vec::new();
    for (vendor, n) in no_tool {
        let (what, looked) = match vendor {
            Vendor::Amd => (
                "no AMDGPU disassembler was found",
                "llvm-objdump 17+ with the amdgcn target: llvm-objdump-N on PATH, /usr/lib/llvm-N/bin, /opt/rocm/llvm/bin; --llvm-objdump PATH names one",
            ),
            Vendor::Nvidia => (
                "no NVIDIA disassembler was found",
                "nvdisasm or cuobjdump on PATH, /usr/local/cuda/bin, /opt/cuda/bin or the backscope tool cache; --nvdisasm PATH names one",
            ),
        };
        out.push(Claim::new(
            format!("scan.disasm.no-tool.{}", vendor.as_str()),
            Confidence::Limited,
            format!("{what} ({looked}): {n} code objects were not disassembled; the rest of the scan is complete"),
        ));
    }
    if !failures.is_empty() {
        out.push(
            Claim::new(
                "scan.disasm.failed",
                Confidence::Limited,
                format!(
                    "{} code objects could not be disassembled (see the problems); their instruction mix is missing",
                    failures.len()
                ),
            )
            .with_sources(failures.iter().take(3).map(|f| Source::file(f.clone(), None, None, "disassembly failure"))),
        );
    }
    // One claim per library, target and family.
    type Key<'a> = (&'a str, &'a str, &'a str);
    let mut groups: BTreeMap<Key<'_>, Vec<(&CodeObjectMix, &KernelMix)>> = BTreeMap::new();
    for co in &report.code_objects {
        for k in &co.kernels {
            groups.entry((co.path.as_str(), co.target.as_str(), k.family)).or_default().push((co, k));
        }
    }
    for ((path, target, family), members) in groups {
        let vendor = members[0].0.vendor;
        let mut paths: BTreeMap<&str, u64> = classes::classes().path_kinds(vendor).map(|p| (p, 0)).collect();
        let mut with: BTreeMap<&str, u64> = BTreeMap::new();
        let mut mnemonics: BTreeMap<&str, u64> = BTreeMap::new();
        for (_, k) in &members {
            for (p, n) in &k.paths {
                if let Some(total) = paths.get_mut(p.as_str()) {
                    *total += n;
                }
                if *n > 0 {
                    *with.entry(p.as_str()).or_default() += 1;
                }
            }
            for (m, n) in &k.path_mnemonics {
                *mnemonics.entry(m.as_str()).or_default() += n;
            }
        }
        let present: Vec<&str> = paths.iter().filter(|(_, n)| **n > 0).map(|(p, _)| *p).collect();
        if present.is_empty() && !always_claimed(family) {
            continue;
        }
        let kernels = members.len();
        let mut top: Vec<(&str, u64)> = mnemonics.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let shown: Vec<String> = top.iter().take(4).map(|(m, n)| format!("{m} ×{n}")).collect();
        let absent: Vec<&str> = paths.iter().filter(|(_, n)| **n == 0).map(|(p, _)| *p).collect();
        let mut statement = format!("{}, {target}: ", file_name(path));
        if present.is_empty() {
            statement.push_str(&format!("none of its {kernels} {family} kernels contains {}", absent.join(", ")));
        } else {
            let parts: Vec<String> = present
                .iter()
                .map(|p| format!("{} of {kernels} {family} kernels contain {p}", with.get(p).unwrap_or(&0)))
                .collect();
            statement.push_str(&parts.join("; "));
            statement.push_str(&format!(" ({}{})", shown.join(", "), if top.len() > 4 { ", …" } else { "" }));
            if !absent.is_empty() {
                statement.push_str(&format!("; none contains {}", absent.join(", ")));
            }
        }
        if members.iter().any(|(co, _)| co.truncated) {
            statement.push_str(" (a listing was cut at the output budget: counts are lower bounds)");
        }
        let tool = match vendor {
            Vendor::Amd => ctx.amd.as_ref(),
            Vendor::Nvidia => ctx.nvidia.as_ref(),
        };
        let mut sources: Vec<Source> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (co, _) in &members {
            if sources.len() >= 3 || !seen.insert((co.offset, co.container_offset)) {
                continue;
            }
            let what = match (co.vendor, co.in_file) {
                (Vendor::Amd, true) => format!("{target} code object"),
                (Vendor::Amd, false) => format!("{target} code object at {:#x} in the compressed bundle", co.offset),
                (Vendor::Nvidia, _) => format!("{target} cubin (fatbin entry)"),
            };
            let (offset, length) = match (co.in_file, co.container_offset) {
                (true, _) => (Some(co.offset), Some(co.size)),
                (false, Some(c)) => (Some(c), None),
                (false, None) => (None, None),
            };
            sources.push(Source::file(path, offset, length, what));
        }
        if let Some(t) = tool {
            let mut argv = vec![t.path.display().to_string()];
            argv.extend(t.args((vendor == Vendor::Amd).then_some(members[0].0.target.split(':').next().unwrap_or(""))));
            argv.push("<code object>".into());
            sources.push(Source::Command { argv, excerpt: format!("{} ({})", t.version, members[0].0.sha256) });
        }
        out.push(
            Claim::new(format!("scan.disasm.{target}.{family}.{}", file_name(path)), Confidence::Confirmed, statement)
                .with_sources(sources),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_matches_family_mangled_or_demangled_names() {
        let raw = "_ZL9mul_mat_qIL9ggml_type12ELi64ELb0EEvPKc";
        let demangled = "mul_mat_q<(ggml_type)12, 64, false>";
        assert!(wanted(None, raw, demangled, "MMQ"));
        assert!(wanted(Some("mmq"), raw, demangled, "MMQ"));
        assert!(wanted(Some("mul_mat_q"), raw, demangled, "MMQ"));
        assert!(wanted(Some("(ggml_type)12"), raw, demangled, "MMQ"));
        assert!(!wanted(Some("mul_mat_vec_q"), raw, demangled, "MMQ"));
    }
}
