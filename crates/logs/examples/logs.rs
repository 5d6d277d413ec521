//! Try the log forensics on a file:
//!
//! ```text
//! cargo run -p backscope-logs --example logs -- FILE|- [--json] [--events] [--quiet]
//! ```
//!
//! Prints the report as text (`--json`: as JSON), `--events` one line per event instead, `--quiet` only
//! the counts and this process's peak RSS (for benchmarks: the whole input is still parsed and analysed).

use std::io::{self, BufWriter, Read, Write};
use std::process::ExitCode;

use logs::{analyze_reader, render, Limits, Parser};

fn main() -> ExitCode {
    let mut path = None;
    let (mut json, mut events, mut quiet) = (false, false, false);
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
            "--events" => events = true,
            "--quiet" => quiet = true,
            _ if path.is_none() => path = Some(arg),
            _ => {
                eprintln!("usage: logs FILE|- [--json] [--events] [--quiet]");
                return ExitCode::from(2);
            }
        }
    }
    let Some(path) = path else {
        eprintln!("usage: logs FILE|- [--json] [--events] [--quiet]");
        return ExitCode::from(2);
    };
    let input: Box<dyn Read> = if path == "-" {
        Box::new(io::stdin().lock())
    } else {
        match std::fs::File::open(&path) {
            Ok(f) => Box::new(f),
            Err(e) => {
                eprintln!("logs: {path}: {e}");
                return ExitCode::from(1);
            }
        }
    };
    let out = io::stdout();
    let mut out = BufWriter::new(out.lock());
    let result = if events {
        Parser::parse_reader(input, Limits::default(), |e| {
            let _ =
                writeln!(out, "{}\t{}\t{}", e.line, e.kind.name(), render::printable(&String::from_utf8_lossy(e.text)));
        })
        .map(|stats| {
            let _ = writeln!(out, "# {} lines, {} bytes", stats.lines, stats.bytes);
        })
    } else {
        analyze_reader(input, Limits::default()).map(|report| {
            let _ = if quiet {
                writeln!(
                    out,
                    "{} lines, {} bytes, {} crashes{}",
                    report.stats.lines,
                    report.stats.bytes,
                    report.crashes_total,
                    peak_rss().map(|kib| format!(", peak RSS {kib} KiB")).unwrap_or_default()
                )
            } else if json {
                serde_json::to_writer_pretty(&mut out, &report).map_err(io::Error::from).and_then(|()| writeln!(out))
            } else {
                write!(out, "{}", render::report_text(&report))
            };
        })
    };
    match result.and_then(|()| out.flush().map_err(logs::Error::Io)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("logs: {path}: {e}");
            ExitCode::from(1)
        }
    }
}

/// Peak resident set size of this process in KiB (Linux `VmHWM`), if the system reports it.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}
