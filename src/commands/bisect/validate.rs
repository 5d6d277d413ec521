//! The one validation a bisect spec goes through, whether it was just typed ([`BisectSpec::validate`]) or read back
//! from a store for `--resume` ([`BisectSpec::from_stored`]): a stored spec is data, and a row someone rewrote must
//! not reach a build, a command or a deadline that the command line would have refused. Each problem names the
//! spec's field (as stored in `bisect_runs.spec_json`) and the flag that sets it.
//!
//! Also here: what of a spec decides which code runs ([`BisectSpec::what_runs`]), shown before a resumed bisect runs
//! it, and whether a resume needs `--yes` for it ([`BisectSpec::runs_stored_code`]).

use std::fmt;
use std::path::{Component, Path};

use anyhow::{anyhow, bail, Result};

use super::options::{parse_backend, BisectSpec, TestSpec};
use crate::output::shell::shell_quoted;

/// Most tries per build (`--repeat`): more is a typo (4294967295 tries is forever), not a flaky test.
pub const MAX_REPEAT: u32 = 100;
/// Longest `--test-timeout`: seven days. A deadline is `now + timeout`; a larger one overflows the clock.
pub const MAX_TEST_TIMEOUT_S: u64 = 7 * 24 * 3600;
/// Most parallel build jobs.
pub const MAX_JOBS: usize = 4096;
/// Largest `--factor` of a speed test (a build 1000 times slower is not a regression to measure).
pub const MAX_FACTOR: f64 = 1000.0;
/// Largest stored spec read back (a real one is a few hundred bytes).
pub const MAX_SPEC_JSON: usize = 1 << 20;
/// Most arguments in any list of the spec (the command, CMake arguments, targets, server arguments, env).
const MAX_ARGS: usize = 1024;
/// Longest single argument, path or pattern.
const MAX_ARG_BYTES: usize = 64 << 10;
/// The cell's numeric ranges: `-ngl` (-1: the runtime decides), tokens to generate (-1 unlimited, -2 fill the
/// context, as llama.cpp reads them), the generated prompt's tokens, and passes.
pub const NUM_GPU: std::ops::RangeInclusive<i64> = -1..=100_000;
pub const NUM_PREDICT: std::ops::RangeInclusive<i64> = -2..=10_000_000;
pub const PROMPT_TOKENS: std::ops::RangeInclusive<u32> = 1..=(1 << 20);
pub const EPOCHS: std::ops::RangeInclusive<u32> = 1..=1000;

/// A spec field that does not pass: the field as stored, the flag that sets it, and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecError {
    pub field: &'static str,
    pub flag: &'static str,
    pub problem: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.flag, self.problem)
    }
}

impl std::error::Error for SpecError {}

fn refuse(field: &'static str, flag: &'static str, problem: impl Into<String>) -> Result<(), SpecError> {
    Err(SpecError { field, flag, problem: problem.into() })
}

/// A string that can reach a command line: bounded, without NUL (which no argument can hold).
fn plain(field: &'static str, flag: &'static str, s: &str) -> Result<(), SpecError> {
    if s.len() > MAX_ARG_BYTES {
        return refuse(field, flag, format!("{} bytes; at most {MAX_ARG_BYTES}", s.len()));
    }
    if s.contains('\0') {
        return refuse(field, flag, "holds a NUL byte, which no argument can hold");
    }
    Ok(())
}

fn list(field: &'static str, flag: &'static str, items: &[String]) -> Result<(), SpecError> {
    if items.len() > MAX_ARGS {
        return refuse(field, flag, format!("{} values; at most {MAX_ARGS}", items.len()));
    }
    items.iter().try_for_each(|s| plain(field, flag, s))
}

/// An absolute path without `..`: what the command line makes of the paths it is given.
fn absolute_path(field: &'static str, flag: &'static str, p: &Path) -> Result<(), SpecError> {
    plain(field, flag, &p.to_string_lossy())?;
    if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return refuse(field, flag, format!("`{}` is not an absolute path without `..`", p.display()));
    }
    Ok(())
}

fn in_range<T: PartialOrd + fmt::Display>(
    field: &'static str,
    flag: &'static str,
    v: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<(), SpecError> {
    if range.contains(&v) {
        return Ok(());
    }
    refuse(field, flag, format!("{v} is out of range ({}..={})", range.start(), range.end()))
}

/// `pypi`; `git:DIR`, `dir:DIR` or `release-dir:DIR` with DIR absolute (the command line makes it so); or
/// `release:github` or `release:URL` with a URL pattern the release source accepts (https or loopback http,
/// `{build}` in it, an archive's file name).
fn check_builds(s: &str) -> Result<(), SpecError> {
    if s == "pypi" || s == "release:github" {
        return Ok(());
    }
    if let Some(pattern) = s.strip_prefix("release:") {
        plain("builds", "--builds", s)?;
        return crate::builds::release::names::check_pattern(pattern)
            .or_else(|e| refuse("builds", "--builds", format!("`{s}`: {e}")));
    }
    match s.strip_prefix("git:").or_else(|| s.strip_prefix("dir:")).or_else(|| s.strip_prefix("release-dir:")) {
        Some(dir) => absolute_path("builds", "--builds", Path::new(dir)),
        None => refuse(
            "builds",
            "--builds",
            format!("`{s}`: expected pypi, git:DIR, dir:DIR, release:URL, release:github or release-dir:DIR"),
        ),
    }
}

/// A CMake build target's name: letters, digits and `_ . + -`, not starting with `-` (it would read as an option).
fn check_target(t: &str) -> Result<(), SpecError> {
    let ok = !t.is_empty()
        && t.len() <= 256
        && !t.starts_with('-')
        && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.+-".contains(&b));
    if ok {
        return Ok(());
    }
    refuse("targets", "--target", format!("`{t}` is not a build target name (letters, digits, _ . + -)"))
}

fn check_test(test: &TestSpec) -> Result<(), SpecError> {
    match test {
        TestSpec::Crash { class, signature } => {
            if let Some(c) = class {
                let known: Result<crate::run::format::record::ErrorClass, _> =
                    serde_json::from_value(serde_json::Value::String(c.clone()));
                if known.is_err() {
                    return refuse(
                        "test.class",
                        "--class",
                        format!("`{c}` is not an error class (crash, server_exit, …)"),
                    );
                }
            }
            if let Some(s) = signature {
                plain("test.signature", "--signature", s)?;
                if s.is_empty() {
                    return refuse("test.signature", "--signature", "empty");
                }
            }
        }
        TestSpec::Kernel { family, .. } => {
            plain("test.family", "--kernel", family)?;
            if family.is_empty() {
                return refuse("test.family", "--kernel", "empty");
            }
        }
        TestSpec::Slower { factor, .. } => {
            if !(factor.is_finite() && *factor > 1.0 && *factor <= MAX_FACTOR) {
                return refuse(
                    "test.factor",
                    "--factor",
                    format!("{factor}: give a factor above 1 and at most {MAX_FACTOR} (1.2: more than 20% slower)"),
                );
            }
        }
        TestSpec::Log { regex } => {
            plain("test.regex", "--log", regex)?;
            if let Err(e) = regex_lite::Regex::new(regex) {
                return refuse("test.regex", "--log", format!("{regex}: {e}"));
            }
        }
        TestSpec::External { argv } => {
            list("test.argv", "--", argv)?;
            if argv.first().is_none_or(|p| p.is_empty()) {
                return refuse("test.argv", "--", "needs a command");
            }
        }
    }
    Ok(())
}

fn check_cell(spec: &BisectSpec) -> Result<(), SpecError> {
    let Some(c) = &spec.cell else {
        if spec.test.needs_cell() {
            return refuse(
                "cell.model",
                "--model",
                format!("`{}` runs a cell: give --model M.gguf", spec.test.describe()),
            );
        }
        return Ok(());
    };
    if !spec.test.needs_cell() {
        return refuse("cell", "--model", "is for the cell tests (--crash, --kernel, --slower, --log), not for -- CMD");
    }
    plain("cell.model", "--model", &c.model)?;
    if c.model.is_empty() {
        return refuse("cell.model", "--model", format!("`{}` runs a cell: give --model M.gguf", spec.test.describe()));
    }
    if let Some(n) = c.num_gpu {
        in_range("cell.num_gpu", "--num-gpu", n, NUM_GPU)?;
    }
    if let Some(n) = c.num_predict {
        in_range("cell.num_predict", "--num-predict", n, NUM_PREDICT)?;
    }
    if let Some(n) = c.prompt_tokens {
        in_range("cell.prompt_tokens", "--prompt-tokens", n, PROMPT_TOKENS)?;
    }
    if let Some(n) = c.epochs {
        in_range("cell.epochs", "--epochs", n, EPOCHS)?;
    }
    list("cell.server_args", "--server-arg", &c.server_args)?;
    if let Some(a) = c.server_args.iter().find(|a| a.contains(',')) {
        return refuse(
            "cell.server_args",
            "--server-arg",
            format!("`{a}`: the sweep splits server arguments at commas; give it as separate arguments"),
        );
    }
    list("cell.env", "--env", &c.env)?;
    for e in &c.env {
        let key = e.split_once('=').map(|(k, _)| k);
        let ok = key.is_some_and(|k| {
            k.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        });
        if !ok {
            return refuse("cell.env", "--env", format!("`{e}`: expected KEY=VALUE (KEY: letters, digits, _)"));
        }
    }
    Ok(())
}

impl BisectSpec {
    /// Every check a spec must pass before anything runs; the first problem found.
    pub fn check(&self) -> Result<(), SpecError> {
        if self.good == self.bad {
            return refuse("good", "--good", format!("--good and --bad name the same build b{}", self.good));
        }
        if self.good > self.bad {
            return refuse(
                "good",
                "--good",
                format!(
                    "b{} is newer than --bad b{}: bisect looks for the first bad build after a good one (a fix is \
                     found by testing for its absence: the property the bad end has)",
                    self.good, self.bad
                ),
            );
        }
        check_builds(&self.builds)?;
        if let Err(e) = parse_backend(&self.backend) {
            return refuse("backend", "--backend", e);
        }
        list("cmake_args", "--cmake-arg", &self.cmake_args)?;
        list("targets", "--target", &self.targets)?;
        self.targets.iter().try_for_each(|t| check_target(t))?;
        in_range("jobs", "--jobs", self.jobs, 1..=MAX_JOBS)?;
        in_range("repeat", "--repeat", self.repeat, 1..=MAX_REPEAT)?;
        in_range("test_timeout_s", "--test-timeout", self.test_timeout_s, 1..=MAX_TEST_TIMEOUT_S)?;
        absolute_path("runs_dir", "--runs-dir", &self.runs_dir)?;
        check_test(&self.test)?;
        check_cell(self)
    }

    /// [`BisectSpec::check`] as the command line reports it.
    pub fn validate(&self) -> Result<()> {
        self.check().map_err(|e| anyhow!("{e}"))
    }

    /// A spec read back from a store: parsed and checked exactly as a new one is; a problem names the bisect and
    /// the field.
    pub fn from_stored(bisect_id: &str, json: &str) -> Result<BisectSpec> {
        if json.len() > MAX_SPEC_JSON {
            bail!("bisect {bisect_id}: its stored spec is {} bytes (at most {MAX_SPEC_JSON}); refused", json.len());
        }
        let spec: BisectSpec = serde_json::from_str(json).map_err(|e| {
            anyhow!("bisect {bisect_id}: its stored spec (bisect_runs.spec_json) is not a bisect spec: {e}")
        })?;
        spec.check().map_err(|e| {
            anyhow!("bisect {bisect_id}: its stored spec is refused: field `{}` ({}): {}", e.field, e.flag, e.problem)
        })?;
        Ok(spec)
    }

    /// What of the spec decides which code runs, as `(what, value)` lines, arguments shell-quoted.
    pub fn what_runs(&self) -> Vec<(&'static str, String)> {
        let quoted = |v: &[String]| v.iter().map(|a| shell_quoted(a)).collect::<Vec<_>>().join(" ");
        let mut out = vec![("builds", self.builds.clone()), ("test", self.test.describe())];
        if !self.cmake_args.is_empty() {
            out.push(("cmake args", quoted(&self.cmake_args)));
        }
        if !self.targets.is_empty() {
            out.push(("targets", quoted(&self.targets)));
        }
        if let Some(c) = &self.cell {
            out.push(("model", shell_quoted(&c.model)));
            if !c.server_args.is_empty() {
                out.push(("server args", quoted(&c.server_args)));
            }
            if !c.env.is_empty() {
                out.push(("server env", quoted(&c.env)));
            }
        }
        out.push(("runs dir", shell_quoted(&self.runs_dir.to_string_lossy())));
        out
    }

    /// Whether resuming this spec runs code that only the stored row names: an external command, binaries or a
    /// checkout from a directory or a URL the row gives (`dir:`, `git:`, `release-dir:`, `release:URL`), CMake
    /// arguments (a compiler launcher is a command), server arguments or environment (`LD_PRELOAD`). What stays is
    /// a built-in test on llama.cpp's own published builds — its PyPI sdists built with backscope's default flags,
    /// or its GitHub release archives (`release:github`) — with the model llama-server loads: no code a row could
    /// choose.
    pub fn runs_stored_code(&self) -> bool {
        let cell_extras = self.cell.as_ref().is_some_and(|c| !c.server_args.is_empty() || !c.env.is_empty());
        matches!(self.test, TestSpec::External { .. })
            || !matches!(self.builds.as_str(), "pypi" | "release:github")
            || !self.cmake_args.is_empty()
            || cell_extras
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::commands::bisect::options::CellSpec;

    fn spec() -> BisectSpec {
        BisectSpec {
            good: 100,
            bad: 110,
            builds: "dir:/builds".into(),
            backend: "cpu".into(),
            cmake_args: vec![],
            targets: vec![],
            jobs: 2,
            repeat: 1,
            test: TestSpec::External { argv: vec!["true".into()] },
            cell: None,
            test_timeout_s: 60,
            runs_dir: PathBuf::from("/runs"),
        }
    }

    #[test]
    fn each_field_out_of_shape_is_named() {
        assert_eq!(spec().check(), Ok(()));
        let field = |f: &dyn Fn(&mut BisectSpec)| {
            let mut s = spec();
            f(&mut s);
            s.check().unwrap_err().field
        };
        assert_eq!(field(&|s| s.test_timeout_s = u64::MAX), "test_timeout_s");
        assert_eq!(field(&|s| s.test_timeout_s = 0), "test_timeout_s");
        assert_eq!(field(&|s| s.repeat = u32::MAX), "repeat");
        assert_eq!(field(&|s| s.jobs = 0), "jobs");
        assert_eq!(field(&|s| s.backend = "rocm".into()), "backend");
        assert_eq!(field(&|s| s.builds = "dir:relative".into()), "builds");
        assert_eq!(field(&|s| s.builds = "dir:/a/../etc".into()), "builds");
        assert_eq!(field(&|s| s.builds = "https://x".into()), "builds");
        assert_eq!(field(&|s| s.builds = "release-dir:relative".into()), "builds");
        assert_eq!(field(&|s| s.builds = "release:http://example.org/{build}/a.zip".into()), "builds");
        assert_eq!(field(&|s| s.builds = "release:https://x/no-build.zip".into()), "builds");
        assert_eq!(field(&|s| s.runs_dir = "runs".into()), "runs_dir");
        assert_eq!(field(&|s| s.targets = vec!["--help".into()]), "targets");
        assert_eq!(field(&|s| s.cmake_args = vec!["-DX=\0".into()]), "cmake_args");
        assert_eq!(field(&|s| s.test = TestSpec::External { argv: vec![] }), "test.argv");
        assert_eq!(field(&|s| s.test = TestSpec::Log { regex: "(".into() }), "test.regex");
        assert_eq!(field(&|s| (s.good, s.bad) = (110, 100)), "good");
        let cell = |f: &dyn Fn(&mut CellSpec)| {
            field(&|s| {
                s.test = TestSpec::Crash { class: None, signature: None };
                let mut c = CellSpec { model: "/m.gguf".into(), ..Default::default() };
                f(&mut c);
                s.cell = Some(c);
            })
        };
        assert_eq!(cell(&|c| c.num_gpu = Some(i64::MIN)), "cell.num_gpu");
        assert_eq!(cell(&|c| c.epochs = Some(u32::MAX)), "cell.epochs");
        assert_eq!(cell(&|c| c.env = vec!["=x".into()]), "cell.env");
        assert_eq!(cell(&|c| c.server_args = vec!["a,b".into()]), "cell.server_args");
        assert_eq!(field(&|s| s.test = TestSpec::Crash { class: Some("nope".into()), signature: None }), "test.class");
    }

    #[test]
    fn a_stored_spec_is_refused_with_its_bisect_and_field() {
        let mut s = spec();
        s.test_timeout_s = u64::MAX;
        let e = BisectSpec::from_stored("bisect-x", &serde_json::to_string(&s).unwrap()).unwrap_err().to_string();
        assert!(e.contains("bisect bisect-x") && e.contains("`test_timeout_s`"), "{e}");
        let e = BisectSpec::from_stored("bisect-x", "{\"good\": 1}").unwrap_err().to_string();
        assert!(e.contains("not a bisect spec"), "{e}");
        assert_eq!(BisectSpec::from_stored("b", &serde_json::to_string(&spec()).unwrap()).unwrap(), spec());
    }

    /// The fuzz target's seeds (fuzz/seeds/bisect_spec: specs real bisects stored) read back valid; every prefix of
    /// them, and each with one number swapped for an extreme, is refused or read without a panic, and what is read
    /// passes the checks again after a round trip (what the fuzz target asserts, on the inputs nearest the seeds).
    #[test]
    fn the_fuzz_seeds_pass_and_their_near_mutations_never_panic() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/bisect_spec");
        let numbers = regex_lite::Regex::new(r"-?[0-9]+").unwrap();
        let mut seeds = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            BisectSpec::from_stored("bisect-x", &text).unwrap();
            seeds += 1;
            let round_trip = |t: &str| {
                if let Ok(spec) = BisectSpec::from_stored("bisect-x", t) {
                    let again = serde_json::to_string(&spec).unwrap();
                    assert_eq!(BisectSpec::from_stored("bisect-x", &again).unwrap(), spec);
                }
            };
            for cut in (0..text.len()).filter(|c| text.is_char_boundary(*c)) {
                round_trip(&text[..cut]);
            }
            for m in numbers.find_iter(&text) {
                for extreme in ["18446744073709551615", "4294967295", "-9223372036854775808", "0", "1e309"] {
                    round_trip(&format!("{}{extreme}{}", &text[..m.start()], &text[m.end()..]));
                }
            }
        }
        assert!(seeds >= 2, "the seeds in {}", dir.display());
    }

    #[test]
    fn only_a_builtin_test_on_default_pypi_builds_runs_without_confirmation() {
        let mut s = spec();
        assert!(s.runs_stored_code(), "an external command");
        s.test = TestSpec::Crash { class: None, signature: None };
        s.cell = Some(CellSpec { model: "/m.gguf".into(), ..Default::default() });
        assert!(s.runs_stored_code(), "dir: builds are binaries the row names");
        s.builds = "release:http://127.0.0.1:9/{build}/llama-{build}-bin-ubuntu-x64.zip".into();
        assert!(s.runs_stored_code(), "archives from a URL the row names");
        s.builds = "release:github".into();
        assert!(!s.runs_stored_code(), "llama.cpp's own release archives");
        s.builds = "pypi".into();
        assert!(!s.runs_stored_code());
        s.cell.as_mut().unwrap().env = vec!["LD_PRELOAD=/x.so".into()];
        assert!(s.runs_stored_code());
    }
}
