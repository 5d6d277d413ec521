//! The `backscope` command: parse the command line, run the command, exit with its status.

#![warn(clippy::print_stdout, clippy::print_stderr, clippy::dbg_macro)]

mod cli;

use std::process::ExitCode;

use backscope::exit;
use backscope::output::{is_broken_pipe, messages};

fn main() -> ExitCode {
    // The sweep's watchdog is this binary started again under another name (see sweep::supervise::watchdog).
    if let Some(code) = backscope::sweep::watchdog_main() {
        return ExitCode::from(code);
    }
    match cli::run(cli::parse()) {
        Ok(code) => ExitCode::from(code),
        // A closed pipe (`backscope scan … | head`) is not an error: the reader has what it wanted.
        Err(e) if is_broken_pipe(&e) => ExitCode::from(exit::OK),
        Err(e) => {
            messages::note(format_args!("{e:#}"));
            ExitCode::from(exit::ERROR)
        }
    }
}
