//! A local llama.cpp git checkout as a build provider: its `bNNNN` tags are the builds, a build's source is
//! `git archive` of the tag unpacked into `CACHE/git-src/<repo key>/bNNNN/` (the checkout itself is never
//! touched), and the upstream range between two builds is `git log --oneline bGOOD..bBAD`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use super::builder::Builder;
use super::cache::{self, Lock};
use super::types::{BuildFlags, BuildNumber, Prepared, Provider};

/// Longest a listing or log query may take.
const GIT_LIMIT: Duration = Duration::from_secs(120);
/// Longest a `git archive` of a tree may take.
const ARCHIVE_LIMIT: Duration = Duration::from_secs(900);
/// Most output kept of a listing or log query (llama.cpp has ~8,000 tags and a few thousand commits per range).
const GIT_OUTPUT_CAP: usize = 16 << 20;

pub struct GitProvider {
    pub repo: PathBuf,
    /// `CACHE/git-src/<repo key>`.
    pub src_root: PathBuf,
    pub builder: Builder,
}

impl GitProvider {
    /// A provider over the checkout at `repo` (a work tree or a bare repository).
    pub fn open(repo: &Path, cache_dir: &Path, builder: Builder) -> anyhow::Result<GitProvider> {
        let repo = repo.canonicalize().with_context(|| format!("{}", repo.display()))?;
        let out = git(&repo, &["rev-parse", "--git-dir"], GIT_LIMIT)?;
        if out.trim().is_empty() {
            bail!("{}: git rev-parse --git-dir printed nothing", repo.display());
        }
        let key = cache::hex(&<sha2::Sha256 as sha2::Digest>::digest(repo.display().to_string().as_bytes())[..6]);
        let name = repo.file_name().and_then(|n| n.to_str()).unwrap_or("repo");
        Ok(GitProvider { src_root: cache_dir.join("git-src").join(format!("{name}-{key}")), repo, builder })
    }

    /// The unpacked tree of `build`'s tag: the cached one, or `git archive` now.
    pub fn source(&self, build: BuildNumber) -> anyhow::Result<PathBuf> {
        let tree = self.src_root.join(build.to_string());
        if cache::is_complete(&tree) {
            return Ok(tree);
        }
        let _lock = Lock::acquire(&self.src_root.join(format!(".lock-{build}")))?;
        if cache::is_complete(&tree) {
            return Ok(tree);
        }
        let scratch = cache::scratch_beside(&tree)?;
        let tag = format!("refs/tags/{build}");
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(&self.repo).args(["archive", "--format=tar", &tag]);
        let what = format!("git archive {tag} of {}", self.repo.display());
        let dest = scratch.path().to_path_buf();
        let streamed = crate::host::proc::run::stream(cmd, ARCHIVE_LIMIT, 64 << 10, |stdout| {
            (
                super::unpack::unpack_tar(stdout, &dest, super::unpack::SOURCE_TREE_LIMITS, &what),
                crate::host::proc::run::ReadTo::End,
            )
        })
        .with_context(|| format!("{what}: cannot run git"))?;
        if streamed.exit.code != Some(0) || streamed.timed_out {
            let err = String::from_utf8_lossy(&streamed.stderr);
            bail!("{what}: {} ({})", streamed.exit.describe(), err.trim());
        }
        streamed.value?;
        if tree.exists() {
            fs::remove_dir_all(&tree).with_context(|| format!("removing the unfinished {}", tree.display()))?;
        }
        fs::rename(scratch.keep(), &tree).with_context(|| format!("moving {} into place", tree.display()))?;
        cache::mark_complete(&tree, &format!("{what}\n"))?;
        Ok(tree)
    }
}

/// Run git in `repo` under the bounded runner; its stdout, or an error with its stderr.
fn git(repo: &Path, args: &[&str], limit: Duration) -> anyhow::Result<String> {
    let mut argv = vec!["git".to_string(), "-C".to_string(), repo.display().to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let out = crate::host::proc::run::run_bounded(&argv, &[], limit, GIT_OUTPUT_CAP)
        .with_context(|| format!("running git {} in {}", args.join(" "), repo.display()))?;
    if out.exit.code != Some(0) || out.timed_out {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!("git {} in {}: {} ({})", args.join(" "), repo.display(), out.exit.describe(), err.trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The build numbers of `git tag --list` output: lines `bNNNN` exactly (other tags are not builds).
pub fn parse_tags(text: &str) -> Vec<BuildNumber> {
    let mut out: Vec<BuildNumber> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('b') && l.len() > 1 && l[1..].bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|l| BuildNumber::parse(l).ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

impl Provider for GitProvider {
    fn list(&self) -> anyhow::Result<Vec<BuildNumber>> {
        Ok(parse_tags(&git(&self.repo, &["tag", "--list", "b*"], GIT_LIMIT)?))
    }

    fn prepare(&self, build: BuildNumber, flags: &BuildFlags) -> anyhow::Result<Prepared> {
        self.builder.prepare(build, flags, || self.source(build))
    }

    fn between(&self, good: BuildNumber, bad: BuildNumber) -> anyhow::Result<Vec<String>> {
        let (lo, hi) = (good.min(bad), good.max(bad));
        let range = format!("refs/tags/{lo}..refs/tags/{hi}");
        let text = git(&self.repo, &["log", "--oneline", "--no-decorate", &range], GIT_LIMIT)?;
        Ok(text.lines().map(str::to_string).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bnnnn_tags_are_builds() {
        let tags = "b10\nb9\nbeta\nb12x\nv1.0\nb\n b11 \nb9\n";
        assert_eq!(parse_tags(tags), vec![BuildNumber(9), BuildNumber(10), BuildNumber(11)]);
    }

    fn sh(dir: &Path, script: &str) {
        let ok = Command::new("sh").arg("-c").arg(script).current_dir(dir).status().unwrap().success();
        assert!(ok, "{script}");
    }

    /// A real repository with three tagged commits: listing, the commits between two tags, and a source tree.
    #[test]
    fn a_tiny_repo_lists_tags_logs_ranges_and_archives_sources() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("llama.cpp");
        fs::create_dir_all(&repo).unwrap();
        sh(
            &repo,
            "git init -q . && git config user.email t@e && git config user.name t && \
             for n in 100 101 102; do echo \"build $n\" > CMakeLists.txt && mkdir -p common && echo $n > common/arg.cpp && \
             git add -A && git commit -q -m \"change $n\" && git tag b$n; done && git tag not-a-build && \
             echo extra > extra.txt && git add -A && git commit -q -m 'untagged after 102'",
        );
        let cache = tmp.path().join("cache");
        let p = GitProvider::open(&repo, &cache, Builder::new(&cache)).unwrap();
        assert_eq!(p.list().unwrap(), vec![BuildNumber(100), BuildNumber(101), BuildNumber(102)]);
        let between = p.between(BuildNumber(100), BuildNumber(102)).unwrap();
        assert_eq!(between.len(), 2, "{between:?}");
        assert!(between[0].ends_with("change 102") && between[1].ends_with("change 101"), "{between:?}");
        let src = p.source(BuildNumber(101)).unwrap();
        assert_eq!(fs::read_to_string(src.join("common/arg.cpp")).unwrap(), "101\n");
        assert!(!src.join("extra.txt").exists());
        assert!(cache::is_complete(&src));
        assert!(p.source(BuildNumber(999)).is_err());
        assert!(
            GitProvider::open(tmp.path(), &cache, Builder::new(&cache)).is_err() || tmp.path().join(".git").exists()
        );
    }
}
