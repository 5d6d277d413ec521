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
pub mod redact;
pub mod shell;
mod source;
pub mod term;
pub mod text;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};

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
///
/// **`-o FILE` never destroys what was there, nor an input.** The output is written to a temporary file beside
/// FILE (`.FILE.XXXXXX.backscope-tmp`, in FILE's own directory so that the rename stays on one file system) and
/// renamed over FILE by [`Output::finish`], once the command's output is complete; an output dropped without
/// `finish` (the command failed) removes its temporary file, and a previous FILE stays as it was. A FILE that is
/// a symlink to a regular file is followed: the file it names is replaced and the link kept. A symlink that names
/// nothing (dangling) is refused: following it would create a file wherever the link aims — in a shared directory,
/// wherever another user aimed it — and replacing it would silently undo a link someone made; a symlink to a
/// directory is refused as a directory is. FILE is refused before any work when
/// it is one of the command's [`Inputs`] (same device and inode, symlinks followed) or already exists inside a
/// directory the command reads. Paths under `/dev` and `/proc` and files that are not regular (a FIFO, `>(…)`,
/// a terminal) are written directly, as a stream, since there is nothing there to replace.
///
/// A stream ([`Output::into_stream`], the sweep's `--json` events) follows the same rule: its lines go to the
/// temporary file as they come and FILE appears when the command ends; to follow one live, send it to standard
/// output or a pipe.
pub struct Output {
    options: OutputOptions,
    sink: BufWriter<Destination>,
    to_stdout: bool,
}

/// Where the bytes go.
enum Destination {
    Stdout(io::Stdout),
    /// A FIFO, a device, `/dev/stdout`: written as it is.
    Direct(File),
    /// A regular file: written beside it, renamed over `target` by `finish` (removed if dropped before).
    Pending {
        temp: tempfile::NamedTempFile,
        target: PathBuf,
    },
}

impl Write for Destination {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Destination::Stdout(w) => w.write(buf),
            Destination::Direct(f) => f.write(buf),
            Destination::Pending { temp, .. } => temp.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Destination::Stdout(w) => w.flush(),
            Destination::Direct(f) => f.flush(),
            Destination::Pending { temp, .. } => temp.flush(),
        }
    }
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output").field("options", &self.options).field("to_stdout", &self.to_stdout).finish()
    }
}

/// The paths a command reads, which its `-o FILE` must not replace: files (refused when FILE is the same file)
/// and directories it reads from (refused when FILE already exists inside one, since any file there may be read).
/// Each is decided when the output is opened, by what the path is then; `-` (standard input) is no path.
#[derive(Clone, Debug, Default)]
pub struct Inputs(Vec<PathBuf>);

impl Inputs {
    /// A command that reads no file (`maps`, `doctor` of the running system).
    pub fn none() -> Inputs {
        Inputs::default()
    }

    /// Adds a file or a directory the command reads.
    pub fn path(mut self, path: impl AsRef<Path>) -> Inputs {
        let path = path.as_ref();
        if path != Path::new("-") && !path.as_os_str().is_empty() {
            self.0.push(path.to_path_buf());
        }
        self
    }

    /// Adds files or directories the command reads.
    pub fn paths<P: AsRef<Path>>(self, paths: impl IntoIterator<Item = P>) -> Inputs {
        paths.into_iter().fold(self, |inputs, p| inputs.path(p))
    }

    /// Adds an optional file or directory.
    pub fn maybe(self, path: Option<impl AsRef<Path>>) -> Inputs {
        match path {
            Some(p) => self.path(p),
            None => self,
        }
    }

    /// Refuses `output` when writing it would replace one of the inputs or a file inside an input directory.
    pub fn check(&self, output: &Path) -> Result<()> {
        let exists = std::fs::symlink_metadata(output).is_ok();
        for input in &self.0 {
            if crate::host::inputs::same_file(output, input)
                || resolved(output).is_some_and(|o| Some(o) == resolved(input))
            {
                bail!(
                    "refusing to write the output to {}: it is {}, an input of this command, which the output would \
                     replace; choose another -o path",
                    output.display(),
                    input.display()
                );
            }
            if exists && std::fs::metadata(input).is_ok_and(|m| m.is_dir()) && lies_inside(input, output) {
                bail!(
                    "refusing to write the output to {}: it already exists inside {}, a directory this command reads, \
                     where it would be read as an input; write the output elsewhere",
                    output.display(),
                    input.display()
                );
            }
        }
        Ok(())
    }
}

/// Where `path` is or would be created: symlinks resolved, the last component kept when it does not exist yet (an
/// input the command creates, such as a new sweep database).
fn resolved(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok().or_else(|| in_resolved_dir(path))
}

/// `path` with its directory resolved and its own name kept (the path itself when it is a symlink, or a path that
/// does not exist yet).
fn in_resolved_dir(path: &Path) -> Option<PathBuf> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Some(std::fs::canonicalize(parent).ok()?.join(path.file_name()?))
}

/// Whether the existing `path` lies inside `dir`: the file it resolves to, or the link itself, since a walk may read
/// either.
fn lies_inside(dir: &Path, path: &Path) -> bool {
    if crate::host::inputs::resolved_inside(dir, path) {
        return true;
    }
    match (std::fs::canonicalize(dir), in_resolved_dir(path)) {
        (Ok(d), Some(p)) => p.starts_with(d),
        _ => false,
    }
}

impl Output {
    /// Opens the destination, before the command does its work, so that a path that cannot be written or that
    /// would replace one of `inputs` fails first. `-o FILE` gets a temporary file beside it (see [`Output`]).
    pub fn open(options: &OutputOptions, inputs: &Inputs) -> Result<Output> {
        let (sink, to_stdout) = match &options.path {
            Some(p) if p != Path::new("-") => {
                inputs.check(p)?;
                (destination(p)?, false)
            }
            // Unlocked: the lock would be held across the command's work and any other thread printing.
            _ => (Destination::Stdout(io::stdout()), true),
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

    /// The output is complete: `-o FILE` is written to disk and renamed over FILE. Without this call the output
    /// is discarded (standard output and direct destinations have already received it).
    pub fn finish(self) -> Result<()> {
        let destination = self.sink.into_inner().map_err(|e| e.into_error()).context("writing the output")?;
        if let Destination::Pending { temp, target } = destination {
            temp.as_file().sync_all().with_context(|| format!("writing {}", temp.path().display()))?;
            temp.persist(&target).map_err(|e| {
                anyhow::Error::new(e.error).context(format!(
                    "cannot rename {} to {}",
                    e.file.path().display(),
                    target.display()
                ))
            })?;
            // The rename itself on disk (best effort: some file systems refuse to sync a directory).
            if let Some(dir) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
                let _ = File::open(dir).and_then(|d| d.sync_all());
            }
        }
        Ok(())
    }

    /// The destination as a stream of lines written while the command runs (see [`Output`] for where they go).
    pub fn into_stream(self) -> Stream {
        Stream(Arc::new(Mutex::new(self)))
    }
}

/// Opens `-o PATH`: a temporary file beside a regular file (or where one will be), or the special file itself.
fn destination(path: &Path) -> Result<Destination> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let special = path.starts_with("/dev") || path.starts_with("/proc");
    let existing = match std::fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot write {}", path.display()))),
    };
    let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    let aim = || std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_else(|e| format!("? ({e})"));
    if link && existing.is_none() {
        bail!(
            "{} is a symlink to {}, which does not exist: -o does not create a file through a dangling link (it \
             could aim anywhere); remove the link, or give the path of the file itself",
            path.display(),
            aim()
        );
    }
    if existing.as_ref().is_some_and(|m| m.is_dir()) {
        let what = if link { format!("a symlink to a directory ({})", aim()) } else { "a directory".to_string() };
        bail!("{} is {what}: -o takes a file name", path.display());
    }
    if special || existing.as_ref().is_some_and(|m| !m.is_file()) {
        // Non-blocking open: a FIFO with no reader fails at once (ENXIO) instead of hanging the command.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        crate::host::inputs::clear_nonblock(&file).with_context(|| format!("cannot write {}", path.display()))?;
        return Ok(Destination::Direct(file));
    }
    // A symlink is followed: the file it names is the one replaced.
    let target = match &existing {
        Some(_) => std::fs::canonicalize(path).with_context(|| format!("cannot resolve {}", path.display()))?,
        None => path.to_path_buf(),
    };
    let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = target.file_name().with_context(|| format!("-o {}: needs a file name", path.display()))?;
    let mode = match &existing {
        // An existing file that may not be written is not replaced either (opening it changes nothing).
        Some(m) => {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&target)
                .with_context(|| format!("cannot write {}", path.display()))?;
            m.permissions().mode() & 0o7777
        }
        // What File::create gives: 0666 less the umask (applied by the kernel).
        None => 0o666,
    };
    let temp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .suffix(".backscope-tmp")
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)
        .with_context(|| format!("cannot create {} (its temporary file in {})", path.display(), dir.display()))?;
    if existing.is_some() {
        // The umask narrowed the mode at creation; the replaced file's own mode is kept.
        let _ = temp.as_file().set_permissions(std::fs::Permissions::from_mode(mode));
    }
    Ok(Destination::Pending { temp, target })
}

/// An [`Output`] written line by line while the command runs; [`Stream::finish`] when it is complete.
pub struct Stream(Arc<Mutex<Output>>);

impl Stream {
    /// A writer into the stream that flushes every line, so a reader sees each event at once.
    pub fn writer(&self) -> Box<dyn Write + Send> {
        Box::new(LineFlush(StreamWriter(Arc::clone(&self.0))))
    }

    /// The stream is complete: as [`Output::finish`]. Every writer must have been dropped.
    pub fn finish(self) -> Result<()> {
        let output =
            Arc::try_unwrap(self.0).map_err(|_| anyhow::anyhow!("the output stream is still being written"))?;
        output.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner()).finish()
    }
}

struct StreamWriter(Arc<Mutex<Output>>);

impl Write for StreamWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).sink.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).sink.flush()
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

    fn to_file(path: &Path) -> OutputOptions {
        OutputOptions { format: Format::Text, path: Some(path.to_path_buf()), all: false }
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_file_appears_whole_at_finish_and_a_dropped_output_leaves_the_old_one() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("report.txt");
        std::fs::write(&report, "previous good report\n").unwrap();
        std::fs::set_permissions(&report, std::fs::Permissions::from_mode(0o640)).unwrap();

        let mut out = Output::open(&to_file(&report), &Inputs::none()).unwrap();
        out.write_raw(b"half of a new one").unwrap();
        out.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&report).unwrap(), "previous good report\n", "untouched until finish");
        drop(out); // the command failed
        assert_eq!(std::fs::read_to_string(&report).unwrap(), "previous good report\n");
        assert_eq!(names_in(dir.path()), ["report.txt"], "the temporary file is removed");

        let mut out = Output::open(&to_file(&report), &Inputs::none()).unwrap();
        out.write_raw(b"new report\n").unwrap();
        out.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&report).unwrap(), "new report\n");
        assert_eq!(names_in(dir.path()), ["report.txt"]);
        let mode = std::fs::metadata(&report).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640, "the replaced file's mode is kept");

        // Through a symlink: the file it names is replaced, the link stays a link.
        let link = dir.path().join("latest.txt");
        std::os::unix::fs::symlink("report.txt", &link).unwrap();
        let mut out = Output::open(&to_file(&link), &Inputs::none()).unwrap();
        out.write_raw(b"via the link\n").unwrap();
        out.finish().unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&report).unwrap(), "via the link\n");
    }

    #[test]
    fn a_dangling_link_and_a_link_to_a_directory_are_refused_and_left_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let dangling = dir.path().join("out.txt");
        std::os::unix::fs::symlink("elsewhere/none.txt", &dangling).unwrap();
        let e = Output::open(&to_file(&dangling), &Inputs::none()).unwrap_err().to_string();
        assert!(e.contains("is a symlink to elsewhere/none.txt, which does not exist"), "{e}");
        assert_eq!(std::fs::read_link(&dangling).unwrap(), Path::new("elsewhere/none.txt"), "the link is kept");
        let to_dir = dir.path().join("to-dir");
        std::os::unix::fs::symlink(dir.path(), &to_dir).unwrap();
        let e = Output::open(&to_file(&to_dir), &Inputs::none()).unwrap_err().to_string();
        assert!(e.contains("is a symlink to a directory"), "{e}");
        assert_eq!(names_in(dir.path()), ["out.txt", "to-dir"], "no temporary file left");
    }

    #[test]
    fn a_stream_is_complete_at_finish() {
        let dir = tempfile::tempdir().unwrap();
        let events = dir.path().join("events.jsonl");
        let stream = Output::open(&to_file(&events), &Inputs::none()).unwrap().into_stream();
        let mut w = stream.writer();
        w.write_all(b"{\"event\":\"run_started\"}\n").unwrap();
        assert!(!events.exists(), "a stream to a file appears when it ends");
        drop(w);
        stream.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&events).unwrap(), "{\"event\":\"run_started\"}\n");
        // Finishing while a writer is still held is refused; the stream is then discarded like any unfinished one.
        let stream = Output::open(&to_file(&events), &Inputs::none()).unwrap().into_stream();
        let mut w = stream.writer();
        w.write_all(b"partial\n").unwrap();
        assert!(stream.finish().is_err());
        drop(w);
        assert_eq!(std::fs::read_to_string(&events).unwrap(), "{\"event\":\"run_started\"}\n");
        assert_eq!(names_in(dir.path()), ["events.jsonl"]);
    }

    #[test]
    fn an_input_or_a_file_in_a_read_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("a.log");
        std::fs::write(&log, "x\n").unwrap();
        let link = dir.path().join("link.log");
        std::os::unix::fs::symlink(&log, &link).unwrap();
        let inputs = Inputs::none().path(&log).path("-");
        for target in [&log, &link] {
            let err = Output::open(&to_file(target), &inputs).unwrap_err().to_string();
            assert!(
                err.contains(&target.display().to_string()) && err.contains(&log.display().to_string()),
                "both paths named: {err}"
            );
        }
        // An input that does not exist yet (a database the command creates) is the same place too.
        let db = dir.path().join("new.db");
        assert!(Output::open(&to_file(&dir.path().join("./new.db")), &Inputs::none().path(&db)).is_err());
        assert!(!db.exists());

        let walked = dir.path().join("tree");
        std::fs::create_dir(&walked).unwrap();
        std::fs::write(walked.join("old.json"), "{}").unwrap();
        let inputs = Inputs::none().path(&walked);
        let err = Output::open(&to_file(&walked.join("old.json")), &inputs).unwrap_err().to_string();
        assert!(err.contains("inside") && err.contains(&walked.display().to_string()), "{err}");
        assert_eq!(std::fs::read_to_string(walked.join("old.json")).unwrap(), "{}");
        // A new file there is no input; elsewhere anything goes.
        Output::open(&to_file(&walked.join("new.json")), &inputs).unwrap().finish().unwrap();
        Output::open(&to_file(&dir.path().join("elsewhere.json")), &inputs).unwrap().finish().unwrap();
    }

    #[test]
    fn special_files_are_written_directly() {
        let mut out = Output::open(&to_file(Path::new("/dev/null")), &Inputs::none()).unwrap();
        out.write_raw(b"gone").unwrap();
        out.finish().unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        // A FIFO nobody reads fails at once instead of waiting for a reader.
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = Output::open(&to_file(&fifo), &Inputs::none()).unwrap_err();
        assert!(format!("{err:#}").contains("cannot create"), "{err:#}");
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
