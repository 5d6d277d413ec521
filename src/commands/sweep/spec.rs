//! The sweep spec file: the TOML schema ([`SpecFile`], documented in docs/sweep.md) and reading it. Relative paths
//! in the file are relative to the file; they are made absolute as it is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::presets::Preset;
use crate::run::format::paths::{absolute, absolute_in, join_clean, program_in};
use crate::run::format::record::Api;

/// The TOML file. Every list replaces the default; flags add endpoints and replace lists they give.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpecFile {
    #[serde(default)]
    pub endpoints: Vec<EndpointSpec>,
    #[serde(default)]
    pub models: Vec<ModelEntry>,
    #[serde(default)]
    pub num_gpu: Vec<i64>,
    #[serde(default)]
    pub prompts: Vec<PromptSpec>,
    #[serde(default)]
    pub num_predict: Vec<i64>,
    pub epochs: Option<u32>,
    pub repetitions: Option<u32>,
    pub temperature: Option<f64>,
    pub seed: Option<i64>,
    pub stream: Option<bool>,
    pub llama_bin: Option<PathBuf>,
    /// Pass-through options: Ollama `options`, top-level request fields for llama.cpp.
    #[serde(default)]
    pub options: Map<String, Value>,
    /// Pass-through top-level request fields (`raw`, `keep_alive`, `think`).
    #[serde(default)]
    pub request: Map<String, Value>,
    #[serde(default)]
    pub timeouts: TimeoutSpec,
    /// Observe GPU kernel launches per request (`--trace`): managed servers get the dispatch observer through
    /// `LD_PRELOAD`; external endpoints are read from their `trace_dir`.
    pub trace: Option<bool>,
    /// The observer library (default: found like `backscope trace` finds it).
    pub observer: Option<PathBuf>,
    /// The Vulkan layer library (default: found like `backscope trace` finds it).
    pub vklayer: Option<PathBuf>,
    /// The observer's window length for managed servers (default 20 ms).
    pub trace_interval_ms: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TimeoutSpec {
    pub connect_s: Option<f64>,
    pub read_s: Option<f64>,
    pub request_s: Option<f64>,
    pub ready_s: Option<f64>,
    pub grace_s: Option<f64>,
}

/// One endpoint: `url` for one backscope does not start, `server` for one it starts.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    pub name: String,
    pub url: Option<String>,
    /// `ollama`, `llama.cpp` or `openai`; detected for external endpoints when absent.
    pub api: Option<Api>,
    /// `llama-server`, `ollama` or `command`.
    pub server: Option<Preset>,
    pub program: Option<PathBuf>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Fixed port for a managed server (default: a free one).
    pub port: Option<u16>,
    /// For an external endpoint: a log file its server writes to, sliced per cell like a managed server's log.
    pub log_file: Option<PathBuf>,
    pub ready_timeout_s: Option<f64>,
    /// For an external endpoint with `trace`: the directory its observed server writes trace files to (what
    /// `backscope trace --env --dir DIR` set up).
    pub trace_dir: Option<PathBuf>,
}

/// A model: one name for every endpoint, or a label with the name Ollama knows and the GGUF file llama-server loads.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum ModelEntry {
    Name(String),
    Table { name: String, ollama: Option<String>, gguf: Option<String> },
}

impl ModelEntry {
    /// A model that names an existing file (relative to `base`) keeps its label as written, so tables and cell keys
    /// stay short, and gets the absolute path as the file llama-server loads.
    pub fn with_file_in(self, base: &Path) -> ModelEntry {
        match self {
            ModelEntry::Name(n) if base.join(&n).is_file() => {
                let gguf = join_clean(base, Path::new(&n)).display().to_string();
                ModelEntry::Table { name: n, ollama: None, gguf: Some(gguf) }
            }
            ModelEntry::Table { name, ollama, gguf: Some(g) } if base.join(&g).is_file() => {
                let gguf = join_clean(base, Path::new(&g)).display().to_string();
                ModelEntry::Table { name, ollama, gguf: Some(gguf) }
            }
            other => other,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PromptSpec {
    pub name: Option<String>,
    pub text: Option<String>,
    pub file: Option<PathBuf>,
    /// A prompt of about this many tokens (see [`super::plan::prompt_of_tokens`]).
    pub tokens: Option<u32>,
}

/// The largest spec file read. A spec is a few dozen lines of TOML (its prompts may be inline text); 16 MiB is far
/// past any real one and still cheap to hold, so a link to `/dev/zero` or a wrong file is refused, not read until
/// memory runs out.
pub const MAX_SPEC_BYTES: u64 = 16 << 20;

impl SpecFile {
    /// Read a spec file; its relative paths become absolute against the file's directory.
    pub fn read(path: &Path) -> Result<SpecFile> {
        let text =
            crate::host::inputs::read_text_limited(path, MAX_SPEC_BYTES).context("cannot read the sweep spec")?;
        let spec: SpecFile = toml::from_str(&text)
            .with_context(|| format!("{} is not a valid sweep spec (see docs/sweep.md)", path.display()))?;
        Ok(spec.relative_to(&absolute(path.parent().unwrap_or(Path::new(".")))))
    }

    fn relative_to(mut self, base: &Path) -> SpecFile {
        let abs = |p: Option<PathBuf>| p.map(|p| absolute_in(base, &p));
        self.llama_bin = abs(self.llama_bin);
        for p in &mut self.prompts {
            p.file = abs(p.file.take());
        }
        for e in &mut self.endpoints {
            e.program = e.program.take().map(|p| program_in(base, &p));
            e.log_file = abs(e.log_file.take());
            e.trace_dir = abs(e.trace_dir.take());
        }
        self.observer = abs(self.observer);
        self.vklayer = abs(self.vklayer);
        self.models = self.models.into_iter().map(|m| m.with_file_in(base)).collect();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_in_a_spec_file_are_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/tiny.gguf"), b"GGUF").unwrap();
        let spec = dir.path().join("sub/spec.toml");
        std::fs::write(
            &spec,
            r#"
            llama_bin = "bin"
            models = ["tiny.gguf", "qwen3.5:2b", { name = "t", gguf = "./tiny.gguf" }]
            [[prompts]]
            file = "../p.txt"
            [[endpoints]]
            name = "a"
            server = "command"
            program = "./run.sh"
            [[endpoints]]
            name = "b"
            server = "ollama"
            program = "ollama"
            "#,
        )
        .unwrap();
        let s = SpecFile::read(&spec).unwrap();
        let sub = dir.path().join("sub");
        assert_eq!(s.llama_bin, Some(sub.join("bin")));
        assert_eq!(s.prompts[0].file, Some(sub.join("../p.txt")));
        assert_eq!(s.endpoints[0].program, Some(sub.join("run.sh")));
        assert_eq!(s.endpoints[1].program, Some(PathBuf::from("ollama")), "a bare name is found on PATH");
        let gguf = Some(sub.join("tiny.gguf").display().to_string());
        assert_eq!(s.models[0], ModelEntry::Table { name: "tiny.gguf".into(), ollama: None, gguf: gguf.clone() });
        assert_eq!(s.models[1], ModelEntry::Name("qwen3.5:2b".into()), "not a file: a name");
        assert_eq!(s.models[2], ModelEntry::Table { name: "t".into(), ollama: None, gguf });
    }

    #[test]
    fn unknown_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join("s.toml");
        std::fs::write(&spec, "num_gpus = [1]\n").unwrap();
        let e = format!("{:#}", SpecFile::read(&spec).unwrap_err());
        assert!(e.contains("not a valid sweep spec") && e.contains("num_gpus"), "{e}");
    }
}
