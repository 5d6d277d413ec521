//! The environment snapshot of a run (`env.json` in the run directory): host, kernel, CPU, memory, the GPUs the
//! kernel exposes, driver versions, the environment variables that steer Ollama/ggml/HIP/CUDA/Vulkan, and for each
//! managed endpoint what its program says about itself (`--version`, `--list-devices`). Everything is read from
//! /proc, /sys and bounded helper commands; nothing here can fail the run.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::plan::{EndpointKind, Plan};
use super::supervise::{run_bounded, Ledger};
use crate::output::redact;

/// Variables that change which backend or device a runtime picks (Ollama's, ggml's and the HIP, CUDA and Vulkan
/// runtimes' device and library selection) or how libraries load.
const ENV_PREFIXES: &[&str] = &[
    "OLLAMA_",
    "GGML_",
    "LLAMA_",
    "HIP_",
    "HSA_",
    "ROCR_",
    "ROCM_",
    "AMD_",
    "CUDA_",
    "NVIDIA_",
    "VK_",
    "VULKAN_",
    "MESA_",
    "GPU_DEVICE_ORDINAL",
];
const ENV_NAMES: &[&str] = &["LD_LIBRARY_PATH", "LD_PRELOAD", "PATH"];

const HELPER_LIMIT: Duration = Duration::from_secs(20);
const HELPER_BYTES: usize = 64 << 10;

pub fn relevant_env() -> Map<String, Value> {
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(k, _)| ENV_PREFIXES.iter().any(|p| k.starts_with(p)) || ENV_NAMES.contains(&k.as_str()))
        // The snapshot is meant to be shared in bug reports: never copy anything that looks like a credential, by
        // the same rules the bundle's redaction uses (a secret word in the name, or a value shaped like a token).
        .filter(|(k, v)| !redact::secret_name(k) && !redact::looks_like_token(v))
        .collect();
    vars.sort();
    vars.into_iter().map(|(k, v)| (k, Value::String(v))).collect()
}

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn uname() -> Value {
    // SAFETY: uname fills a caller-provided struct of fixed-size NUL-terminated arrays.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return Value::Null;
    }
    let field = |f: &[libc::c_char]| -> String {
        let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    json!({"sysname": field(&u.sysname), "nodename": field(&u.nodename), "release": field(&u.release), "version": field(&u.version), "machine": field(&u.machine)})
}

fn os_release() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| v.trim_matches('"').to_string())
}

fn cpu() -> Value {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string()));
    let logical = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    json!({"model": model, "logical_cpus": logical})
}

fn mem_total_kib() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// DRM devices (`/sys/class/drm/card*/device`): PCI vendor/device ids and the kernel driver. Vendor 0x1002 is AMD,
/// 0x10de NVIDIA, 0x8086 Intel.
fn drm_gpus() -> Vec<Value> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/sys/class/drm") else { return out };
    let mut names: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    for name in names.into_iter().filter(|n| n.starts_with("card") && !n.contains('-')).take(16) {
        let dev = Path::new("/sys/class/drm").join(&name).join("device");
        let driver = std::fs::read_link(dev.join("driver"))
            .ok()
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()));
        out.push(json!({
            "card": name,
            "vendor": read_trim(dev.join("vendor")),
            "device": read_trim(dev.join("device")),
            "driver": driver,
            "product": read_trim(dev.join("product_name")),
            "vram_total_bytes": read_trim(dev.join("mem_info_vram_total")).and_then(|s| s.parse::<u64>().ok()),
        }));
    }
    out
}

fn device_nodes() -> Value {
    let render: Vec<String> = std::fs::read_dir("/dev/dri")
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    json!({
        "/dev/kfd": Path::new("/dev/kfd").exists(),
        "/dev/nvidia0": Path::new("/dev/nvidia0").exists(),
        "/dev/dri": render,
    })
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn helper(argv: &[&str], env: &[(String, String)], ledger: &Ledger) -> Value {
    match run_bounded(argv, env, HELPER_LIMIT, HELPER_BYTES, Some(ledger)) {
        Ok((exit, out)) => json!({"argv": argv, "exit": exit.describe(), "output": out}),
        Err(e) => json!({"argv": argv, "error": e.to_string()}),
    }
}

/// The snapshot of `plan`'s run; its helper commands are recorded in `ledger` while they run.
pub fn snapshot(plan: &Plan, ledger: &Ledger) -> Value {
    let mut tools = Vec::new();
    for argv in [&["nvidia-smi", "-L"][..], &["rocminfo"][..], &["vulkaninfo", "--summary"][..]] {
        if on_path(argv[0]) {
            tools.push(helper(argv, &[], ledger));
        }
    }
    let mut endpoints = Map::new();
    for e in &plan.endpoints {
        let v = match &e.kind {
            EndpointKind::External { url, api, log_file } => json!({"url": url, "api": api, "log_file": log_file}),
            EndpointKind::Managed { preset, program, env, .. } => {
                let prog = program.display().to_string();
                let probes: Vec<Value> =
                    preset.self_description().iter().map(|arg| helper(&[&prog, arg], env, ledger)).collect();
                json!({"preset": preset, "program": prog, "env": env.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect::<Map<String, Value>>(), "probes": probes})
            }
        };
        endpoints.insert(e.name.clone(), v);
    }
    json!({
        "captured_at": crate::run::format::ids::utc_now(),
        "uname": uname(),
        "os": os_release(),
        "cpu": cpu(),
        "memory_total_kib": mem_total_kib(),
        "gpus": drm_gpus(),
        "drivers": {
            "nvidia": read_trim("/proc/driver/nvidia/version").map(|s| s.lines().next().unwrap_or("").to_string()),
            "amdgpu": read_trim("/sys/module/amdgpu/version"),
        },
        "device_nodes": device_nodes(),
        "env": relevant_env(),
        "endpoints": endpoints,
        "tools": tools,
        "backscope_version": env!("CARGO_PKG_VERSION"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_facts_come_from_the_running_kernel() {
        let u = uname();
        assert_eq!(u["sysname"], "Linux");
        assert!(!u["release"].as_str().unwrap().is_empty());
        assert!(mem_total_kib().unwrap() > 0);
        assert!(cpu()["logical_cpus"].as_u64().unwrap() >= 1);
    }

    #[test]
    fn only_runtime_variables_are_kept() {
        // SAFETY (edition 2021: set_var is safe): test-local variable names no other test reads.
        std::env::set_var("GGML_VK_VISIBLE_DEVICES_SNAPSHOT_TEST", "0");
        std::env::set_var("UNRELATED_SNAPSHOT_TEST", "x");
        std::env::set_var("OLLAMA_API_KEY_SNAPSHOT_TEST", "secret");
        // Shapes the old whole-word list let through: a PASS suffix, and a token under an innocent name.
        std::env::set_var("OLLAMA_REDIS_PASS_SNAPSHOT_TEST", "hunter2");
        std::env::set_var("GGML_SNAPSHOT_TEST_URLISH", "ghp_0123456789abcdefABCDEF0123456789abcd");
        let env = relevant_env();
        assert!(!env.contains_key("OLLAMA_REDIS_PASS_SNAPSHOT_TEST"));
        assert!(!env.contains_key("GGML_SNAPSHOT_TEST_URLISH"));
        assert_eq!(env["GGML_VK_VISIBLE_DEVICES_SNAPSHOT_TEST"], "0");
        assert!(!env.contains_key("UNRELATED_SNAPSHOT_TEST"));
        assert!(!env.contains_key("OLLAMA_API_KEY_SNAPSHOT_TEST"), "credentials never enter the snapshot");
    }
}
