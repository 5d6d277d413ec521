//! The claims a summary supports: what ran and how much, the families of each matmul, Vulkan pipelines and their
//! order, cut and rotated traces, and what could not be read.

use std::path::{Path, PathBuf};

use super::crashes::{kernel_failures, CrashSummary, DeviceLostSummary, HangSummary};
use super::files::TraceProblem;
use super::kernels::{short_name, DeviceSummary, FamilyTotal, ObservedKernel};
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::kernels;
use crate::observe::vulkan::{self, ShaderIndex};
use crate::trace::TraceFile;

/// The kernel's side: a claim per incident of the kept GPU-driver lines (`trace.kernel`, `trace.kernel.N`), joined
/// to the traced process it names and that process's failure record, whose claim then names it; and the capture's
/// limits (`trace.kernel_log`, Limited).
pub(super) fn kernel_claims(
    log: &crate::observe::kernel_log::stored::KernelLog,
    traces: &[TraceFile],
    (crashes, device_lost, hangs): (&[CrashSummary], &[DeviceLostSummary], &[HangSummary]),
    claims: &mut Vec<Claim>,
) {
    use crate::observe::kernel_log::join;
    let failures = kernel_failures(crashes, device_lost, hangs);
    let traced: Vec<(u32, String)> = traces.iter().map(|t| (t.pid(), t.header.exe.clone())).collect();
    // The last window with work of a process that began before an instant: where its last launch or submission was.
    let last_work = |pid: u32, t_ns: u64| {
        traces
            .iter()
            .filter(|t| t.pid() == pid)
            .flat_map(|t| t.windows.iter())
            .filter(|w| w.t0 <= t_ns && !w.counts.is_empty())
            .max_by_key(|w| w.t0)
            .map(|w| [w.t0, w.t1])
    };
    let joined = join::join(&log.lines, &traced, &failures);
    for (i, j) in joined.iter().enumerate() {
        let id = if joined.len() == 1 { "trace.kernel".to_string() } else { format!("trace.kernel.{}", i + 1) };
        let mut claim = j.claim(id.clone(), &failures, &last_work);
        if let Some(how) = &log.read_after {
            claim.statement.push_str(&format!(" (the kernel's lines {how})"));
        }
        claims.push(claim);
        for (k, f) in failures.iter().enumerate() {
            let Some((note, sources)) = j.note_for(k, &id, &failures) else { continue };
            if let Some(c) = claims.iter_mut().find(|c| c.id == f.claim) {
                c.statement.push_str(&note);
                c.sources.extend(sources);
            }
        }
    }
    claims.extend(join::limits_claim(log, "trace.kernel_log"));
}

/// Besides ggml's own matmul kernels ([`kernels::MATMUL_FAMILIES`]), a trace summary names the paths that leave
/// matmuls to a dequantize pass and vendor BLAS; on Vulkan, to a dequantize pass.
const MATMUL_FALLBACKS: &[&str] = &["dequantize", "vendor-BLAS"];
const VULKAN_MATMUL_FALLBACKS: &[&str] = &["dequantize"];

/// The matmul families that say something for these kernels: CUDA/HIP's when some kernel is not a Vulkan
/// pipeline, Vulkan's when some is.
fn matmul_families(kernels: &[ObservedKernel]) -> Vec<&'static str> {
    let vulkan = |k: &&ObservedKernel| k.api == trace_format::record::api::VULKAN;
    let mut out: Vec<&'static str> = Vec::new();
    if kernels.is_empty() || kernels.iter().any(|k| !vulkan(&k)) {
        out.extend(kernels::MATMUL_FAMILIES.iter().chain(MATMUL_FALLBACKS));
    }
    if kernels.iter().any(|k| vulkan(&k)) {
        for f in kernels::VULKAN_MATMUL_FAMILIES.iter().chain(VULKAN_MATMUL_FALLBACKS) {
            if !out.contains(f) {
                out.push(f);
            }
        }
    }
    out
}

/// Claims about Vulkan: each device's facts (asked from the driver by the layer), and how pipelines without a
/// debug name were named.
pub(super) fn vulkan_claims(traces: &[TraceFile], devices: &[DeviceSummary], index: &ShaderIndex) -> Vec<Claim> {
    let mut out = Vec::new();
    let file_of = |pid: u32| {
        traces.iter().filter(move |t| t.pid() == pid && !t.devices.is_empty()).filter_map(|t| t.path.as_ref())
    };
    for (i, d) in devices.iter().enumerate() {
        let id = if devices.len() == 1 {
            "trace.vulkan.device".to_string()
        } else {
            format!("trace.vulkan.device.{}", i + 1)
        };
        let sources = d.pids.iter().flat_map(|&pid| file_of(pid)).take(8).map(|p| {
            Source::file(
                p.display().to_string(),
                None,
                None,
                "backscope-trace device record (the Vulkan layer asked the driver)",
            )
        });
        out.push(Claim::new(id, Confidence::Confirmed, d.statement()).with_sources(sources));
    }
    let hashed: Vec<&str> = traces
        .iter()
        .flat_map(|t| t.kernels.values())
        .filter(|k| k.api == trace_format::record::api::VULKAN && k.source == trace_format::record::source::SPIRV_HASH)
        .filter(|k| !k.name.starts_with("spirv:"))
        .map(|k| k.name.as_str())
        .collect();
    let libraries: Vec<Source> = index
        .libraries
        .iter()
        .map(|(p, what)| {
            let what = match what {
                vulkan::Library::Shaders(n) => {
                    format!("{n} embedded SPIR-V shaders, hashed as the layer hashes modules")
                }
                vulkan::Library::Stripped => "no symbol table (stripped): its shaders have no names".to_string(),
                vulkan::Library::Unreadable(e) => format!("could not be read: {e}"),
            };
            Source::file(p.display().to_string(), None, None, what)
        })
        .collect();
    if !hashed.is_empty() {
        out.push(
            Claim::new(
                "trace.vulkan.shaders",
                Confidence::Inferred,
                format!(
                    "{} Vulkan pipeline(s) had no debug name and are named after the embedded shader their SPIR-V hash matched (e.g. {})",
                    hashed.len(),
                    hashed.iter().take(3).copied().collect::<Vec<_>>().join(", ")
                ),
            )
            .with_sources(libraries.clone()),
        );
    }
    if let Some(claim) = unread_libraries_claim(index) {
        out.push(claim);
    }
    let unnamed = index.unnamed(traces);
    if unnamed > 0 {
        let why = if index.libraries.is_empty() {
            "no trace names a library holding their SPIR-V (the layer records the loaded libggml-vulkan)".to_string()
        } else {
            "their hash matched no shader of the libraries read".to_string()
        };
        out.push(
            Claim::new(
                "trace.vulkan.unnamed",
                Confidence::Limited,
                format!(
                    "{unnamed} Vulkan pipeline(s) are known only by the hash of their SPIR-V (spirv:<hash>): {why}; \
                     GGML_VK_DEBUG_MARKERS=1 makes ggml-vulkan name them (backscope trace sets it for a command it runs; \
                     `trace --env` prints it with --labels on)"
                ),
            )
            .with_sources(libraries),
        );
    }
    out
}

/// The order of the Vulkan dispatches, where the layer recorded it: how many distinct sequences of pipelines the
/// submitted command buffers dispatched (`crate::observe::vulkan::dispatch_record`), the one submitted most, and those whose
/// order was not kept. Nothing for traces that recorded no order or no dispatch.
pub(super) fn order_claim(dir: &Path, traces: &[TraceFile]) -> Option<Claim> {
    use crate::observe::vulkan::dispatch_record::{DispatchRecord, Order};
    let record = DispatchRecord::of(dir, traces);
    let Order::Yes { sequences, not_kept } = &record.order else { return None };
    let most = sequences.iter().max_by_key(|s| (s.submissions, std::cmp::Reverse(s.first_ns)))?;
    let submissions: u64 = sequences.iter().map(|s| s.submissions).sum();
    let start: Vec<String> = most.runs.iter().take(4).map(|(name, n)| format!("{n}× {name}")).collect();
    let statement = format!(
        "The order of the Vulkan dispatches was recorded: {} distinct sequence(s) of pipelines over {submissions} \
         submitted command buffer(s){}; the most submitted ({}×) is {} dispatches: {}{}",
        sequences.len(),
        if *not_kept > 0 { format!(" and {not_kept} whose order the layer did not keep") } else { String::new() },
        most.submissions,
        most.dispatches(),
        start.join(", "),
        if most.runs.len() > start.len() { ", …" } else { "" }
    );
    let sources = traces.iter().filter(|t| t.order_recorded()).filter_map(|t| t.path.as_ref()).take(8).map(|p| {
        Source::file(p.display().to_string(), None, None, "backscope-trace file: sequence records (Vulkan layer)")
    });
    Some(Claim::new("trace.vulkan.order", Confidence::Confirmed, statement).with_sources(sources))
}

/// The id of the Limited claim naming the shader libraries the traces name that were not read.
pub const LIBRARIES_SKIPPED: &str = "trace.vulkan.libraries_skipped";

/// The libraries the traces name that were not read for shaders (not a regular file, too large, over the
/// command's read budget, not a library), each named with why: what the shader names rest on is then partial.
fn unread_libraries_claim(index: &ShaderIndex) -> Option<Claim> {
    let unread: Vec<(&PathBuf, &str)> = index
        .libraries
        .iter()
        .filter_map(|(p, what)| match what {
            vulkan::Library::Unreadable(why) => Some((p, why.as_str())),
            _ => None,
        })
        .collect();
    if unread.is_empty() && !index.libraries_left_out {
        return None;
    }
    const SHOWN: usize = 4;
    let mut listed: Vec<String> =
        unread.iter().take(SHOWN).map(|(p, why)| format!("{} ({why})", p.display())).collect();
    if unread.len() > SHOWN {
        listed.push(format!("and {} more", unread.len() - SHOWN));
    }
    if index.libraries_left_out {
        listed.push(format!(
            "the traces name more than {} libraries; the rest were not looked at",
            vulkan::MAX_LIBRARIES
        ));
    }
    let sources = unread.iter().take(SHOWN).map(|(p, why)| {
        Source::file(p.display().to_string(), None, None, format!("named by a trace's pipeline; not read: {why}"))
    });
    Some(
        Claim::new(
            LIBRARIES_SKIPPED,
            Confidence::Limited,
            format!(
                "{} of the {}{} shader libraries the traces name were not read, so pipelines from them keep their \
                 spirv:<hash> names: {}",
                unread.len(),
                index.libraries.len(),
                if index.libraries_left_out { "+" } else { "" },
                listed.join("; ")
            ),
        )
        .with_sources(sources),
    )
}

pub(super) fn claims(
    dir: &Path,
    traces: &[TraceFile],
    problems: &[TraceProblem],
    kernels: &[ObservedKernel],
    families: &[FamilyTotal],
    crashes: &[CrashSummary],
) -> Vec<Claim> {
    let sources: Vec<Source> = traces
        .iter()
        .filter_map(|t| t.path.as_ref())
        .take(8)
        .map(|p| Source::file(p.display().to_string(), None, None, "backscope-trace file (observed launches)"))
        .collect();
    let mut out = Vec::new();
    if !problems.is_empty() {
        out.push(unreadable_claim(problems));
    }
    if traces.is_empty() {
        if problems.is_empty() {
            out.push(none_claim(dir));
        }
        return out;
    }
    // A cut trace misses everything after its cut, a rotating one whose earliest segments were rotated away
    // everything before its first window read: their counts are lower bounds, and "did not run" is unknown.
    let cut: Vec<&TraceFile> = traces.iter().filter(|t| t.is_cut()).collect();
    let rotated: Vec<&TraceFile> = traces.iter().filter(|t| t.rotated_away().is_some()).collect();
    let counting = if cut.is_empty() && rotated.is_empty() {
        Counting { counted: "", at_least: "", confidence: Confidence::Confirmed }
    } else {
        Counting { counted: " (at least)", at_least: "at least ", confidence: Confidence::Limited }
    };
    out.push(total_claim(traces, kernels, (cut.len(), rotated.len()), &counting, &sources));
    family_claims(kernels, families, (cut.len(), rotated.len()), &counting, &sources, &mut out);
    out.extend(cut_claim(&cut));
    out.extend(rotated_claim(&rotated));
    for (i, c) in crashes.iter().enumerate() {
        let id = if crashes.len() == 1 { "trace.crash".to_string() } else { format!("trace.crash.{}", i + 1) };
        out.push(c.claim(id, c.sources(str::to_string)));
    }
    out.extend(incomplete_claim(traces));
    out
}

/// How counts are worded: exact, or lower bounds when a trace was cut.
struct Counting {
    counted: &'static str,
    at_least: &'static str,
    confidence: Confidence,
}

/// Trace files that could not be read are left out of every count.
fn unreadable_claim(problems: &[TraceProblem]) -> Claim {
    let listed: Vec<String> = problems.iter().take(4).map(|p| p.to_string()).collect();
    let more = if problems.len() > 4 { format!("; and {} more", problems.len() - 4) } else { String::new() };
    Claim::new(
        "trace.unreadable",
        Confidence::Limited,
        format!(
            "{} trace file(s) could not be read and are left out of every count: {}{more}",
            problems.len(),
            listed.join("; ")
        ),
    )
    .with_sources(
        problems
            .iter()
            .take(8)
            .map(|p| Source::file(p.file.clone(), None, None, format!("unreadable trace file: {}", p.message))),
    )
}

/// No trace at all.
fn none_claim(dir: &Path) -> Claim {
    Claim::new(
            "trace.none",
            Confidence::Unresolved,
            format!("No trace file in {}: the command loaded no CUDA/HIP runtime and created no Vulkan device, or the observer could not write (see its stderr line)", dir.display()),
        )
        .with_source(Source::file(dir.display().to_string(), None, None, "trace directory"))
}

/// How many launches of how many kernels in how many processes.
fn total_claim(
    traces: &[TraceFile],
    kernels: &[ObservedKernel],
    (cut, rotated): (usize, usize),
    counting: &Counting,
    sources: &[Source],
) -> Claim {
    let Counting { at_least, confidence, .. } = *counting;
    let total: u64 = kernels.iter().map(|k| k.launches).sum();
    let failed: u64 = kernels.iter().map(|k| k.errors).sum();
    let failed_text =
        if failed > 0 { format!(" ({failed} of them failed: the runtime returned an error)") } else { String::new() };
    let vulkan_text = if kernels.iter().any(|k| k.api == trace_format::record::api::VULKAN) {
        " (a Vulkan pipeline's launches are its dispatches, counted when submitted)"
    } else {
        ""
    };
    let cut_text = match (cut, rotated) {
        (0, 0) => String::new(),
        (cut, 0) => format!("; {cut} trace(s) were cut, so these counts are lower bounds (see trace.cut)"),
        (0, rotated) => format!(
            "; {rotated} rotating trace(s) had their earliest segments rotated away, so these counts are lower \
             bounds (see trace.rotated)"
        ),
        (cut, rotated) => format!(
            "; {cut} trace(s) were cut and {rotated} had their earliest segments rotated away, so these counts are \
             lower bounds (see trace.cut, trace.rotated)"
        ),
    };
    Claim::new(
            "trace.total",
            confidence,
            format!(
                "{at_least}{total} kernel launches of {} distinct kernels were observed in {} process(es){vulkan_text}{failed_text}{cut_text}",
                kernels.len(),
                traces.len()
            ),
        )
        .with_sources(sources.to_vec())
}

/// Which matmul families ran, and which did not.
fn family_claims(
    kernels: &[ObservedKernel],
    families: &[FamilyTotal],
    (cut, rotated): (usize, usize),
    counting: &Counting,
    sources: &[Source],
    out: &mut Vec<Claim>,
) {
    let Counting { counted, at_least, confidence } = *counting;
    let relevant = matmul_families(kernels);
    let present: Vec<&FamilyTotal> = families.iter().filter(|f| relevant.contains(&f.family.as_str())).collect();
    let absent: Vec<&str> = relevant.iter().copied().filter(|m| !families.iter().any(|f| f.family == *m)).collect();
    for f in &present {
        let top: Vec<String> = kernels
            .iter()
            .filter(|k| k.family == f.family)
            .take(3)
            .map(|k| format!("{} {}", k.launches, short_name(&k.demangled)))
            .collect();
        // Vendor BLAS: which libraries' kernels they were.
        let mut libraries: Vec<&str> =
            kernels.iter().filter(|k| k.family == f.family).filter_map(|k| k.library.as_deref()).collect();
        libraries.sort_unstable();
        libraries.dedup();
        let from = if libraries.is_empty() { String::new() } else { format!(" ({})", libraries.join(", ")) };
        out.push(
            Claim::new(
                format!("trace.family.{}", f.family),
                confidence,
                format!(
                    "{}{from} ran: {at_least}{} launches of {} kernel(s) (top{counted}: {})",
                    f.family,
                    f.launches - f.errors,
                    f.kernels,
                    top.join("; ")
                ),
            )
            .with_sources(sources.to_vec()),
        );
    }
    if !present.is_empty() && !absent.is_empty() {
        let absent = absent.join(", ");
        let (confidence, statement) = match (cut, rotated) {
            (0, 0) => (Confidence::Confirmed, format!("No {absent} kernel ran during the traced command")),
            (_, 0) => (
                Confidence::Unresolved,
                format!("No {absent} kernel ran before the trace(s) were cut; whether one ran afterwards is not known"),
            ),
            _ => (
                Confidence::Unresolved,
                format!(
                    "No {absent} kernel ran in what the traces hold; some were cut or rotated (see trace.cut, \
                     trace.rotated), and whether one ran outside it is not known"
                ),
            ),
        };
        out.push(Claim::new("trace.absent", confidence, statement).with_sources(sources.to_vec()));
    }
}

/// Traces the observer stopped writing before their process ended.
fn cut_claim(cut: &[&TraceFile]) -> Option<Claim> {
    if cut.is_empty() {
        return None;
    }
    let what: Vec<String> = cut
        .iter()
        .filter_map(|t| {
            let c = t.truncated.as_ref()?;
            Some(format!("pid {} after {} bytes: {}", t.pid(), c.bytes, c.why()))
        })
        .collect();
    Some(
        Claim::new(
            "trace.cut",
            Confidence::Limited,
            format!(
                "The observer stopped writing {} trace(s) before the process ended ({}); launches after the cut are not counted",
                cut.len(),
                what.join("; ")
            ),
        )
        .with_sources(cut.iter().filter_map(|t| t.path.as_ref()).map(|p| {
            Source::file(p.display().to_string(), None, None, "trace file ending with a truncated record")
        })),
    )
}

/// Rotating traces whose earliest segments were rotated away (or are missing): their counts start later than their
/// process.
fn rotated_claim(rotated: &[&TraceFile]) -> Option<Claim> {
    if rotated.is_empty() {
        return None;
    }
    let what: Vec<String> = rotated
        .iter()
        .filter_map(|t| {
            let s = t.rotated_away()?;
            let since = match s.since_ns {
                Some(since) => format!(
                    "its counts are those since {since} ns (CLOCK_MONOTONIC; {:.1} s after the process started)",
                    since.saturating_sub(t.header.start_ns) as f64 / 1e9
                ),
                None => "its segments read hold no window".to_string(),
            };
            Some(format!("pid {} ({}): {}; {since}", t.pid(), t.header.exe, s.describe()))
        })
        .collect();
    let sources = rotated.iter().filter_map(|t| t.segments.as_ref()).flat_map(|s| &s.present).filter_map(|p| {
        let what = format!("backscope-trace file: segment {} of a rotating trace", p.index);
        p.path.as_ref().map(|path| Source::file(path.display().to_string(), None, None, what))
    });
    Some(
        Claim::new(
            "trace.rotated",
            Confidence::Limited,
            format!(
                "{} rotating trace(s) (BACKSCOPE_TRACE_ROTATE) no longer hold their process's beginning: {}; \
                 every count of theirs is a lower bound for the process",
                rotated.len(),
                what.join("; ")
            ),
        )
        .with_sources(sources.take(16)),
    )
}

/// A process whose crash record says its open window was written lost nothing; any other that ended without
/// the exit flush may have lost its last window.
fn incomplete_claim(traces: &[TraceFile]) -> Option<Claim> {
    let incomplete: Vec<&TraceFile> =
        traces.iter().filter(|t| !t.is_finished() && !t.fatal_crash().is_some_and(|c| c.flushed)).collect();
    (!incomplete.is_empty()).then(|| {
            Claim::new(
                "trace.incomplete",
                Confidence::Limited,
                format!("{} process(es) ended without the observer's exit flush (killed or crashed): their last window may be missing", incomplete.len()),
            )
            .with_sources(incomplete.iter().filter_map(|t| t.path.as_ref()).map(|p| Source::file(p.display().to_string(), None, None, "trace file without end record")))
    })
}
