//! `doctor`: what this host offers a local LLM runtime, from files any user can read — GPUs (sysfs, KFD,
//! /proc/driver/nvidia), device-node permissions for the current user or a service user, loaded kernel modules,
//! Vulkan drivers and implicit layers, environment overrides (the process's and ollama.service's), installed
//! runtimes with a bounded scan — plus the vendor tools when present, and the gate verdict for each GPU found.
//! Every finding is a claim with its source; where nothing is found, the places looked at are the sources.
//!
//! The filesystem root is an option (`/` by default) so that tests can build a fake sysfs/proc/dev tree; tools
//! and systemd are consulted only for the real root, where what they report belongs to the same machine.

mod access;
mod env;
mod findings;
mod gpus;
mod host;
mod render;
mod report;
mod runtimes;
mod tools;
mod vulkan;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;

use self::findings::*;
use self::host::Host;
pub use self::report::{DoctorReport, GpuGate, OverrideFinding, SCHEMA};

/// Options of [`doctor`].
#[derive(Clone, Debug)]
pub struct DoctorOptions {
    pub root: PathBuf,
    /// Also check device access for this user (e.g. `ollama`).
    pub user: Option<String>,
    /// The environment to read (default: this process's).
    pub env: Option<BTreeMap<String, String>>,
    /// Run rocminfo, vulkaninfo, nvidia-smi, systemctl, ollama (default: only when `root` is `/`).
    pub tools: Option<bool>,
    /// Deadline of each tool.
    pub tool_timeout: Duration,
    /// Scan the ggml GPU libraries of the runtimes found.
    pub scan: bool,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions {
            root: PathBuf::from("/"),
            user: None,
            env: None,
            tools: None,
            tool_timeout: Duration::from_secs(5),
            scan: true,
        }
    }
}

/// One `backscope doctor` invocation.
#[derive(Clone, Debug, Default)]
pub struct DoctorCommand {
    pub options: DoctorOptions,
    /// Format (JSON: schema backscope.doctor/1) and destination.
    pub output: crate::output::OutputOptions,
}

/// Probe the host.
pub fn doctor(opts: &DoctorOptions) -> Result<DoctorReport> {
    let started = Instant::now();
    let host = Host { root: opts.root.clone() };
    let env: BTreeMap<String, String> = opts.env.clone().unwrap_or_else(|| std::env::vars().collect());
    let real = host.is_real();
    let use_tools = opts.tools.unwrap_or(real);
    let mut claims = Vec::new();

    // The tools run while the files are read.
    let (tool_runs, (mut probe, device_nodes, modules, vk, rts)) = std::thread::scope(|s| {
        let t = s.spawn(|| if use_tools { run_tools(&env, opts.tool_timeout) } else { Vec::new() });
        let probe = gpus::probe(&host);
        let nodes = access::gpu_nodes(&host);
        let modules = loaded_modules(&host);
        let vk = vulkan::probe(&host, &env);
        let rts = runtimes::find(&host, env.get("PATH").map(String::as_str));
        (t.join().unwrap_or_default(), (probe, nodes, modules, vk, rts))
    });
    merge_nvidia_smi(&mut probe, &tool_runs);
    gpu_claims(&host, &probe, &mut claims);
    let (module_map, modules_source, modules_limited) = modules;
    claims.extend(modules_limited);
    module_claims(&module_map, &modules_source, &probe, &mut claims);

    let mut users = users(&host, opts.user.as_ref(), &mut claims);
    let service = service_unit(&host, use_tools, &tool_runs);
    add_service_user(&host, service.as_ref(), &mut users);
    let device_access = device_access(&host, &device_nodes, &users, &mut claims);

    vulkan_claims(&vk, &mut claims);
    let mut rts = rts;
    let runtime_dirs: Vec<String> = rts.runtimes.iter().map(|r| r.path.clone()).collect();
    claims.extend(vulkan::capability_claims(&runtime_dirs, &env, use_tools, opts.tool_timeout));

    let environment = environment(&env, service.as_ref(), &mut claims);
    let overrides = overrides(&probe, &environment, &mut claims);

    runtime_claims(&mut rts, &tool_runs, &mut claims);
    let scan = if opts.scan { runtimes::scan_runtimes(&rts.runtimes) } else { None };
    tool_claims(&tool_runs, service.as_ref(), &mut claims);
    let gates = gates(&probe, &rts, scan.as_ref(), &mut claims)?;

    Ok(DoctorReport {
        schema: SCHEMA,
        root: host.root.display().to_string(),
        elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        gpus: probe,
        users,
        device_access,
        modules: module_map,
        modules_source,
        vulkan: vk,
        environment,
        service,
        overrides,
        runtimes: rts,
        tools: tool_runs,
        gates,
        claims,
    })
}

/// Probe and print.
pub fn run(cmd: &DoctorCommand) -> Result<u8> {
    // Every file under a root other than `/` may be read (libraries, manifests, tools); the real root's own reads
    // are a few system directories, and refusing every existing -o path under `/` would refuse them all.
    let root = Some(&cmd.options.root).filter(|r| r.as_path() != Path::new("/"));
    let mut out = crate::output::Output::open(&cmd.output, &crate::output::Inputs::none().maybe(root))?;
    out.emit(&doctor(&cmd.options)?)?;
    out.finish()?;
    Ok(crate::exit::OK)
}
