//! Listings cached by the code object's SHA-256 and the disassembler's version: the same kernel bytes ship in many
//! wheels and installs, and a listing does not change unless the bytes or the tool do. One JSON file per code
//! object under `DIR/<tool>-<version>/<cpu>-<sha256>.json`; a file that does not parse is ignored and rewritten.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::listing::Listing;
use super::tools::Tool;

/// Where listings are cached when no directory is given: `$BACKSCOPE_CACHE/disasm`, else
/// `~/.cache/backscope/disasm`; `None` without a home directory.
pub fn default_dir() -> Option<PathBuf> {
    base_dir().map(|b| b.join("disasm"))
}

/// `$BACKSCOPE_CACHE`, else `~/.cache/backscope`.
pub fn base_dir() -> Option<PathBuf> {
    match std::env::var_os("BACKSCOPE_CACHE") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| Path::new(&h).join(".cache/backscope")),
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn entry_path(dir: &Path, tool: &Tool, cpu: &str, sha: &str) -> PathBuf {
    let cpu: String = cpu.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect();
    dir.join(tool.cache_key()).join(format!("{cpu}-{sha}.json"))
}

pub fn load(dir: &Path, tool: &Tool, cpu: &str, sha: &str) -> Option<Listing> {
    let text = std::fs::read(entry_path(dir, tool, cpu, sha)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Store a listing (complete ones only: a truncated listing is not the code object's). Written to a temporary
/// name and renamed, so a reader never sees half a file. Failing to cache is not an error of the scan.
pub fn store(dir: &Path, tool: &Tool, cpu: &str, sha: &str, listing: &Listing) {
    if listing.truncated {
        return;
    }
    let path = entry_path(dir, tool, cpu, sha);
    let Some(parent) = path.parent() else { return };
    if std::fs::create_dir_all(parent).is_err() {
        return;
    }
    let Ok(mut tmp) = tempfile::NamedTempFile::new_in(parent) else { return };
    if serde_json::to_writer(&mut tmp, listing).is_ok() {
        let _ = tmp.persist(&path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_abc_is_the_fips_180_example() {
        // FIPS 180-2, appendix B.1.
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn a_listing_round_trips_and_a_broken_file_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let tool = Tool {
            kind: super::super::tools::ToolKind::LlvmObjdump,
            path: "/x".into(),
            version: "LLVM version 19.1.7".into(),
        };
        let mut l = Listing { unattributed: 3, ..Listing::default() };
        store(dir.path(), &tool, "gfx942", "ab", &l);
        assert_eq!(load(dir.path(), &tool, "gfx942", "ab"), Some(l.clone()));
        assert_eq!(load(dir.path(), &tool, "gfx90a", "ab"), None, "another CPU is another entry");
        std::fs::write(entry_path(dir.path(), &tool, "gfx942", "ab"), b"{").unwrap();
        assert_eq!(load(dir.path(), &tool, "gfx942", "ab"), None);
        l.truncated = true;
        store(dir.path(), &tool, "gfx1100", "cd", &l);
        assert_eq!(load(dir.path(), &tool, "gfx1100", "cd"), None, "truncated listings are not cached");
    }
}
