//! `backscope trace -- CMD ARGS…`: run a command under the dispatch observer (`crates/observer`, loaded with
//! `LD_PRELOAD`), then read the trace files it and its children wrote and report which GPU kernels really ran,
//! classified into ggml families. `--env` prints what to set to observe a service instead, and `--read DIR`
//! summarises traces written that way.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::evidence::{Claim, Confidence, Source};
use crate::kernels;
use crate::render::table;
use crate::trace::{self, Range, TraceFile};

pub const OBSERVER_FILE: &str = "libbackscope_observer.so";

/// What `backscope trace` does: run a command under the observer, print the environment that observes a service
/// (`env`), or summarise traces already written (`read`).
#[derive(Debug, Clone, Default)]
pub struct TraceOptions {
    /// The observer library (default: $BACKSCOPE_OBSERVER_SO, else next to the backscope executable).
    pub observer: Option<PathBuf>,
    /// Directory for the trace files (default: a new directory under the system temp dir). Must be empty or new.
    pub dir: Option<PathBuf>,
    /// Length of a trace time window in milliseconds.
    pub interval_ms: u64,
    /// Turn ggml's CUDA graphs off in the traced command (GGML_CUDA_DISABLE_GRAPHS=1).
    pub no_graphs: bool,
    /// Print the environment lines that observe a service, then exit.
    pub env: bool,
    /// With `env`: print a systemd drop-in for this unit instead.
    pub systemd: Option<String>,
    /// Summarise the trace files already in this directory instead of running a command.
    pub read: Option<PathBuf>,
    /// Print the summary as JSON.
    pub json: bool,
    /// Rows of the per-kernel table (0 = all).
    pub top: usize,
    /// The command to run.
    pub command: Vec<String>,
}

/// One kernel as observed, merged across processes.
#[derive(Clone, Debug, Serialize)]
pub struct ObservedKernel {
    pub name: String,
    pub demangled: String,
    pub api: String,
    pub family: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ggml_type: Option<&'static str>,
    /// Launches: direct launch calls plus kernels run by replays of captured graphs (failed calls included).
    pub launches: u64,
    /// Of those, kernels run through graph replays.
    pub graph: u64,
    /// Of those, launch calls that returned an error (the kernel did not run).
    pub errors: u64,
    /// The most frequent (grid, block) shapes with their counts.
    pub shapes: Vec<([u32; 3], [u32; 3], u64)>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FamilyTotal {
    pub family: String,
    pub kernels: u64,
    pub launches: u64,
    pub graph: u64,
    pub errors: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TraceSummary {
    pub schema: &'static str,
    pub dir: String,
    pub processes: Vec<ProcessSummary>,
    pub families: Vec<FamilyTotal>,
    pub kernels: Vec<ObservedKernel>,
    pub claims: Vec<Claim>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessSummary {
    pub pid: u32,
    pub exe: String,
    pub file: String,
    pub launches: u64,
    pub graph_launches: u64,
    pub complete: bool,
    pub warnings: Vec<String>,
}

/// Find the observer library: explicit path, environment, or beside the running executable.
pub fn find_observer(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return p.canonicalize().with_context(|| format!("observer library {}", p.display()));
    }
    if let Some(p) = std::env::var_os("BACKSCOPE_OBSERVER_SO") {
        return PathBuf::from(&p)
            .canonicalize()
            .with_context(|| format!("BACKSCOPE_OBSERVER_SO={}", PathBuf::from(&p).display()));
    }
    let exe = std::env::current_exe().context("locating the backscope executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [
        dir.join(OBSERVER_FILE),
        dir.join("deps").join(OBSERVER_FILE),
        dir.join("../lib/backscope").join(OBSERVER_FILE),
    ] {
        if candidate.is_file() {
            return Ok(candidate.canonicalize()?);
        }
    }
    bail!(
        "cannot find {OBSERVER_FILE} next to {}; build it with `cargo build --release` (the workspace builds it) or pass --observer PATH",
        exe.display()
    )
}

pub fn run(args: TraceOptions) -> Result<u8> {
    if args.env {
        let observer = find_observer(args.observer.as_deref())?;
        let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from("/var/tmp/backscope-traces"));
        print!("{}", env_lines(&observer, &dir, args.systemd.as_deref(), args.interval_ms));
        return Ok(0);
    }
    let (dir, exit_status) = match &args.read {
        Some(dir) => (dir.clone(), None),
        None => {
            if args.command.is_empty() {
                bail!("nothing to trace: give a command after `--` (backscope trace -- llama-bench -m model.gguf), or --read DIR / --env");
            }
            let observer = find_observer(args.observer.as_deref())?;
            let dir = match &args.dir {
                Some(d) => {
                    std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                    if std::fs::read_dir(d)?.next().is_some() {
                        bail!("{} is not empty: trace files of an earlier run would mix with this one", d.display());
                    }
                    d.clone()
                }
                None => {
                    let stamp = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis())
                        .unwrap_or(0);
                    let d = std::env::temp_dir().join(format!("backscope-trace-{}-{stamp}", std::process::id()));
                    std::fs::create_dir_all(&d)?;
                    d
                }
            };
            let status = run_observed(&observer, &dir, &args)?;
            (dir, Some(status))
        }
    };
    let traces = trace::read_dir(&dir)?;
    let summary = summarise(&dir, &traces, exit_status);
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print!("{}", render(&summary, args.top));
    }
    // Exit with the traced command's status, so `backscope trace -- cmd` can stand in for `cmd` in scripts.
    Ok(match exit_status {
        Some(s) if (0..=255).contains(&s) => s as u8,
        Some(_) => 1,
        None => 0,
    })
}

/// Environment that loads the observer into a process (and, through inheritance, its children).
pub fn env_lines(observer: &Path, dir: &Path, systemd_unit: Option<&str>, interval_ms: u64) -> String {
    let vars = [
        ("LD_PRELOAD", observer.display().to_string()),
        ("BACKSCOPE_TRACE_DIR", dir.display().to_string()),
        ("BACKSCOPE_TRACE_INTERVAL_MS", interval_ms.to_string()),
    ];
    let mut out = String::new();
    match systemd_unit {
        Some(unit) => {
            let _ = writeln!(out, "# /etc/systemd/system/{unit}.d/backscope-trace.conf");
            let _ = writeln!(
                out,
                "# then: mkdir -p {0} && chown <service user> {0}; systemctl daemon-reload; systemctl restart {unit}",
                dir.display()
            );
            let _ = writeln!(
                out,
                "# runners the service starts inherit LD_PRELOAD; read the traces with: backscope trace --read {}",
                dir.display()
            );
            let _ = writeln!(out, "[Service]");
            for (k, v) in vars {
                let _ = writeln!(out, "Environment=\"{k}={v}\"");
            }
        }
        None => {
            let _ = writeln!(
                out,
                "# mkdir -p {0}; export these before starting the service; then: backscope trace --read {0}",
                dir.display()
            );
            for (k, v) in vars {
                let _ = writeln!(out, "export {k}={v}");
            }
        }
    }
    out
}

fn run_observed(observer: &Path, dir: &Path, args: &TraceOptions) -> Result<i32> {
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(existing) if !existing.is_empty() => format!("{}:{existing}", observer.display()),
        _ => observer.display().to_string(),
    };
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("LD_PRELOAD", preload)
        .env("BACKSCOPE_TRACE_DIR", dir)
        .env("BACKSCOPE_TRACE_INTERVAL_MS", args.interval_ms.to_string());
    if args.no_graphs {
        cmd.env("GGML_CUDA_DISABLE_GRAPHS", "1");
    }
    let status = cmd.status().with_context(|| format!("cannot run {}", args.command[0]))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Merge every process's kernels by name, classify them, and state what ran as claims.
pub fn summarise(dir: &Path, traces: &[TraceFile], exit_status: Option<i32>) -> TraceSummary {
    let mut processes = Vec::new();
    let mut all_stats = Vec::new();
    for t in traces {
        let stats = t.kernel_stats(Range::All);
        processes.push(ProcessSummary {
            pid: t.pid(),
            exe: t.header.exe.clone(),
            file: t.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            launches: t.total_launches(Range::All),
            graph_launches: t.graph_launches(Range::All),
            complete: t.is_complete(),
            warnings: t.warnings.iter().map(|w| format!("{}: {}", w.code, w.detail)).collect(),
        });
        all_stats.extend(stats);
    }
    let merged = trace::merge_by_name(all_stats);
    let mut kernels: Vec<ObservedKernel> = merged
        .into_values()
        .filter(|s| s.launches > 0 || s.errors > 0)
        .map(|s| {
            let d = kernels::describe(&s.name);
            ObservedKernel {
                demangled: d.demangled,
                family: d.family,
                ggml_type: d.ggml_type,
                api: s.api,
                launches: s.launches,
                graph: s.graph,
                errors: s.errors,
                shapes: s.shapes.iter().take(4).map(|(sh, n)| (sh.grid, sh.block, *n)).collect(),
                name: s.name,
            }
        })
        .collect();
    kernels.sort_by(|a, b| b.launches.cmp(&a.launches).then(a.name.cmp(&b.name)));
    let mut fam: BTreeMap<&str, FamilyTotal> = BTreeMap::new();
    for k in &kernels {
        let f =
            fam.entry(k.family).or_insert_with(|| FamilyTotal { family: k.family.to_string(), ..Default::default() });
        f.kernels += 1;
        f.launches += k.launches;
        f.graph += k.graph;
        f.errors += k.errors;
    }
    let mut families: Vec<FamilyTotal> = fam.into_values().collect();
    families.sort_by_key(|f| std::cmp::Reverse(f.launches));
    let claims = claims(dir, traces, &kernels, &families);
    TraceSummary {
        schema: "backscope.trace-summary/1",
        dir: dir.display().to_string(),
        processes,
        families,
        kernels,
        claims,
        exit_status,
    }
}

/// Kernel families that say which matrix-multiply path ggml took.
const MATMUL_FAMILIES: &[&str] = &["MMVQ", "MMQ", "MMVF", "MMF", "dequantize", "vendor-BLAS"];

fn claims(dir: &Path, traces: &[TraceFile], kernels: &[ObservedKernel], families: &[FamilyTotal]) -> Vec<Claim> {
    let sources: Vec<Source> = traces
        .iter()
        .filter_map(|t| t.path.as_ref())
        .take(8)
        .map(|p| Source::file(p.display().to_string(), None, None, "backscope-trace file (observed launches)"))
        .collect();
    let mut out = Vec::new();
    if traces.is_empty() {
        out.push(
            Claim::new(
                "trace.none",
                Confidence::Unresolved,
                format!("No trace file in {}: the command loaded no CUDA/HIP runtime, or the observer could not write (see its stderr line)", dir.display()),
            )
            .with_source(Source::file(dir.display().to_string(), None, None, "trace directory")),
        );
        return out;
    }
    let total: u64 = kernels.iter().map(|k| k.launches).sum();
    let failed: u64 = kernels.iter().map(|k| k.errors).sum();
    let failed_text =
        if failed > 0 { format!(" ({failed} of them failed: the runtime returned an error)") } else { String::new() };
    out.push(
        Claim::new(
            "trace.total",
            Confidence::Confirmed,
            format!(
                "{total} kernel launches of {} distinct kernels were observed in {} process(es){failed_text}",
                kernels.len(),
                traces.len()
            ),
        )
        .with_sources(sources.clone()),
    );
    let present: Vec<&FamilyTotal> = families.iter().filter(|f| MATMUL_FAMILIES.contains(&f.family.as_str())).collect();
    let absent: Vec<&str> =
        MATMUL_FAMILIES.iter().copied().filter(|m| !families.iter().any(|f| f.family == *m)).collect();
    for f in &present {
        let top: Vec<String> = kernels
            .iter()
            .filter(|k| k.family == f.family)
            .take(3)
            .map(|k| format!("{} {}", k.launches, short_name(&k.demangled)))
            .collect();
        out.push(
            Claim::new(
                format!("trace.family.{}", f.family),
                Confidence::Confirmed,
                format!(
                    "{} ran: {} launches of {} kernel(s) (top: {})",
                    f.family,
                    f.launches - f.errors,
                    f.kernels,
                    top.join("; ")
                ),
            )
            .with_sources(sources.clone()),
        );
    }
    if !present.is_empty() && !absent.is_empty() {
        out.push(
            Claim::new(
                "trace.absent",
                Confidence::Confirmed,
                format!("No {} kernel ran during the traced command", absent.join(", ")),
            )
            .with_sources(sources.clone()),
        );
    }
    let incomplete: Vec<&TraceFile> = traces.iter().filter(|t| !t.is_complete()).collect();
    if !incomplete.is_empty() {
        out.push(
            Claim::new(
                "trace.incomplete",
                Confidence::Limited,
                format!("{} process(es) ended without the observer's exit flush (killed or crashed): their last window may be missing", incomplete.len()),
            )
            .with_sources(incomplete.iter().filter_map(|t| t.path.as_ref()).map(|p| Source::file(p.display().to_string(), None, None, "trace file without end record"))),
        );
    }
    out
}

fn short_name(demangled: &str) -> String {
    let mut s: String = demangled.chars().take(70).collect();
    if demangled.chars().count() > 70 {
        s.push('…');
    }
    s
}

pub fn render(s: &TraceSummary, top: usize) -> String {
    let mut out = String::new();
    let mut t = table(&["family", "kernels", "launches", "via graph replay", "failed"]);
    for f in &s.families {
        t.add_row(vec![
            f.family.clone(),
            f.kernels.to_string(),
            f.launches.to_string(),
            f.graph.to_string(),
            f.errors.to_string(),
        ]);
    }
    let _ = writeln!(out, "Kernel families\n{t}\n");
    let mut t = table(&["kernel", "family", "type", "launches", "graph", "failed", "top shape (grid / block)"]);
    let n = if top == 0 { s.kernels.len() } else { top.min(s.kernels.len()) };
    for k in &s.kernels[..n] {
        let shape = k.shapes.first().map(|(g, b, c)| format!("{g:?} / {b:?} ×{c}")).unwrap_or_default();
        t.add_row(vec![
            short_name(&k.demangled),
            k.family.to_string(),
            k.ggml_type.unwrap_or("-").to_string(),
            k.launches.to_string(),
            k.graph.to_string(),
            k.errors.to_string(),
            shape,
        ]);
    }
    let _ = writeln!(out, "Kernels ({} of {})\n{t}\n", n, s.kernels.len());
    let _ = writeln!(out, "Processes");
    for p in &s.processes {
        let _ = writeln!(
            out,
            "  pid {} {} — {} kernel launches, {} graph launches{} ({})",
            p.pid,
            p.exe,
            p.launches,
            p.graph_launches,
            if p.complete { "" } else { ", no exit record" },
            p.file
        );
        for w in &p.warnings {
            let _ = writeln!(out, "    warning: {w}");
        }
    }
    let _ = writeln!(out, "\nClaims");
    crate::render::claims(&mut out, &s.claims);
    if let Some(code) = s.exit_status {
        let _ = writeln!(out, "\ntraced command exited with status {code}; traces in {}", s.dir);
    }
    out
}
