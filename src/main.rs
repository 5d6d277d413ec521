//! The `backscope` command: parse the command line, run the command, exit with its status.

#![warn(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)]

mod cli;

use std::process::ExitCode;

use backscope::exit;
use backscope::output::{is_broken_pipe, messages};
use clap::Parser as _;

fn main() -> ExitCode {
    // The sweep's watchdog is this binary started again under another name (see sweep::supervise::watchdog).
    if let Some(code) = backscope::commands::sweep::watchdog_main() {
        return ExitCode::from(code);
    }
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return command_line_error(&e),
    };
    match cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        // A closed pipe (`backscope scan … | head`) is not an error: the reader has what it wanted.
        Err(e) if is_broken_pipe(&e) => ExitCode::from(exit::OK),
        Err(e) => {
            messages::note(format_args!("{e:#}"));
            ExitCode::from(exit::ERROR)
        }
    }
}

/// What clap has to say about the command line. `--help` and `--version` are printed as clap prints them, to
/// standard output. A usage error quotes the argument that was wrong, which may hold terminal escapes or bidi
/// controls: it goes to standard error line by line through the one escaper, without clap's colours.
fn command_line_error(e: &clap::Error) -> ExitCode {
    if !e.use_stderr() {
        // A closed standard output ends help quietly, as a closed pipe ends any output.
        let _ = e.print();
        return ExitCode::from(exit::OK);
    }
    for line in e.render().to_string().lines() {
        messages::line(line);
    }
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(exit::ERROR))
}
