//! Everything backscope knows about the servers it starts, one place per preset: the program it runs by default, the
//! API it speaks, the argv and environment it gets, what it takes at start (and so what restarts it), the path that
//! says it is ready, what to tell the user when its program is not found, and which commands describe it in the
//! environment snapshot.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::supervise::ProcessSpec;
use crate::run::format::record::Api;

/// The host every managed server binds: servers are local, and loopback keeps them off the network.
const HOST: &str = "127.0.0.1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum Preset {
    /// llama.cpp's server: backscope adds `-m MODEL --host 127.0.0.1 --port P [-ngl N] -lv 4 --metrics`.
    #[serde(rename = "llama-server")]
    LlamaServer,
    /// `ollama serve` with `OLLAMA_HOST=127.0.0.1:P`; num_gpu and the model go in each request.
    #[serde(rename = "ollama")]
    Ollama,
    /// Any program; `{port}`, `{host}`, `{model}` and `{num_gpu}` in its args are substituted.
    #[serde(rename = "command")]
    Command,
}

impl Preset {
    /// The preset a `--server NAME=PRESET` flag names.
    pub fn parse(s: &str) -> Option<Preset> {
        match s {
            "llama-server" => Some(Preset::LlamaServer),
            "ollama" => Some(Preset::Ollama),
            "command" => Some(Preset::Command),
            _ => None,
        }
    }

    /// The program run when the endpoint names none: llama-server from `llama_bin` (else PATH), ollama from PATH.
    /// `None`: a `command` server must name its program.
    pub fn default_program(self, llama_bin: Option<&Path>) -> Option<PathBuf> {
        match self {
            Preset::LlamaServer => Some(match llama_bin {
                Some(dir) => dir.join("llama-server"),
                None => PathBuf::from("llama-server"),
            }),
            Preset::Ollama => Some(PathBuf::from("ollama")),
            Preset::Command => None,
        }
    }

    /// The API a server of this preset speaks, given the one the spec asks for; `None` when the request
    /// contradicts the preset. A `command` speaks what it is told (llama.cpp's by default).
    pub fn api(self, requested: Option<Api>) -> Option<Api> {
        match (self, requested) {
            (Preset::LlamaServer, None | Some(Api::LlamaCpp)) => Some(Api::LlamaCpp),
            (Preset::Ollama, None | Some(Api::Ollama)) => Some(Api::Ollama),
            (Preset::Command, a) => Some(a.unwrap_or(Api::LlamaCpp)),
            (Preset::LlamaServer | Preset::Ollama, Some(_)) => None,
        }
    }

    /// Whether num_gpu can differ between cells of one endpoint: per request (Ollama's API) or per start (a
    /// llama-server, or a command whose args take `{num_gpu}`).
    pub fn num_gpu_settable(self, api: Api, args: &[String]) -> bool {
        match self {
            Preset::Command => api == Api::Ollama || args.iter().any(|a| a.contains("{num_gpu}")),
            Preset::LlamaServer | Preset::Ollama => true,
        }
    }

    /// What to add to "cannot start PROGRAM: not found".
    pub fn not_found_hint(self) -> &'static str {
        match self {
            Preset::LlamaServer => {
                " (not found: pass --llama-bin DIR with the llama.cpp build's bin directory, or --program NAME=PATH)"
            }
            Preset::Ollama | Preset::Command => " (not found: pass --program NAME=PATH)",
        }
    }

    /// Arguments that make the program describe itself (version, devices) for the environment snapshot.
    pub fn self_description(self) -> &'static [&'static str] {
        match self {
            Preset::LlamaServer => &["--version", "--list-devices"],
            Preset::Ollama => &["--version"],
            Preset::Command => &[],
        }
    }
}

/// The GET path that answers 200 once a server of this API is ready to generate (llama-server answers 503 on
/// `/health` while it loads the model).
pub fn ready_path(api: Api) -> &'static str {
    match api {
        Api::Ollama => "/api/version",
        Api::LlamaCpp => "/health",
        Api::OpenAi => "/v1/models",
    }
}

/// Which server process a cell needs. Cells with equal keys run on one process; a new key means a (re)start.
/// llama-server takes the model and `-ngl` at start, Ollama per request, a command what its args name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerKey {
    pub endpoint: String,
    /// The model file, when the server takes it at start.
    pub model: Option<String>,
    /// `-ngl`, when the server takes it at start.
    pub num_gpu: Option<i64>,
}

/// How to start one managed server for one model and num_gpu: everything but the port, which is chosen at start.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub preset: Preset,
    pub api: Api,
    pub program: PathBuf,
    /// The endpoint's own args, appended (llama-server, ollama) or substituted (command).
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The GGUF file a llama-server loads (`{model}` of a command).
    pub model_file: String,
    pub num_gpu: i64,
}

impl Launch {
    /// The key of the process this launch starts (see [`ServerKey`]).
    pub fn server_key(&self, endpoint: &str) -> ServerKey {
        let (model, num_gpu) = match self.preset {
            Preset::LlamaServer => (Some(self.model_file.clone()), Some(self.num_gpu)),
            Preset::Ollama => (None, None),
            Preset::Command => (
                self.args.iter().any(|a| a.contains("{model}")).then(|| self.model_file.clone()),
                self.args.iter().any(|a| a.contains("{num_gpu}")).then_some(self.num_gpu),
            ),
        };
        ServerKey { endpoint: endpoint.to_string(), model, num_gpu }
    }

    /// The argv and environment at `port`. Never a shell string.
    pub fn process(&self, port: u16) -> ProcessSpec {
        let mut argv: Vec<String> = Vec::new();
        let mut env = self.env.clone();
        match self.preset {
            Preset::LlamaServer => {
                argv.extend(["-m".into(), self.model_file.clone(), "--host".into(), HOST.into()]);
                argv.extend(["--port".into(), port.to_string()]);
                // -1 = runtime decides: no flag, so llama.cpp's default (`auto`, fit to memory) applies, as Ollama does.
                if self.num_gpu >= 0 {
                    argv.extend(["-ngl".into(), self.num_gpu.to_string()]);
                }
                // -lv 4 makes llama-server log `using device …` and `offloaded N/M layers` (the backend evidence).
                argv.extend(["-lv".into(), "4".into(), "--metrics".into()]);
                argv.extend(self.args.iter().cloned());
            }
            Preset::Ollama => {
                argv.push("serve".into());
                argv.extend(self.args.iter().cloned());
                env.retain(|(k, _)| k != "OLLAMA_HOST");
                env.push(("OLLAMA_HOST".into(), format!("{HOST}:{port}")));
            }
            Preset::Command => {
                argv.extend(self.args.iter().map(|a| {
                    a.replace("{port}", &port.to_string())
                        .replace("{host}", HOST)
                        .replace("{model}", &self.model_file)
                        .replace("{num_gpu}", &self.num_gpu.to_string())
                }));
            }
        }
        ProcessSpec { program: self.program.clone(), args: argv, env }
    }

    pub fn ready_path(&self) -> &'static str {
        ready_path(self.api)
    }

    pub fn not_found_hint(&self) -> &'static str {
        self.preset.not_found_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(preset: Preset, args: &[&str], num_gpu: i64) -> Launch {
        Launch {
            preset,
            api: preset.api(None).unwrap(),
            program: PathBuf::from("/opt/llama/bin/llama-server"),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: vec![("GGML_VK_VISIBLE_DEVICES".into(), "0".into())],
            model_file: "tiny.gguf".into(),
            num_gpu,
        }
    }

    #[test]
    fn llama_server_gets_model_host_port_layers_and_the_evidence_flags() {
        // The argv llama.cpp 11434's `llama-server --help` documents: -m, --host, --port, -ngl, -lv, --metrics.
        let ps = launch(Preset::LlamaServer, &["--device", "Vulkan0"], 1).process(4242);
        assert_eq!(ps.program, PathBuf::from("/opt/llama/bin/llama-server"));
        let want = "-m tiny.gguf --host 127.0.0.1 --port 4242 -ngl 1 -lv 4 --metrics --device Vulkan0";
        assert_eq!(ps.args.join(" "), want);
        assert_eq!(ps.env, vec![("GGML_VK_VISIBLE_DEVICES".to_string(), "0".to_string())]);
        let auto = launch(Preset::LlamaServer, &[], -1).process(4242);
        assert!(!auto.args.contains(&"-ngl".to_string()), "-1 leaves -ngl to llama.cpp (auto)");
    }

    #[test]
    fn ollama_owns_its_host_variable() {
        let mut l = launch(Preset::Ollama, &[], 1);
        l.env.push(("OLLAMA_HOST".into(), "0.0.0.0:1".into()));
        let ps = l.process(5555);
        assert_eq!(ps.args, ["serve"]);
        assert_eq!(
            ps.env.iter().filter(|(k, _)| k == "OLLAMA_HOST").collect::<Vec<_>>(),
            [&("OLLAMA_HOST".to_string(), "127.0.0.1:5555".to_string())]
        );
    }

    #[test]
    fn a_command_substitutes_its_placeholders_and_restarts_only_for_what_it_takes() {
        let l = launch(Preset::Command, &["--listen={host}:{port}", "{model}"], 3);
        assert_eq!(l.process(9).args, ["--listen=127.0.0.1:9", "tiny.gguf"]);
        let key = l.server_key("x");
        assert_eq!(key, ServerKey { endpoint: "x".into(), model: Some("tiny.gguf".into()), num_gpu: None });
        let other_ngl = Launch { num_gpu: 4, ..l.clone() };
        assert_eq!(other_ngl.server_key("x"), key, "no {{num_gpu}} in the args: one process for every num_gpu");
    }

    #[test]
    fn restart_keys_follow_what_each_preset_takes_at_start() {
        let ls = |n| launch(Preset::LlamaServer, &[], n).server_key("ls");
        assert_ne!(ls(0), ls(1), "a new -ngl restarts llama-server");
        let ol = |n| launch(Preset::Ollama, &[], n).server_key("ol");
        assert_eq!(ol(0), ol(1), "Ollama takes num_gpu per request");
    }

    #[test]
    fn presets_refuse_a_foreign_api() {
        assert_eq!(Preset::LlamaServer.api(Some(Api::Ollama)), None);
        assert_eq!(Preset::Ollama.api(Some(Api::OpenAi)), None);
        assert_eq!(Preset::Command.api(Some(Api::OpenAi)), Some(Api::OpenAi));
        assert_eq!(Preset::Command.api(None), Some(Api::LlamaCpp));
        assert_eq!(Preset::parse("vllm"), None);
        assert!(!Preset::Command.num_gpu_settable(Api::LlamaCpp, &["{port}".into()]));
        assert!(Preset::Command.num_gpu_settable(Api::Ollama, &[]));
    }
}
