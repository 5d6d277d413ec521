//! A GGUF model file opened for reading: mapped through the SIGBUS-guarded [`MappedFile`] and parsed by
//! `crates/gguf`, with errors that name the file. A ground-floor module: `synth` reads its vocabulary and checks
//! what it wrote through it, `predict` reads a model's weights.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use gguf::Gguf;

use crate::host::inputs::MappedFile;

/// A GGUF file mapped through the SIGBUS-guarded [`MappedFile`]: when another process truncates it while it is
/// read (a model being re-downloaded), the pages past the new end read as zeros instead of killing the process,
/// and [`GgufMap::check_whole`] turns that into an error naming the file and the offset.
#[derive(Debug)]
pub struct GgufMap {
    pub path: PathBuf,
    map: MappedFile,
}

impl GgufMap {
    pub fn bytes(&self) -> &[u8] {
        self.map.bytes()
    }

    /// An error when part of the file could not be read while it was mapped (it was cut short underneath):
    /// whatever was read from it is not the file. Call it after the last use of what was parsed.
    pub fn check_whole(&self) -> Result<()> {
        match self.map.cut_at() {
            Some(offset) => bail!(
                "{}: the file was truncated while it was being read (nothing could be read from offset {offset} on, \
                 of {} bytes when opened); read it again once it is complete",
                self.path.display(),
                self.map.bytes().len()
            ),
            None => Ok(()),
        }
    }
}

pub fn open_gguf(path: &Path) -> Result<GgufMap> {
    let map = MappedFile::open(path).map_err(|e| anyhow!("{}: cannot open: {e}", path.display()))?;
    Ok(GgufMap { path: path.to_path_buf(), map })
}

/// The reader's error names offset, entry and field; this adds the file and the key or tensor name. A file cut
/// short while it was parsed is reported as that rather than as the malformed bytes it left.
pub fn parse_gguf(file: &GgufMap) -> Result<Gguf<'_>> {
    let parsed = Gguf::parse(file.bytes());
    file.check_whole()?;
    parsed.map_err(|e| anyhow!("{}: {}", file.path.display(), e.with_names(file.bytes())))
}
