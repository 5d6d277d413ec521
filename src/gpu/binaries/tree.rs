//! The install-tree view: which files are ggml backends, how each library's `DT_NEEDED` chain resolves
//! the way the dynamic loader would (without executing anything), and vendor BLAS / MIOpen data dirs.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use binfmt::elf::HostElf;

use super::limits::ScanLimits;
use super::records::*;
use crate::host::inputs as input;

/// ggml backends by the name their `ggml_backend_<x>_reg` registration function carries (ggml sources:
/// `ggml/src/ggml-<x>/`). The HIP and MUSA backends compile the CUDA sources, so they export the CUDA name.
const REG_SYMBOLS: &[(&str, &str)] = &[
    ("ggml_backend_cuda_reg", "cuda"),
    ("ggml_backend_vk_reg", "vulkan"),
    ("ggml_backend_cpu_reg", "cpu"),
    ("ggml_backend_metal_reg", "metal"),
    ("ggml_backend_sycl_reg", "sycl"),
    ("ggml_backend_opencl_reg", "opencl"),
    ("ggml_backend_cann_reg", "cann"),
    ("ggml_backend_blas_reg", "blas"),
    ("ggml_backend_rpc_reg", "rpc"),
];

/// Backend from the file name (`libggml-hip.so`, `libggml-cpu-haswell.so`, `libggml-vulkan-abc123.so`).
fn backend_from_name(file_name: &str) -> Option<String> {
    let rest = file_name.strip_prefix("libggml")?;
    if rest.starts_with(".so")
        || rest.starts_with('-')
            && rest[1..]
                .split(['-', '.'])
                .next()
                .is_some_and(|s| s.len() == 8 && s.chars().all(|c| c.is_ascii_hexdigit()))
    {
        // `libggml.so` or auditwheel's `libggml-<8 hex>.so`: the core library that loads backends.
        return Some("ggml".into());
    }
    let name = rest.strip_prefix('-')?.split(['.', '-']).next()?;
    let known = [
        "hip", "cuda", "vulkan", "cpu", "metal", "sycl", "opencl", "musa", "cann", "blas", "rpc", "base", "webgpu",
        "zdnn",
    ];
    known.contains(&name).then(|| if name == "base" { "ggml-base".to_string() } else { name.to_string() })
}

/// Whether the dynamic symbol table defines (exports) `name`: an entry of that name whose section index is not
/// SHN_UNDEF (ELF gABI, "Symbol Table"). ggml's core `libggml.so` *imports* `ggml_backend_vk_reg` and the other
/// backends it was linked with (ggml-backend-reg.cpp calls them), so the name in `.dynstr` alone says nothing.
/// Without a `.dynsym`, the name's presence is all there is to go on.
fn defines(elf: &HostElf<'_>, name: &[u8]) -> bool {
    let dynstr = elf.section(".dynstr").map(|s| s.data).unwrap_or_default();
    let Some(dynsym) = elf.section(".dynsym") else { return binfmt::read::find(dynstr, name, 0).is_some() };
    // Elf64_Sym: st_name u32, st_info, st_other, st_shndx u16 at 6; Elf32_Sym: st_shndx at 14.
    let (size, shndx_at) = if elf.is_64 { (24, 6) } else { (16, 14) };
    dynsym.data.chunks_exact(size).any(|sym| {
        let st_name = u32::from_le_bytes([sym[0], sym[1], sym[2], sym[3]]) as usize;
        let shndx = u16::from_le_bytes([sym[shndx_at], sym[shndx_at + 1]]);
        shndx != 0
            && dynstr.get(st_name..).is_some_and(|s| s.starts_with(name) && s.get(name.len()).is_none_or(|&b| b == 0))
    })
}

pub fn identify_backend(record: &FileRecord, elf: &HostElf<'_>) -> Option<Backend> {
    let by_name = backend_from_name(record.file_name());
    let dynstr = elf.section(".dynstr").map(|s| s.data).unwrap_or_default();
    let mut by_content: Option<(String, String)> = None;
    for (sym, backend) in REG_SYMBOLS {
        if binfmt::read::find(dynstr, sym.as_bytes(), 0).is_some() && defines(elf, sym.as_bytes()) {
            let (name, evidence) = match *backend {
                "cuda" if record.amdgpu.is_some() => ("hip", format!("exports {sym} and has a .hip_fatbin section")),
                "cuda" if record.cuda.is_some() => ("cuda", format!("exports {sym} and has a .nv_fatbin section")),
                other => (other, format!("exports {sym}")),
            };
            by_content = Some((name.to_string(), evidence));
            break;
        }
    }
    match (by_name, by_content) {
        (Some(n), Some((c, ev))) if n == c => {
            Some(Backend { name: n, by: BackendEvidence::NameAndContent, content_evidence: Some(ev) })
        }
        (_, Some((c, ev))) => Some(Backend { name: c, by: BackendEvidence::Content, content_evidence: Some(ev) }),
        (Some(n), None) => Some(Backend { name: n, by: BackendEvidence::Name, content_evidence: None }),
        (None, None) => None,
    }
}

/// The gfx arch named in a file name, e.g. `TensileLibrary_lazy_gfx906.dat` → `gfx906`,
/// `Kernels.so-000-gfx90a-xnack-.hsaco` → `gfx90a`, `gfx9-generic` kept whole.
pub fn arch_in_name(name: &str) -> Option<String> {
    let at = name.find("gfx")?;
    let rest = &name[at..];
    let len = rest[3..].bytes().take_while(|b| b.is_ascii_alphanumeric()).count() + 3;
    let mut arch = rest[..len].to_string();
    if arch.len() <= 3 {
        return None;
    }
    for generic in ["-generic", "-4-generic", "-1-generic", "-3-generic"] {
        if rest[len..].starts_with(generic) {
            arch.push_str(generic);
            break;
        }
    }
    Some(arch)
}

/// Directories named `library` under a `rocblas*` or `hipblaslt*` directory, with per-arch counts.
pub fn vendor_blas_dirs(files: &[PathBuf]) -> Vec<VendorBlasDir> {
    let mut dirs: BTreeMap<PathBuf, VendorBlasDir> = BTreeMap::new();
    for f in files {
        let Some(dir) = f.parent() else { continue };
        let library = dir.ancestors().skip(1).take(3).find_map(|a| {
            let n = a.file_name()?.to_str()?.to_ascii_lowercase();
            ["hipblaslt", "rocblas"].into_iter().find(|l| n.starts_with(l)).map(str::to_string)
        });
        let (Some(library), true) = (library, dir.file_name().is_some_and(|n| n == "library")) else { continue };
        let entry = dirs.entry(dir.to_path_buf()).or_insert_with(|| VendorBlasDir {
            path: dir.display().to_string(),
            library,
            files: 0,
            files_per_arch: BTreeMap::new(),
            code_objects_per_arch: BTreeMap::new(),
            fallback_per_arch: BTreeMap::new(),
        });
        entry.files += 1;
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(arch) = arch_in_name(name) {
            *entry.files_per_arch.entry(arch.clone()).or_default() += 1;
            if name.ends_with(".co") || name.ends_with(".hsaco") {
                *entry.code_objects_per_arch.entry(arch.clone()).or_default() += 1;
            }
            if name.contains("_fallback_") {
                *entry.fallback_per_arch.entry(arch).or_default() += 1;
            }
        }
    }
    dirs.into_values().collect()
}

/// MIOpen databases (`…/miopen/db/gfx906_60.HIP.fdb.txt`, `gfx90a68.kdb`): per file, arch and line count.
pub fn miopen_dbs(files: &[PathBuf], problems: &mut Vec<Problem>) -> Vec<MiopenDb> {
    let mut out = Vec::new();
    for f in files {
        let in_miopen = f
            .ancestors()
            .any(|a| a.file_name().is_some_and(|n| n.to_string_lossy().to_ascii_lowercase().starts_with("miopen")));
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !in_miopen
            || !(name.ends_with(".txt") || name.ends_with(".db") || name.ends_with(".kdb") || name.ends_with(".fdb"))
        {
            continue;
        }
        let Some(arch) = arch_in_name(name) else { continue };
        let size = fs::metadata(f).map(|m| m.len()).unwrap_or(0);
        let lines = if name.ends_with(".txt") {
            let failed = |why: String| Problem {
                path: f.display().to_string(),
                offset: None,
                severity: Severity::Warning,
                message: format!("cannot read MIOpen db: {why}"),
            };
            match input::open_regular(f) {
                Ok(Ok(file)) => Some(count_lines(file)),
                Ok(Err(kind)) => {
                    problems.push(failed(format!("not a regular file ({kind})")));
                    None
                }
                Err(e) => {
                    problems.push(failed(e.to_string()));
                    None
                }
            }
        } else {
            None
        };
        out.push(MiopenDb { path: f.display().to_string(), arch, size, lines });
    }
    out
}

fn count_lines(file: fs::File) -> u64 {
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut n = 0u64;
    loop {
        let buf = match reader.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(b) => b,
        };
        n += buf.iter().filter(|&&b| b == b'\n').count() as u64;
        let len = buf.len();
        reader.consume(len);
    }
    n
}

/// The system's library directories in ld.so's order after LD_LIBRARY_PATH and RUNPATH: ld.so.conf
/// (with its `include` globs), then the built-in defaults.
fn system_dirs() -> Vec<(PathBuf, &'static str)> {
    let mut dirs = Vec::new();
    let mut seen = HashSet::new();
    read_ld_so_conf(Path::new("/etc/ld.so.conf"), &mut dirs, &mut seen, 0);
    let mut out: Vec<(PathBuf, &'static str)> = dirs.into_iter().map(|d| (d, "ld.so.conf")).collect();
    for d in ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"] {
        out.push((PathBuf::from(d), "default"));
    }
    out
}

fn read_ld_so_conf(path: &Path, out: &mut Vec<PathBuf>, seen: &mut HashSet<PathBuf>, depth: u32) {
    if depth > 8 || !seen.insert(path.to_path_buf()) {
        return;
    }
    // Regular files only (a FIFO here would block), and no more than any real configuration needs.
    let Ok(Ok(file)) = input::open_regular(path) else { return };
    let mut text = String::new();
    if file.take(1 << 20).read_to_string(&mut text).is_err() {
        return;
    }
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include") {
            let pattern = pattern.trim();
            let (dir, file_glob) = match pattern.rsplit_once('/') {
                Some((d, g)) => (PathBuf::from(if d.is_empty() { "/" } else { d }), g.to_string()),
                None => (PathBuf::from("/etc"), pattern.to_string()),
            };
            let mut matches: Vec<PathBuf> = fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| glob_match(&file_glob, n)))
                .collect();
            matches.sort();
            for m in matches {
                read_ld_so_conf(&m, out, seen, depth + 1);
            }
        } else if line.starts_with('/') {
            out.push(PathBuf::from(line));
        }
    }
}

/// `*` and `?` wildcards, enough for ld.so.conf's `include /etc/ld.so.conf.d/*.conf`.
fn glob_match(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

/// What the loader needs from a library to continue the chain, shared by every name it needs (a
/// library with thousands of `DT_NEEDED` names and RPATH entries is read once, not copied per name).
#[derive(Debug, Default)]
struct LinkInfo {
    needed: Vec<String>,
    rpath: Vec<String>,
    runpath: Vec<String>,
}

/// The longest path the kernel opens (`PATH_MAX` of linux/limits.h, counting the terminating NUL): `open(2)`
/// fails with ENAMETOOLONG past it, and so does ld.so, so a longer candidate can never be a library.
const PATH_MAX: usize = 4096;

/// A library's RPATH and RUNPATH directories with `$ORIGIN` expanded, computed once and shared by every name
/// it needs.
#[derive(Debug, Default)]
struct SearchDirs {
    rpath: Vec<PathBuf>,
    runpath: Vec<PathBuf>,
    /// The library has a RUNPATH (even if every entry of it was skipped): ld.so then ignores its RPATH.
    has_runpath: bool,
}

/// A `DT_NEEDED` name waiting to be resolved.
struct Pending {
    name: String,
    /// The library that needs it.
    parent: Arc<Path>,
    /// Its RPATH and RUNPATH, expanded.
    dirs: Arc<SearchDirs>,
    depth: u32,
}

/// What one candidate path is, on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Candidate {
    /// An ELF file of this class and machine (ld.so skips other classes and machines and keeps searching).
    Elf(u8, u16),
    /// Absent, unreadable, or not an ELF file.
    Unusable,
    /// Something other than a regular file: never opened, since opening a FIFO or reading a terminal
    /// blocks.
    NotRegular(&'static str),
}

/// Looks candidate paths up on disk, remembering each answer for the whole scan and counting the lookups
/// and the bytes of the paths it keeps against the scan's budgets.
struct Prober {
    seen: HashMap<PathBuf, Candidate>,
    lookups: u64,
    budget: u64,
    bytes: u64,
    bytes_budget: u64,
}

/// Why the prober refused a lookup.
enum ProbeRefused {
    Lookups,
    Bytes,
}

impl Prober {
    fn probe(&mut self, path: &Path) -> Result<Candidate, ProbeRefused> {
        if let Some(&c) = self.seen.get(path) {
            return Ok(c);
        }
        if self.lookups >= self.budget {
            return Err(ProbeRefused::Lookups);
        }
        let len = path.as_os_str().len() as u64;
        if self.bytes + len > self.bytes_budget {
            return Err(ProbeRefused::Bytes);
        }
        self.lookups += 1;
        self.bytes += len;
        let c = match input::open_regular(path) {
            Ok(Ok(mut file)) => {
                let mut head = [0u8; 20];
                match file.read_exact(&mut head) {
                    Ok(()) if head[..4] == *b"\x7fELF" => {
                        Candidate::Elf(head[4], u16::from_le_bytes([head[18], head[19]]))
                    }
                    _ => Candidate::Unusable,
                }
            }
            Ok(Err(kind)) => Candidate::NotRegular(kind),
            Err(_) => Candidate::Unusable,
        };
        self.seen.insert(path.to_path_buf(), c);
        Ok(c)
    }
}

/// The length `entry` has once `$ORIGIN` and `${ORIGIN}` are replaced by `origin` (of `origin_len` bytes),
/// without building it.
fn expanded_len(entry: &str, origin_len: usize) -> usize {
    let braced = entry.matches("${ORIGIN}").count();
    let plain = entry.matches("$ORIGIN").count();
    entry.len() - braced * 9 - plain * 7 + (braced + plain) * origin_len
}

fn expand_origin(entry: &str, origin: &str) -> PathBuf {
    PathBuf::from(entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin))
}

/// Per-file budget on the bytes of paths built and examined ([`ScanLimits::dependency_path_bytes_per_file`]).
struct PathBytes {
    spent: u64,
    budget: u64,
}

impl PathBytes {
    /// Take `n` bytes; false (and nothing taken) when they do not fit.
    fn take(&mut self, n: usize) -> bool {
        if self.spent + n as u64 > self.budget {
            return false;
        }
        self.spent += n as u64;
        true
    }
}

/// Expand `library`'s RPATH and RUNPATH (`$ORIGIN` is the directory `library` was found in). An entry that would
/// expand past [`PATH_MAX`] can name no directory ld.so could open: it is skipped, with one warning per library
/// (`warned` remembers which were reported in this scan). `None` when the expansions would pass the file's byte
/// budget.
fn search_dirs(
    link: &LinkInfo,
    library: &Path,
    bytes: &mut PathBytes,
    warned: &mut HashSet<PathBuf>,
    problems: &mut Vec<Problem>,
) -> Option<SearchDirs> {
    let origin = library.parent().map(|p| p.display().to_string()).unwrap_or_default();
    let mut skipped: Vec<(&'static str, usize, usize)> = Vec::new();
    let mut expand = |list: &[String], what: &'static str| -> Option<Vec<PathBuf>> {
        let mut out = Vec::new();
        for (i, entry) in list.iter().enumerate() {
            let len = expanded_len(entry, origin.len());
            if len >= PATH_MAX {
                skipped.push((what, i, len));
                continue;
            }
            if !bytes.take(len) {
                return None;
            }
            out.push(expand_origin(entry, &origin));
        }
        Some(out)
    };
    let has_runpath = !link.runpath.is_empty();
    let rpath = if has_runpath { Vec::new() } else { expand(&link.rpath, "RPATH")? };
    let runpath = expand(&link.runpath, "RUNPATH")?;
    if let Some(&(what, i, len)) = skipped.first() {
        if warned.insert(library.to_path_buf()) {
            let more = match skipped.len() - 1 {
                0 => String::new(),
                n => format!(" (and {n} more of its RPATH/RUNPATH entries)"),
            };
            problems.push(Problem {
                path: library.display().to_string(),
                offset: None,
                severity: Severity::Warning,
                message: format!(
                    "{what} entry {} expands $ORIGIN (to {origin}) into a path of {len} bytes, longer than PATH_MAX \
                     ({PATH_MAX} bytes, the longest path open(2), and so ld.so, accepts): skipped as a search \
                     directory{more}",
                    i + 1
                ),
            });
        }
    }
    Some(SearchDirs { rpath, runpath, has_runpath })
}

/// Read a library's `DT_NEEDED`, RPATH and RUNPATH (through a guarded map: it may be rewritten while we read
/// it). An unreadable or changed library contributes nothing, with a warning for the change.
fn link_info(path: &Path, problems: &mut Vec<Problem>) -> LinkInfo {
    let Ok(mapped) = input::MappedFile::open(path) else { return LinkInfo::default() };
    let info = match HostElf::parse(mapped.bytes()) {
        Ok(e) => LinkInfo {
            needed: e.needed.iter().map(|s| s.to_string()).collect(),
            rpath: e.rpath.iter().map(|s| s.to_string()).collect(),
            runpath: e.runpath.iter().map(|s| s.to_string()).collect(),
        },
        Err(_) => LinkInfo::default(),
    };
    if let Some(at) = mapped.cut_at() {
        problems.push(Problem {
            path: path.display().to_string(),
            offset: Some(at),
            severity: Severity::Warning,
            message: "the library changed while it was read for dependency resolution; its own dependencies are \
                      left out"
                .into(),
        });
        return LinkInfo::default();
    }
    info
}

/// Resolve each ELF's `DT_NEEDED` chain (transitively, breadth-first) the way ld.so would: RPATH (when
/// there is no RUNPATH), LD_LIBRARY_PATH (`extra`), RUNPATH, ld.so.conf, default dirs; then, marked `tree`,
/// the directories of the scanned tree, which Ollama puts on `LD_LIBRARY_PATH` for its runners. Candidates
/// that are not regular files are skipped with a warning, never opened; candidates longer than `PATH_MAX`
/// are skipped. The work is bounded by `limits`' dependency budgets, in lookups and in bytes of paths; a file
/// that reaches one gets a warning and keeps what was resolved.
pub fn resolve_dependencies(
    files: &mut [FileRecord],
    extra: &[PathBuf],
    limits: &ScanLimits,
    problems: &mut Vec<Problem>,
) {
    let mut resolver = Resolver::new(files, extra, limits);
    for f in files.iter_mut() {
        resolver.resolve_file(f, problems);
    }
}

/// The scan-wide side of dependency resolution: where to look, the libraries parsed and paths probed so far
/// (shared across files), and the paths already warned about.
struct Resolver<'a> {
    extra: &'a [PathBuf],
    limits: &'a ScanLimits,
    system: Vec<(PathBuf, &'static str)>,
    tree_dirs: Vec<PathBuf>,
    cache: HashMap<PathBuf, Arc<LinkInfo>>,
    prober: Prober,
    not_regular_reported: HashSet<PathBuf>,
    too_long_reported: HashSet<PathBuf>,
}

/// One file's walk of its `DT_NEEDED` chain: its queue, what it resolved, its budgets, and why it stopped.
struct FileWalk {
    bytes: PathBytes,
    probes: u64,
    /// Names queued or resolved: each is looked up once per file, as ld.so loads each once.
    queued: HashSet<String>,
    queue: VecDeque<Pending>,
    out: Vec<Dependency>,
    stopped: Option<String>,
    left_out: usize,
}

impl<'a> Resolver<'a> {
    fn new(files: &[FileRecord], extra: &'a [PathBuf], limits: &'a ScanLimits) -> Self {
        let mut tree_dirs: Vec<PathBuf> =
            files.iter().filter_map(|f| Path::new(&f.path).parent().map(Path::to_path_buf)).collect();
        tree_dirs.sort();
        tree_dirs.dedup();
        Resolver {
            extra,
            limits,
            system: system_dirs(),
            tree_dirs,
            cache: HashMap::new(),
            prober: Prober {
                seen: HashMap::new(),
                lookups: 0,
                budget: limits.dependency_probes_per_scan,
                bytes: 0,
                bytes_budget: limits.dependency_path_bytes_per_scan,
            },
            not_regular_reported: HashSet::new(),
            too_long_reported: HashSet::new(),
        }
    }

    fn file_bytes_stop(&self) -> String {
        format!(
            "{} bytes of candidate paths and expanded search directories examined (limit per file)",
            self.limits.dependency_path_bytes_per_file
        )
    }

    /// Walk one file's chain breadth-first and record it in `f.dependencies`; a budget reached is a warning.
    fn resolve_file(&mut self, f: &mut FileRecord, problems: &mut Vec<Problem>) {
        let Some(elf) = &f.elf else { return };
        if elf.needed.is_empty() {
            return;
        }
        let identity = Candidate::Elf(if elf.class == 64 { 2 } else { 1 }, elf.machine);
        let me: Arc<Path> = Arc::from(Path::new(&f.path));
        let link = LinkInfo { needed: Vec::new(), rpath: elf.rpath.clone(), runpath: elf.runpath.clone() };
        let mut walk = FileWalk {
            bytes: PathBytes { spent: 0, budget: self.limits.dependency_path_bytes_per_file },
            probes: 0,
            queued: HashSet::new(),
            queue: VecDeque::new(),
            out: Vec::new(),
            stopped: None,
            left_out: elf.needed.len(),
        };
        let needed: Vec<&String> = elf.needed.iter().collect();
        if !self.enqueue(&mut walk, &link, &me, &needed, 1, problems) {
            walk.stopped = Some(self.file_bytes_stop());
        }
        while let Some(pending) = walk.queue.pop_front() {
            if pending.depth > 16 {
                continue;
            }
            if walk.out.len() as u64 >= self.limits.dependencies_per_file {
                walk.stopped = Some(format!(
                    "more than {} dependencies in the chain (limit per file)",
                    self.limits.dependencies_per_file
                ));
                break;
            }
            let found = match self.find(&mut walk, &pending, identity, problems) {
                Ok(found) => found,
                Err(why) => {
                    walk.stopped = Some(why);
                    walk.left_out = walk.queue.len() + 1;
                    break;
                }
            };
            self.record(&mut walk, pending, found, problems);
            if walk.stopped.is_some() {
                break;
            }
        }
        if let Some(why) = walk.stopped {
            problems.push(Problem {
                path: f.path.clone(),
                offset: None,
                severity: Severity::Warning,
                message: format!(
                    "dependency resolution stopped after {why}; {} of the DT_NEEDED names (chain included) are \
                     resolved, the other {} are left out",
                    walk.out.len(),
                    walk.left_out,
                ),
            });
        }
        f.dependencies = walk.out;
    }

    /// Queue the `names` not queued yet, to be looked for in the search directories of `link` (a library found at
    /// `from`); false when the file's byte budget ran out expanding those directories.
    fn enqueue(
        &mut self,
        walk: &mut FileWalk,
        link: &LinkInfo,
        from: &Arc<Path>,
        names: &[&String],
        depth: u32,
        problems: &mut Vec<Problem>,
    ) -> bool {
        let Some(dirs) = search_dirs(link, from, &mut walk.bytes, &mut self.too_long_reported, problems) else {
            return false;
        };
        let dirs = Arc::new(dirs);
        for name in names {
            if walk.queued.insert((*name).clone()) {
                walk.queue.push_back(Pending {
                    name: (*name).clone(),
                    parent: Arc::clone(from),
                    dirs: Arc::clone(&dirs),
                    depth,
                });
            }
        }
        true
    }

    /// Look one name up in ld.so's order; the path and how it was found, `None` when missing, or why a budget
    /// stopped the walk.
    fn find(
        &mut self,
        walk: &mut FileWalk,
        pending: &Pending,
        identity: Candidate,
        problems: &mut Vec<Problem>,
    ) -> Result<Option<(PathBuf, &'static str)>, String> {
        let (name, dirs, limits) = (&pending.name, &pending.dirs, self.limits);
        let is_path = name.contains('/');
        let search: Box<dyn Iterator<Item = (&Path, &'static str)>> = if is_path {
            Box::new(std::iter::once((Path::new(""), "path")))
        } else {
            let rpath = (!dirs.has_runpath).then_some(&dirs.rpath).into_iter().flatten();
            Box::new(
                rpath
                    .map(|d| (d.as_path(), "rpath"))
                    .chain(self.extra.iter().map(|d| (d.as_path(), "ld_library_path")))
                    .chain(dirs.runpath.iter().map(|d| (d.as_path(), "runpath")))
                    .chain(self.system.iter().map(|(d, via)| (d.as_path(), *via)))
                    .chain(self.tree_dirs.iter().map(|d| (d.as_path(), "tree"))),
            )
        };
        for (dir, via) in search {
            let len = if is_path { name.len() } else { dir.as_os_str().len() + 1 + name.len() };
            if len >= PATH_MAX {
                continue;
            }
            if walk.probes >= limits.dependency_probes_per_file {
                return Err(format!("{} candidate paths examined (limit per file)", limits.dependency_probes_per_file));
            }
            if !walk.bytes.take(len) {
                return Err(self.file_bytes_stop());
            }
            walk.probes += 1;
            let path = if is_path { PathBuf::from(name) } else { dir.join(name) };
            match self.prober.probe(&path) {
                Err(ProbeRefused::Lookups) => {
                    return Err(format!(
                        "{} paths looked up on disk in this scan (limit per scan)",
                        limits.dependency_probes_per_scan
                    ));
                }
                Err(ProbeRefused::Bytes) => {
                    return Err(format!(
                        "{} bytes of paths looked up on disk in this scan (limit per scan)",
                        limits.dependency_path_bytes_per_scan
                    ));
                }
                Ok(c) if c == identity => return Ok(Some((path, via))),
                Ok(Candidate::NotRegular(kind)) => {
                    if self.not_regular_reported.insert(path.clone()) {
                        problems.push(Problem {
                            path: path.display().to_string(),
                            offset: None,
                            severity: Severity::Warning,
                            message: format!(
                                "not a regular file ({kind}): skipped as a candidate for {name}, needed by {}",
                                pending.parent.display()
                            ),
                        });
                    }
                }
                Ok(_) => {}
            }
        }
        Ok(None)
    }

    /// Record one name's outcome; a library found queues the names it needs in turn.
    fn record(
        &mut self,
        walk: &mut FileWalk,
        pending: Pending,
        found: Option<(PathBuf, &'static str)>,
        problems: &mut Vec<Problem>,
    ) {
        let Pending { name, parent, depth, .. } = pending;
        let needed_by = parent.display().to_string();
        let Some((path, via)) = found else {
            walk.out.push(Dependency { name, needed_by, depth, resolved: None, via: "missing".into() });
            return;
        };
        let canonical = path.canonicalize().unwrap_or(path.clone());
        let info = Arc::clone(
            self.cache.entry(canonical.clone()).or_insert_with(|| Arc::new(link_info(&canonical, problems))),
        );
        let fresh: Vec<&String> = info.needed.iter().filter(|n| !walk.queued.contains(*n)).collect();
        if !fresh.is_empty() {
            let found_at: Arc<Path> = Arc::from(path.as_path());
            // The byte budget ran out: this library is recorded, nothing after it is probed.
            if !self.enqueue(walk, &info, &found_at, &fresh, depth + 1, problems) {
                walk.stopped = Some(self.file_bytes_stop());
                walk.left_out = walk.queue.len() + fresh.len();
            }
        }
        walk.out.push(Dependency {
            name,
            needed_by,
            depth,
            resolved: Some(path.display().to_string()),
            via: via.into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_expansion_length_is_computed_without_building_it() {
        for (entry, origin) in [("$ORIGIN/../lib", "/opt/x"), ("${ORIGIN}:$ORIGIN$ORIGIN", "/a"), ("/usr/lib", "/o")] {
            assert_eq!(expanded_len(entry, origin.len()), expand_origin(entry, origin).as_os_str().len(), "{entry}");
        }
        assert_eq!(expanded_len(&"$ORIGIN".repeat(500), 20), 10_000);
    }

    #[test]
    fn names() {
        assert_eq!(backend_from_name("libggml-hip-f822f971.so").as_deref(), Some("hip"));
        assert_eq!(backend_from_name("libggml-cpu-haswell.so").as_deref(), Some("cpu"));
        assert_eq!(backend_from_name("libggml-base-184f4db6.so.0.12.0").as_deref(), Some("ggml-base"));
        assert_eq!(backend_from_name("libggml-cee774fd.so.0.12.0").as_deref(), Some("ggml"));
        assert_eq!(backend_from_name("libggml.so").as_deref(), Some("ggml"));
        assert_eq!(backend_from_name("libllama.so"), None);
        assert_eq!(arch_in_name("TensileLibrary_lazy_gfx906.dat").as_deref(), Some("gfx906"));
        assert_eq!(arch_in_name("Kernels.so-000-gfx90a-xnack-.hsaco").as_deref(), Some("gfx90a"));
        assert_eq!(arch_in_name("x_gfx9-generic.co").as_deref(), Some("gfx9-generic"));
        assert_eq!(arch_in_name("gfx"), None);
        assert!(glob_match("*.conf", "x86_64-linux-gnu.conf"));
        assert!(!glob_match("*.conf", "x.conf.bak"));
    }
}
