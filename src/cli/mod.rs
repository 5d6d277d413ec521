//! The command line: clap's definitions of every command and flag, and their conversion into the options values the
//! library's commands take. Only this part of backscope knows clap; `main.rs` parses, calls [`run`] and exits.

mod logs;
mod output;
mod sweep;
mod synth;
mod trace;

use std::path::PathBuf;

use anyhow::Result;
use backscope::scan;
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "backscope",
    version,
    about = "Evidence about which GPU backend and kernel path a local LLM runtime really uses"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read GPU binaries and runtime install trees: which GPU archs each library carries code for, which ggml
    /// kernel families, what their dependencies resolve to, and (with --arch) what runs on one GPU.
    Scan(ScanArgs),
    /// Run a model across endpoints (Ollama, llama-server; external or started by backscope), num_gpu values
    /// (layers offloaded to the GPU, not a GPU count), prompts and repetitions, surviving crashes, and record
    /// every cell (SQLite + a run directory).
    Sweep(sweep::SweepArgs),
    /// Write a GGUF model with random weights, real tokenizer metadata and the tensor shapes/types of a real model,
    /// so the same kernels dispatch without downloading weights.
    Synth(synth::SynthArgs),
    /// Run a command under the dispatch observer and report which GPU kernels really ran.
    Trace(trace::TraceArgs),
    /// Read an Ollama or llama.cpp log (FILE, or - for standard input): a timeline, the facts it states
    /// (backends, devices, offloaded layers, buffers), and each crash with its phase and signature.
    Logs(logs::LogsArgs),
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Files or directories: an Ollama lib dir (/usr/lib/ollama), a llama.cpp build dir, /opt/rocm/lib,
    /// an unpacked wheel, a single libggml-hip.so or .hsaco/.co file.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Answer for one GPU: gfx900, gfx906, gfx90a:xnack-, gfx1201, sm_86 (or 8.6).
    #[arg(long)]
    pub arch: Option<String>,
    /// Per-kernel table with resources (registers, spills, LDS/shared memory, scratch, workgroup size).
    #[arg(long)]
    pub kernels: bool,
    /// Extra library directories for dependency resolution, searched where ld.so searches LD_LIBRARY_PATH.
    #[arg(long = "library-path", value_name = "DIR")]
    pub library_path: Vec<PathBuf>,
    /// Output: text (the default), --json (the records and claims: docs/scan-json.md), markdown, html.
    #[command(flatten)]
    pub output: output::OutputArgs,
}

impl From<ScanArgs> for scan::ScanCommand {
    fn from(a: ScanArgs) -> Self {
        scan::ScanCommand {
            options: scan::ScanOptions {
                paths: a.paths,
                arch: a.arch,
                kernels: a.kernels,
                library_path: a.library_path,
            },
            output: a.output.into(),
        }
    }
}

/// The command line of this process; `--help`, `--version` and usage errors print and exit here.
pub fn parse() -> Cli {
    Cli::parse()
}

/// Run the command the line names; its exit status (`backscope::exit`).
pub fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Scan(a) => scan::run(&a.into()),
        Command::Sweep(a) => backscope::sweep::run(a.into()),
        Command::Synth(a) => backscope::synth::run(a.into()),
        Command::Trace(a) => backscope::tracecmd::run(a.into()),
        Command::Logs(a) => backscope::logscmd::run(&a.into()),
    }
}

#[cfg(test)]
mod tests {
    use backscope::sweep::{Resume, SweepCommand};
    use clap::CommandFactory;

    use super::*;

    fn sweep(args: &[&str]) -> SweepCommand {
        let cli = Cli::try_parse_from(["backscope", "sweep"].iter().chain(args)).unwrap();
        let Command::Sweep(a) = cli.command else { panic!("not a sweep") };
        a.into()
    }

    #[test]
    fn the_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn resume_without_a_value_is_the_latest_run() {
        let run = |args: &[&str]| match sweep(args) {
            SweepCommand::Run(o) => o.resume,
            other => panic!("{other:?}"),
        };
        assert_eq!(run(&["--resume"]), Some(Resume::Latest));
        assert_eq!(run(&["--resume", "20261123-142557-fc54"]), Some(Resume::Run("20261123-142557-fc54".into())));
        assert_eq!(run(&["--endpoint", "a=http://x"]), None);
    }

    #[test]
    fn sweep_flags_reach_the_options_unchanged() {
        let SweepCommand::Run(o) = sweep(&[
            "--server",
            "cpu=llama-server:--device,none",
            "--num-gpu",
            "0,-1",
            "--grace",
            "2.5",
            "--prompt-file",
            "p.txt",
            "--no-stream",
            "--db",
            "x.db",
        ]) else {
            panic!("not a run")
        };
        assert_eq!(o.flags.servers, ["cpu=llama-server:--device,none"]);
        assert_eq!(o.flags.num_gpu, [0, -1]);
        assert_eq!(o.flags.timeouts.grace_s, Some(2.5));
        assert_eq!(o.flags.prompt_files, [PathBuf::from("p.txt")], "made absolute when merged, not here");
        assert!(o.flags.no_stream);
        assert_eq!((o.db, o.runs_dir), (PathBuf::from("x.db"), PathBuf::from("backscope-runs")));
        let SweepCommand::Export(e) = sweep(&["export", "--run", "a", "--run", "b"]) else { panic!("not export") };
        assert_eq!((e.runs, e.db), (vec!["a".to_string(), "b".to_string()], PathBuf::from("backscope.db")));
    }

    #[test]
    fn scan_flags_become_scan_options() {
        let cli = Cli::try_parse_from(["backscope", "scan", "--arch", "gfx906", "--json", "/opt/rocm/lib"]).unwrap();
        let Command::Scan(a) = cli.command else { panic!("not a scan") };
        let c: scan::ScanCommand = a.into();
        assert_eq!((c.options.arch.as_deref(), c.output.format), (Some("gfx906"), backscope::output::Format::Json));
        assert_eq!(c.options.paths, [PathBuf::from("/opt/rocm/lib")]);
    }
}
