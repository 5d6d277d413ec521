//! `backscope gate`'s flags, and their conversion into `backscope::commands::gate::GateCommand`.

use std::path::PathBuf;

use backscope::commands::gate::{GateCommand, GateOptions};
use backscope::run::format::target::DbValue;
use clap::Args;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
    backscope gate --arch gfx900
    backscope gate --arch gfx900 --install /usr/lib/ollama --ollama v0.12.5
    backscope gate --arch gfx906 --log ollama.log --install /usr/local/lib/ollama --runs backscope.db")]
pub struct GateArgs {
    /// The GPU: gfx900, gfx906:xnack-, gfx1201, sm_86 (or 8.6).
    #[arg(long)]
    pub arch: String,
    /// An install tree to scan (Ollama's lib dir, /opt/rocm/lib, a llama.cpp build); repeatable.
    #[arg(long, value_name = "DIR")]
    pub install: Vec<PathBuf>,
    /// A sweep database whose runs were made on this GPU (execution evidence).
    #[arg(long, value_name = "DB")]
    pub runs: Option<PathBuf>,
    /// With --runs: only this run; repeatable.
    #[arg(long = "run", value_name = "RUN", requires = "runs")]
    pub run_ids: Vec<String>,
    /// A runtime log (Ollama server log, llama-server output); repeatable.
    #[arg(long, value_name = "FILE")]
    pub log: Vec<PathBuf>,
    /// The Ollama release whose build targets apply (v0.12.5); `none` for a runtime that is not Ollama
    /// [default: the newest release in backscope's data].
    #[arg(long, value_name = "VERSION")]
    pub ollama: Option<String>,
    /// The ROCm release whose official support list applies (7.2.1) [default: the newest in backscope's data].
    #[arg(long, value_name = "VERSION")]
    pub rocm: Option<String>,
    /// Output: text (the default), --json (schema backscope.gate/1), markdown, html.
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

impl From<GateArgs> for GateCommand {
    fn from(a: GateArgs) -> Self {
        GateCommand {
            options: GateOptions {
                arch: a.arch,
                install: a.install,
                runs: a.runs.map(DbValue::read),
                run_ids: a.run_ids,
                logs: a.log,
                ollama: a.ollama,
                rocm: a.rocm,
            },
            output: a.output.into(),
        }
    }
}
