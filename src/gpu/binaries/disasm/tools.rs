//! The disassemblers: finding them, and running one on one code object with bounded output, a time limit and
//! the error it printed.
//!
//! - AMD: `llvm-objdump` with the AMDGPU target, LLVM 17 or newer (gfx942 needs 17, gfx1201 19). Looked for as
//!   `--llvm-objdump PATH`, then `llvm-objdump-N` on `PATH` (newest first), `/usr/lib/llvm-N/bin/llvm-objdump`,
//!   `/opt/rocm/llvm/bin/llvm-objdump`, and plain `llvm-objdump` on `PATH`; the first whose `--version` lists the
//!   `amdgcn` target is used.
//! - NVIDIA: `nvdisasm` (sm_75 and newer in CUDA 13), else `cuobjdump`. Looked for as `--nvdisasm PATH` (either
//!   tool), then on `PATH`, in `/usr/local/cuda/bin` and `/opt/cuda/bin`, and in the tool cache that
//!   `scripts/fixtures.sh` fills from the PyPI wheels `nvidia-cuda-nvdisasm`/`nvidia-cuda-cuobjdump`
//!   (`$BACKSCOPE_CACHE/tools/*/nvidia/cu*/bin`, default `~/.cache/backscope`).

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::listing::{self, Format, Listing};
use crate::host::proc::run::{self, ReadTo};

/// Newest and oldest LLVM major version looked for by name.
const LLVM_NEWEST: u32 = 25;
const LLVM_OLDEST: u32 = 17;
/// What is kept of a disassembler's standard error for an error message.
const STDERR_KEPT: usize = 4096;
/// How long a `--version` may take (a tool on a hung network mount must not hang the scan).
const VERSION_LIMIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolKind {
    LlvmObjdump,
    Nvdisasm,
    Cuobjdump,
}

/// A disassembler that was found and answered `--version`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Tool {
    pub kind: ToolKind,
    pub path: PathBuf,
    /// The version line it printed (`LLVM version 19.1.7`, `Cuda compilation tools, release 13.5, V13.5.37`).
    pub version: String,
}

impl Tool {
    /// A short stable name for cache directories: kind and version digits.
    pub fn cache_key(&self) -> String {
        let digits: String =
            self.version.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '.').collect::<String>();
        let kind = match self.kind {
            ToolKind::LlvmObjdump => "llvm-objdump",
            ToolKind::Nvdisasm => "nvdisasm",
            ToolKind::Cuobjdump => "cuobjdump",
        };
        format!("{kind}-{}", digits.chars().rev().take(48).collect::<String>().chars().rev().collect::<String>())
    }

    /// The arguments for one code object (the path is appended last).
    pub fn args(&self, mcpu: Option<&str>) -> Vec<String> {
        match self.kind {
            ToolKind::LlvmObjdump => {
                let mut a = vec!["-d".to_string(), "--no-show-raw-insn".to_string(), "--no-leading-addr".to_string()];
                if let Some(cpu) = mcpu {
                    a.push(format!("--mcpu={cpu}"));
                }
                a
            }
            // -c: code sections only; -ndf: no dataflow analysis (branch-target annotations only, and slow).
            ToolKind::Nvdisasm => vec!["-c".into(), "-ndf".into()],
            ToolKind::Cuobjdump => vec!["-sass".into()],
        }
    }

    fn format(&self) -> Format {
        match self.kind {
            ToolKind::LlvmObjdump => Format::LlvmObjdump,
            ToolKind::Nvdisasm => Format::Nvdisasm,
            ToolKind::Cuobjdump => Format::Cuobjdump,
        }
    }
}

/// Why a disassembler could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{path}: cannot run: {source}")]
    Spawn { path: String, source: std::io::Error },
    #[error("{path}: {what}")]
    Unusable { path: String, what: String },
    #[error("{tool} failed on {input} ({status}): {stderr}")]
    Failed { tool: String, input: String, status: String, stderr: String },
    #[error("{tool} ran longer than {seconds} s on {input} and was stopped")]
    TimedOut { tool: String, input: String, seconds: u64 },
    #[error("reading {tool}'s output for {input}: {source}")]
    Read { tool: String, input: String, source: std::io::Error },
}

/// Run `program arg` and return its standard output if it exits 0 (for `--version`: small, bounded in bytes and
/// time).
fn version_output(program: &Path, arg: &str) -> Option<String> {
    let argv = [program.display().to_string(), arg.to_string()];
    let done = run::run_bounded(&argv, &[], VERSION_LIMIT, 1 << 16).ok()?;
    (done.exit.code == Some(0)).then(|| String::from_utf8_lossy(&done.stdout).into_owned())
}

fn on_path(name: &str) -> Option<PathBuf> {
    crate::host::proc::which(name, std::env::var("PATH").ok().as_deref())
}

/// An `llvm-objdump` that can disassemble AMDGPU code: `--version` names the `amdgcn` target.
pub fn check_llvm_objdump(path: &Path) -> Result<Tool, ToolError> {
    let shown = path.display().to_string();
    let text = version_output(path, "--version")
        .ok_or_else(|| ToolError::Unusable { path: shown.clone(), what: "does not answer --version".into() })?;
    if !text.lines().any(|l| l.trim_start().starts_with("amdgcn")) {
        return Err(ToolError::Unusable {
            path: shown,
            what: "this llvm-objdump has no AMDGPU (amdgcn) target".into(),
        });
    }
    let version = text.lines().map(str::trim).find(|l| l.contains("LLVM version")).unwrap_or("LLVM").to_string();
    Ok(Tool { kind: ToolKind::LlvmObjdump, path: path.to_path_buf(), version })
}

/// `nvdisasm` or `cuobjdump`, told apart by name; `--version` must name the CUDA tools.
pub fn check_nvidia(path: &Path) -> Result<Tool, ToolError> {
    let shown = path.display().to_string();
    let text = version_output(path, "--version")
        .ok_or_else(|| ToolError::Unusable { path: shown.clone(), what: "does not answer --version".into() })?;
    let Some(version) = text.lines().map(str::trim).find(|l| l.starts_with("Cuda compilation tools")) else {
        return Err(ToolError::Unusable { path: shown, what: "--version does not name the CUDA tools".into() });
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let kind = if name.contains("cuobjdump") { ToolKind::Cuobjdump } else { ToolKind::Nvdisasm };
    Ok(Tool { kind, path: path.to_path_buf(), version: version.to_string() })
}

/// The AMDGPU disassembler: `explicit` if given (an error if it is unusable), else the first usable one found.
pub fn find_amd(explicit: Option<&Path>) -> Result<Option<Tool>, ToolError> {
    if let Some(p) = explicit {
        return check_llvm_objdump(p).map(Some);
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    for v in (LLVM_OLDEST..=LLVM_NEWEST).rev() {
        candidates.extend(on_path(&format!("llvm-objdump-{v}")));
        candidates.push(PathBuf::from(format!("/usr/lib/llvm-{v}/bin/llvm-objdump")));
    }
    candidates.push(PathBuf::from("/opt/rocm/llvm/bin/llvm-objdump"));
    candidates.extend(on_path("llvm-objdump"));
    Ok(candidates.iter().filter(|p| p.exists()).find_map(|p| check_llvm_objdump(p).ok()))
}

/// The NVIDIA disassembler: `explicit` if given, else nvdisasm, else cuobjdump, from the places in the module doc.
pub fn find_nvidia(explicit: Option<&Path>, cache: &Path) -> Result<Option<Tool>, ToolError> {
    if let Some(p) = explicit {
        return check_nvidia(p).map(Some);
    }
    let mut wheel_dirs: Vec<PathBuf> = Vec::new();
    if let Ok(tools) = std::fs::read_dir(cache.join("tools")) {
        for t in tools.flatten() {
            if let Ok(cus) = std::fs::read_dir(t.path().join("nvidia")) {
                wheel_dirs.extend(cus.flatten().map(|c| c.path().join("bin")));
            }
        }
    }
    wheel_dirs.sort();
    wheel_dirs.reverse(); // cu13 before cu12
                          // A tool in the cache is run only when no one but this user can have written it (crate::host::cache::check_trusted).
    let mut refused = None;
    for name in ["nvdisasm", "cuobjdump"] {
        let mut candidates: Vec<PathBuf> = on_path(name).into_iter().collect();
        candidates.push(Path::new("/usr/local/cuda/bin").join(name));
        candidates.push(Path::new("/opt/cuda/bin").join(name));
        for tool in wheel_dirs.iter().map(|d| d.join(name)).filter(|p| p.exists()) {
            match crate::host::cache::check_trusted(cache, &tool) {
                Ok(()) => candidates.push(tool),
                Err(what) => refused = refused.or(Some(ToolError::Unusable { path: tool.display().to_string(), what })),
            }
        }
        if let Some(t) = candidates.iter().filter(|p| p.exists()).find_map(|p| check_nvidia(p).ok()) {
            return Ok(Some(t));
        }
    }
    refused.map_or(Ok(None), Err)
}

/// Disassemble the code object in `input`: at most `budget` bytes of output are read (a longer listing is kept and
/// marked truncated), and the tool is stopped after `limit`.
pub fn run(tool: &Tool, input: &Path, mcpu: Option<&str>, budget: u64, limit: Duration) -> Result<Listing, ToolError> {
    let name = tool.path.display().to_string();
    let shown = input.display().to_string();
    let mut cmd = Command::new(&tool.path);
    cmd.args(tool.args(mcpu)).arg(input);
    let format = tool.format();
    let done = run::stream(cmd, limit, STDERR_KEPT, |stdout| {
        let read = listing::read(BufReader::with_capacity(1 << 16, stdout), format, budget);
        // A listing cut at the budget needs no more: the tool is stopped rather than drained.
        let to = if read.as_ref().is_ok_and(|l| l.truncated) { ReadTo::Early } else { ReadTo::End };
        (read, to)
    })
    .map_err(|source| ToolError::Spawn { path: name.clone(), source })?;
    if done.timed_out {
        return Err(ToolError::TimedOut { tool: name, input: shown, seconds: limit.as_secs() });
    }
    let listing = done.value.map_err(|source| ToolError::Read { tool: name.clone(), input: shown.clone(), source })?;
    let truncated = listing.truncated;
    let stderr_text = String::from_utf8_lossy(&done.stderr);
    // llvm-objdump warns and goes on with a generic CPU when it does not know the processor: that listing
    // would be of the wrong instruction set.
    if let Some(l) = stderr_text.lines().find(|l| l.contains("is not a recognized processor")) {
        return Err(ToolError::Failed {
            tool: name,
            input: shown,
            status: "unknown processor".into(),
            stderr: l.trim().into(),
        });
    }
    if done.exit.code != Some(0) && !truncated {
        let first = stderr_text.lines().filter(|l| !l.trim().is_empty()).take(3).collect::<Vec<_>>().join(" | ");
        return Err(ToolError::Failed { tool: name, input: shown, status: done.exit.describe(), stderr: first });
    }
    Ok(listing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_that_is_not_a_disassembler_is_refused() {
        let err = check_llvm_objdump(Path::new("/bin/true")).unwrap_err();
        assert!(err.to_string().contains("amdgcn") || err.to_string().contains("--version"), "{err}");
        let err = check_nvidia(Path::new("/bin/echo")).unwrap_err();
        assert!(err.to_string().contains("CUDA tools"), "{err}");
        assert!(check_nvidia(Path::new("/nonexistent/nvdisasm")).is_err());
    }

    /// A stand-in disassembler: a script that `exec`s `body` (so the pid the watchdog kills is the one writing).
    fn script(dir: &Path, body: &str) -> Tool {
        let path = dir.join("fake-nvdisasm");
        std::fs::write(&path, format!("#!/bin/sh\nexec {body}\n")).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        Tool { kind: ToolKind::Nvdisasm, path, version: String::new() }
    }

    #[test]
    fn the_time_limit_stops_a_hung_tool() {
        let dir = tempfile::tempdir().unwrap();
        let tool = script(dir.path(), "sleep 30");
        let started = std::time::Instant::now();
        let err = run(&tool, Path::new("x.cubin"), None, 1 << 20, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, ToolError::TimedOut { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn endless_output_is_cut_at_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        const LINE: &str = "        /*0000*/ NOP ;";
        let tool = script(dir.path(), &format!("yes '{LINE}'"));
        let listing = run(&tool, Path::new("x.cubin"), None, 1 << 20, Duration::from_secs(60)).unwrap();
        assert!(listing.truncated);
        // Every whole line inside the budget is read, newline included.
        assert_eq!(listing.unattributed, (1 << 20) / (LINE.len() as u64 + 1));
    }

    #[test]
    fn a_failing_tool_reports_its_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let tool = script(dir.path(), "sh -c 'echo \"nvdisasm fatal : bad input\" >&2; exit 3'");
        let err = run(&tool, Path::new("x.cubin"), None, 1 << 20, Duration::from_secs(60)).unwrap_err();
        assert!(err.to_string().contains("nvdisasm fatal : bad input"), "{err}");
    }
}
