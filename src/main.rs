use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use backscope::cli::{Cli, Command};
use backscope::{render, scan};
use clap::Parser;

/// Exit codes: 0 success, 1 the command ran but some input could not be decoded (see the problems),
/// 2 usage or I/O error of backscope itself.
const EXIT_OK: u8 = 0;
const EXIT_PROBLEMS: u8 = 1;
const EXIT_ERROR: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // A closed pipe (`backscope scan … | head`) is not an error.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::from(EXIT_OK);
            }
            eprintln!("backscope: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Sweep(args) => backscope::sweep::run(args),
        Command::Synth(args) => backscope::synth::run(args),
        Command::Trace(args) => backscope::tracecmd::run(args),
        Command::Scan(args) => {
            for p in &args.paths {
                if !p.exists() && std::fs::symlink_metadata(p).is_err() {
                    anyhow::bail!("{}: no such file or directory", p.display());
                }
            }
            let opts = scan::ScanOptions {
                paths: args.paths,
                arch: args.arch,
                kernels: args.kernels,
                library_path: args.library_path,
                follow_outside: args.follow_outside,
                limits: scan::limits::ScanLimits::default(),
            };
            let report = scan::scan(&opts);
            // Stdout is line-buffered with a small buffer; a kernel table in JSON is one multi-MB line.
            let sink: Box<dyn Write> = match &args.output {
                Some(path) => {
                    Box::new(std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?)
                }
                None => Box::new(std::io::stdout().lock()),
            };
            let mut stdout = std::io::BufWriter::with_capacity(1 << 20, sink);
            if args.json {
                serde_json::to_writer(&mut stdout, &report)?;
                writeln!(stdout)?;
            } else {
                stdout.write_all(render::scan(&report, args.kernels).as_bytes())?;
            }
            stdout.flush()?;
            let errors = report.problems.iter().any(|p| p.severity == scan::Severity::Error);
            Ok(if errors { EXIT_PROBLEMS } else { EXIT_OK })
        }
    }
}
