//! `predict --backend vulkan --verify LLAMA_BENCH`: ggml-vulkan checks the prediction itself. The same model, prompt
//! and placement run once through llama-bench under the Vulkan layer's device impersonation
//! (`crate::vulkan_profile`: the device answers ggml as the profiled one, shaders are empty), and the pipelines ggml
//! chose are the observation the prediction is compared with. The device need not be present: lavapipe serves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use trace_format::env;

use super::prediction::DeviceSource;
use super::VulkanOptions;
use crate::output::messages;
use crate::predict::{Batch, FlashAttn, ObservedSource, WeightSource};

/// How long the impersonated llama-bench may take: its shaders do no work, so minutes mean something is wrong.
const BENCH_LIMIT: Duration = Duration::from_secs(600);
/// What is kept of llama-bench's output for an error message.
const OUTPUT_BYTES: usize = 1 << 20;

/// What `--verify` needs besides the prediction's own options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verify {
    /// llama-bench of the build to verify against (its directory's libggml-vulkan.so is the build's library).
    pub llama_bench: PathBuf,
    /// The Vulkan layer library (default: found as `trace` finds it).
    pub vklayer: Option<PathBuf>,
}

/// Runs llama-bench impersonating `device` (a profile id of `data/vulkan_profiles/` or a profile file: flat,
/// `vulkaninfo --json` or Khronos) with the model, prompt, decode, ubatch, flash attention, KV type and layers of
/// `opts`, traced into a new directory that is kept. Returns `opts` observing that trace; where `device` is a file,
/// the device of the prediction becomes the trace's device record (what the profile answered ggml).
pub fn observe(mut opts: VulkanOptions, device: &str, verify: &Verify) -> Result<VulkanOptions> {
    let WeightSource::Model(model) = &opts.weights else {
        bail!("--verify runs the model: give it with --model M.gguf");
    };
    let Batch::PromptTokens(prompt) = opts.batch else {
        bail!("--verify runs llama-bench on a prompt: give --prompt-tokens N, not --ne11");
    };
    let profile = crate::vulkan_profile::resolve(device)
        .with_context(|| format!("--verify impersonates --device {device}, which must name a profile"))?;
    let layer = crate::observe::vulkan_env(verify.vklayer.as_deref(), |k| std::env::var(k).ok())?;
    if layer.is_empty() {
        bail!("--verify needs the Vulkan layer, which was not found (pass --vklayer)");
    }
    let dir = tempfile::Builder::new()
        .prefix("backscope-verify-")
        .tempdir()
        .context("creating the directory of the verifying trace")?
        .keep();
    let profile_file = crate::vulkan_profile::write_for_layer(&profile, &dir)?;
    let trace_dir = dir.join("trace");
    std::fs::create_dir(&trace_dir).with_context(|| format!("creating {}", trace_dir.display()))?;

    let argv = bench_argv(&verify.llama_bench, model, prompt, &opts);
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
    let ran = crate::proc::run::run_bounded(&argv, &vars, BENCH_LIMIT, OUTPUT_BYTES)
        .with_context(|| format!("cannot run {}", verify.llama_bench.display()))?;
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
    if opts.library.is_none() {
        let lib = verify.llama_bench.parent().unwrap_or(Path::new(".")).join("libggml-vulkan.so");
        opts.library = lib.exists().then_some(lib);
    }
    if Path::new(device).exists() {
        opts.device = DeviceSource::TraceDir(trace_dir.clone());
    }
    opts.observed = Some(ObservedSource::TraceDir(trace_dir));
    Ok(opts)
}

/// llama-bench's arguments for the prediction's case: one repetition of the prompt (`-p N -n 0`) and, when decode
/// steps are predicted, a decode test of that many tokens; layers, ubatch, flash attention and KV types as predicted.
fn bench_argv(llama_bench: &Path, model: &Path, prompt: u64, opts: &VulkanOptions) -> Vec<String> {
    let mut argv = vec![llama_bench.display().to_string(), "-m".into(), model.display().to_string()];
    let ngl = opts.placement.n_gpu_layers.filter(|n| *n >= 0).unwrap_or(999);
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
    use super::*;
    use crate::predict::PlacementOptions;

    #[test]
    fn the_bench_case_follows_the_prediction() {
        let mut o = VulkanOptions::new(
            DeviceSource::Profile("gfx900-radv".into()),
            WeightSource::Model("m.gguf".into()),
            Batch::PromptTokens(64),
        );
        let argv = bench_argv(Path::new("/b/llama-bench"), Path::new("m.gguf"), 64, &o);
        let line = argv.join(" ");
        assert!(line.starts_with("/b/llama-bench -m m.gguf -ngl 999 -r 1 -p 64 -n 1 -ub 512"), "{line}");
        assert!(line.contains("-ctk f16 -ctv f16") && !line.contains("-fa") && !line.contains("-nopo"), "{line}");
        o.placement = PlacementOptions { n_gpu_layers: Some(3), op_offload: false, ..o.placement.clone() };
        o.flash_attn = FlashAttn::Off;
        o.decode_tokens = Some(0);
        let line = bench_argv(Path::new("/b/llama-bench"), Path::new("m.gguf"), 9, &o).join(" ");
        assert!(line.contains("-ngl 3 -r 1 -p 9 -n 0") && line.ends_with("-fa 0 -nopo 1"), "{line}");
    }
}
