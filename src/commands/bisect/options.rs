//! What a bisect is asked to do: the ends, the build source and flags, the test and its cell. The spec is stored
//! with the bisect (serde), so that `--resume` replays it exactly.

use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::builds::{Backend, BuildFlags, BuildNumber};
use crate::output::shell::shell_line;
#[cfg(test)]
use crate::output::shell::shell_quoted;
use crate::output::OutputOptions;
use crate::run::format::target::DbValue;

/// A build number as a person writes it: `9700` or `b9700`.
pub fn parse_build(s: &str) -> Result<BuildNumber, String> {
    let digits = s.strip_prefix('b').unwrap_or(s);
    match digits.parse::<u32>() {
        Ok(n) if !digits.starts_with('+') => Ok(BuildNumber(n)),
        _ => Err(format!("`{s}` is not a llama.cpp build number (9700 or b9700)")),
    }
}

/// A backend by its exact name ([`Backend::name`]); the builder's own reader also takes `rocm` and any case, but a
/// stored spec names one spelling.
pub fn parse_backend(s: &str) -> Result<Backend, String> {
    [Backend::Cpu, Backend::Vulkan, Backend::Cuda, Backend::Hip]
        .into_iter()
        .find(|b| b.name() == s)
        .ok_or_else(|| format!("unknown backend `{s}` (cpu, vulkan, cuda or hip)"))
}

pub fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Cpu => "cpu",
        Backend::Vulkan => "vulkan",
        Backend::Cuda => "cuda",
        Backend::Hip => "hip",
    }
}

/// Which t/s a speed test compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rate {
    Decode,
    Prompt,
}

impl Rate {
    pub fn as_str(self) -> &'static str {
        match self {
            Rate::Decode => "decode",
            Rate::Prompt => "prompt",
        }
    }
}

/// The test: what makes a build "bad" (has the property the bad end has).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TestSpec {
    /// A cell fails: with any error class, or with `class` (an error class name), or with a crash whose log
    /// signature id starts with (or whose signature text contains) `signature`.
    Crash { class: Option<String>, signature: Option<String> },
    /// The kernel family runs in the cell (`absent`: does not run), from the sweep's trace.
    Kernel { family: String, absent: bool },
    /// The cell's t/s is slower than the good end's by more than `factor` (good ÷ candidate > factor).
    Slower { rate: Rate, factor: f64 },
    /// The cell's server log matches the regular expression.
    Log { regex: String },
    /// An external command with git-bisect-run semantics.
    External { argv: Vec<String> },
}

impl TestSpec {
    /// The test as it was asked for, for tables and claims.
    pub fn describe(&self) -> String {
        match self {
            TestSpec::Crash { class, signature } => {
                let mut s = "--crash".to_string();
                if let Some(c) = class {
                    s.push_str(&format!(" --class {c}"));
                }
                if let Some(sig) = signature {
                    s.push_str(&format!(" --signature {sig}"));
                }
                s
            }
            TestSpec::Kernel { family, absent } => {
                format!("--kernel {family}{}", if *absent { " --absent" } else { "" })
            }
            TestSpec::Slower { rate, factor } => format!("--slower {} --factor {factor}", rate.as_str()),
            TestSpec::Log { regex } => format!("--log {regex}"),
            TestSpec::External { argv } => {
                format!("-- {}", shell_line(argv))
            }
        }
    }

    /// Whether the test runs a sweep cell (and so needs `--model`).
    pub fn needs_cell(&self) -> bool {
        !matches!(self, TestSpec::External { .. })
    }
}

/// The cell a crash, kernel, speed or log test runs: one managed llama-server, one model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CellSpec {
    pub model: String,
    pub num_gpu: Option<i64>,
    /// Arguments appended to llama-server's (no commas: the sweep splits its server arguments at commas).
    pub server_args: Vec<String>,
    /// `KEY=VALUE` for the server's environment.
    pub env: Vec<String>,
    pub num_predict: Option<i64>,
    pub prompt_tokens: Option<u32>,
    pub epochs: Option<u32>,
}

/// A whole bisect, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BisectSpec {
    pub good: u32,
    pub bad: u32,
    /// `pypi`, `git:DIR`, `dir:DIR`, `release:URL`, `release:github`, `release-dir:DIR`.
    pub builds: String,
    pub backend: String,
    pub cmake_args: Vec<String>,
    pub targets: Vec<String>,
    pub jobs: usize,
    /// Tries per build for a flaky test (any bad try makes the build bad); for `--slower`, the most rounds of
    /// measurements before a step is undecided.
    pub repeat: u32,
    pub test: TestSpec,
    pub cell: Option<CellSpec>,
    /// Seconds one test (a command, a sweep) may run before it is killed.
    pub test_timeout_s: u64,
    /// Where the sweeps' run directories and the bisect's own logs go (absolute).
    pub runs_dir: PathBuf,
}

impl BisectSpec {
    pub fn flags(&self) -> Result<BuildFlags> {
        Ok(BuildFlags {
            backend: parse_backend(&self.backend).map_err(anyhow::Error::msg)?,
            cmake_args: self.cmake_args.clone(),
            targets: self.targets.clone(),
            jobs: self.jobs,
        })
    }
}

/// Which bisect `--resume` continues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resume {
    Latest,
    Id(String),
}

/// One `backscope bisect` invocation.
#[derive(Clone, Debug)]
pub struct BisectOptions {
    /// The bisect to start; none with `--resume` (the stored spec is used).
    pub spec: Option<BisectSpec>,
    pub resume: Option<Resume>,
    pub db: DbValue,
    pub dry_run: bool,
    /// `--yes`: a resumed bisect may run what its stored spec names (an external command, builds from a directory,
    /// CMake or server arguments) although this command line did not give it.
    pub yes: bool,
    pub output: OutputOptions,
    /// The backscope executable the cell tests run as `backscope sweep` (the running one, unless a caller says).
    pub exe: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_numbers_are_read_with_or_without_the_b() {
        assert_eq!(parse_build("9700"), Ok(BuildNumber(9700)));
        assert_eq!(parse_build("b9700"), Ok(BuildNumber(9700)));
        for bad in ["", "b", "bb9700", "-1", "+5", "97.0", "b99999999999"] {
            assert!(parse_build(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_external_test_is_described_as_a_shell_would_read_it() {
        let t = TestSpec::External { argv: vec!["sh".into(), "-c".into(), "test -e \"$X/bad\" || echo 'no'".into()] };
        assert_eq!(t.describe(), r#"-- sh -c 'test -e "$X/bad" || echo '\''no'\'''"#);
        // The shell reads each quoted argument back as it was.
        for arg in ["plain-1.0", "a b", "it's", "$HOME", "", "x\ny", "'"] {
            let out = std::process::Command::new("/bin/sh")
                .arg("-c")
                .arg(format!("printf %s {}", shell_quoted(arg)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8(out.stdout).unwrap(), arg);
        }
    }
}
