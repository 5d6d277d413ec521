//! Runner milestones of every era, as data: `data/log_milestones.toml` of the repository, embedded at build
//! time and read by a small bounded parser (the file uses only `[[milestone]]` headers, `key = "value"` lines
//! and comments). Each row is a literal pattern, the era that prints it, what it means for the phase of a
//! crash, and where the line is printed. [`table`] holds the rows and one Aho-Corasick automaton over their
//! patterns; [`Table::find`] tells which row a line matches (the first pattern in the line).
//!
//! A row that does not parse is an error value naming its line; the embedded file is checked by this module's
//! tests, and a table that failed to parse is empty (the log is then read without era milestones, never a panic).

use std::sync::LazyLock;

/// The embedded milestone file.
pub const SOURCE: &str = include_str!("../../../data/log_milestones.toml");

/// Most rows a milestone file may hold.
pub const MAX_ROWS: usize = 1024;
/// Longest line of a milestone file.
pub const MAX_LINE: usize = 4096;

/// What a milestone says about the runner's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Meaning {
    Discovery,
    /// The runner process itself says it started: a model load follows, unless it is a discovery runner.
    RunnerStart,
    /// A tokenizer-only load (`vocab only - skipping tensors`): the model-loader lines before it were not the
    /// runner's load.
    VocabOnly,
    Load,
    Ready,
    RequestStarted,
    PromptDone,
    RequestDone,
    Compute,
    /// The runtime retries an allocation that failed another way (fewer GPU layers, no pipeline parallelism): the
    /// failure before it was handled.
    Retry,
}

impl Meaning {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "discovery" => Meaning::Discovery,
            "runner_start" => Meaning::RunnerStart,
            "vocab_only" => Meaning::VocabOnly,
            "load" => Meaning::Load,
            "ready" => Meaning::Ready,
            "request_started" => Meaning::RequestStarted,
            "prompt_done" => Meaning::PromptDone,
            "request_done" => Meaning::RequestDone,
            "compute" => Meaning::Compute,
            "retry" => Meaning::Retry,
            _ => return None,
        })
    }

    pub fn label(self) -> &'static str {
        match self {
            Meaning::Discovery => "GPU discovery",
            Meaning::RunnerStart => "runner process started",
            Meaning::VocabOnly => "vocabulary-only load",
            Meaning::Load => "model load",
            Meaning::Ready => "runner ready",
            Meaning::RequestStarted => "request started",
            Meaning::PromptDone => "prompt done",
            Meaning::RequestDone => "request finished",
            Meaning::Compute => "graph compute",
            Meaning::Retry => "allocation retried",
        }
    }
}

/// One row of the milestone file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Milestone {
    pub pattern: String,
    pub era: String,
    pub meaning: Meaning,
    /// A literal after which the line holds a number worth keeping (the GPU layers of an allocation attempt).
    pub number_after: Option<String>,
    pub source: String,
}

/// A row or line of a milestone file that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableError {
    /// 1-based line of the file.
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "log_milestones.toml line {}: {}", self.line, self.message)
    }
}

/// Parse a milestone file.
pub fn parse(text: &str) -> Result<Vec<Milestone>, TableError> {
    let mut rows: Vec<Milestone> = Vec::new();
    let mut current: Option<(usize, [Option<String>; 5])> = None;
    let err = |line: usize, message: &str| TableError { line, message: message.to_string() };
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.len() > MAX_LINE {
            return Err(err(n, "line longer than 4096 bytes"));
        }
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line == "[[milestone]]" {
            if let Some((start, fields)) = current.take() {
                rows.push(finish(start, fields)?);
            }
            if rows.len() >= MAX_ROWS {
                return Err(err(n, "more than 1024 rows"));
            }
            current = Some((n, Default::default()));
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(err(n, "expected `[[milestone]]` or `key = \"value\"`"));
        };
        let Some((_, fields)) = current.as_mut() else {
            return Err(err(n, "a field before the first `[[milestone]]`"));
        };
        let slot = match key.trim() {
            "pattern" => 0,
            "era" => 1,
            "meaning" => 2,
            "number_after" => 3,
            "source" => 4,
            other => return Err(err(n, &format!("unknown field `{other}`"))),
        };
        fields[slot] = Some(string_value(value.trim()).ok_or_else(|| err(n, "expected a quoted string"))?);
    }
    if let Some((start, fields)) = current.take() {
        rows.push(finish(start, fields)?);
    }
    Ok(rows)
}

fn finish(start: usize, fields: [Option<String>; 5]) -> Result<Milestone, TableError> {
    let [pattern, era, meaning, number_after, source] = fields;
    let missing = |what: &str| TableError { line: start, message: format!("the row has no `{what}`") };
    let pattern = pattern.filter(|p| !p.is_empty()).ok_or_else(|| missing("pattern"))?;
    let meaning_text = meaning.ok_or_else(|| missing("meaning"))?;
    let meaning = Meaning::parse(&meaning_text)
        .ok_or_else(|| TableError { line: start, message: format!("unknown meaning `{meaning_text}`") })?;
    Ok(Milestone {
        pattern,
        era: era.ok_or_else(|| missing("era"))?,
        meaning,
        number_after: number_after.filter(|s| !s.is_empty()),
        source: source.filter(|s| !s.is_empty()).ok_or_else(|| missing("source"))?,
    })
}

/// A basic TOML string (`"…"` with `\"` and `\\` escapes), nothing after it but a comment.
fn string_value(s: &str) -> Option<String> {
    let mut chars = s.strip_prefix('"')?.chars();
    let mut out = String::new();
    loop {
        match chars.next()? {
            '"' => break,
            '\\' => match chars.next()? {
                '"' => out.push('"'),
                '\\' => out.push('\\'),
                _ => return None,
            },
            c => out.push(c),
        }
    }
    let rest = chars.as_str().trim();
    (rest.is_empty() || rest.starts_with('#')).then_some(out)
}

/// The milestone rows and an automaton over their patterns.
#[derive(Debug)]
pub struct Table {
    pub rows: Vec<Milestone>,
    /// Why the embedded file could not be used, if it could not.
    pub error: Option<TableError>,
    automaton: Option<crate::patterns::Patterns>,
    /// Tells most lines that hold no pattern without the automaton.
    prefilter: crate::patterns::Prefilter,
}

impl Table {
    pub fn new(rows: Vec<Milestone>) -> Self {
        let patterns: Vec<&str> = rows.iter().map(|r| r.pattern.as_str()).collect();
        let automaton = crate::patterns::Patterns::new(&patterns).ok();
        let prefilter = crate::patterns::Prefilter::new(&patterns);
        Table { rows, error: None, automaton, prefilter }
    }

    /// The row whose pattern comes first in `text`, and the number after its `number_after`, if any.
    pub fn find(&self, text: &[u8]) -> Option<(u16, Option<u32>)> {
        if !self.prefilter.may_hold(text) {
            return None;
        }
        let (index, start) = self.automaton.as_ref()?.find(text)?;
        let row = self.rows.get(index)?;
        let number = row.number_after.as_ref().and_then(|key| {
            let at = memchr::memmem::find(&text[start..], key.as_bytes())? + start + key.len();
            let digits = text[at..].iter().take_while(|b| b.is_ascii_digit()).count();
            std::str::from_utf8(&text[at..at + digits]).ok()?.parse().ok()
        });
        Some((u16::try_from(index).ok()?, number))
    }

    pub fn get(&self, index: u16) -> Option<&Milestone> {
        self.rows.get(usize::from(index))
    }
}

/// The embedded table (empty, with its error, if the file does not parse).
pub fn table() -> &'static Table {
    static TABLE: LazyLock<Table> = LazyLock::new(|| match parse(SOURCE) {
        Ok(rows) => Table::new(rows),
        Err(e) => Table { error: Some(e), ..Table::new(Vec::new()) },
    });
    &TABLE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_table_parses_and_every_row_has_a_source() {
        let rows = parse(SOURCE).unwrap();
        assert!(rows.len() >= 15, "{}", rows.len());
        assert!(table().error.is_none());
        for r in &rows {
            // A source names a file and line (Ollama tag + path:line, or L:path:line) or an issue URL.
            let cited = r.source.contains("https://")
                || r.source.split(' ').any(|w| [".go:", ".cpp:", ".c:", ".py:"].iter().any(|x| w.contains(x)));
            assert!(cited, "row {:?} has no file:line or URL source", r.pattern);
        }
        let eras: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.era.as_str()).collect();
        for era in [
            "ollama-dyn-ext-server",
            "ollama-go-runner",
            "ollama-new-engine",
            "llama-server",
            "llama-server-2024",
            "ggml",
        ] {
            assert!(eras.contains(era), "no row of era {era}");
        }
    }

    #[test]
    fn lines_of_each_era_find_their_row() {
        let t = table();
        let meaning = |line: &str| t.find(line.as_bytes()).map(|(i, n)| (t.get(i).unwrap().meaning, n));
        // https://github.com/ollama/ollama/issues/2165 (ROCm, v0.1.21 pre-release): the rocm_v5 ext server.
        assert_eq!(
            meaning("2024/01/23 19:26:51 dyn_ext_server.go:90: INFO Loading Dynamic llm server: /tmp/ollama800487147/rocm_v5/libext_server.so"),
            Some((Meaning::Load, None))
        );
        // The new engine's fit loop (format of ollama v0.24.0 runner/ollamarunner/runner.go:1297, ml/device.go:85).
        assert_eq!(
            meaning("time=2025-09-20T10:00:00.000Z level=INFO source=runner.go:1297 msg=load request=\"{Operation:fit LoraPath:[] Parallel:1 BatchSize:512 FlashAttention:false KvSize:4096 KvCacheType: NumThreads:8 GPULayers:37[ID:GPU-0 Layers:37(0..36)] MultiUserCache:false ProjectorPath: MainGPU:0 UseMmap:false}\""),
            Some((Meaning::Load, Some(37)))
        );
        assert_eq!(
            meaning(
                "INFO [            update_slots] slot released | tid=\"1\" timestamp=1 id_slot=0 id_task=5 n_ctx=2048"
            ),
            Some((Meaning::RequestDone, None))
        );
        assert_eq!(meaning("ggml_compute_forward_mul_mat"), Some((Meaning::Compute, None)));
        assert_eq!(meaning("llama_model_loader: - kv   0: general.architecture str = llama"), None);
    }

    #[test]
    fn bad_files_are_errors_with_their_line() {
        assert_eq!(parse("pattern = \"x\"").unwrap_err().line, 1);
        assert_eq!(
            parse("[[milestone]]\npattern = \"x\"\nera = \"e\"\nmeaning = \"nope\"\nsource = \"s\"").unwrap_err().line,
            1
        );
        assert_eq!(parse("[[milestone]]\npattern = \"unterminated").unwrap_err().line, 2);
        assert_eq!(
            parse("[[milestone]]\nera = \"e\"\nmeaning = \"load\"\nsource = \"s\"").unwrap_err().message,
            "the row has no `pattern`"
        );
        let long = format!("# {}", "x".repeat(5000));
        assert!(parse(&long).is_err());
        assert_eq!(
            parse("[[milestone]]\npattern = \"a\\\"b\" # c\nera = \"e\"\nmeaning = \"load\"\nsource = \"s\"").unwrap()
                [0]
            .pattern,
            "a\"b"
        );
    }
}
