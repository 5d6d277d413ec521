//! A directory of already-built versions as a build provider; nothing is built.
//!
//! Accepted layouts, per build, under the root `DIR`:
//! - `DIR/bNNNN/bin/` or `DIR/NNNN/bin/` (a llama.cpp build or install prefix);
//! - `DIR/bNNNN/` or `DIR/NNNN/` itself holding `llama-server` (binaries unpacked flat, as llama.cpp's release
//!   zips are);
//! - `DIR/bNNNN/lib/ollama/` or `DIR/NNNN/lib/ollama/` (an extracted Ollama release: its ggml backend libraries,
//!   `libggml-*.so`, which Ollama's runner loads from there).
//!
//! A build directory with none of these is not listed. There is no history between builds, so the upstream
//! range is empty.

use std::path::{Path, PathBuf};

use super::types::{BuildFlags, BuildNumber, Prepared, Provider};

pub struct DirProvider {
    pub root: PathBuf,
}

impl DirProvider {
    pub fn new(root: &Path) -> DirProvider {
        DirProvider { root: root.to_path_buf() }
    }

    /// The directory to hand to a test for `build`, if the root has one.
    pub fn bin_dir(&self, build: BuildNumber) -> Option<PathBuf> {
        [build.to_string(), build.0.to_string()].iter().map(|n| self.root.join(n)).find_map(|d| runnable_dir(&d))
    }
}

/// The directory inside a build's folder that holds what runs, in the order of the layouts above.
fn runnable_dir(dir: &Path) -> Option<PathBuf> {
    let bin = dir.join("bin");
    if bin.join("llama-server").is_file() || bin.is_dir() && has_ggml_libs(&bin) {
        return Some(bin);
    }
    if dir.join("llama-server").is_file() {
        return Some(dir.to_path_buf());
    }
    let ollama = dir.join("lib/ollama");
    if has_ggml_libs(&ollama) {
        return Some(ollama);
    }
    None
}

fn has_ggml_libs(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten().any(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("libggml") && n.contains(".so")))
    })
}

impl Provider for DirProvider {
    fn list(&self) -> anyhow::Result<Vec<BuildNumber>> {
        let rd = std::fs::read_dir(&self.root).map_err(|e| anyhow::anyhow!("reading {}: {e}", self.root.display()))?;
        let mut out: Vec<BuildNumber> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                let digits = name.strip_prefix('b').unwrap_or(&name);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let build = BuildNumber::parse(digits).ok()?;
                runnable_dir(&e.path()).map(|_| build)
            })
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn prepare(&self, build: BuildNumber, _flags: &BuildFlags) -> anyhow::Result<Prepared> {
        Ok(match self.bin_dir(build) {
            Some(bin_dir) => Prepared::Ready { bin_dir, build_secs: 0.0, from_cache: true },
            None => Prepared::Unbuildable {
                reason: format!(
                    "{}: no {build}/bin (or {}/bin) with llama-server or ggml libraries",
                    self.root.display(),
                    build.0
                ),
                log: None,
            },
        })
    }

    fn between(&self, _good: BuildNumber, _bad: BuildNumber) -> anyhow::Result<Vec<String>> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builds::types::Backend;
    use std::fs;

    #[test]
    fn every_accepted_layout_is_listed_and_prepared() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path();
        for (dir, file) in [
            ("b100/bin", "llama-server"),
            ("101/bin", "libggml-cuda.so"),
            ("b102", "llama-server"),
            ("103/lib/ollama", "libggml-base.so"),
            ("b104/bin", "README"), // nothing runnable
            ("notes", "llama-server"),
            ("b10x/bin", "llama-server"),
        ] {
            fs::create_dir_all(r.join(dir)).unwrap();
            fs::write(r.join(dir).join(file), "").unwrap();
        }
        let p = DirProvider::new(r);
        assert_eq!(p.list().unwrap(), [100, 101, 102, 103].map(BuildNumber).to_vec());
        let flags = BuildFlags { backend: Backend::Cpu, cmake_args: vec![], targets: vec![], jobs: 1 };
        let ready = |n| match p.prepare(BuildNumber(n), &flags).unwrap() {
            Prepared::Ready { bin_dir, from_cache, build_secs } => {
                assert!(from_cache && build_secs == 0.0);
                bin_dir
            }
            other => panic!("b{n}: {other:?}"),
        };
        assert_eq!(ready(100), r.join("b100/bin"));
        assert_eq!(ready(101), r.join("101/bin"));
        assert_eq!(ready(102), r.join("b102"));
        assert_eq!(ready(103), r.join("103/lib/ollama"));
        assert!(matches!(p.prepare(BuildNumber(104), &flags).unwrap(), Prepared::Unbuildable { log: None, .. }));
        assert!(p.between(BuildNumber(100), BuildNumber(103)).unwrap().is_empty());
    }
}
