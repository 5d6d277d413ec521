//! A GGUF file mapped into memory, so that a 5 GB model is parsed without reading its tensor data.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::Result;

use super::Gguf;

/// A GGUF file mapped into memory. Opening it is I/O (an `io::Error`, without the path: the caller says
/// which file); parsing it gives the reader's [`crate::Error`].
#[derive(Debug)]
pub struct GgufFile {
    pub path: PathBuf,
    map: Option<memmap2::Mmap>,
}

impl GgufFile {
    #[allow(unsafe_code)] // the one map, justified below
    pub fn open(path: impl AsRef<Path>) -> io::Result<GgufFile> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path)?;
        let len = file.metadata()?.len();
        // An empty file cannot be mapped on every platform; it parses as a truncated magic.
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the map is read-only and private to this process. If another process truncates the file
            // while it is mapped, reads fault (SIGBUS); GGUF readers (llama.cpp, gguf-py's np.memmap) accept the
            // same risk, and everything read is bounds-checked against the length seen here.
            Some(unsafe { memmap2::Mmap::map(&file) }?)
        };
        Ok(GgufFile { path, map })
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    pub fn parse(&self) -> Result<Gguf<'_>> {
        Gguf::parse(self.bytes())
    }
}
