//! Each section of the doctor's findings as claims: GPUs, kernel modules, users and device access, Vulkan, the
//! environment and HSA overrides, runtimes, tools, and the gate for each GPU. Each function reads what the probes
//! found and pushes its claims.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use super::host::{environment_source, file_src, read_small, Host};
use super::report::{GpuGate, OverrideFinding};
use super::{access, env, gpus, runtimes, tools, vulkan};
use crate::evidence::{Claim, Confidence, Source};
use crate::gpu::binaries::ScanReport;
use crate::support_matrix::{self as gate, OllamaRelease};

const MODULES: &[&str] = &["amdgpu", "nvidia", "nvidia_uvm", "nvidia_drm", "i915", "xe"];

pub(super) fn loaded_modules(host: &Host) -> (BTreeMap<String, bool>, Option<String>, Option<Claim>) {
    let proc_modules = host.path("/proc/modules");
    if let Some(text) = read_small(&proc_modules) {
        let names: Vec<&str> = text.lines().filter_map(|l| l.split_whitespace().next()).collect();
        let map = MODULES.iter().map(|m| (m.to_string(), names.contains(m))).collect();
        return (map, Some(proc_modules.display().to_string()), None);
    }
    // Without /proc/modules (a container), /sys/module still lists loaded and built-in modules.
    let sys = host.path("/sys/module");
    let map: BTreeMap<String, bool> = MODULES.iter().map(|m| (m.to_string(), sys.join(m).is_dir())).collect();
    let claim = Claim::new(
        "doctor.modules.limited",
        Confidence::Limited,
        format!(
            "{} cannot be read; loaded modules were read from {} instead{}",
            proc_modules.display(),
            sys.display(),
            if sys.is_dir() { "" } else { ", which does not exist either: module state unknown" }
        ),
    )
    .with_source(Source::file(proc_modules.display().to_string(), None, None, "absent or unreadable"));
    (map, sys.is_dir().then(|| sys.display().to_string()), Some(claim))
}

/// Run the tools the host has, in parallel; each with its own deadline.
pub(super) fn run_tools(env: &BTreeMap<String, String>, timeout: Duration) -> Vec<tools::ToolRun> {
    let path = env.get("PATH").map(String::as_str);
    let mut jobs: Vec<Vec<String>> = Vec::new();
    let mut add = |name: &str, args: &[&str]| {
        if let Some(p) = tools::which(name, path) {
            let mut argv = vec![p.display().to_string()];
            argv.extend(args.iter().map(|a| a.to_string()));
            jobs.push(argv);
        }
    };
    add("rocminfo", &[]);
    add("vulkaninfo", &["--summary"]);
    add("nvidia-smi", &[tools::NVIDIA_SMI_QUERY, "--format=csv,noheader"]);
    add("systemctl", &["show", "ollama.service", "-p", "Environment", "-p", "User", "-p", "FragmentPath"]);
    add("ollama", &["--version"]);
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs.iter().map(|argv| s.spawn(move || tools::run_bounded(argv, timeout))).collect();
        handles.into_iter().filter_map(|h| h.join().ok().and_then(|r| r.ok())).collect()
    })
}

pub(super) fn tool<'a>(runs: &'a [tools::ToolRun], name: &str) -> Option<&'a tools::ToolRun> {
    runs.iter().find(|r| r.argv.first().is_some_and(|p| Path::new(p).file_name().is_some_and(|n| n == name)))
}

pub(super) fn tool_source(r: &tools::ToolRun) -> Source {
    // vulkaninfo prints pages of extensions before its devices; the device lines are the evidence.
    let excerpt = if r.argv.first().is_some_and(|p| p.ends_with("vulkaninfo")) {
        r.stdout
            .lines()
            .map(str::trim)
            .filter(|l| ["GPU", "deviceName", "deviceType", "driverInfo"].iter().any(|k| l.starts_with(k)))
            .take(12)
            .collect::<Vec<_>>()
            .join(" | ")
    } else {
        r.excerpt(6)
    };
    Source::Command { argv: r.argv.clone(), excerpt: format!("{}: {excerpt}", r.status()) }
}

/// nvidia-smi adds the compute capability the driver's files do not state.
pub(super) fn merge_nvidia_smi(probe: &mut gpus::GpuProbe, tool_runs: &[tools::ToolRun]) {
    if let Some(run) = tool(tool_runs, "nvidia-smi") {
        for g in tools::parse_nvidia_smi(&run.stdout) {
            if let Some(gpu) =
                probe.gpus.iter_mut().find(|x| x.slot.as_deref().is_some_and(|s| tools::same_bus(&g.bus_id, s)))
            {
                gpu.compute_capability = Some(g.compute_cap.clone());
                gpu.model = gpu.model.take().or(Some(g.name.clone()));
            } else {
                probe.gpus.push(gpus::Gpu {
                    vendor: "nvidia",
                    slot: Some(g.bus_id.clone()),
                    model: Some(g.name.clone()),
                    compute_capability: Some(g.compute_cap.clone()),
                    sources: vec![format!("{} {}", run.argv.join(" "), "(no sysfs or /proc entry matched its bus id)")],
                    ..Default::default()
                });
            }
        }
    }
}

/// A claim for each GPU found, or one naming where none was.
pub(super) fn gpu_claims(host: &Host, probe: &gpus::GpuProbe, claims: &mut Vec<Claim>) {
    if probe.gpus.is_empty() {
        let looked: Vec<String> = probe.looked.iter().map(|(p, w)| format!("{p}: {w}")).collect();
        claims.push(
            Claim::new(
                "doctor.gpu.none",
                Confidence::Confirmed,
                format!("No GPU is visible here ({})", looked.join("; ")),
            )
            .with_sources(probe.looked.iter().map(|(p, w)| file_src(p.clone(), w.clone()))),
        );
    }
    for g in &probe.gpus {
        let mut facts = Vec::new();
        if let Some(d) = &g.driver {
            facts.push(format!("driver {d}"));
        }
        if !g.nodes.is_empty() {
            facts.push(format!("nodes {}", g.nodes.join(" ")));
        }
        if let (Some(t), Some(v)) = (&g.gfx_target, g.gfx_target_version) {
            facts.push(format!("ISA {t} (KFD gfx_target_version {v})"));
        }
        if let Some(cc) = &g.compute_capability {
            facts.push(format!("compute capability {cc}"));
        }
        let what = match g.vendor {
            "amd" => "AMD GPU",
            "nvidia" => "NVIDIA GPU",
            "intel" => "Intel GPU",
            _ => "display device",
        };
        claims.push(
            Claim::new(
                format!("doctor.gpu.{}", g.slot.clone().unwrap_or_default()),
                Confidence::Confirmed,
                format!("{what}: {}; {}", g.label(), facts.join(", ")),
            )
            .with_sources(g.sources.iter().map(|s| file_src(s.clone(), "read"))),
        );
    }
    if let Some(v) = &probe.nvidia_driver {
        claims.push(
            Claim::new("doctor.gpu.nvidia-driver", Confidence::Confirmed, format!("NVIDIA kernel driver {v}"))
                .with_source(file_src(
                    host.path("/proc/driver/nvidia/version").display().to_string(),
                    "NVRM version line",
                )),
        );
    }
}

/// Which GPU kernel modules are loaded, and a GPU whose module is not.
pub(super) fn module_claims(
    module_map: &BTreeMap<String, bool>,
    modules_source: &Option<String>,
    probe: &gpus::GpuProbe,
    claims: &mut Vec<Claim>,
) {
    if let Some(src) = &modules_source {
        let loaded: Vec<&str> = module_map.iter().filter(|(_, l)| **l).map(|(m, _)| m.as_str()).collect();
        claims.push(
            Claim::new(
                "doctor.modules",
                Confidence::Confirmed,
                if loaded.is_empty() {
                    format!("none of the GPU kernel modules {} is loaded", MODULES.join(", "))
                } else {
                    format!("GPU kernel modules loaded: {}", loaded.join(", "))
                },
            )
            .with_source(file_src(src.clone(), "module list")),
        );
        for (vendor, module) in [("amd", "amdgpu"), ("nvidia", "nvidia")] {
            if probe.gpus.iter().any(|g| g.vendor == vendor) && module_map.get(module) == Some(&false) {
                claims.push(
                    Claim::new(
                        format!("doctor.modules.{module}-missing"),
                        Confidence::Confirmed,
                        format!(
                            "an {vendor} GPU is present but the {module} module is not loaded: no runtime can use it"
                        ),
                    )
                    .with_source(file_src(src.clone(), "module list")),
                );
            }
        }
    }
}

/// This process's user and the one asked about.
pub(super) fn users(host: &Host, user: Option<&String>, claims: &mut Vec<Claim>) -> Vec<access::User> {
    let mut users = vec![access::current_user(host)];
    let mut user_errors = Vec::new();
    if let Some(name) = user {
        match access::named_user(host, name) {
            Ok(u) => users.push(u),
            Err(e) => user_errors.push(e),
        }
    }
    for e in &user_errors {
        claims.push(
            Claim::new("doctor.access.user", Confidence::Unresolved, format!("cannot check access for the user: {e}"))
                .with_source(file_src(host.path("/etc/passwd").display().to_string(), "user database")),
        );
    }
    users
}

/// The service environment (systemd first, the unit files when systemd cannot answer).
pub(super) fn service_unit(host: &Host, use_tools: bool, tool_runs: &[tools::ToolRun]) -> Option<env::ServiceUnit> {
    let service = if use_tools {
        tool(tool_runs, "systemctl").filter(|r| r.exit == Some(0)).and_then(|r| env::parse_systemctl_show(&r.stdout))
    } else {
        None
    };
    service.or_else(|| {
        let u = env::unit_files(host);
        (!u.read_from.is_empty()).then_some(u)
    })
}

/// The service's user, when it runs as one, is checked too.
pub(super) fn add_service_user(host: &Host, service: Option<&env::ServiceUnit>, users: &mut Vec<access::User>) {
    if let Some(user) = service.and_then(|s| s.user.clone()) {
        if !users.iter().any(|u| u.name == user) {
            if let Ok(u) = access::named_user(host, &user) {
                users.push(u);
            }
        }
    }
}

/// Whether each user can open each GPU device node.
pub(super) fn device_access(
    host: &Host,
    device_nodes: &[std::path::PathBuf],
    users: &[access::User],
    claims: &mut Vec<Claim>,
) -> Vec<access::NodeAccess> {
    let mut device_access = Vec::new();
    for node in device_nodes {
        for u in users {
            if let Some(a) = access::check(host, node, u) {
                let src = file_src(
                    a.path.clone(),
                    format!(
                        "mode {} uid {} gid {}{}",
                        a.mode,
                        a.owner,
                        a.group,
                        a.group_name.as_ref().map(|g| format!(" ({g})")).unwrap_or_default()
                    ),
                );
                let user_src = if u.from.starts_with("this process") {
                    file_src("/proc/self/status", "Uid, Gid and Groups of this process")
                } else {
                    file_src(host.path("/etc/group").display().to_string(), format!("groups of {}", u.name))
                };
                claims.push(
                    Claim::new(
                        format!("doctor.access.{}.{}", u.name, a.path.rsplit('/').next().unwrap_or("")),
                        Confidence::Confirmed,
                        format!(
                            "{} {} open {} read-write ({})",
                            u.name,
                            if a.read_write { "can" } else { "cannot" },
                            a.path,
                            a.why
                        ),
                    )
                    .with_source(src)
                    .with_source(user_src),
                );
                device_access.push(a);
            }
        }
    }
    if device_nodes.is_empty() {
        claims.push(
            Claim::new(
                "doctor.access.no-nodes",
                Confidence::Confirmed,
                "no GPU device node: /dev/kfd, /dev/dri/renderD* and /dev/nvidia* do not exist",
            )
            .with_source(file_src(host.path("/dev").display().to_string(), "listed")),
        );
    }
    device_access
}

/// Vulkan drivers, implicit layers and the loader's environment.
pub(super) fn vulkan_claims(vk: &vulkan::VulkanSetup, claims: &mut Vec<Claim>) {
    if vk.icds.is_empty() {
        claims.push(
            Claim::new(
                "doctor.vulkan.icds",
                Confidence::Confirmed,
                "no Vulkan driver manifest (ICD) in the loader's search paths",
            )
            .with_sources(vk.icd_dirs.iter().take(4).map(|d| file_src(d.clone(), "searched"))),
        );
    } else {
        let names: Vec<String> = vk.icds.iter().map(|m| m.library.clone().unwrap_or_else(|| m.path.clone())).collect();
        claims.push(
            Claim::new(
                "doctor.vulkan.icds",
                Confidence::Confirmed,
                format!("Vulkan driver manifests: {}", names.join(", ")),
            )
            .with_sources(vk.icds.iter().take(8).map(|m| file_src(m.path.clone(), "ICD manifest"))),
        );
    }
    for l in &vk.implicit_layers {
        let src = file_src(l.path.clone(), "implicit layer manifest");
        if let Some(e) = &l.error {
            claims.push(
                Claim::new(
                    "doctor.vulkan.layer-unreadable",
                    Confidence::Limited,
                    format!("implicit layer manifest {} unreadable: {e}", l.path),
                )
                .with_source(src),
            );
            continue;
        }
        let off = l.disable_with.as_ref().map(|d| format!("; set {d} to turn it off")).unwrap_or_default();
        let (confidence, statement) = if !l.active {
            (
                Confidence::Confirmed,
                format!("implicit Vulkan layer {} is installed but not active ({})", l.name, l.activity),
            )
        } else if l.mesa {
            (Confidence::Confirmed, format!("Mesa's implicit Vulkan layer {} is active ({}){off}", l.name, l.activity))
        } else {
            (
                Confidence::Inferred,
                format!(
                    "third-party implicit Vulkan layer {} ({}) is injected into every Vulkan program, llama.cpp's Vulkan backend included: an injected layer has crashed llama.cpp (ggml-org/llama.cpp#8828){off}",
                    l.name,
                    l.library.as_deref().unwrap_or("?")
                ),
            )
        };
        claims.push(Claim::new(format!("doctor.vulkan.layer.{}", l.name), confidence, statement).with_source(src));
    }
    for (k, v) in &vk.env {
        claims.push(
            Claim::new(
                format!("doctor.vulkan.env.{k}"),
                Confidence::Confirmed,
                format!("{k}={v} changes where the Vulkan loader looks for drivers or layers"),
            )
            .with_source(environment_source("process")),
        );
    }
}

/// Environment: the process's and the service's.
pub(super) fn environment(
    env: &BTreeMap<String, String>,
    service: Option<&env::ServiceUnit>,
    claims: &mut Vec<Claim>,
) -> Vec<env::Setting> {
    let mut environment = env::settings(env, "process");
    if let Some(svc) = &service {
        environment.extend(svc.environment.iter().filter(|s| env::relevant(&s.name)).cloned());
        claims.push(
            Claim::new(
                "doctor.service",
                Confidence::Confirmed,
                format!(
                    "ollama.service runs as {} with {} environment setting(s){}",
                    svc.user.as_deref().unwrap_or("root (no User=)"),
                    svc.environment.len(),
                    if svc.environment_files.is_empty() {
                        String::new()
                    } else {
                        format!(" plus EnvironmentFile {}", svc.environment_files.join(", "))
                    }
                ),
            )
            .with_sources(svc.read_from.iter().map(|f| file_src(f.clone(), "unit"))),
        );
    }
    for s in &environment {
        claims.push(
            Claim::new(
                format!("doctor.env.{}", s.name),
                Confidence::Confirmed,
                format!(
                    "{}={} ({})",
                    s.name,
                    s.value,
                    if s.origin == "process" {
                        "this shell's environment".to_string()
                    } else {
                        format!("ollama.service, {}", s.origin)
                    }
                ),
            )
            .with_source(environment_source(&s.origin)),
        );
    }
    environment
}

/// HSA overrides against each AMD GPU's real ISA; a per-device variable applies to that device index.
pub(super) fn overrides(
    probe: &gpus::GpuProbe,
    environment: &[env::Setting],
    claims: &mut Vec<Claim>,
) -> Vec<OverrideFinding> {
    let amd: Vec<&gpus::Gpu> = probe.gpus.iter().filter(|g| g.gfx_target.is_some()).collect();
    let mut overrides = Vec::new();
    for s in environment.iter().filter(|s| s.name.starts_with("HSA_OVERRIDE_GFX_VERSION")) {
        let target = env::override_target(&s.value);
        let index: Option<usize> = s.name.strip_prefix("HSA_OVERRIDE_GFX_VERSION_").and_then(|n| n.parse().ok());
        let mut per_gpu = Vec::new();
        if let Some(t) = &target {
            for (i, g) in amd.iter().enumerate() {
                if index.is_some_and(|n| n != i) {
                    continue;
                }
                per_gpu.push(env::override_risk(g.gfx_target.as_deref().unwrap_or(""), t));
            }
        }
        let src = environment_source(&s.origin);
        match (&target, per_gpu.is_empty()) {
            (None, _) => claims.push(Claim::new(format!("doctor.override.{}", s.name), Confidence::Confirmed, format!("{}={} is not a x.y.z version: ROCm ignores or rejects it", s.name, s.value)).with_source(src)),
            (Some(t), true) => claims.push(Claim::new(format!("doctor.override.{}", s.name), Confidence::Inferred, format!("{}={} makes ROCm treat the GPU as {t}; no AMD GPU with a known ISA was found to compare it with", s.name, s.value)).with_source(src)),
            (Some(t), false) => {
                for r in &per_gpu {
                    let (confidence, verdict) = match r.risk {
                        "crash" => (Confidence::Inferred, "crash risk: code built for the override's target uses what the card lacks"),
                        "low" => (Confidence::Inferred, "the override's target uses nothing the card lacks"),
                        "none" => (Confidence::Confirmed, "a no-op"),
                        _ => (Confidence::Unresolved, "cannot judge"),
                    };
                    claims.push(
                        Claim::new(
                            format!("doctor.override.{}.{}", s.name, r.card),
                            confidence,
                            format!("{}={} makes ROCm load {t} code on the {} card: {verdict} ({})", s.name, s.value, r.card, r.reasons.join("; ")),
                        )
                        .with_source(src.clone())
                        .with_sources(r.sources.iter().cloned()),
                    );
                }
            }
        }
        overrides.push(OverrideFinding {
            variable: s.name.clone(),
            value: s.value.clone(),
            origin: s.origin.clone(),
            target,
            per_gpu,
        });
    }
    overrides
}

/// The runtimes installed, with the version `ollama --version` names.
pub(super) fn runtime_claims(rts: &mut runtimes::RuntimeProbe, tool_runs: &[tools::ToolRun], claims: &mut Vec<Claim>) {
    if let Some(run) = tool(tool_runs, "ollama") {
        if let Some(v) = tools::parse_ollama_version(&format!("{}\n{}", run.stdout, run.stderr)) {
            for r in rts.runtimes.iter_mut().filter(|r| r.kind == "ollama") {
                r.version = Some(v.clone());
                r.version_source = Some(run.argv.join(" "));
            }
        }
    }
    if rts.runtimes.is_empty() {
        claims.push(
            Claim::new(
                "doctor.runtimes.none",
                Confidence::Confirmed,
                "no Ollama, ROCm, CUDA or llama.cpp install on the usual paths or on PATH",
            )
            .with_sources(rts.absent.iter().map(|p| file_src(p.clone(), "absent"))),
        );
    }
    for r in &rts.runtimes {
        let version = r.version.as_ref().map(|v| format!(" {v}")).unwrap_or_default();
        let libs: Vec<&str> = r.ggml_libraries.iter().map(|l| l.rsplit('/').next().unwrap_or(l)).collect();
        claims.push(
            Claim::new(
                format!("doctor.runtime.{}.{}", r.kind, r.path),
                Confidence::Confirmed,
                format!(
                    "{}{version} at {}: ggml GPU libraries {}; vendor BLAS dirs {}",
                    r.kind,
                    r.path,
                    if libs.is_empty() { "none".to_string() } else { libs.join(", ") },
                    if r.vendor_dirs.is_empty() { "none".to_string() } else { r.vendor_dirs.len().to_string() }
                ),
            )
            .with_source(file_src(r.path.clone(), "install tree"))
            .with_sources(r.version_source.iter().map(|s| file_src(s.clone(), "version"))),
        );
    }
}

/// What each tool that ran says.
pub(super) fn tool_claims(tool_runs: &[tools::ToolRun], service: Option<&env::ServiceUnit>, claims: &mut Vec<Claim>) {
    for run in tool_runs {
        let name = Path::new(&run.argv[0]).file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        let src = tool_source(run);
        let statement = tool_statement(&name, run, service);
        claims.push(Claim::new(format!("doctor.tool.{name}"), Confidence::Confirmed, statement).with_source(src));
    }
}

/// One tool's output in a sentence.
fn tool_statement(name: &str, run: &tools::ToolRun, service: Option<&env::ServiceUnit>) -> String {
    match name {
        "rocminfo" => {
            let agents = tools::parse_rocminfo(&run.stdout);
            if agents.is_empty() {
                format!("rocminfo lists no GPU agent ({}: {})", run.status(), run.excerpt(2))
            } else {
                let a: Vec<String> = agents
                    .iter()
                    .map(|a| format!("{} ({})", a.name, a.marketing_name.as_deref().unwrap_or("?")))
                    .collect();
                format!("rocminfo lists GPU agent(s): {}", a.join(", "))
            }
        }
        "vulkaninfo" => {
            let devs = tools::parse_vulkaninfo(&run.stdout);
            if devs.is_empty() {
                format!("vulkaninfo lists no device ({})", run.status())
            } else {
                let d: Vec<String> = devs
                    .iter()
                    .map(|d| {
                        let kind = if d.device_type.ends_with("_CPU") {
                            "a CPU implementation, not a GPU".to_string()
                        } else {
                            d.device_type.trim_start_matches("PHYSICAL_DEVICE_TYPE_").to_ascii_lowercase()
                        };
                        format!("GPU{} {} ({kind}; driver {} {})", d.index, d.name, d.driver, d.driver_info)
                    })
                    .collect();
                format!("vulkaninfo lists {}", d.join("; "))
            }
        }
        "nvidia-smi" => {
            let g = tools::parse_nvidia_smi(&run.stdout);
            if g.is_empty() {
                format!("nvidia-smi lists no GPU ({}: {})", run.status(), run.excerpt(2))
            } else {
                let s: Vec<String> = g
                    .iter()
                    .map(|g| {
                        format!(
                            "{} {} (compute capability {}, driver {}, {})",
                            g.index, g.name, g.compute_cap, g.driver, g.bus_id
                        )
                    })
                    .collect();
                format!("nvidia-smi lists {}", s.join("; "))
            }
        }
        "systemctl" => match &service {
            Some(s) if s.read_from.iter().any(|f| f.starts_with("systemctl")) => {
                "systemctl shows ollama.service (its environment is under ollama.service)".to_string()
            }
            _ if run.exit == Some(0) => "systemd has no ollama.service unit".to_string(),
            _ => format!("systemctl could not report on ollama.service ({}: {})", run.status(), run.excerpt(2)),
        },
        _ => format!("{} → {} ({})", run.argv.join(" "), run.excerpt(2), run.status()),
    }
}

/// The gate for each GPU.
pub(super) fn gates(
    probe: &gpus::GpuProbe,
    rts: &runtimes::RuntimeProbe,
    scan: Option<&ScanReport>,
    claims: &mut Vec<Claim>,
) -> Result<Vec<GpuGate>> {
    let ollama = match rts.runtimes.iter().find(|r| r.kind == "ollama").and_then(|r| r.version.clone()) {
        Some(v) => OllamaRelease::from_option(Some(&v)).unwrap_or(OllamaRelease::from_option(None)?),
        None => OllamaRelease::from_option(None)?,
    };
    let rocm = rts
        .runtimes
        .iter()
        .find(|r| r.kind == "rocm")
        .and_then(|r| r.version.as_deref())
        .map(|v| v.split('-').next().unwrap_or(v).to_string());
    let mut gates = Vec::new();
    for g in &probe.gpus {
        let label = g.label();
        let Some(arch) = g.arch() else {
            let why = match g.vendor {
                "nvidia" => "the compute capability is unknown (the driver's files do not state it and nvidia-smi did not run): run `backscope gate --arch sm_XX`",
                "amd" => "KFD states no ISA for it (amdgpu's compute interface is not up)",
                _ => "not a GPU that ggml's CUDA/HIP backends drive",
            };
            gates.push(GpuGate { gpu: label, arch: None, report: None, why_none: Some(why.into()) });
            continue;
        };
        let report = gate::evaluate(&gate::Inputs {
            arch: &arch,
            scan,
            logs: &[],
            records: None,
            ollama: &ollama,
            rocm: rocm.as_deref(),
        })?;
        claims.push(
            Claim::new(
                format!("doctor.gate.{arch}"),
                Confidence::Inferred,
                format!("gate for {label}: {}", report.verdict),
            )
            .with_sources(report.claims.last().map(|c| c.sources.clone()).unwrap_or_default()),
        );
        gates.push(GpuGate { gpu: label, arch: Some(arch), report: Some(report), why_none: None });
    }
    Ok(gates)
}
