use std::fmt;
use std::path::PathBuf;

/// Why a GGUF file could not be read: where (file, byte offset), which field, and what was expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufError {
    pub file: Option<PathBuf>,
    /// Byte offset in the file of the field that failed.
    pub offset: u64,
    /// The field, innermost last: `kv[17] 'tokenizer.ggml.tokens' > element 5 > string length`; empty for I/O
    /// errors.
    pub field: String,
    /// What was expected and what was found.
    pub problem: String,
}

impl GgufError {
    pub(crate) fn new(offset: u64, field: impl Into<String>, problem: impl Into<String>) -> GgufError {
        GgufError { file: None, offset, field: field.into(), problem: problem.into() }
    }

    /// Prefix the field path with the enclosing structure (`kv[3] 'general.name'`).
    pub(crate) fn within(mut self, outer: impl fmt::Display) -> GgufError {
        self.field = if self.field.is_empty() { outer.to_string() } else { format!("{outer} > {}", self.field) };
        self
    }

    pub(crate) fn in_file(mut self, file: impl Into<PathBuf>) -> GgufError {
        self.file = Some(file.into());
        self
    }
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        // An empty field marks an I/O error (open, stat, map), which has no offset.
        if self.field.is_empty() {
            return f.write_str(&self.problem);
        }
        write!(f, "GGUF offset {} (0x{:x}), {}: {}", self.offset, self.offset, self.field, self.problem)
    }
}

impl std::error::Error for GgufError {}
