//! The `backscope` command: parse the command line, run the command, exit with its status.

mod cli;

use std::process::ExitCode;

use backscope::exit;

fn main() -> ExitCode {
    match cli::run(cli::parse()) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // A closed pipe (`backscope scan … | head`) is not an error.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::from(exit::OK);
            }
            eprintln!("backscope: {e:#}");
            ExitCode::from(exit::ERROR)
        }
    }
}
