//! The output layer: every command's result goes through here, and nothing else in backscope writes to standard
//! output.
//!
//! A command builds a typed result and implements [`Render`] for it: its JSON (each command's documented,
//! versioned schema, written with serde) and a [`Document`] (headings, paragraphs, tables, claim lists,
//! excerpts, charts). [`Output`] owns the destination — standard output or the `-o FILE` — with its buffering,
//! and renders the document in the chosen [`Format`]: terminal text (fitted to the width, long tables collapsed
//! unless `--all`), Markdown, or one self-contained HTML file. Exporters return strings and do no I/O (the pattern
//! of hyperfine's exporters); escaping for each format is in [`escape`].
//!
//! A closed pipe (`backscope … | head`) surfaces as an [`std::io::ErrorKind::BrokenPipe`] error from the writes
//! here; the binary turns it into a quiet exit 0, as ripgrep does. Messages for standard error go through
//! [`messages`], which never panics.

pub mod doc;
pub mod escape;
mod html;
mod markdown;
pub mod messages;
pub mod term;
pub mod text;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub use doc::{Align, Block, Chart, ClaimList, Collapse, Column, Document, Excerpt, Fit, Span, Svg, Table, Text};

/// The formats every command can write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Text for a terminal (the default).
    #[default]
    Text,
    /// The command's JSON (schemas in docs/).
    Json,
    Markdown,
    /// One self-contained HTML file.
    Html,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::Markdown => "markdown",
            Format::Html => "html",
        }
    }
}

/// Where and how a command writes its result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputOptions {
    pub format: Format,
    /// A file instead of standard output.
    pub path: Option<PathBuf>,
    /// Text output: show every row of long tables.
    pub all: bool,
}

impl OutputOptions {
    pub fn json(&self) -> bool {
        self.format == Format::Json
    }
}

/// A command's result: its JSON and its document.
pub trait Render {
    /// The result as the command's documented JSON.
    fn write_json(&self, out: &mut dyn Write) -> io::Result<()>;
    /// The result as a document for text, Markdown and HTML.
    fn document(&self) -> Document;
}

/// Renders `doc` in a document format (`Json` has no document rendering and gives the text).
pub fn render_document(doc: &Document, format: Format, layout: text::Layout) -> String {
    match format {
        Format::Text | Format::Json => text::render(doc, layout),
        Format::Markdown => markdown::render(doc),
        Format::Html => html::render(doc),
    }
}

/// The destination of one command's output: standard output or a file, buffered.
pub struct Output {
    options: OutputOptions,
    sink: BufWriter<Box<dyn Write + Send>>,
    to_stdout: bool,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output").field("options", &self.options).field("to_stdout", &self.to_stdout).finish()
    }
}

impl Output {
    /// Opens the destination: `-o FILE` is created now, so that a path that cannot be written fails before the
    /// command does its work.
    pub fn open(options: &OutputOptions) -> Result<Output> {
        let (sink, to_stdout): (Box<dyn Write + Send>, bool) = match &options.path {
            Some(p) if p != Path::new("-") => {
                (Box::new(File::create(p).with_context(|| format!("cannot create {}", p.display()))?), false)
            }
            // Unlocked: the lock would be held across the command's work and any other thread printing.
            _ => (Box::new(io::stdout()), true),
        };
        // A large buffer: a scan's JSON is one multi-MB line, and standard output alone is line-buffered.
        Ok(Output { options: options.clone(), sink: BufWriter::with_capacity(1 << 20, sink), to_stdout })
    }

    pub fn format(&self) -> Format {
        self.options.format
    }

    /// The text layout for this destination: the terminal's width (or `$COLUMNS`, or the default) and `--all`.
    pub fn layout(&self) -> text::Layout {
        text::Layout { width: term::width(self.to_stdout), all: self.options.all }
    }

    /// Writes `result` in the chosen format and flushes.
    pub fn emit(&mut self, result: &dyn Render) -> Result<()> {
        match self.options.format {
            Format::Json => {
                result.write_json(&mut self.sink).context("writing the output")?;
            }
            format => {
                let rendered = render_document(&result.document(), format, self.layout());
                self.sink.write_all(rendered.as_bytes()).context("writing the output")?;
            }
        }
        self.flush()
    }

    /// Writes bytes as they are (JSON Lines records, a line of a stream) without flushing.
    pub fn write_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.sink.write_all(bytes).context("writing the output")
    }

    pub fn flush(&mut self) -> Result<()> {
        self.sink.flush().context("writing the output")
    }

    /// The destination as a writer that flushes every line, for a stream of events read while it runs.
    pub fn into_line_writer(self) -> Box<dyn Write + Send> {
        Box::new(LineFlush(self.sink))
    }
}

/// Flushes after every write that ends a line, so a reader sees each event at once.
struct LineFlush<W: Write>(W);

impl<W: Write> Write for LineFlush<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.0.write(buf)?;
        if buf[..n].contains(&b'\n') {
            self.0.flush()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// A document whose JSON form is a given value (results that are only ever text get a small object).
#[derive(Clone, Debug)]
pub struct Rendered {
    pub document: Document,
    pub json: serde_json::Value,
}

impl Render for Rendered {
    fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer(&mut *out, &self.json)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        self.document.clone()
    }
}

/// Whether an error is a closed pipe on the way out (the reader went away: not an error of backscope).
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn a_chart_is_svg_in_html_and_its_fallback_elsewhere() {
        let svg = Svg::new(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10"><rect width="5" height="9"/></svg>"#,
        )
        .unwrap();
        let mut fallback = Table::new(vec![Column::number("num_gpu"), Column::number("t/s")]);
        fallback.row(["0", "41.5"]);
        let mut doc = Document::new("chart");
        doc.push(Chart { title: "decode t/s by num_gpu".into(), svg, fallback: vec![fallback.into()] });
        let layout = text::Layout { width: 80, all: false };
        let html = render_document(&doc, Format::Html, layout);
        assert!(
            html.contains("<figure class=\"chart\">\n<figcaption>decode t/s by num_gpu</figcaption>\n<svg "),
            "{html}"
        );
        assert!(!html.contains("41.5"), "HTML shows the chart, not its fallback");
        let md = render_document(&doc, Format::Markdown, layout);
        assert!(
            md.contains("**decode t/s by num\\_gpu**") && md.contains("| 0 | 41.5 |") && !md.contains("<svg"),
            "{md}"
        );
        let text = render_document(&doc, Format::Text, layout);
        assert!(
            text.starts_with("decode t/s by num_gpu\n") && text.contains("41.5") && !text.contains("<svg"),
            "{text}"
        );
    }

    /// Print macros bypass the output layer (buffering, escaping, a closed pipe); none may appear in backscope's
    /// own sources. Clippy's `print_stdout`/`print_stderr` lints say the same at build time; this test holds
    /// without clippy.
    #[test]
    fn no_print_macro_outside_the_output_layer() {
        fn walk(dir: &Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for (i, line) in text.lines().enumerate() {
                        let code = line.split("//").next().unwrap_or("");
                        // The names are spelled apart from `!(` so that this test does not find itself.
                        for m in ["println", "print", "eprintln", "eprint", "dbg"].map(|n| format!("{n}!(")) {
                            let m = m.as_str();
                            let hit = code.match_indices(m).any(|(at, _)| {
                                // `eprint!` inside `eprintln!` is the same hit; a macro is preceded by a non-identifier.
                                !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                            });
                            if hit {
                                found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                            }
                        }
                    }
                }
            }
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        walk(&src, &mut found);
        found.dedup();
        assert!(found.is_empty(), "print macros outside the output layer:\n{}", found.join("\n"));
    }
}
