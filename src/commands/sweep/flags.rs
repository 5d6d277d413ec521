//! The command-line form of a sweep ([`SweepFlags`], the flags that shape it) and its merge onto a spec file.
//! Relative paths in flags are relative to the working directory; they are made absolute as each flag is merged.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::presets::Preset;
use super::spec::{EndpointSpec, ModelEntry, PromptSpec, SpecFile, TimeoutSpec};
use crate::run::format::paths::{absolute_in, program_in};

/// The flags that describe the sweep, as given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepFlags {
    /// `NAME=URL`: an external endpoint.
    pub endpoints: Vec<String>,
    /// `NAME=PRESET[:ARG,ARG…]`: a managed endpoint.
    pub servers: Vec<String>,
    /// `NAME:KEY=VALUE`: environment of a managed endpoint.
    pub env: Vec<String>,
    /// `NAME=PATH`: the program of a managed endpoint.
    pub programs: Vec<String>,
    pub llama_bin: Option<PathBuf>,
    pub models: Vec<String>,
    pub num_gpu: Vec<i64>,
    pub num_predict: Vec<i64>,
    pub prompts: Vec<String>,
    pub prompt_files: Vec<PathBuf>,
    pub prompt_tokens: Vec<u32>,
    pub epochs: Option<u32>,
    pub repetitions: Option<u32>,
    pub temperature: Option<f64>,
    pub seed: Option<i64>,
    /// `KEY=VALUE`: pass-through option; VALUE is JSON when it parses.
    pub options: Vec<String>,
    pub no_stream: bool,
    pub timeouts: TimeoutSpec,
    pub trace: bool,
    pub observer: Option<PathBuf>,
    pub vklayer: Option<PathBuf>,
    /// `NAME=DIR`: trace directory of an external endpoint.
    pub trace_dirs: Vec<String>,
    pub trace_interval_ms: Option<u64>,
}

/// A flag that cannot be merged; the message names the flag as given and says what was expected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlagError {
    #[error("{flag} {value}: expected {expected}")]
    Malformed { flag: &'static str, value: String, expected: &'static str },
    #[error("{flag} {value}: no endpoint named `{name}`{hint}")]
    NoSuchEndpoint { flag: &'static str, value: String, name: String, hint: &'static str },
    #[error(
        "--server {value}: unknown server preset `{preset}`: use llama-server, ollama, or command (with --program)"
    )]
    UnknownPreset { value: String, preset: String },
}

fn split<'a>(
    flag: &'static str,
    value: &'a str,
    at: char,
    expected: &'static str,
) -> Result<(&'a str, &'a str), FlagError> {
    value.split_once(at).ok_or_else(|| FlagError::Malformed { flag, value: value.to_string(), expected })
}

fn endpoint<'s>(
    spec: &'s mut SpecFile,
    flag: &'static str,
    value: &str,
    name: &str,
    hint: &'static str,
) -> Result<&'s mut EndpointSpec, FlagError> {
    spec.endpoints.iter_mut().find(|x| x.name == name).ok_or_else(|| FlagError::NoSuchEndpoint {
        flag,
        value: value.to_string(),
        name: name.to_string(),
        hint,
    })
}

impl SweepFlags {
    /// Whether any flag that shapes the sweep was given (`--resume` takes the stored plan and refuses them).
    pub fn is_empty(&self) -> bool {
        // Derived equality takes every field, so a new flag cannot be forgotten here.
        *self == SweepFlags::default()
    }

    /// Merge onto a spec file: endpoints and `--server`s are added, lists given on the command line replace the
    /// file's, scalars override. Relative paths are made absolute against `cwd`.
    pub fn merge_onto(&self, mut spec: SpecFile, cwd: &Path) -> Result<SpecFile, FlagError> {
        for e in &self.endpoints {
            let (name, url) = split("--endpoint", e, '=', "NAME=URL")?;
            spec.endpoints.push(EndpointSpec { name: name.into(), url: Some(url.into()), ..Default::default() });
        }
        for s in &self.servers {
            let (name, rest) = split("--server", s, '=', "NAME=PRESET[:ARG,ARG…]")?;
            let (preset, args) = match rest.split_once(':') {
                Some((p, a)) => (p, a.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect()),
                None => (rest, Vec::new()),
            };
            let preset = Preset::parse(preset)
                .ok_or_else(|| FlagError::UnknownPreset { value: s.clone(), preset: preset.to_string() })?;
            spec.endpoints.push(EndpointSpec { name: name.into(), server: Some(preset), args, ..Default::default() });
        }
        for e in &self.env {
            let (name, kv) = split("--env", e, ':', "NAME:KEY=VALUE")?;
            let (k, v) = kv.split_once('=').ok_or_else(|| FlagError::Malformed {
                flag: "--env",
                value: e.clone(),
                expected: "NAME:KEY=VALUE",
            })?;
            let hint = " (define it with --server first)";
            endpoint(&mut spec, "--env", e, name, hint)?.env.insert(k.into(), v.into());
        }
        for p in &self.programs {
            let (name, path) = split("--program", p, '=', "NAME=PATH")?;
            endpoint(&mut spec, "--program", p, name, "")?.program = Some(program_in(cwd, Path::new(path)));
        }
        if let Some(dir) = &self.llama_bin {
            spec.llama_bin = Some(absolute_in(cwd, dir));
        }
        if !self.models.is_empty() {
            spec.models = self.models.iter().map(|m| ModelEntry::Name(m.clone()).with_file_in(cwd)).collect();
        }
        if !self.num_gpu.is_empty() {
            spec.num_gpu = self.num_gpu.clone();
        }
        if !self.num_predict.is_empty() {
            spec.num_predict = self.num_predict.clone();
        }
        if !self.prompts.is_empty() || !self.prompt_files.is_empty() || !self.prompt_tokens.is_empty() {
            let text = self.prompts.iter().map(|t| PromptSpec { text: Some(t.clone()), ..Default::default() });
            let files = (self.prompt_files.iter())
                .map(|f| PromptSpec { file: Some(absolute_in(cwd, f)), ..Default::default() });
            let tokens = self.prompt_tokens.iter().map(|&n| PromptSpec { tokens: Some(n), ..Default::default() });
            spec.prompts = text.chain(files).chain(tokens).collect();
        }
        spec.epochs = self.epochs.or(spec.epochs);
        spec.repetitions = self.repetitions.or(spec.repetitions);
        spec.temperature = self.temperature.or(spec.temperature);
        spec.seed = self.seed.or(spec.seed);
        if self.no_stream {
            spec.stream = Some(false);
        }
        for o in &self.options {
            let (k, v) = split("--option", o, '=', "KEY=VALUE")?;
            // `num_ctx=4096` is a number, `stop=["\n"]` a list; anything that is not JSON is a string.
            let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
            spec.options.insert(k.into(), value);
        }
        let (t, s) = (&self.timeouts, &mut spec.timeouts);
        s.connect_s = t.connect_s.or(s.connect_s);
        s.read_s = t.read_s.or(s.read_s);
        s.request_s = t.request_s.or(s.request_s);
        s.ready_s = t.ready_s.or(s.ready_s);
        s.grace_s = t.grace_s.or(s.grace_s);
        for d in &self.trace_dirs {
            let (name, dir) = split("--trace-dir", d, '=', "NAME=DIR")?;
            let hint = " (define it with --endpoint first)";
            endpoint(&mut spec, "--trace-dir", d, name, hint)?.trace_dir = Some(absolute_in(cwd, Path::new(dir)));
        }
        if self.trace || !self.trace_dirs.is_empty() {
            spec.trace = Some(true);
        }
        if let Some(o) = &self.observer {
            spec.observer = Some(absolute_in(cwd, o));
        }
        if let Some(l) = &self.vklayer {
            spec.vklayer = Some(absolute_in(cwd, l));
        }
        spec.trace_interval_ms = self.trace_interval_ms.or(spec.trace_interval_ms);
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags_of(f: impl FnOnce(&mut SweepFlags)) -> SweepFlags {
        let mut x = SweepFlags::default();
        f(&mut x);
        x
    }

    fn merged(f: impl FnOnce(&mut SweepFlags)) -> Result<SpecFile, FlagError> {
        flags_of(f).merge_onto(SpecFile::default(), Path::new("/cwd"))
    }

    #[test]
    fn every_flag_counts_as_shaping_the_sweep() {
        assert!(SweepFlags::default().is_empty());
        assert!(!flags_of(|f| f.timeouts.grace_s = Some(1.0)).is_empty());
        assert!(!flags_of(|f| f.no_stream = true).is_empty());
        assert!(!flags_of(|f| f.trace_interval_ms = Some(5)).is_empty());
    }

    #[test]
    fn option_values_are_json_when_they_parse() {
        let s =
            merged(|f| f.options = vec!["num_ctx=4096".into(), "stop=[\"\\n\"]".into(), "mode=fast".into()]).unwrap();
        assert_eq!(s.options["num_ctx"], 4096);
        assert_eq!(s.options["stop"], serde_json::json!(["\n"]));
        assert_eq!(s.options["mode"], "fast");
    }

    #[test]
    fn flag_paths_are_relative_to_the_working_directory() {
        let s = merged(|f| {
            f.servers = vec!["a=llama-server".into(), "b=command".into()];
            f.endpoints = vec!["e=http://127.0.0.1:1".into()];
            f.llama_bin = Some("./bin".into());
            f.programs = vec!["a=./l/llama-server".into(), "b=run".into()];
            f.prompt_files = vec!["p.txt".into()];
            f.observer = Some("/abs/obs.so".into());
            f.trace_dirs = vec!["e=t".into()];
        })
        .unwrap();
        assert_eq!(s.llama_bin, Some(PathBuf::from("/cwd/bin")));
        // `--endpoint`s first, then `--server`s.
        assert_eq!(s.endpoints[0].trace_dir, Some(PathBuf::from("/cwd/t")));
        assert_eq!(s.endpoints[1].program, Some(PathBuf::from("/cwd/l/llama-server")));
        assert_eq!(s.endpoints[2].program, Some(PathBuf::from("run")), "a bare name is found on PATH");
        assert_eq!(s.prompts[0].file, Some(PathBuf::from("/cwd/p.txt")));
        assert_eq!(s.observer, Some(PathBuf::from("/abs/obs.so")));
        assert_eq!(s.trace, Some(true), "--trace-dir implies --trace");
    }

    #[test]
    fn malformed_flags_say_what_was_expected() {
        let err = |f: fn(&mut SweepFlags)| merged(f).unwrap_err().to_string();
        assert_eq!(err(|f| f.endpoints = vec!["a".into()]), "--endpoint a: expected NAME=URL");
        assert_eq!(
            err(|f| f.servers = vec!["a=vllm".into()]),
            "--server a=vllm: unknown server preset `vllm`: use llama-server, ollama, or command (with --program)"
        );
        assert_eq!(
            err(|f| f.env = vec!["a:K=V".into()]),
            "--env a:K=V: no endpoint named `a` (define it with --server first)"
        );
        assert_eq!(err(|f| f.env = vec!["a:KV".into()]), "--env a:KV: expected NAME:KEY=VALUE");
        assert_eq!(err(|f| f.env = vec!["a=KV".into()]), "--env a=KV: expected NAME:KEY=VALUE");
        assert_eq!(err(|f| f.programs = vec!["a".into()]), "--program a: expected NAME=PATH");
        assert_eq!(err(|f| f.programs = vec!["a=/x".into()]), "--program a=/x: no endpoint named `a`");
        assert_eq!(err(|f| f.options = vec!["k".into()]), "--option k: expected KEY=VALUE");
        assert_eq!(err(|f| f.trace_dirs = vec!["d".into()]), "--trace-dir d: expected NAME=DIR");
        assert_eq!(
            err(|f| f.trace_dirs = vec!["e=d".into()]),
            "--trace-dir e=d: no endpoint named `e` (define it with --endpoint first)"
        );
    }
}
