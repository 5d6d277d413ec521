//! The one evidence model every command reports in: a claim is a statement, a confidence label and the
//! sources behind it. Confidence labels follow the investigation backscope automates:
//!
//! - **Confirmed**: read directly from bytes, a run or a log (a code object for gfx900 exists at offset X).
//! - **Inferred**: follows from confirmed facts plus a rule whose source is cited (MMVQ ran because the
//!   batch was 8 and ggml's rule says so), but was not observed.
//! - **Unresolved**: the evidence at hand cannot decide (the device's xnack mode is unknown).
//! - **Limited**: the answer is known to be partial (a decoder skipped an unreadable file).

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Confidence {
    Confirmed,
    Inferred,
    Unresolved,
    Limited,
}

impl fmt::Display for Confidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Confidence::Confirmed => "Confirmed",
            Confidence::Inferred => "Inferred",
            Confidence::Unresolved => "Unresolved",
            Confidence::Limited => "Limited",
        })
    }
}

/// Where a claim comes from. Every variant can be followed back by a person: a file and byte range, a
/// command and what it printed, a run record, a log line, or a rule in backscope's own data files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// Bytes in a file: `offset`/`length` locate them; `what` names the structure (e.g. "offload bundle").
    File {
        path: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        offset: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        length: Option<u64>,
        what: String,
    },
    /// A command that was run and an excerpt of its output.
    Command { argv: Vec<String>, excerpt: String },
    /// A record of a backscope run (sweep cell, trace), addressable as run id + file.
    Run {
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        file: Option<String>,
    },
    /// One line of a log.
    LogLine { path: String, line: u64, text: String },
    /// A rule from backscope's knowledge files, with that rule's own upstream source.
    Rule { file: String, rule: String, upstream: String },
}

impl Source {
    pub fn file(path: impl Into<String>, offset: Option<u64>, length: Option<u64>, what: impl Into<String>) -> Self {
        Source::File { path: path.into(), offset, length, what: what.into() }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File { path, offset: Some(o), length: Some(l), what } => {
                write!(f, "{path} @ {o:#x} (+{l:#x}): {what}")
            }
            Source::File { path, offset: Some(o), what, .. } => write!(f, "{path} @ {o:#x}: {what}"),
            Source::File { path, what, .. } => write!(f, "{path}: {what}"),
            Source::Command { argv, excerpt } => write!(f, "`{}` → {excerpt}", argv.join(" ")),
            Source::Run { run_id, file: Some(file) } => write!(f, "run {run_id}: {file}"),
            Source::Run { run_id, file: None } => write!(f, "run {run_id}"),
            Source::LogLine { path, line, text } => write!(f, "{path}:{line}: {text}"),
            Source::Rule { file, rule, upstream } => write!(f, "{file} [{rule}] ← {upstream}"),
        }
    }
}

/// A statement with its confidence and sources.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// A stable identifier of what the claim is about, e.g. `scan.arch.gfx900.libggml-hip.so`, so that
    /// reports can join claims from different commands and runs.
    pub id: String,
    pub statement: String,
    pub confidence: Confidence,
    pub sources: Vec<Source>,
}

impl Claim {
    pub fn new(id: impl Into<String>, confidence: Confidence, statement: impl Into<String>) -> Self {
        Claim { id: id.into(), statement: statement.into(), confidence, sources: Vec::new() }
    }

    #[must_use]
    pub fn with_source(mut self, source: Source) -> Self {
        self.sources.push(source);
        self
    }

    #[must_use]
    pub fn with_sources(mut self, sources: impl IntoIterator<Item = Source>) -> Self {
        self.sources.extend(sources);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_serialize_with_tagged_sources() {
        let c = Claim::new("scan.x", Confidence::Confirmed, "it is so").with_source(Source::file(
            "/lib/a.so",
            Some(0x1000),
            Some(16),
            "offload bundle",
        ));
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["confidence"], "Confirmed");
        assert_eq!(json["sources"][0]["kind"], "file");
        assert_eq!(json["sources"][0]["offset"], 4096);
        let back: Claim = serde_json::from_value(json).unwrap();
        assert_eq!(back, c);
        assert_eq!(c.sources[0].to_string(), "/lib/a.so @ 0x1000 (+0x10): offload bundle");
    }
}
