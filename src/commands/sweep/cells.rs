//! The plan expanded into cells ([`Schedule`]): one request each, in execution order, with everything the runner
//! needs to run and record it computed here — its resume key, its directory, the server it needs (the launch, its
//! restart key, the name of its log) or the external endpoint it goes to, the model name the endpoint understands
//! and the prompt text. The runner derives no names of its own.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::plan::{Endpoint, EndpointKind, Plan, Prompt, Timeouts};
use super::presets::{Launch, ServerKey};
use crate::run::format::paths::sanitize;
use crate::run::format::record::Api;
use crate::run::format::run_dir::RunDir;

/// The cells of a plan and the settings they share.
#[derive(Debug)]
pub struct Schedule {
    pub cells: Vec<Cell>,
    pub request: RequestSettings,
    pub timeouts: Timeouts,
    /// `--trace` for managed servers: the observer they get.
    pub observer: Option<Observer>,
}

/// What every request of a run asks for besides its cell's own values.
#[derive(Clone, Debug)]
pub struct RequestSettings {
    pub temperature: f64,
    pub seed: i64,
    pub stream: bool,
    pub options: Map<String, Value>,
    pub request: Map<String, Value>,
}

/// The dispatch observer preloaded into managed servers.
#[derive(Clone, Debug)]
pub struct Observer {
    pub library: PathBuf,
    pub interval_ms: u64,
    /// The Vulkan layer's manifest directory, when Vulkan dispatches are observed too.
    pub vulkan_manifest: Option<PathBuf>,
}

/// One request of the plan.
#[derive(Clone, Debug)]
pub struct Cell {
    /// Position in the plan (0-based).
    pub seq: u64,
    /// The stable key `--resume` matches on: `endpoint|model|ngl=N|prompt|n=N|eE|rR`.
    pub key: String,
    /// The cell's directory inside the run directory.
    pub dir: String,
    pub endpoint: String,
    /// The API, when known before the first request.
    pub api: Option<Api>,
    pub target: Target,
    /// The model's label (tables, keys).
    pub model: String,
    /// The model as this endpoint names it: Ollama's name, or the GGUF file a managed server loaded.
    pub model_name: String,
    /// Layers offloaded to the GPU (-1 = the runtime decides; also "as started" for an external llama-server).
    pub num_gpu: i64,
    pub prompt: Arc<Prompt>,
    pub num_predict: i64,
    pub epoch: u32,
    pub repetition: u32,
}

impl Cell {
    pub fn is_managed(&self) -> bool {
        matches!(self.target, Target::Managed(_))
    }
}

/// Where a cell's request goes.
#[derive(Clone, Debug)]
pub enum Target {
    /// A server backscope starts; cells with the same key share one.
    Managed(Arc<ManagedServer>),
    /// A server someone else runs.
    External(Arc<ExternalEndpoint>),
}

#[derive(Debug)]
pub struct ManagedServer {
    pub key: ServerKey,
    pub endpoint: String,
    pub launch: Launch,
    pub fixed_port: Option<u16>,
    pub ready_timeout_s: f64,
    /// The endpoint's name as it appears in file names: `servers/sNNN-{file_stem}.log`, `traces/sNNN-{file_stem}`.
    pub file_stem: String,
}

#[derive(Debug)]
pub struct ExternalEndpoint {
    pub name: String,
    pub url: String,
    /// Known from the spec or detected when the run was created; `None`: detected by the first cell.
    pub api: Option<Api>,
    /// A log file its server writes, sliced per cell.
    pub log_file: Option<PathBuf>,
    /// With `--trace`: where its observed server writes trace files.
    pub trace_dir: Option<PathBuf>,
    /// Whether the plan sweeps num_gpu, which an external llama-server cannot follow (its cells say so).
    pub num_gpu_swept: bool,
}

impl Schedule {
    /// All cells, in execution order: epoch, endpoint, model, num_gpu, prompt, num_predict, repetition. Endpoints
    /// inside epochs keep a managed server running across its cells and, with several epochs, interleave the
    /// endpoints over time so drift (thermal, other load) does not favour one.
    pub fn of(plan: &Plan) -> Schedule {
        let prompts: Vec<Arc<Prompt>> = plan.prompts.iter().cloned().map(Arc::new).collect();
        let mut cells = Vec::new();
        for epoch in 1..=plan.epochs {
            for ep in &plan.endpoints {
                // An endpoint that cannot set num_gpu gets one cell per combination, recorded as -1 ("as started").
                let ngl: Vec<i64> = if ep.num_gpu_settable() { plan.num_gpu.clone() } else { vec![-1] };
                for m in &plan.models {
                    for &num_gpu in &ngl {
                        let target = target(ep, plan, &m.gguf, num_gpu);
                        for prompt in &prompts {
                            for &num_predict in &plan.num_predict {
                                for repetition in 1..=plan.repetitions {
                                    let seq = cells.len() as u64;
                                    let key = format!(
                                        "{}|{}|ngl={num_gpu}|{}|n={num_predict}|e{epoch}|r{repetition}",
                                        ep.name, m.label, prompt.name
                                    );
                                    let dir = RunDir::cell_dir(seq, &ep.name, num_gpu, epoch, repetition);
                                    cells.push(Cell {
                                        seq,
                                        key,
                                        dir,
                                        endpoint: ep.name.clone(),
                                        api: ep.api(),
                                        target: target.clone(),
                                        model: m.label.clone(),
                                        model_name: ep.model_name(m).to_string(),
                                        num_gpu,
                                        prompt: Arc::clone(prompt),
                                        num_predict,
                                        epoch,
                                        repetition,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        let observer = plan.trace.as_ref().and_then(|t| {
            t.observer.as_ref().map(|library| Observer {
                library: library.clone(),
                interval_ms: t.interval_ms,
                vulkan_manifest: t.vulkan_manifest.clone(),
            })
        });
        Schedule {
            cells,
            request: RequestSettings {
                temperature: plan.temperature,
                seed: plan.seed,
                stream: plan.stream,
                options: plan.options.clone(),
                request: plan.request.clone(),
            },
            timeouts: plan.timeouts,
            observer,
        }
    }
}

fn target(ep: &Endpoint, plan: &Plan, model_file: &str, num_gpu: i64) -> Target {
    match &ep.kind {
        EndpointKind::External { url, api, log_file } => Target::External(Arc::new(ExternalEndpoint {
            name: ep.name.clone(),
            url: url.clone(),
            api: *api,
            log_file: log_file.clone(),
            trace_dir: plan.trace.as_ref().and_then(|t| t.dirs.get(&ep.name).cloned()),
            num_gpu_swept: plan.num_gpu.iter().any(|&n| n != -1),
        })),
        EndpointKind::Managed { preset, api, program, args, env, port, ready_timeout_s } => {
            let launch = Launch {
                preset: *preset,
                api: *api,
                program: program.clone(),
                args: args.clone(),
                env: env.clone(),
                model_file: model_file.to_string(),
                num_gpu,
            };
            Target::Managed(Arc::new(ManagedServer {
                key: launch.server_key(&ep.name),
                endpoint: ep.name.clone(),
                launch,
                fixed_port: *port,
                ready_timeout_s: *ready_timeout_s,
                file_stem: sanitize(&ep.name),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::commands::sweep::flags::SweepFlags;
    use crate::commands::sweep::plan::resolve;
    use crate::commands::sweep::spec::SpecFile;

    fn schedule(f: impl FnOnce(&mut SweepFlags), detect: &mut dyn FnMut(&str) -> Option<Api>) -> (Plan, Schedule) {
        let mut flags = SweepFlags::default();
        f(&mut flags);
        let spec = flags.merge_onto(SpecFile::default(), Path::new("/cwd")).unwrap();
        let plan = resolve(&spec, detect).unwrap();
        let s = Schedule::of(&plan);
        (plan, s)
    }

    fn managed(c: &Cell) -> &ManagedServer {
        match &c.target {
            Target::Managed(m) => m,
            Target::External(_) => panic!("cell {} is external", c.key),
        }
    }

    #[test]
    fn the_investigations_replay_is_one_command() {
        let (plan, s) = schedule(
            |f| {
                f.endpoints = vec!["rocm=http://127.0.0.1:11435".into(), "vulkan=http://127.0.0.1:11434".into()];
                f.models = vec!["qwen3.5:2b".into()];
                f.num_gpu = vec![0, 1, 2, -1];
                f.num_predict = vec![512];
                f.epochs = Some(1);
            },
            &mut |_| None,
        );
        assert_eq!(s.cells.len(), 8);
        assert_eq!(s.cells[0].key, "rocm|qwen3.5:2b|ngl=0|default|n=512|e1|r1");
        assert_eq!(s.cells[7].key, "vulkan|qwen3.5:2b|ngl=-1|default|n=512|e1|r1");
        assert_eq!(s.cells[7].dir, "cells/00007-vulkan-ngl-1-e1r1");
        assert_eq!((s.request.temperature, s.request.seed, s.request.stream), (0.0, 42, true));
        assert!(s.cells.iter().all(|c| !c.is_managed()));
        assert_eq!(plan.endpoints.len(), 2);
    }

    #[test]
    fn managed_cells_carry_their_launch_and_restart_key() {
        let (_, s) = schedule(
            |f| {
                f.servers =
                    vec!["cpu=llama-server:--device,none".into(), "vulkan=llama-server:--device,Vulkan0".into()];
                f.env = vec!["vulkan:GGML_VK_VISIBLE_DEVICES=0".into()];
                f.llama_bin = Some("/opt/llama/bin".into());
                f.models = vec!["tiny.gguf".into()];
                f.num_gpu = vec![0, 1, -1];
            },
            &mut |_| None,
        );
        assert_eq!(s.cells.len(), 6);
        let vk: Vec<&ManagedServer> = s.cells[3..].iter().map(managed).collect();
        let ps = vk[1].launch.process(4242);
        assert_eq!(ps.program, PathBuf::from("/opt/llama/bin/llama-server"));
        assert_eq!(
            ps.args.join(" "),
            "-m tiny.gguf --host 127.0.0.1 --port 4242 -ngl 1 -lv 4 --metrics --device Vulkan0"
        );
        assert_eq!(ps.env, vec![("GGML_VK_VISIBLE_DEVICES".to_string(), "0".to_string())]);
        assert_ne!(vk[0].key, vk[1].key, "a new num_gpu restarts llama-server");
        assert_eq!(vk[0].file_stem, "vulkan");
    }

    #[test]
    fn an_external_llama_server_runs_as_started() {
        let (_, s) = schedule(
            |f| {
                f.endpoints = vec!["ls=http://127.0.0.1:8080/".into(), "ol=http://127.0.0.1:11434".into()];
                f.models = vec!["m".into()];
                f.num_gpu = vec![0, 99];
            },
            &mut |url| url.contains("8080").then_some(Api::LlamaCpp),
        );
        let ngl = |name: &str| s.cells.iter().filter(|c| c.endpoint == name).map(|c| c.num_gpu).collect::<Vec<_>>();
        assert_eq!(ngl("ls"), [-1]);
        assert_eq!(ngl("ol"), [0, 99]);
        let Target::External(ls) = &s.cells[0].target else { panic!("external") };
        assert_eq!((ls.url.as_str(), ls.api, ls.num_gpu_swept), ("http://127.0.0.1:8080", Some(Api::LlamaCpp), true));
        assert_eq!(s.cells[0].model_name, "m");
    }

    #[test]
    fn ollama_keeps_one_server_across_num_gpu_and_gets_the_model_by_name() {
        let spec: SpecFile = toml::from_str(
            r#"
            models = ["qwen3.5:2b"]
            num_gpu = [0, 1]
            [[endpoints]]
            name = "vk"
            server = "ollama"
            "#,
        )
        .unwrap();
        let s = Schedule::of(&resolve(&spec, &mut |_| None).unwrap());
        assert_eq!(managed(&s.cells[0]).key, managed(&s.cells[1]).key);
        assert_eq!(s.cells[0].model_name, "qwen3.5:2b");
    }

    /// `testdata/plan-f146fcc.json` is the plan a run of backscope f146fcc (before the sweep was split into these
    /// modules) stored in SQLite; `testdata/plan-f146fcc-cells.jsonl` is what that run recorded for each cell — its
    /// key and result file — and the argv of the server start each managed cell made, read from its `--json`
    /// events with the port replaced by `{port}` (every start failed to spawn, so each managed cell made one).
    #[test]
    fn a_plan_stored_before_the_split_resumes_with_the_same_cells() {
        let stored = include_str!("testdata/plan-f146fcc.json");
        let plan: Plan = serde_json::from_str(stored).unwrap();
        assert_eq!(serde_json::to_value(&plan).unwrap(), serde_json::from_str::<Value>(stored).unwrap());
        let s = Schedule::of(&plan);
        let recorded: Vec<Value> = include_str!("testdata/plan-f146fcc-cells.jsonl")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(s.cells.len(), recorded.len());
        for (c, r) in s.cells.iter().zip(&recorded) {
            assert_eq!(c.seq, r["seq"].as_u64().unwrap());
            assert_eq!(c.key, r["cell_key"].as_str().unwrap());
            assert_eq!(format!("{}/result.json", c.dir), r["file"].as_str().unwrap());
            let argv = match &c.target {
                Target::Managed(m) => Some(m.launch.process(4242).argv()),
                Target::External(_) => None,
            };
            let want = r["server_argv"]
                .as_array()
                .map(|a| a.iter().map(|x| x.as_str().unwrap().replace("{port}", "4242")).collect::<Vec<_>>());
            assert_eq!(argv, want, "cell {}", c.key);
        }
    }
}
