//! The command line: clap's definitions of every command and flag, and their conversion into the options values the
//! library's commands take. Only this part of backscope knows clap; `main.rs` parses, calls [`run`] and exits.

mod bisect;
mod db;
mod doctor;
mod gate;
mod generate;
mod logs;
mod maps;
mod numbers;
mod output;
mod predict;
mod push;
mod report;
mod sweep;
mod synth;
mod trace;

use std::path::PathBuf;

use anyhow::Result;
use backscope::commands::scan;
use backscope::gpu::binaries;
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
    /// Run a command under the dispatch observer and the Vulkan layer and report which GPU kernels and Vulkan
    /// pipelines really ran.
    Trace(trace::TraceArgs),
    /// List and classify the shared objects running processes (and their children) have mapped: ggml backends,
    /// HIP/CUDA runtimes, vendor BLAS, Vulkan ICDs and layers. Loaded is not evidence of dispatch.
    Maps(maps::MapsArgs),
    /// Which kernel family ggml picks for each weight of a model in each phase of a request (prefill ubatches,
    /// the last rows, decode) on one GPU arch and ggml version, with the rule and its citation; optionally checked
    /// against observed kernels (a trace, a sweep run recorded with --trace).
    // Boxed: its flags are many, and `Command` should not be as large as its largest subcommand.
    Predict(Box<predict::PredictArgs>),
    /// Whether one GPU can run a runtime's GPU path, layer by layer: vendor support policy, build targets, shipped
    /// vendor artifacts, code objects in the binaries, runtime recognition (logs), runtime execution (runs).
    Gate(gate::GateArgs),
    /// Probe this host without root or GPU tools: GPUs (sysfs, KFD, /proc/driver/nvidia), device permissions,
    /// kernel modules, Vulkan drivers and implicit layers, environment overrides, installed runtimes; ends with
    /// the gate verdict for each GPU found.
    Doctor(doctor::DoctorArgs),
    /// Read an Ollama or llama.cpp log (FILE, or - for standard input): a timeline, the facts it states
    /// (backends, devices, offloaded layers, buffers), and each crash with its phase and signature.
    Logs(logs::LogsArgs),
    /// The statistics of a sweep run (DB or run directory): the matched-results pivot, crash timing with a
    /// verdict (deterministic or variable), endpoint ratios with confidence intervals, the backend each cell ran
    /// on, outliers, timelines; as text, JSON, Markdown or HTML with charts; --bundle writes the evidence for a
    /// bug report.
    Report(report::ReportArgs),
    /// Find the first llama.cpp build where a crash, a kernel path, a speed or a log line changed (or an external
    /// command's verdict flips): build or fetch the builds between --good and --bad, test each, binary-search, and
    /// name the first bad build, the upstream range and both ends' evidence. Resumable (--resume).
    // Boxed: its flags are many.
    Bisect(Box<bisect::BisectArgs>),
    /// Upload runs from a local SQLite file (a host's backscope.db, or the RUN_DIR.local.db a sweep fell back to
    /// when its PostgreSQL server went away) into a shared PostgreSQL store, exactly once (docs/fleet.md).
    Push(push::PushArgs),
    /// Write the manual pages, shell completions or the Vulkan layer's manifest a package installs
    /// (scripts/package-deb.sh).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
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
    /// Follow symlinks that lead outside the given paths (by default they are reported and not followed, so
    /// that a link to / or /proc/self/root does not walk the whole file system).
    #[arg(long)]
    pub follow_outside: bool,
    /// Disassemble the code objects (those for --arch, if given) and report each kernel's instruction mix:
    /// classes (vector ALU, FMA, scalar, LDS, global loads/stores, branches, waits) and path-deciding
    /// instructions (MFMA, WMMA, dot, packed fp16; HMMA, IMMA, DP4A, LDGSTS, TMA, WGMMA).
    #[arg(long)]
    pub disasm: bool,
    /// With --disasm: only kernels whose mangled or demangled name contains PATTERN, or whose family is PATTERN
    /// (MMQ, MMVQ, FA-vec, …).
    #[arg(long, value_name = "PATTERN", requires = "disasm")]
    pub kernel: Option<String>,
    /// With --disasm: the llvm-objdump to use (needs the AMDGPU target; default: the newest found).
    #[arg(long = "llvm-objdump", value_name = "PATH", requires = "disasm")]
    pub llvm_objdump: Option<PathBuf>,
    /// With --disasm: the nvdisasm (or cuobjdump) to use (default: found on PATH, /usr/local/cuda/bin or the
    /// backscope tool cache).
    #[arg(long, value_name = "PATH", requires = "disasm")]
    pub nvdisasm: Option<PathBuf>,
    /// With --disasm: cache listings here (default: $BACKSCOPE_CACHE/disasm or ~/.cache/backscope/disasm).
    #[arg(long = "disasm-cache", value_name = "DIR", requires = "disasm", conflicts_with = "no_disasm_cache")]
    pub disasm_cache: Option<PathBuf>,
    /// With --disasm: neither read nor write the listing cache.
    #[arg(long = "no-disasm-cache", requires = "disasm")]
    pub no_disasm_cache: bool,
    /// Output: text (the default), --json (the records and claims: docs/scan-json.md), markdown, html.
    #[command(flatten)]
    pub output: output::OutputArgs,
}

impl From<ScanArgs> for scan::ScanCommand {
    fn from(a: ScanArgs) -> Self {
        scan::ScanCommand {
            options: binaries::ScanOptions {
                paths: a.paths,
                arch: a.arch,
                kernels: a.kernels,
                library_path: a.library_path,
                follow_outside: a.follow_outside,
                limits: binaries::limits::ScanLimits::default(),
                disasm: a.disasm.then_some(backscope::gpu::binaries::disasm::DisasmOptions {
                    kernel: a.kernel,
                    llvm_objdump: a.llvm_objdump,
                    nvdisasm: a.nvdisasm,
                    cache_dir: a.disasm_cache,
                    no_cache: a.no_disasm_cache,
                }),
            },
            output: a.output.into(),
        }
    }
}

/// Run the command the line names; its exit status (`backscope::exit`).
pub fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Scan(a) => scan::run(&a.into()),
        Command::Sweep(a) => backscope::commands::sweep::run(a.into()),
        Command::Synth(a) => backscope::commands::synth::run(a.into()),
        Command::Trace(a) => backscope::commands::trace::run(a.into()),
        Command::Maps(a) => backscope::commands::maps::run(&a.into()),
        Command::Predict(a) => backscope::commands::predict::command::run(&(*a).into()),
        Command::Gate(a) => backscope::commands::gate::run(&a.into()),
        Command::Doctor(a) => backscope::commands::doctor::run(&a.into()),
        Command::Logs(a) => backscope::commands::logs::run(&a.into()),
        Command::Report(a) => backscope::commands::report::run(&a.into()),
        Command::Bisect(a) => backscope::commands::bisect::run(&a.into_options()?),
        Command::Push(a) => backscope::commands::push::run(&a.into()),
        Command::Generate(a) => generate::run(a, <Cli as clap::CommandFactory>::command()),
    }
}

#[cfg(test)]
mod tests {
    use backscope::commands::sweep::{Resume, SweepCommand};
    use backscope::run::format::target::DbValue;
    use clap::CommandFactory;

    use super::*;

    fn sweep(args: &[&str]) -> SweepCommand {
        let cli = Cli::try_parse_from(["backscope", "sweep"].iter().chain(args)).unwrap();
        let Command::Sweep(a) = cli.command else { panic!("not a sweep") };
        a.into()
    }

    fn generate_files(args: &[&str]) {
        let cli = Cli::try_parse_from(["backscope", "generate"].iter().chain(args)).unwrap();
        let Command::Generate(a) = cli.command else { panic!("not generate") };
        assert_eq!(generate::run(a, Cli::command()).unwrap(), backscope::exit::OK);
    }

    #[test]
    fn every_command_gets_a_page_and_every_shell_its_completions() {
        let dir = tempfile::tempdir().unwrap();
        let man = dir.path().join("man");
        generate_files(&["man", man.to_str().unwrap()]);
        let commands: Vec<String> =
            Cli::command().get_subcommands().filter(|c| !c.is_hide_set()).map(|c| c.get_name().to_string()).collect();
        assert!(commands.len() >= 12 && !commands.contains(&"generate".to_string()), "{commands:?}");
        for name in std::iter::once("backscope".to_string()).chain(commands.iter().map(|c| format!("backscope-{c}"))) {
            let page = std::fs::read_to_string(man.join(format!("{name}.1"))).unwrap();
            let title = format!(".TH {name} 1  \"backscope {}\" \"backscope manual\"", env!("CARGO_PKG_VERSION"));
            assert!(page.contains(&title), "{name}: {page}");
        }
        let completions = dir.path().join("completions");
        generate_files(&["completions", completions.to_str().unwrap()]);
        for (file, flag) in
            [("backscope.bash", "--vklayer"), ("_backscope", "--vklayer"), ("backscope.fish", "-l vklayer")]
        {
            let text = std::fs::read_to_string(completions.join(file)).unwrap();
            assert!(text.contains(flag), "{file} completes trace's flags");
        }
        let layer = "/usr/lib/backscope/libbackscope_vklayer.so";
        generate_files(&["vulkan-manifest", "--library", layer, dir.path().to_str().unwrap()]);
        let manifest = std::fs::read(dir.path().join(trace_format::vulkan::MANIFEST_FILE)).unwrap();
        assert_eq!(
            manifest,
            backscope::observe::observers::manifest_text(std::path::Path::new(layer)),
            "the text trace recognises"
        );
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
        assert_eq!((o.db, o.runs_dir), (DbValue::sqlite(PathBuf::from("x.db")), PathBuf::from("backscope-runs")));
        let SweepCommand::Export(e) = sweep(&["export", "--run", "a", "--run", "b"]) else { panic!("not export") };
        assert_eq!(
            (e.runs, e.db),
            (vec!["a".to_string(), "b".to_string()], DbValue::sqlite(PathBuf::from("backscope.db")))
        );
    }

    #[test]
    fn predict_gate_and_doctor_flags_become_their_commands() {
        use backscope::commands::predict::command::{BatchFrom, Observation, PredictCommand};
        use backscope::commands::predict::{Batch, WeightSource};
        let parse = |args: &[&str]| Cli::try_parse_from(["backscope"].iter().chain(args));
        let cli = parse(&[
            "predict",
            "--arch",
            "gfx900",
            "--type",
            "q4_k",
            "--n",
            "4096",
            "--ne11",
            "64",
            "--trace-json",
            "t.json",
            "--ggml",
            "o24",
        ])
        .unwrap();
        let Command::Predict(a) = cli.command else { panic!("not predict") };
        let c: PredictCommand = (*a).into();
        assert!(
            matches!(&c.prediction.weights, WeightSource::Single { weight_type, n: Some(4096), k: None } if weight_type == "q4_k")
        );
        assert_eq!(
            (c.batch, c.prediction.batch, c.observation, c.prediction.ggml.as_str()),
            (BatchFrom::Flags, Batch::Ne11(64), Observation::TraceJson("t.json".into()), "o24")
        );
        assert_eq!(c.output, backscope::output::OutputOptions::default(), "text on standard output");
        let Command::Predict(a) =
            parse(&["predict", "--arch", "sm_90", "--model", "m.gguf", "--run", "r1"]).unwrap().command
        else {
            panic!("not predict")
        };
        let c: PredictCommand = (*a).into();
        assert_eq!(
            (c.batch, c.observation, c.db),
            (BatchFrom::EachRecord, Observation::Run("r1".into()), DbValue::sqlite(PathBuf::from("backscope.db")))
        );
        assert!(
            parse(&["predict", "--arch", "gfx900", "--model", "m", "--type", "q4_k", "--ne11", "1"]).is_err(),
            "one weight source"
        );
        assert!(
            parse(&["predict", "--arch", "gfx900", "--type", "q4_k", "--trace", "d", "--run", "r"]).is_err(),
            "one observation"
        );

        let Command::Gate(a) = parse(&[
            "gate",
            "--arch",
            "gfx906",
            "--install",
            "a",
            "--install",
            "b",
            "--log",
            "l",
            "--runs",
            "x.db",
            "--run",
            "r1",
            "--ollama",
            "none",
            "--format",
            "html",
            "-o",
            "gate.html",
        ])
        .unwrap()
        .command
        else {
            panic!("not gate")
        };
        let g: backscope::commands::gate::GateCommand = a.into();
        assert_eq!(g.options.install, [PathBuf::from("a"), PathBuf::from("b")]);
        assert_eq!(
            (g.options.runs, g.options.run_ids, g.options.ollama.as_deref()),
            (Some(DbValue::sqlite("x.db".into())), vec!["r1".to_string()], Some("none"))
        );
        assert_eq!(
            (g.output.format, g.output.path.as_deref()),
            (backscope::output::Format::Html, Some(std::path::Path::new("gate.html")))
        );
        assert!(parse(&["gate", "--arch", "gfx906", "--run", "r1"]).is_err(), "--run needs --runs");

        let Command::Doctor(a) =
            parse(&["doctor", "--user", "ollama", "--no-tools", "--tool-timeout", "2", "--json"]).unwrap().command
        else {
            panic!("not doctor")
        };
        let d: backscope::commands::doctor::DoctorCommand = a.into();
        assert_eq!(
            (d.options.user.as_deref(), d.options.tools, d.options.root),
            (Some("ollama"), Some(false), PathBuf::from("/"))
        );
        assert_eq!(d.options.tool_timeout, std::time::Duration::from_secs(2));
        assert_eq!(d.output.format, backscope::output::Format::Json);
    }

    #[test]
    fn bisect_flags_become_a_stored_spec() {
        use backscope::commands::bisect::{Rate, Resume, TestSpec};
        let parse = |args: &[&str]| Cli::try_parse_from(["backscope", "bisect"].iter().chain(args));
        let opts = |args: &[&str]| {
            let Command::Bisect(a) = parse(args).unwrap().command else { panic!("not bisect") };
            a.into_options()
        };
        let o = opts(&[
            "--good",
            "b9819",
            "--bad",
            "9900",
            "--builds",
            "dir:rel",
            "--backend",
            "vulkan",
            "--cmake-arg",
            "-DGGML_NATIVE=OFF",
            "--jobs",
            "3",
            "--model",
            "m.gguf",
            "--num-gpu",
            "-1",
            "--server-arg=--device",
            "--server-arg",
            "none",
            "--env",
            "GGML_VK_VISIBLE_DEVICES=0",
            "--slower",
            "decode",
            "--factor",
            "1.2",
            "--repeat",
            "4",
        ])
        .unwrap();
        let s = o.spec.unwrap();
        assert_eq!((s.good, s.bad, s.backend.as_str(), s.jobs, s.repeat), (9819, 9900, "vulkan", 3, 4));
        assert_eq!(s.test, TestSpec::Slower { rate: Rate::Decode, factor: 1.2 });
        assert!(s.builds.starts_with("dir:/") && s.builds.ends_with("/rel"), "made absolute: {}", s.builds);
        assert_eq!(s.cmake_args, ["-DGGML_NATIVE=OFF"]);
        let cell = s.cell.unwrap();
        assert_eq!(
            (cell.num_gpu, cell.server_args.as_slice()),
            (Some(-1), &["--device".to_string(), "none".into()][..])
        );
        let o = opts(&["--good", "1", "--bad", "2", "--", "sh", "-c", "exit 1"]).unwrap();
        assert_eq!(o.spec.unwrap().test, TestSpec::External { argv: vec!["sh".into(), "-c".into(), "exit 1".into()] });
        assert_eq!(opts(&["--resume"]).unwrap().resume, Some(Resume::Latest));
        assert_eq!(opts(&["--resume", "bisect-x"]).unwrap().resume, Some(Resume::Id("bisect-x".into())));
        assert!(parse(&["--good", "1", "--bad", "2", "--crash", "--log", "x"]).is_err(), "one test");
        assert!(parse(&["--good", "1", "--bad", "2", "--slower", "decode"]).is_err(), "--slower needs --factor");
        assert!(parse(&["--good", "1", "--bad", "2", "--class", "crash"]).is_err(), "--class needs --crash");
        assert!(parse(&["--bad", "2", "--crash"]).is_err(), "--good is required without --resume");
        assert!(opts(&["--resume", "--crash"]).is_err(), "--resume takes the stored spec");
    }

    #[test]
    fn scan_flags_become_scan_options() {
        let cli = Cli::try_parse_from(["backscope", "scan", "--arch", "gfx906", "--json", "/opt/rocm/lib"]).unwrap();
        let Command::Scan(a) = cli.command else { panic!("not a scan") };
        let c: scan::ScanCommand = a.into();
        assert_eq!((c.options.arch.as_deref(), c.output.format), (Some("gfx906"), backscope::output::Format::Json));
        assert_eq!(c.options.paths, [PathBuf::from("/opt/rocm/lib")]);
        assert!(c.options.disasm.is_none());
    }

    #[test]
    fn disasm_flags_become_disasm_options_and_need_disasm() {
        let cli = Cli::try_parse_from([
            "backscope",
            "scan",
            "--disasm",
            "--kernel",
            "mul_mat_q",
            "--nvdisasm",
            "/x/nvdisasm",
            "--no-disasm-cache",
            "l.so",
        ])
        .unwrap();
        let Command::Scan(a) = cli.command else { panic!("not a scan") };
        let c: scan::ScanCommand = a.into();
        let d = c.options.disasm.expect("--disasm");
        assert_eq!(d.kernel.as_deref(), Some("mul_mat_q"));
        assert_eq!(d.nvdisasm, Some(PathBuf::from("/x/nvdisasm")));
        assert!(d.no_cache && d.cache_dir.is_none() && d.llvm_objdump.is_none());
        assert!(
            Cli::try_parse_from(["backscope", "scan", "--kernel", "mmq", "l.so"]).is_err(),
            "--kernel needs --disasm"
        );
    }

    #[test]
    fn maps_flags_become_maps_options() {
        let cli = Cli::try_parse_from([
            "backscope",
            "maps",
            "--name",
            "ollama",
            "--watch",
            "--interval",
            "2",
            "--arch",
            "gfx1201",
            "--json",
            "-o",
            "maps.json",
        ])
        .unwrap();
        let Command::Maps(a) = cli.command else { panic!("not maps") };
        let o: backscope::commands::maps::MapsOptions = a.into();
        assert_eq!(
            (o.names.as_slice(), o.watch, o.interval),
            (&["ollama".to_string()][..], true, std::time::Duration::from_secs(2))
        );
        assert_eq!(o.archs, ["gfx1201"]);
        assert_eq!((o.output.format, o.output.path), (backscope::output::Format::Json, Some("maps.json".into())));
        assert!(Cli::try_parse_from(["backscope", "maps"]).is_err(), "a PID or --name is required");
        let cli = Cli::try_parse_from(["backscope", "maps", "12", "34"]).unwrap();
        let Command::Maps(a) = cli.command else { panic!("not maps") };
        assert_eq!(a.pids, [12, 34]);
    }
}
