//! Inputs and outputs of every command: `-o` never replaces an input nor truncates a previous good output, writes
//! through a symlink to a file and refuses dangling and directory links, and no command hangs on or reads without
//! end a FIFO or a link to `/dev/zero`. Every input is made here; every special-file run is bounded in time and
//! memory (tests/support/bounded.rs).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::bounded::{self, Bounds, GIB, MIB};
use crate::support::util::{backscope, mkfifo, run, stdout_ok};

/// The smallest GGUF: magic, version 3, no tensor, no key (the GGUF spec's header, 24 bytes).
fn empty_gguf(path: &Path) {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    fs::write(path, b).unwrap();
}

/// A sweep database with one imported run: real llama-bench JSON Lines (an H100 validation run in docs/).
fn sweep_db(dir: &Path) -> PathBuf {
    let jsonl = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/validation/gpu-2026-11-21/overhead-run1.jsonl");
    let db = dir.join("s.db");
    stdout_ok(
        backscope().args(["sweep", "import", "--db"]).arg(&db).arg("--runs-dir").arg(dir.join("runs")).arg(&jsonl),
    );
    db
}

/// Files of `dir` whose names mark them as an output's temporary file.
fn leftovers(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".backscope-tmp"))
        .collect()
}

/// `backscope ARGS` must be refused before any work, naming the output and the input, and leave `input` exactly as
/// it was (its bytes compared whole, before and after).
fn refused(args: &[&std::ffi::OsStr], output: &Path, input: &Path) {
    let before = fs::read(input).unwrap();
    let out = run(backscope().args(args));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.contains("refusing to write the output to")
            && stderr.contains(&output.display().to_string())
            && stderr.contains(&input.display().to_string()),
        "{args:?}: both paths named: {stderr}"
    );
    assert!(fs::read(input).unwrap() == before, "{args:?}: {} changed", input.display());
    assert!(leftovers(output.parent().unwrap()).is_empty(), "{args:?}: a temporary file was left");
}

#[test]
fn no_command_writes_its_output_over_one_of_its_inputs() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let os = |p: &Path| p.as_os_str().to_owned();

    let log = d.join("a.log");
    fs::write(
        &log,
        "llama_model_loader: loaded meta data with 3 key-value pairs\nggml_cuda_init: found 1 CUDA devices\n",
    )
    .unwrap();
    refused(&["logs".as_ref(), log.as_ref(), "-o".as_ref(), log.as_ref()], &log, &log);

    let model = d.join("m.gguf");
    empty_gguf(&model);
    let predict = |o: &Path| -> Vec<std::ffi::OsString> {
        ["predict", "--arch", "gfx900", "--prompt-tokens", "8", "--model"]
            .iter()
            .map(Into::into)
            .chain([os(&model), "-o".into(), os(o)])
            .collect()
    };
    let a = predict(&model);
    refused(&a.iter().map(|s| s.as_os_str()).collect::<Vec<_>>(), &model, &model);

    let db = sweep_db(d);
    refused(&["report".as_ref(), db.as_ref(), "-o".as_ref(), db.as_ref()], &db, &db);
    refused(&["sweep".as_ref(), "report".as_ref(), "--db".as_ref(), db.as_ref(), "-o".as_ref(), db.as_ref()], &db, &db);
    refused(&["sweep".as_ref(), "export".as_ref(), "--db".as_ref(), db.as_ref(), "-o".as_ref(), db.as_ref()], &db, &db);
    let runs = d.join("runs");
    let sweep = [
        "sweep".as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
        "--runs-dir".as_ref(),
        runs.as_os_str(),
        "--endpoint".as_ref(),
        "a=http://127.0.0.1:9".as_ref(),
        "--model".as_ref(),
        "m".as_ref(),
        "-o".as_ref(),
        db.as_os_str(),
    ];
    let runs_before = fs::read_dir(&runs).unwrap().count();
    refused(&sweep, &db, &db);
    assert_eq!(fs::read_dir(&runs).unwrap().count(), runs_before, "no run was started");
    // A database the sweep would create is its input too.
    let new_db = d.join("new.db");
    let out = run(backscope()
        .args(["sweep", "--endpoint", "a=http://127.0.0.1:9", "--model", "m", "--db"])
        .arg(&new_db)
        .arg("-o")
        .arg(&new_db));
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!new_db.exists(), "refused before the database was created");

    let lib = d.join("lib.so");
    fs::copy("/bin/true", &lib).unwrap();
    refused(&["scan".as_ref(), lib.as_ref(), "-o".as_ref(), lib.as_ref()], &lib, &lib);
    let link = d.join("latest.json");
    std::os::unix::fs::symlink(&lib, &link).unwrap();
    refused(&["scan".as_ref(), lib.as_ref(), "-o".as_ref(), link.as_ref()], &link, &lib);

    let vocab = d.join("vocab.gguf");
    empty_gguf(&vocab);
    refused(
        &[
            "synth".as_ref(),
            "--preset".as_ref(),
            "tiny".as_ref(),
            "--vocab".as_ref(),
            vocab.as_ref(),
            "-o".as_ref(),
            vocab.as_ref(),
        ],
        &vocab,
        &vocab,
    );
}

#[test]
fn an_existing_file_inside_a_scanned_directory_is_not_an_output() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    fs::create_dir(&tree).unwrap();
    fs::copy("/bin/true", tree.join("libggml.so")).unwrap();
    let old = tree.join("scan.json");
    fs::write(&old, "{}").unwrap();
    let out = run(backscope().arg("scan").arg(&tree).arg("--json").arg("-o").arg(&old));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("inside") && stderr.contains(&tree.display().to_string()), "{stderr}");
    assert_eq!(fs::read_to_string(&old).unwrap(), "{}");
    // A new file there is written, and its temporary file is not left in the tree.
    let new = tree.join("new.json");
    stdout_ok(backscope().arg("scan").arg(&tree).arg("--json").arg("-o").arg(&new));
    let report: serde_json::Value = serde_json::from_slice(&fs::read(&new).unwrap()).unwrap();
    assert!(report["files"].is_array(), "{report}");
    assert!(leftovers(&tree).is_empty());
}

#[test]
fn a_failed_run_keeps_the_previous_report() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let log = d.join("a.log");
    fs::write(&log, "ggml_cuda_init: found 1 CUDA devices\n").unwrap();
    let report = d.join("report.txt");
    stdout_ok(backscope().arg("logs").arg(&log).arg("-o").arg(&report));
    let good = fs::read(&report).unwrap();
    assert!(String::from_utf8_lossy(&good).contains("1 lines"), "{}", String::from_utf8_lossy(&good));

    // The model is no GGUF: predict fails after its output was opened.
    let bad = d.join("bad.gguf");
    fs::write(&bad, "not a model").unwrap();
    let out = run(backscope()
        .args(["predict", "--arch", "gfx900", "--prompt-tokens", "8", "--model"])
        .arg(&bad)
        .arg("-o")
        .arg(&report));
    assert_ne!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(fs::read(&report).unwrap() == good, "the previous report is intact");
    assert!(leftovers(d).is_empty(), "the failed run's temporary file is removed");
}

/// A bounded `backscope ARGS`: must end by itself within 10 s below 256 MiB with exit `code`, and name `path` and
/// `kind` in what it printed.
fn bounded_refusal(args: &[&std::ffi::OsStr], code: i32, path: &Path, kind: &str) -> bounded::Done {
    let bounds = Bounds { deadline: Duration::from_secs(30), ..Bounds::default() };
    let done = bounded::run(args, bounds);
    done.assert_bounded(&[code], 10, 256 * MIB);
    let said = format!("{}\n{}", done.stdout, done.stderr);
    assert!(said.contains(&path.display().to_string()) && said.contains(kind), "{path:?} {kind}: {said}");
    done
}

#[test]
fn logs_neither_hangs_on_a_fifo_nor_reopens_a_pipe() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("server.log");
    mkfifo(&fifo);
    bounded_refusal(&["logs".as_ref(), fifo.as_ref()], 2, &fifo, "FIFO");
    // A library trace is told to load: the traced program's loader would wait on it.
    bounded_refusal(
        &["trace".as_ref(), "--observer".as_ref(), fifo.as_ref(), "--".as_ref(), "true".as_ref()],
        2,
        &fifo,
        "is a FIFO",
    );
    // A sweep database and a vocabulary GGUF are named for what they are (SQLite alone said "disk I/O error").
    bounded_refusal(&["sweep".as_ref(), "export".as_ref(), "--db".as_ref(), fifo.as_ref()], 2, &fifo, "is a FIFO");
    let out = tmp.path().join("out.gguf");
    bounded_refusal(
        &[
            "synth".as_ref(),
            "--preset".as_ref(),
            "tiny".as_ref(),
            "--vocab".as_ref(),
            fifo.as_ref(),
            "-o".as_ref(),
            out.as_ref(),
        ],
        2,
        &fifo,
        "is a FIFO",
    );
    assert!(!out.exists(), "nothing written");
    // gate --log reads logs the same way.
    bounded_refusal(
        &["gate".as_ref(), "--arch".as_ref(), "gfx900".as_ref(), "--log".as_ref(), fifo.as_ref()],
        2,
        &fifo,
        "named FIFO",
    );
    // Standard input from a pipe is read once and analysed.
    let mut writer = Command::new("printf")
        .arg("ggml_cuda_init: found 1 CUDA devices\\nsecond line\\n")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe: Stdio = writer.stdout.take().unwrap().into();
    let done = bounded::run(&["logs", "--json", "-"], Bounds { stdin: Some(pipe), ..Bounds::default() });
    writer.wait().unwrap();
    done.assert_bounded(&[0], 10, 256 * MIB);
    let v: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["input"], "<stdin>", "{v}");
    assert!(done.stdout.contains("\"lines\":2"), "{}", done.stdout);
}

#[test]
fn trace_files_that_are_fifos_or_dev_zero_are_named_and_left_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("traces");
    fs::create_dir(&dir).unwrap();
    let fifo = dir.join("trace-100.jsonl");
    mkfifo(&fifo);
    let zero = dir.join("trace-200.jsonl");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    // trace --read: exit 1 (some trace unreadable), each named with what it is.
    let done = bounded_refusal(&["trace".as_ref(), "--read".as_ref(), dir.as_ref()], 1, &fifo, "is a FIFO");
    assert!(done.stdout.contains(&zero.display().to_string()) && done.stdout.contains("character device"));
    // predict --trace: the unreadable files are left out of the comparison, with the same words.
    let done = bounded_refusal(
        &["predict", "--arch", "gfx900", "--type", "q4_k", "--prompt-tokens", "8", "--json", "--trace"]
            .iter()
            .map(std::ffi::OsStr::new)
            .chain([dir.as_os_str()])
            .collect::<Vec<_>>(),
        0,
        &fifo,
        "is a FIFO",
    );
    assert!(done.stdout.contains("character device"), "{}", done.stdout);
}

#[test]
fn doctor_leaves_fifos_and_devices_under_its_root_unread() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for dir in ["etc", "proc", "usr/share/vulkan/icd.d", "sys/class/drm"] {
        fs::create_dir_all(root.join(dir)).unwrap();
    }
    let passwd = root.join("etc/passwd");
    mkfifo(&passwd);
    mkfifo(&root.join("etc/group"));
    let modules = root.join("proc/modules");
    std::os::unix::fs::symlink("/dev/zero", &modules).unwrap();
    mkfifo(&root.join("usr/share/vulkan/icd.d/radeon_icd.x86_64.json"));
    let done = bounded_refusal(
        &["doctor".as_ref(), "--json".as_ref(), "--user".as_ref(), "alice".as_ref(), "--root".as_ref(), root.as_ref()],
        0,
        &passwd,
        "is a FIFO",
    );
    assert!(done.stderr.contains(&modules.display().to_string()), "{}", done.stderr);
    serde_json::from_str::<serde_json::Value>(&done.stdout).expect("the report is still written");
}

#[test]
fn sweep_spec_and_prompt_files_are_regular_files_of_bounded_size() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("spec.toml");
    mkfifo(&fifo);
    let big = tmp.path().join("prompt.txt");
    fs::File::create(&big).unwrap().set_len(17 * MIB).unwrap(); // sparse: no disk used
    let dev_zero = Path::new("/dev/zero");
    let endpoint = ["sweep", "--dry-run", "--endpoint", "a=http://127.0.0.1:9", "--model", "m", "--prompt-file"];
    fn with<'a>(endpoint: &'a [&'a str], p: &'a Path) -> Vec<&'a std::ffi::OsStr> {
        endpoint.iter().map(std::ffi::OsStr::new).chain([p.as_os_str()]).collect()
    }
    bounded_refusal(&with(&endpoint, dev_zero), 2, dev_zero, "character device");
    bounded_refusal(&with(&endpoint, &big), 2, &big, "more than the 16777216 bytes");
    bounded_refusal(
        &["sweep".as_ref(), "--dry-run".as_ref(), "--spec".as_ref(), dev_zero.as_ref()],
        2,
        dev_zero,
        "character device",
    );
    bounded_refusal(&["sweep".as_ref(), "--dry-run".as_ref(), "--spec".as_ref(), fifo.as_ref()], 2, &fifo, "FIFO");
}

/// `-o` onto a symlink: through a link to a regular file, that file is replaced and the link kept (the existing
/// rule); a dangling link is refused and left as it is, no file created where it points; a link to a directory is
/// refused as a directory.
#[test]
fn o_through_symlinks_writes_the_named_file_and_refuses_dangling_and_directory_links() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    std::fs::write(&input, "hello\n").unwrap();
    let bounds = || Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(60), ..Default::default() };
    let scan =
        |out: &Path| bounded::run(&["scan".as_ref(), input.as_os_str(), "-o".as_ref(), out.as_os_str()], bounds());
    let target = tmp.path().join("report.txt");
    std::fs::write(&target, "old\n").unwrap();
    let to_file = tmp.path().join("to-file");
    std::os::unix::fs::symlink("report.txt", &to_file).unwrap();
    scan(&to_file).assert_bounded(&[0], 30, 512 * MIB);
    assert!(std::fs::read_to_string(&target).unwrap().starts_with("scanned 1 files"));
    assert_eq!(std::fs::read_link(&to_file).unwrap(), Path::new("report.txt"));

    let aim = tmp.path().join("aimed/at.txt");
    std::fs::create_dir(tmp.path().join("aimed")).unwrap();
    let dangling = tmp.path().join("dangling");
    std::os::unix::fs::symlink(&aim, &dangling).unwrap();
    let done = scan(&dangling);
    done.assert_bounded(&[2], 30, 512 * MIB);
    let want = format!("{} is a symlink to {}, which does not exist", dangling.display(), aim.display());
    assert!(done.stderr.contains(&want), "{}", done.describe());
    assert_eq!(std::fs::read_link(&dangling).unwrap(), aim, "the link is left as it was");
    assert!(!aim.exists(), "no file is created where the link points");

    let to_dir = tmp.path().join("to-dir");
    std::os::unix::fs::symlink(tmp.path().join("aimed"), &to_dir).unwrap();
    let done = scan(&to_dir);
    done.assert_bounded(&[2], 30, 512 * MIB);
    assert!(done.stderr.contains("is a symlink to a directory"), "{}", done.describe());
    assert!(std::fs::read_link(&to_dir).is_ok());
    let left: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("backscope-tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}
