//! `backscope maps`: which shared objects running processes (and their children: Ollama runs inference in a child
//! runner) have mapped, classified (ggml, HIP/CUDA runtimes, vendor BLAS, Vulkan loader, ICDs and layers,
//! backscope's observer), each resolved to the scan's view of it (SONAME, ggml backend, GPU targets present and
//! what runs on the GPUs found). Read from `/proc`, no ptrace and no root for one's own processes.
//!
//! A mapping proves a library is loaded, nothing more: every claim says "loaded — not evidence of dispatch"
//! (`backscope trace` observes dispatch).

mod proc;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::evidence::{Claim, Confidence, Source};
use crate::exit;
use crate::gpu::arch::DeviceArch;
use crate::gpu::binaries::coverage::answer;
use crate::gpu::binaries::{gpu, FileRecord};
use crate::output::{Block, Collapse, Column, Document, Output, OutputOptions, Render, Table, Text};

pub const SCHEMA: &str = "backscope.maps/1";

/// One `backscope maps` invocation.
#[derive(Clone, Debug, Default)]
pub struct MapsOptions {
    pub pids: Vec<u32>,
    /// Processes whose `comm`, executable or first argument is this name.
    pub names: Vec<String>,
    /// Re-read until every watched process has exited (or Ctrl-C), keeping everything ever mapped.
    pub watch: bool,
    pub interval: Duration,
    /// GPUs to answer for, besides the AMD GPUs found in the KFD topology.
    pub archs: Vec<String>,
    /// Format (JSON: schema backscope.maps/1) and destination.
    pub output: OutputOptions,
}

/// What a library is, by its file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LibraryClass {
    Ggml,
    HipRuntime,
    CudaRuntime,
    VendorBlas,
    VulkanLoader,
    VulkanIcd,
    VulkanLayer,
    Observer,
    /// The process's own executable (it may carry GPU code: a HIP or CUDA program's fatbin).
    Executable,
    Other,
}

impl LibraryClass {
    pub fn as_str(self) -> &'static str {
        match self {
            LibraryClass::Ggml => "ggml",
            LibraryClass::HipRuntime => "hip-runtime",
            LibraryClass::CudaRuntime => "cuda-runtime",
            LibraryClass::VendorBlas => "vendor-blas",
            LibraryClass::VulkanLoader => "vulkan-loader",
            LibraryClass::VulkanIcd => "vulkan-icd",
            LibraryClass::VulkanLayer => "vulkan-layer",
            LibraryClass::Observer => "observer",
            LibraryClass::Executable => "executable",
            LibraryClass::Other => "other",
        }
    }
}

/// File-name stems (the name up to `.so`) of each class. Sources: the libraries ROCm 6 and CUDA 12/13 install
/// (`/opt/rocm/lib`, the CUDA toolkit's `lib64`, the nvidia-* PyPI wheels), Mesa's Vulkan drivers
/// (`/usr/share/vulkan/icd.d/*.json` name `libvulkan_<driver>.so`), the Khronos loader's layer naming
/// (`libVkLayer_*`), NVIDIA's Vulkan ICD `libGLX_nvidia.so.0` (its `nvidia_icd.json`), AMDVLK's `amdvlk64.so`.
const CLASSES: &[(LibraryClass, &[&str], &[&str])] = &[
    // (class, exact stems, stem prefixes)
    (LibraryClass::Observer, &["libbackscope_observer", "libbackscope_vklayer"], &[]),
    (LibraryClass::Ggml, &["libllama", "libmtmd"], &["libggml", "libllama-"]),
    (
        LibraryClass::HipRuntime,
        &[
            "libamdhip64",
            "libhsa-runtime64",
            "libhsakmt",
            "libamd_comgr",
            "libhiprtc",
            "librocprofiler-register",
            "libroctx64",
            "libroctracer64",
        ],
        &["libhiprtc-builtins"],
    ),
    (
        LibraryClass::CudaRuntime,
        &["libcudart", "libcuda", "libnvrtc", "libnvidia-ptxjitcompiler", "libnvJitLink", "libcupti", "libnvidia-nvvm"],
        &["libnvrtc-builtins"],
    ),
    (
        LibraryClass::VendorBlas,
        &[
            "librocblas",
            "libhipblas",
            "libhipblaslt",
            "librocsolver",
            "libhipsolver",
            "libMIOpen",
            "librocsparse",
            "libhipsparse",
            "librocfft",
            "libhipfft",
            "libcublas",
            "libcublasLt",
            "libcusparse",
            "libcufft",
            "libcusolver",
        ],
        &["libcudnn"],
    ),
    (LibraryClass::VulkanLoader, &["libvulkan"], &[]),
    (LibraryClass::VulkanIcd, &["libGLX_nvidia", "amdvlk64"], &["libvulkan_"]),
    (LibraryClass::VulkanLayer, &[], &["libVkLayer_"]),
];

/// A library's class from its file name.
pub fn classify(path: &str) -> LibraryClass {
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = name.split(".so").next().unwrap_or(name);
    for (class, exact, prefixes) in CLASSES {
        if exact.contains(&stem) || prefixes.iter().any(|p| stem.starts_with(p)) {
            return *class;
        }
    }
    LibraryClass::Other
}

/// The version in a file name: `libamdhip64.so.6.3.60303` → `6.3.60303`.
fn version_of(path: &str) -> Option<String> {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.split_once(".so.").map(|(_, v)| v.to_string()).filter(|v| !v.is_empty())
}

#[derive(Clone, Debug, Serialize)]
pub struct MapsReport {
    pub schema: &'static str,
    /// The GPUs answered for, each with where it came from.
    pub gpus: Vec<GpuSeen>,
    pub processes: Vec<ProcessRecord>,
    pub libraries: Vec<LibraryRecord>,
    pub claims: Vec<Claim>,
    pub problems: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchStats>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GpuSeen {
    pub arch: String,
    /// `--arch`, or the KFD node file it was read from.
    pub from: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct WatchStats {
    pub snapshots: u64,
    pub seconds: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessRecord {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    pub cmdline: String,
    /// The watched process this one descends from (itself for a watched process).
    pub root: u32,
    /// Shared objects mapped, by path.
    pub libraries: Vec<MappedLibrary>,
    /// Seconds from the start of `maps` when first and last read (differ under `--watch`).
    pub first_seen_s: f64,
    pub last_seen_s: f64,
    /// Gone by the end of a `--watch`.
    pub exited: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct MappedLibrary {
    pub path: String,
    /// 1-based line of `/proc/PID/maps` with its first mapping.
    pub line: u64,
    pub text: String,
    pub deleted: bool,
}

/// A mapped shared object and the scan's view of it.
#[derive(Clone, Debug, Serialize)]
pub struct LibraryRecord {
    pub path: String,
    pub class: LibraryClass,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The ggml backend the scan identified (`hip`, `vulkan`, `cpu`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// GPU targets it carries code for (`gfx90a`, `sm_75`, `compute_75`).
    pub targets: Vec<String>,
    /// Per GPU found: the scan's verdict (`ggml-kernels`, `nothing`, …) and note.
    pub on_gpus: Vec<OnGpu>,
    pub mapped_by: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scan_error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct OnGpu {
    pub arch: String,
    pub verdict: &'static str,
    pub note: String,
}

/// AMD GPUs in the KFD topology: `gfx_target_version` is major·10000 + minor·100 + stepping (the KFD driver's
/// encoding; 90010 is gfx90a), 0 for CPU nodes.
fn kfd_gpus() -> Vec<GpuSeen> {
    let mut out = Vec::new();
    let Ok(nodes) = std::fs::read_dir("/sys/class/kfd/kfd/topology/nodes") else { return out };
    for node in nodes.flatten() {
        let file = node.path().join("properties");
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let Some(v) =
            text.lines().find_map(|l| l.strip_prefix("gfx_target_version ")).and_then(|v| v.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(arch) = crate::gpu::knowledge::archs::gfx_target_of(u64::from(v)) {
            if !out.iter().any(|g: &GpuSeen| g.arch == arch) {
                out.push(GpuSeen { arch, from: file.display().to_string() });
            }
        }
    }
    out
}

/// State kept across snapshots.
struct Watched {
    started: Instant,
    processes: BTreeMap<u32, ProcessRecord>,
    snapshots: u64,
    problems: Vec<String>,
}

impl Watched {
    /// Read every watched process and its descendants once. Returns the roots that are alive.
    fn snapshot(&mut self, opts: &MapsOptions, progress: &mut dyn FnMut(String)) -> Vec<u32> {
        let now = self.started.elapsed().as_secs_f64();
        let all = proc::all();
        let mut roots: Vec<u32> = opts.pids.iter().copied().filter(|p| all.iter().any(|q| q.pid == *p)).collect();
        for name in &opts.names {
            roots.extend(all.iter().filter(|p| proc::is_named(p, name) && p.pid != std::process::id()).map(|p| p.pid));
        }
        roots.sort_unstable();
        roots.dedup();
        // A named process's descendants that are themselves named are roots in their own right; keep the first root.
        let mut root_of: BTreeMap<u32, u32> = BTreeMap::new();
        for r in &roots {
            for pid in proc::with_descendants(&[*r], &all) {
                root_of.entry(pid).or_insert(*r);
            }
        }
        self.snapshots += 1;
        for (pid, root) in root_of {
            let Some(info) = all.iter().find(|p| p.pid == pid) else { continue };
            let maps = match proc::maps(pid) {
                Ok(m) => m,
                Err(proc::ProcError::Gone { .. }) => continue,
                Err(e) => {
                    let msg = e.to_string();
                    if !self.problems.contains(&msg) {
                        self.problems.push(msg);
                    }
                    continue;
                }
            };
            let record = self.processes.entry(pid).or_insert_with(|| {
                progress(format!("pid {pid} ({}): reading its mappings", info.comm));
                ProcessRecord {
                    pid,
                    ppid: info.ppid,
                    comm: info.comm.clone(),
                    exe: info.exe.as_ref().map(|e| e.display().to_string()),
                    cmdline: info.cmdline.clone(),
                    root,
                    libraries: Vec::new(),
                    first_seen_s: now,
                    last_seen_s: now,
                    exited: false,
                }
            });
            record.last_seen_s = now;
            let exe = info.exe.as_ref().map(|e| e.display().to_string());
            for m in maps.iter().filter(|m| proc::is_shared_object(&m.path) || exe.as_deref() == Some(m.path.as_str()))
            {
                if record.libraries.iter().any(|l| l.path == m.path) {
                    continue;
                }
                if self.snapshots > 1 {
                    progress(format!("pid {pid} ({}): + {} ({})", record.comm, m.path, classify(&m.path).as_str()));
                }
                record.libraries.push(MappedLibrary {
                    path: m.path.clone(),
                    line: m.line,
                    text: format!("{:x}-{:x} {} {:08x} {} {}", m.start, m.end, m.perms, m.offset, m.inode, m.path),
                    deleted: m.deleted,
                });
            }
        }
        roots
    }
}

/// Run `maps`: returns the exit status.
pub fn run(opts: &MapsOptions) -> Result<u8> {
    if opts.pids.is_empty() && opts.names.is_empty() {
        bail!("name the processes: backscope maps PID… or --name NAME (e.g. --name ollama, --name llama-server)");
    }
    // A named PID that does not exist is an error at once, with or without --watch.
    for pid in &opts.pids {
        proc::live(*pid)?;
        proc::maps(*pid)?;
    }
    // Processes are the input: what they map is read through /proc, where no -o file can be.
    let mut out = Output::open(&opts.output, &crate::output::Inputs::none())?;
    let mut watched =
        Watched { started: Instant::now(), processes: BTreeMap::new(), snapshots: 0, problems: Vec::new() };
    let mut progress = |line: String| {
        if opts.watch {
            crate::output::messages::line(format_args!("maps: {line}"));
        }
    };
    let roots = watched.snapshot(opts, &mut progress);
    if roots.is_empty() {
        bail!("no running process is named {}", opts.names.join(" or "));
    }
    if watched.processes.is_empty() {
        bail!("{}", watched.problems.first().cloned().unwrap_or_else(|| "no process could be read".into()));
    }
    if opts.watch {
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, Arc::clone(&stop)).context("cannot install a signal handler")?;
        }
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(opts.interval);
            if watched.snapshot(opts, &mut progress).is_empty() {
                break;
            }
        }
        let alive: BTreeSet<u32> = proc::all().iter().map(|p| p.pid).collect();
        for p in watched.processes.values_mut() {
            p.exited = !alive.contains(&p.pid);
        }
    }
    let report = report(watched, opts);
    out.emit(&report)?;
    out.finish()?;
    Ok(if report.problems.is_empty() { exit::OK } else { exit::PROBLEMS })
}

fn report(watched: Watched, opts: &MapsOptions) -> MapsReport {
    let mut gpus: Vec<GpuSeen> =
        opts.archs.iter().map(|a| GpuSeen { arch: a.clone(), from: "--arch".into() }).collect();
    for g in kfd_gpus() {
        if !gpus.iter().any(|x| x.arch == g.arch) {
            gpus.push(g);
        }
    }
    let archs: Vec<DeviceArch> = gpus.iter().map(|g| DeviceArch::parse(&g.arch)).collect();
    let mut by_path: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut executables: BTreeSet<String> = BTreeSet::new();
    for p in watched.processes.values() {
        executables.extend(p.exe.clone());
        for l in &p.libraries {
            by_path.entry(l.path.clone()).or_default().push(p.pid);
        }
    }
    let libraries: Vec<LibraryRecord> = {
        use rayon::prelude::*;
        let paths: Vec<(String, Vec<u32>)> = by_path.into_iter().collect();
        paths
            .into_par_iter()
            .map(|(path, pids)| {
                let mut rec = library(&path, pids, &archs);
                if executables.contains(&path) {
                    rec.class = LibraryClass::Executable;
                }
                rec
            })
            .collect()
    };
    let processes: Vec<ProcessRecord> = watched.processes.into_values().collect();
    let claims = claims(&processes, &libraries);
    MapsReport {
        schema: SCHEMA,
        gpus,
        processes,
        libraries,
        claims,
        problems: watched.problems,
        watch: opts
            .watch
            .then(|| WatchStats { snapshots: watched.snapshots, seconds: watched.started.elapsed().as_secs_f64() }),
    }
}

/// The scan's view of one mapped library: SONAME, backend, targets and what runs on each GPU.
fn library(path: &str, mapped_by: Vec<u32>, archs: &[DeviceArch]) -> LibraryRecord {
    let class = classify(path);
    let mut rec = LibraryRecord {
        path: path.to_string(),
        class,
        soname: None,
        version: version_of(path),
        backend: None,
        targets: Vec::new(),
        on_gpus: Vec::new(),
        mapped_by,
        scan_error: None,
    };
    let (file, problems): (Option<FileRecord>, _) =
        gpu::scan_file(Path::new(path), false, &crate::gpu::binaries::limits::ScanLimits::default());
    if let Some(p) = problems.first() {
        rec.scan_error = Some(p.message.clone());
    }
    let Some(file) = file else { return rec };
    rec.soname = file.elf.as_ref().and_then(|e| e.soname.clone());
    rec.backend = file.backend.as_ref().map(|b| b.name.clone());
    let mut targets = BTreeSet::new();
    for co in file.amdgpu.iter().flat_map(|a| &a.code_objects) {
        targets.insert(co.target.clone());
    }
    for e in file.cuda.iter().flat_map(|c| &c.entries) {
        targets.insert(e.target.clone());
    }
    rec.targets = targets.into_iter().collect();
    if file.has_gpu_code() {
        let files = [file];
        for arch in archs {
            for l in answer(arch, &files, &[]).libraries {
                rec.on_gpus.push(OnGpu { arch: arch.label(), verdict: l.verdict, note: l.note });
            }
        }
    }
    rec
}

const NOT_DISPATCH: &str = "loaded — not evidence of dispatch";

fn claims(processes: &[ProcessRecord], libraries: &[LibraryRecord]) -> Vec<Claim> {
    let lib_of: BTreeMap<&str, &LibraryRecord> = libraries.iter().map(|l| (l.path.as_str(), l)).collect();
    let mut out = Vec::new();
    for p in processes {
        let mut per_class: BTreeMap<LibraryClass, u64> = BTreeMap::new();
        for l in &p.libraries {
            let class = lib_of.get(l.path.as_str()).map_or_else(|| classify(&l.path), |r| r.class);
            *per_class.entry(class).or_default() += 1;
        }
        let counts: Vec<String> = per_class.iter().map(|(c, n)| format!("{} {n}", c.as_str())).collect();
        let maps_file = format!("/proc/{}/maps", p.pid);
        out.push(
            Claim::new(
                format!("maps.{}.summary", p.pid),
                Confidence::Confirmed,
                format!(
                    "{} (pid {}) has {} executable files mapped ({}): {NOT_DISPATCH}",
                    p.comm,
                    p.pid,
                    p.libraries.len(),
                    counts.join(", ")
                ),
            )
            .with_source(Source::file(maps_file.clone(), None, None, "memory mappings read from /proc")),
        );
        for m in &p.libraries {
            let Some(lib) = lib_of.get(m.path.as_str()) else { continue };
            if lib.class == LibraryClass::Other || (lib.class == LibraryClass::Executable && lib.targets.is_empty()) {
                continue;
            }
            let name = m.path.rsplit('/').next().unwrap_or(&m.path);
            let mut what = lib.class.as_str().to_string();
            if let Some(b) = &lib.backend {
                what.push_str(&format!(", ggml `{b}` backend"));
            }
            if let Some(s) = &lib.soname {
                what.push_str(&format!(", SONAME {s}"));
            }
            let mut statement = format!("{} (pid {}) has {name} mapped ({what})", p.comm, p.pid);
            if !lib.targets.is_empty() {
                statement.push_str(&format!("; it carries GPU code for {}", lib.targets.join(", ")));
            }
            for g in &lib.on_gpus {
                statement.push_str(&format!("; on {}: {} ({})", g.arch, g.verdict, g.note));
            }
            if lib.class == LibraryClass::Observer {
                statement.push_str(if name.starts_with("libbackscope_vklayer") {
                    "; backscope's Vulkan layer is recording this process's dispatches"
                } else {
                    "; the backscope observer is recording this process's launches"
                });
            }
            statement.push_str(&format!(": {NOT_DISPATCH}"));
            out.push(
                Claim::new(format!("maps.{}.{name}", p.pid), Confidence::Confirmed, statement)
                    .with_source(Source::LogLine { path: maps_file.clone(), line: m.line, text: m.text.clone() }),
            );
        }
    }
    out
}

/// Rows of a process's library table terminal output shows (`--all`: every row); the GPU-related classes sort
/// first, `other` last.
const LIBRARY_ROWS: usize = 30;

impl Render for MapsReport {
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        document(self)
    }
}

/// The report as a document: each process's summary claim first (what it has mapped), the GPUs answered for,
/// a table of each process's libraries, then the claim for each GPU-related library.
fn document(r: &MapsReport) -> Document {
    let pids: Vec<String> = r.processes.iter().filter(|p| p.root == p.pid).map(|p| p.pid.to_string()).collect();
    let mut doc = Document::new(format!("backscope maps {}", pids.join(" ")));
    let lib_of: BTreeMap<&str, &LibraryRecord> = r.libraries.iter().map(|l| (l.path.as_str(), l)).collect();
    let (summaries, interesting): (Vec<Claim>, Vec<Claim>) =
        r.claims.iter().cloned().partition(|c| c.id.ends_with(".summary"));
    doc.claims(&summaries);
    if !r.gpus.is_empty() {
        let g: Vec<String> = r.gpus.iter().map(|g| format!("{} (from {})", g.arch, g.from)).collect();
        doc.paragraph(format!("GPUs answered for: {}", g.join(", ")));
    }
    for p in &r.processes {
        let parent = if p.root == p.pid { String::new() } else { format!(", child of {} under {}", p.ppid, p.root) };
        let exited = if p.exited { ", exited" } else { "" };
        doc.heading(
            2,
            format!(
                "pid {} {} ({}{parent}{exited}): {} executable files mapped (shared objects and the program)",
                p.pid,
                p.comm,
                p.exe.as_deref().unwrap_or("executable not readable"),
                p.libraries.len()
            ),
        );
        let mut t = Table::new(vec![
            Column::label("library"),
            Column::keep("class"),
            Column::label("SONAME"),
            Column::keep("version"),
            Column::text("GPU code"),
        ])
        .collapse(Collapse::Head(LIBRARY_ROWS));
        let mut rows: Vec<(&LibraryRecord, &MappedLibrary)> =
            p.libraries.iter().filter_map(|m| lib_of.get(m.path.as_str()).map(|l| (*l, m))).collect();
        rows.sort_by_key(|(l, m)| (l.class, m.path.clone()));
        for (l, m) in rows {
            let mut gpu = l.targets.join(" ");
            for g in &l.on_gpus {
                gpu.push_str(&format!("; {}: {}", g.arch, g.verdict));
            }
            let class = match &l.backend {
                Some(b) => format!("{} ({b})", l.class.as_str()),
                None => l.class.as_str().to_string(),
            };
            t.row([
                format!("{}{}", m.path, if m.deleted { " (deleted)" } else { "" }),
                class,
                l.soname.clone().unwrap_or_else(|| "-".into()),
                l.version.clone().unwrap_or_else(|| "-".into()),
                gpu,
            ]);
        }
        doc.push(t);
    }
    doc.heading(
        2,
        "Claims (a mapped library is loaded — not evidence of dispatch; `backscope trace` observes dispatch)",
    );
    doc.claims(&interesting);
    if !r.problems.is_empty() {
        doc.heading(2, format!("Problems ({})", r.problems.len()));
        doc.push(Block::List(r.problems.iter().map(|p| Text::plain(p.as_str())).collect()));
    }
    if let Some(w) = &r.watch {
        doc.paragraph(format!("watched for {:.1} s ({} snapshots)", w.seconds, w.snapshots));
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_classes_by_file_name() {
        for (path, class) in [
            ("/opt/x/libggml-vulkan.so", LibraryClass::Ggml),
            ("/usr/lib/ollama/libggml-hip.so", LibraryClass::Ggml),
            ("/opt/x/libllama.so.0", LibraryClass::Ggml),
            ("/opt/rocm/lib/libamdhip64.so.6.3.60303", LibraryClass::HipRuntime),
            ("/opt/rocm/lib/libhsa-runtime64.so.1", LibraryClass::HipRuntime),
            ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", LibraryClass::CudaRuntime),
            ("/usr/local/cuda/lib64/libcudart.so.12", LibraryClass::CudaRuntime),
            ("/opt/rocm/lib/libhipblaslt.so.0", LibraryClass::VendorBlas),
            ("/usr/lib/libcublasLt.so.12", LibraryClass::VendorBlas),
            ("/usr/lib/x86_64-linux-gnu/libvulkan.so.1.3.239", LibraryClass::VulkanLoader),
            ("/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so", LibraryClass::VulkanIcd),
            ("/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.0", LibraryClass::VulkanIcd),
            ("/usr/lib/x86_64-linux-gnu/libVkLayer_MESA_device_select.so", LibraryClass::VulkanLayer),
            ("/x/libbackscope_observer.so", LibraryClass::Observer),
            ("/x/libbackscope_vklayer.so", LibraryClass::Observer),
            ("/usr/lib/x86_64-linux-gnu/libc.so.6", LibraryClass::Other),
            ("/usr/lib/x86_64-linux-gnu/libcudax.so", LibraryClass::Other),
        ] {
            assert_eq!(classify(path), class, "{path}");
        }
        assert_eq!(version_of("/opt/rocm/lib/libamdhip64.so.6.3.60303").as_deref(), Some("6.3.60303"));
        assert_eq!(version_of("/x/libggml.so"), None);
    }

    #[test]
    fn kfd_versions_name_the_gfx_target() {
        // The KFD encoding (major*10000 + minor*100 + stepping) of targets whose names are known.
        assert_eq!(crate::gpu::knowledge::archs::gfx_target_of(90000).as_deref(), Some("gfx900"));
        assert_eq!(crate::gpu::knowledge::archs::gfx_target_of(90006).as_deref(), Some("gfx906"));
        assert_eq!(crate::gpu::knowledge::archs::gfx_target_of(90010).as_deref(), Some("gfx90a"));
        assert_eq!(crate::gpu::knowledge::archs::gfx_target_of(90402).as_deref(), Some("gfx942"));
        assert_eq!(crate::gpu::knowledge::archs::gfx_target_of(110000).as_deref(), Some("gfx1100"));
        assert_eq!(crate::gpu::knowledge::archs::gfx_target_of(120001).as_deref(), Some("gfx1201"));
        assert_eq!(crate::gpu::knowledge::archs::gfx_target_of(0), None);
    }
}
