//! `sweep import` of llama-bench output: large, from pipes and FIFOs, invalid, failing mid-store. Every input is made
//! here: llama-bench test objects in the shape `tools/llama-bench/llama-bench.cpp` prints them (its `-o jsonl` writes
//! one object per line with the fields `n_prompt`, `n_gen`, `avg_ns`, `avg_ts`, …), the database is read back with
//! SQLite itself, and processes are looked up in /proc by pid.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::bounded::{self, Bounds, GIB, MIB};
use crate::support::util::backscope;

/// One llama-bench test as `-o jsonl` prints it: a prompt-processing test of `n_prompt` tokens.
fn bench_line(n_prompt: u64, avg_ts: &str) -> String {
    format!(
        "{{\"backends\": \"Vulkan\", \"gpu_info\": \"llvmpipe\", \"model_filename\": \"/m/tiny.gguf\", \"n_gpu_layers\": 99, \
         \"n_prompt\": {n_prompt}, \"n_gen\": 0, \"n_depth\": 0, \"test_time\": \"2026-11-21T12:00:00Z\", \
         \"avg_ns\": 1361702127, \"stddev_ns\": 1000000, \"avg_ts\": {avg_ts}, \"stddev_ts\": 0.5}}\n"
    )
}

/// The smallest test llama-bench output can hold: the four fields every test has.
fn minimal_tests(n: usize) -> String {
    (0..n).map(|i| format!("{{\"n_prompt\":{},\"n_gen\":0,\"avg_ns\":1000,\"avg_ts\":1.5}}\n", i + 1)).collect()
}

/// Runs in the database, read with SQLite; `None` when there is no database file.
fn runs_in(db: &Path) -> Option<i64> {
    if !db.exists() {
        return None;
    }
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    Some(conn.query_row("SELECT count(*) FROM runs", [], |r| r.get(0)).unwrap())
}

fn records_in(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row("SELECT count(*) FROM records", [], |r| r.get(0)).unwrap()
}

/// Every path under `dir` (files and directories), sorted; empty when `dir` does not exist.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return out };
    for e in rd.flatten() {
        let p = e.path();
        out.push(p.clone());
        if p.is_dir() {
            out.extend(tree(&p));
        }
    }
    out.sort();
    out
}

/// `backscope sweep import ARGS --db DB --runs-dir RUNS` under bounds.
fn import(args: &[&std::ffi::OsStr], db: &Path, runs: &Path, bounds: Bounds) -> bounded::Done {
    let mut all: Vec<std::ffi::OsString> = vec!["sweep".into(), "import".into()];
    all.extend(args.iter().map(|a| a.to_os_string()));
    all.extend(["--db".into(), db.as_os_str().to_owned(), "--runs-dir".into(), runs.as_os_str().to_owned()]);
    bounded::run(&all, bounds)
}

fn bounds(seconds: u64) -> Bounds {
    Bounds { deadline: Duration::from_secs(seconds), ..Bounds::default() }
}

/// 20,000 minimal tests (about 1 MB) used to take 72 s, 177 MB and 40,000 inodes: a synced transaction and a
/// `result.json` per test. Now one transaction and one records file: seconds, a few files.
#[test]
fn twenty_thousand_tests_import_in_seconds_into_a_few_files() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bench.jsonl");
    std::fs::write(&input, minimal_tests(20_000)).unwrap();
    let (db, runs) = (dir.path().join("b.db"), dir.path().join("runs"));
    let done = import(&[input.as_os_str()], &db, &runs, bounds(60));
    done.assert_bounded(&[0], 15, 150 * MIB);
    assert!(done.stdout.contains("imported 20000 llama-bench tests"), "{}", done.stdout);
    assert_eq!((runs_in(&db), records_in(&db)), (Some(1), 20_000));
    let files = tree(&runs);
    assert!(files.len() <= 6, "the run directory holds a few files, not one per test: {} entries", files.len());
    let run_dir = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    let lines = std::fs::read_to_string(run_dir.join("records.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 20_000);
    assert_eq!(std::fs::read(run_dir.join("input/bench.jsonl")).unwrap(), std::fs::read(&input).unwrap());

    // The report over it: 20,000 distinct prompt sizes are 20,000 places, which every lookup by place made
    // quadratic (63 s in text before they became maps).
    let json = bounded::run(&[OsStr::new("report"), run_dir.as_os_str(), OsStr::new("--json")], bounds(60));
    json.assert_bounded(&[0], 15, GIB);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("report --json");
    assert_eq!((v["cells"].as_u64(), v["groups"].as_array().map(Vec::len)), (Some(20_000), Some(20_000)));
    let text = bounded::run(&[OsStr::new("report"), db.as_os_str()], bounds(60));
    text.assert_bounded(&[0], 15, GIB);
    assert!(text.stdout.contains("20000 cells"), "{}", &text.stdout[..text.stdout.len().min(2000)]);
}

/// Past the cap an import is refused, naming the file, the limit and the test that is one too many; nothing is
/// created.
#[test]
fn more_tests_than_one_import_takes_are_refused_with_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("huge.jsonl");
    std::fs::write(&input, minimal_tests(100_001)).unwrap();
    let (db, runs) = (dir.path().join("b.db"), dir.path().join("runs"));
    let done = import(&[input.as_os_str()], &db, &runs, bounds(60));
    done.assert_bounded(&[2], 30, 300 * MIB);
    assert!(
        done.stderr.contains(&format!("{}: more than 100000 llama-bench tests", input.display()))
            && done.stderr.contains("test 100001 at line 100001"),
        "{}",
        done.stderr
    );
    assert_eq!(runs_in(&db), None, "no database created");
    assert_eq!(tree(&runs), Vec::<PathBuf>::new());
}

/// More bytes than an import reads: a file is refused by its size before it is read, a pipe once the limit is
/// passed; both in bounded memory, with the limit named.
#[test]
fn more_bytes_than_one_import_reads_are_refused_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("b.db"), dir.path().join("runs"));
    let big = dir.path().join("big.jsonl");
    std::fs::File::create(&big).unwrap().set_len(65 * MIB).unwrap();
    let done = import(&[big.as_os_str()], &db, &runs, bounds(30));
    done.assert_bounded(&[2], 10, 100 * MIB);
    assert!(
        done.stderr.contains(&format!("{}: more than the 64 MiB one import reads", big.display())),
        "{}",
        done.stderr
    );
    let (reader, mut writer) = std::io::pipe().unwrap();
    let feeder = std::thread::spawn(move || {
        let line = bench_line(64, "47.0");
        let mut written = 0u64;
        // Stops when backscope closes the pipe after the limit.
        while written < 80 * MIB && writer.write_all(line.as_bytes()).is_ok() {
            written += line.len() as u64;
        }
    });
    let done = import(&["-".as_ref()], &db, &runs, Bounds { stdin: Some(Stdio::from(reader)), ..bounds(60) });
    feeder.join().unwrap();
    done.assert_bounded(&[2], 30, 300 * MIB);
    assert!(done.stderr.contains("-: more than the 64 MiB one import reads"), "{}", done.stderr);
    assert_eq!(runs_in(&db), None);
    assert_eq!(tree(&runs), Vec::<PathBuf>::new());
}

/// `llama-bench -o jsonl | backscope sweep import -`: standard input that is an anonymous pipe, read once.
#[test]
fn an_import_from_a_pipe_on_standard_input_works() {
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("b.db"), dir.path().join("runs"));
    let (reader, mut writer) = std::io::pipe().unwrap();
    let text = format!("{}{}", bench_line(64, "47.0"), bench_line(512, "120.5"));
    let feeder = std::thread::spawn(move || {
        writer.write_all(text.as_bytes()).unwrap();
    });
    let done = import(&["-".as_ref()], &db, &runs, Bounds { stdin: Some(Stdio::from(reader)), ..bounds(30) });
    feeder.join().unwrap();
    done.assert_bounded(&[0], 20, 150 * MIB);
    assert_eq!((runs_in(&db), records_in(&db)), (Some(1), 2));
    let run_dir = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    assert_eq!(
        std::fs::read_to_string(run_dir.join("input/stdin")).unwrap(),
        format!("{}{}", bench_line(64, "47.0"), bench_line(512, "120.5")),
        "the copy is what was read"
    );
    // The run directory alone still reports: its records come from records.jsonl.
    let out = backscope().arg("report").arg(&run_dir).args(["--format", "json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = report.to_string();
    assert!(text.contains("pp512") && text.contains("120.5"), "{text}");
}

/// `backscope sweep import <(llama-bench -o jsonl)`: bash hands over /dev/fd/N, an anonymous pipe. It used to be
/// refused after an empty run was created.
#[test]
fn an_import_from_process_substitution_works() {
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("b.db"), dir.path().join("runs"));
    let src = dir.path().join("src.jsonl");
    std::fs::write(&src, format!("{}{}", bench_line(64, "47.0"), bench_line(128, "80.0"))).unwrap();
    let script = "exec \"$0\" sweep import <(cat \"$1\") --db \"$2\" --runs-dir \"$3\"";
    let mut child = Command::new("bash")
        .args(["-c", script])
        .arg(env!("CARGO_BIN_EXE_backscope"))
        .arg(&src)
        .arg(&db)
        .arg(&runs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the import of a pipe did not finish within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!((runs_in(&db), records_in(&db)), (Some(1), 2));
}

/// A named FIFO has no writer that backscope could know of: refused at once, and nothing is created.
#[test]
fn a_named_fifo_is_refused_at_once_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("bench.jsonl");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (db, runs) = (dir.path().join("b.db"), dir.path().join("runs"));
    let done = import(&[fifo.as_os_str()], &db, &runs, bounds(20));
    done.assert_bounded(&[2], 10, 150 * MIB);
    assert!(done.stderr.contains("named FIFO"), "{}", done.stderr);
    assert_eq!(runs_in(&db), None, "no database created");
    assert_eq!(tree(&runs), Vec::<PathBuf>::new(), "no run directory");
}

/// A file with one bad value among good tests changes nothing: the database keeps its runs and records, no run
/// directory appears, and the error names the file, the line and the field.
#[test]
fn an_invalid_import_leaves_the_database_and_runs_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (db, runs) = (dir.path().join("b.db"), dir.path().join("runs"));
    let good = dir.path().join("good.jsonl");
    std::fs::write(&good, bench_line(64, "47.0")).unwrap();
    import(&[good.as_os_str()], &db, &runs, bounds(30)).assert_bounded(&[0], 20, 150 * MIB);
    assert_eq!((runs_in(&db), records_in(&db)), (Some(1), 1));
    let before = tree(&runs);
    let cases = [
        ("negative.jsonl", "-47.0", "line 3 (test 3): `avg_ts` is -47.0"),
        // llama-bench prints a non-finite float with std::to_string: a bare `nan`/`inf`, which is no JSON.
        ("nan.jsonl", "nan", "line 3 (test 3): `avg_ts` is `nan`, which is no number"),
        ("inf.jsonl", "-inf", "line 3 (test 3): `avg_ts` is `-inf`, which is no number"),
    ];
    for (name, value, expect) in cases {
        let bad = dir.path().join(name);
        let text = format!("{}{}{}", bench_line(64, "47.0"), bench_line(128, "90.0"), bench_line(256, value));
        std::fs::write(&bad, text).unwrap();
        let done = import(&[good.as_os_str(), bad.as_os_str()], &db, &runs, bounds(30));
        done.assert_bounded(&[2], 20, 150 * MIB);
        assert!(done.stderr.contains(&format!("{}, {expect}", bad.display())), "{}", done.stderr);
        assert_eq!((runs_in(&db), records_in(&db)), (Some(1), 1), "{name}: the database changed");
        assert_eq!(tree(&runs), before, "{name}: files were created");
    }
    // Absurd token counts and negative durations, in a JSON array as `-o json` prints it (objects over lines).
    let bad = dir.path().join("bad.json");
    let a = bench_line(64, "47.0").replace("\"n_prompt\": 64", "\"n_prompt\": 99999999999");
    let b = bench_line(64, "47.0").replace("\"avg_ns\": 1361702127", "\"avg_ns\": -5");
    std::fs::write(&bad, format!("[\n  {},\n  {}\n]\n", a.trim(), b.trim())).unwrap();
    let done = import(&[bad.as_os_str()], &db, &runs, bounds(30));
    done.assert_bounded(&[2], 20, 150 * MIB);
    for expect in ["line 2 (test 1): `n_prompt` is 99999999999", "line 3 (test 2): `avg_ns` is -5"] {
        assert!(done.stderr.contains(&format!("{}, {expect}", bad.display())), "{}", done.stderr);
    }
    assert_eq!((runs_in(&db), records_in(&db)), (Some(1), 1));
    assert_eq!(tree(&runs), before);
}

/// An import that fails after the checks (here: its runs directory cannot be created) takes back what it made: a
/// database it created, with the directory it made for it.
#[test]
fn an_import_that_fails_while_storing_leaves_no_database_behind() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.jsonl");
    std::fs::write(&good, bench_line(64, "47.0")).unwrap();
    std::fs::write(dir.path().join("a-file"), "").unwrap();
    let (db, runs) = (dir.path().join("new/b.db"), dir.path().join("a-file/runs"));
    let done = import(&[good.as_os_str()], &db, &runs, bounds(30));
    done.assert_bounded(&[2], 20, 150 * MIB);
    assert!(done.stderr.contains("Not a directory"), "{}", done.stderr);
    let left: Vec<PathBuf> = tree(dir.path()).into_iter().filter(|p| p != &good).collect();
    assert_eq!(left, vec![dir.path().join("a-file")], "the import left files behind");
}
