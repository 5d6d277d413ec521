//! Listings cached by the code object's SHA-256 and the disassembler's version: the same kernel bytes ship in many
//! wheels and installs, and a listing does not change unless the bytes or the tool do. One JSON file per code
//! object under `DIR/<tool>-<version>/<cpu>-<sha256>.json`; a file that does not parse is ignored and rewritten.
//!
//! The cache is bounded in bytes: an entry larger than [`ENTRY_BYTES`] is neither written nor read (a planted or
//! damaged one costs a fresh disassembly, not its size in memory), and after each store the least recently used
//! entries (by modification time, which a cache hit renews) are deleted until the whole cache directory holds at
//! most [`CACHE_BYTES`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use super::listing::Listing;
use super::tools::Tool;

/// Most bytes of one cached listing. A listing holds each function name once and a count per mnemonic: the listing
/// of the largest code object of the 168 MB cyllama-rocm library takes well under a megabyte.
pub const ENTRY_BYTES: u64 = 32 << 20;
/// Most bytes of the whole cache directory (all tools and versions together).
pub const CACHE_BYTES: u64 = 256 << 20;

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
    let path = entry_path(dir, tool, cpu, sha);
    let bytes = crate::host::inputs::read_limited(&path, ENTRY_BYTES).ok()?;
    let listing = serde_json::from_slice(&bytes).ok()?;
    // A hit makes the entry the most recently used one.
    if let Ok(f) = std::fs::File::options().write(true).open(&path) {
        let _ = f.set_modified(SystemTime::now());
    }
    Some(listing)
}

/// A writer that refuses to go past `left` bytes.
struct Capped<W> {
    inner: W,
    left: u64,
}

impl<W: Write> Write for Capped<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() as u64 > self.left {
            return Err(std::io::Error::other("over the cache's entry size"));
        }
        let n = self.inner.write(buf)?;
        self.left -= n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Store a listing (complete ones only: a truncated listing is not the code object's; at most [`ENTRY_BYTES`] of
/// JSON), then evict down to [`CACHE_BYTES`]. Written to a temporary name and renamed, so a reader never sees half a
/// file. Failing to cache is not an error of the scan.
pub fn store(dir: &Path, tool: &Tool, cpu: &str, sha: &str, listing: &Listing) {
    store_capped(dir, tool, cpu, sha, listing, ENTRY_BYTES, CACHE_BYTES);
}

fn store_capped(dir: &Path, tool: &Tool, cpu: &str, sha: &str, listing: &Listing, entry_cap: u64, cache_cap: u64) {
    if listing.truncated {
        return;
    }
    let path = entry_path(dir, tool, cpu, sha);
    let Some(parent) = path.parent() else { return };
    if std::fs::create_dir_all(parent).is_err() {
        return;
    }
    let Ok(tmp) = tempfile::NamedTempFile::new_in(parent) else { return };
    let mut out = Capped { inner: std::io::BufWriter::new(tmp), left: entry_cap };
    if serde_json::to_writer(&mut out, listing).is_err() {
        return;
    }
    let Ok(tmp) = out.inner.into_inner() else { return };
    if tmp.persist(&path).is_ok() {
        evict(dir, cache_cap, &path);
    }
}

/// Delete the least recently modified files of the cache (`DIR/<tool>/<file>`) until they take at most `cap`
/// bytes; `keep` (the entry just written) stays.
fn evict(dir: &Path, cap: u64, keep: &Path) {
    let mut files: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    for tool_dir in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for entry in std::fs::read_dir(tool_dir.path()).into_iter().flatten().flatten() {
            // Not followed: a link's target is not the cache's to delete, nor counted.
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_file() {
                files.push((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len(), entry.path()));
            }
        }
    }
    let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= cap {
            break;
        }
        if path != keep && std::fs::remove_file(&path).is_ok() {
            total -= len;
        }
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

    fn tool() -> Tool {
        Tool { kind: super::super::tools::ToolKind::LlvmObjdump, path: "/x".into(), version: "LLVM version 19".into() }
    }

    fn listing(functions: usize) -> Listing {
        let f = |i: usize| super::super::listing::FunctionMnemonics {
            name: format!("kernel_{i:04}"),
            mnemonics: [("s_endpgm".to_string(), 1)].into(),
        };
        Listing { functions: (0..functions).map(f).collect(), ..Listing::default() }
    }

    fn age(dir: &Path, cpu: &str, sha: &str, seconds: u64) {
        let f = std::fs::File::options().write(true).open(entry_path(dir, &tool(), cpu, sha)).unwrap();
        f.set_modified(SystemTime::now() - std::time::Duration::from_secs(seconds)).unwrap();
    }

    #[test]
    fn the_least_recently_used_entries_are_evicted_past_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let one = serde_json::to_vec(&listing(10)).unwrap().len() as u64;
        // Room for three entries.
        let cap = 3 * one + one / 2;
        for (i, sha) in ["a", "b", "c"].iter().enumerate() {
            store_capped(d, &tool(), "gfx900", sha, &listing(10), ENTRY_BYTES, cap);
            age(d, "gfx900", sha, 1000 - 100 * i as u64);
        }
        // A hit on the oldest renews it; the next store then evicts the second oldest.
        assert!(load(d, &tool(), "gfx900", "a").is_some());
        store_capped(d, &tool(), "gfx900", "d", &listing(10), ENTRY_BYTES, cap);
        let present = |sha: &str| entry_path(d, &tool(), "gfx900", sha).exists();
        assert_eq!([present("a"), present("b"), present("c"), present("d")], [true, false, true, true]);
    }

    #[test]
    fn entries_over_the_entry_cap_are_neither_written_nor_read() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let big = listing(100);
        let size = serde_json::to_vec(&big).unwrap().len() as u64;
        store_capped(d, &tool(), "gfx900", "a", &big, size - 1, CACHE_BYTES);
        assert!(!entry_path(d, &tool(), "gfx900", "a").exists());
        let parent = entry_path(d, &tool(), "gfx900", "a").parent().unwrap().to_path_buf();
        assert_eq!(std::fs::read_dir(&parent).unwrap().count(), 0, "no temporary file left behind");
        // A file over ENTRY_BYTES at the entry's path (sparse: no disk) is a miss, not read.
        let f = std::fs::File::create(entry_path(d, &tool(), "gfx900", "a")).unwrap();
        f.set_len(ENTRY_BYTES + 1).unwrap();
        assert_eq!(load(d, &tool(), "gfx900", "a"), None);
    }
}
