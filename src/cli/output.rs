//! The output flags every command shares (`--format`, `--json`, `-o`, `--all`), turned into
//! `backscope::output::OutputOptions`.

use std::path::PathBuf;

use backscope::output::{Format, OutputOptions};
use clap::{Args, ValueEnum};

/// `--format`: the formats of `backscope::output::Format` by their command-line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// For a terminal: fitted to its width, long tables collapsed (--all shows them whole).
    Text,
    /// The command's JSON (schemas in docs/).
    Json,
    /// Markdown with GitHub tables, for bug reports.
    Markdown,
    /// One self-contained HTML file (inline CSS, no scripts, loads nothing).
    Html,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Text => Format::Text,
            FormatArg::Json => Format::Json,
            FormatArg::Markdown => Format::Markdown,
            FormatArg::Html => Format::Html,
        }
    }
}

/// How to print (commands whose `-o` means something else take only these).
#[derive(Debug, Args)]
pub struct FormatArgs {
    /// Output format.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<FormatArg>,
    /// Same as --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Text output: show every row of long tables instead of collapsing them.
    #[arg(long)]
    pub all: bool,
}

/// How and where to print.
#[derive(Debug, Args)]
pub struct OutputArgs {
    #[command(flatten)]
    pub format: FormatArgs,
    /// Write the output to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

impl FormatArgs {
    pub fn options(&self, path: Option<PathBuf>) -> OutputOptions {
        let format = if self.json { Format::Json } else { self.format.map_or(Format::Text, Format::from) };
        OutputOptions { format, path, all: self.all }
    }
}

impl From<OutputArgs> for OutputOptions {
    fn from(a: OutputArgs) -> Self {
        a.format.options(a.output)
    }
}
