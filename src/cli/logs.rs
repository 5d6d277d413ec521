//! `backscope logs`'s flags, and their conversion into `backscope::commands::logs::LogsOptions`.

use std::path::PathBuf;

use backscope::commands::logs::LogsOptions;
use clap::Args;

#[derive(Debug, Args)]
#[command(after_help = "Exit status (in every format, --json or not):
    0  the log was read and shows no crash
    1  the log shows at least one crash
    2  the log could not be read, or is not a log (a binary file)

Examples:
    backscope logs ~/.ollama/logs/server.log
    journalctl -u ollama --no-pager | backscope logs -
    backscope logs server.log --format html -o server-log.html
    backscope logs server.log >/dev/null || echo \"crashed (1) or unreadable (2)\"")]
pub struct LogsArgs {
    /// The log: an Ollama server log (journal, Docker or plain), a llama-server or llama-cli log; - reads
    /// standard input.
    #[arg(value_name = "FILE|-")]
    pub input: PathBuf,
    /// Output: text (the default), --json (docs/logs-json.md), markdown, html.
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

impl From<LogsArgs> for LogsOptions {
    fn from(a: LogsArgs) -> Self {
        LogsOptions { input: a.input, output: a.output.into() }
    }
}
