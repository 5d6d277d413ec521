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

/// The identity of the GGUF file at `path` ([`ModelFile`]): its name, size and header digest. Only the header is
/// hashed (the bytes before the tensor data), so a multi-gigabyte model costs a parse, not a read of its weights.
pub fn model_file(path: &Path) -> Result<crate::run::format::record::ModelFile> {
    use sha2::{Digest, Sha256};
    let file = open_gguf(path)?;
    let parsed = parse_gguf(&file)?;
    let end = usize::try_from(parsed.data_offset.min(parsed.file_size)).unwrap_or(usize::MAX).min(file.bytes().len());
    let digest = Sha256::digest(&file.bytes()[..end]);
    let size = parsed.file_size;
    drop(parsed);
    file.check_whole()?;
    Ok(crate::run::format::record::ModelFile {
        name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        size,
        header_sha256: crate::builds::cache::hex(&digest),
    })
}
