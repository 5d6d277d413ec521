//! The cell loop, restart policy and failure classification against a scripted [`Executor`]: servers that
//! serve, exit, crash or lose their port on cue, and answers that succeed, break, hang or are cut short by
//! Ctrl-C. No process is spawned and no socket opened.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::*;
use crate::commands::sweep::events::Collect;
use crate::commands::sweep::flags::SweepFlags;
use crate::commands::sweep::http::Failure;
use crate::commands::sweep::plan::resolve;
use crate::commands::sweep::spec::SpecFile;
use crate::commands::sweep::supervise::ProcessSpec;
use crate::run::format::record::RunSource;
use crate::run::format::run_row::{RunRow, RunStatus};

/// How the next spawned server behaves.
enum Spawn {
    /// The program cannot be started.
    Fails(io::ErrorKind),
    /// It writes this to its log and exits before it is ready.
    Exits { log: &'static str, code: Option<i32>, signal: Option<i32> },
    /// It becomes ready and serves.
    Serves,
    /// It writes this to its log, becomes ready and serves.
    ServesLogging(&'static str),
}

/// How the next generation request goes.
enum Reply {
    Ok,
    /// The request fails with this class; `ends`: the server ended that way first.
    Fails {
        class: ErrorClass,
        ends: Option<ExitInfo>,
    },
    /// Ctrl-C arrives while the request runs.
    Interrupted,
    /// The server logs this many bytes (in 100-byte lines) while it answers.
    OkLogging(usize),
}

#[derive(Default)]
struct Script {
    spawns: VecDeque<Spawn>,
    replies: VecDeque<Reply>,
    /// What happened, in order: `spawn PORT ARGV`, `stop PID`.
    log: Vec<String>,
    /// Servers by pid: how each ended, if it did; by port, which pid listens.
    exits: HashMap<u32, Option<ExitInfo>>,
    listening: HashMap<u16, u32>,
    /// Server logs by port.
    logs: HashMap<u16, std::path::PathBuf>,
    next_port: u16,
    next_pid: u32,
}

#[derive(Clone)]
struct Scripted {
    script: Arc<Mutex<Script>>,
    interrupt: Interrupt,
}

impl Scripted {
    fn new(spawns: Vec<Spawn>, replies: Vec<Reply>) -> Self {
        let script = Script {
            spawns: spawns.into(),
            replies: replies.into(),
            next_port: 40000,
            next_pid: 1000,
            ..Default::default()
        };
        Scripted { script: Arc::new(Mutex::new(script)), interrupt: Interrupt::none() }
    }

    fn log(&self) -> Vec<String> {
        self.script.lock().unwrap().log.clone()
    }
}

struct ScriptedServer {
    pid: u32,
    script: Arc<Mutex<Script>>,
}

#[derive(Clone)]
struct ScriptedClient {
    port: u16,
    timeouts: Timeouts,
    script: Arc<Mutex<Script>>,
    interrupt: Interrupt,
}

fn exit_info(code: Option<i32>, signal: Option<i32>) -> ExitInfo {
    ExitInfo { code, signal, after_ms: 5.0 }
}

impl Executor for Scripted {
    type Server = ScriptedServer;
    type Client = ScriptedClient;

    fn free_port(&mut self) -> io::Result<u16> {
        let mut s = self.script.lock().unwrap();
        s.next_port += 1;
        Ok(s.next_port)
    }

    fn port_taken(&mut self, _port: u16) -> bool {
        false
    }

    fn spawn(&mut self, process: &ProcessSpec, log: &Path) -> io::Result<ScriptedServer> {
        let mut s = self.script.lock().unwrap();
        let port = process.args.iter().skip_while(|a| *a != "--port").nth(1).cloned().unwrap_or_default();
        s.log.push(format!("spawn {port} {}", process.argv().join(" ")));
        let (text, exit) = match s.spawns.pop_front().expect("a spawn the test did not script") {
            Spawn::Fails(kind) => return Err(io::Error::from(kind)),
            Spawn::Exits { log, code, signal } => (log, Some(exit_info(code, signal))),
            Spawn::Serves => ("", None),
            Spawn::ServesLogging(text) => (text, None),
        };
        std::fs::write(log, text)?;
        s.logs.insert(port.parse().unwrap_or(0), log.to_path_buf());
        s.next_pid += 1;
        let pid = s.next_pid;
        s.exits.insert(pid, exit);
        s.listening.insert(port.parse().unwrap_or(0), pid);
        Ok(ScriptedServer { pid, script: Arc::clone(&self.script) })
    }

    fn client(&mut self, base_url: &str, timeouts: Timeouts) -> ScriptedClient {
        let port = base_url.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
        ScriptedClient { port, timeouts, script: Arc::clone(&self.script), interrupt: self.interrupt.clone() }
    }
}

impl Server for ScriptedServer {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn age(&self) -> Duration {
        Duration::from_millis(5)
    }

    fn try_exit(&mut self) -> Option<ExitInfo> {
        self.script.lock().unwrap().exits.get(&self.pid).cloned().flatten()
    }

    fn wait_exit(&mut self, _limit: Duration) -> Option<ExitInfo> {
        self.try_exit()
    }

    fn stop(&mut self, _grace: Duration) -> ExitInfo {
        let mut s = self.script.lock().unwrap();
        s.log.push(format!("stop {}", self.pid));
        s.exits.entry(self.pid).or_default().get_or_insert_with(|| exit_info(None, Some(libc::SIGTERM))).clone()
    }
}

impl Client for ScriptedClient {
    fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    fn get(&self, _path: &str, _limit: Duration) -> Result<(u16, Vec<u8>), Failure> {
        Ok((200, b"{}".to_vec()))
    }

    fn post_json(&self, _path: &str, _body: &Value, _limit: Duration) -> Result<(u16, Vec<u8>), Failure> {
        Ok((200, b"{}".to_vec()))
    }

    fn generate(&self, api: Api, _body: &Value, _stream: bool, _first: &mut dyn FnMut(f64)) -> Measurement {
        let reply = self.script.lock().unwrap().replies.pop_front().expect("a request the test did not script");
        let mut m = Measurement {
            http_status: Some(200),
            wall_ms: 12.0,
            ttft_ms: Some(3.0),
            state: api::StreamState::new(api),
            body_bytes: 64,
            failure: None,
        };
        if let Reply::OkLogging(bytes) = reply {
            let path = self.script.lock().unwrap().logs[&self.port].clone();
            let line = format!("{:99}\n", "0.01.000.000 I slot update_slots: id  0 | task 0 | n_past = 12");
            let text = line.repeat(bytes / line.len());
            std::fs::OpenOptions::new().append(true).open(path).unwrap().write_all(text.as_bytes()).unwrap();
        }
        match reply {
            Reply::Ok | Reply::OkLogging(_) => {
                let body =
                    json!({"content": " blue", "stop": true, "timings": {"predicted_n": 4, "predicted_ms": 8.0}});
                m.state.feed_whole(body.to_string().as_bytes()).unwrap();
            }
            Reply::Fails { class, ends } => {
                if ends.is_some() {
                    let mut s = self.script.lock().unwrap();
                    let pid = s.listening[&self.port];
                    s.exits.insert(pid, ends);
                }
                m.http_status = None;
                m.failure = Some((Failure::new(class, "the scripted failure"), 7.0));
            }
            Reply::Interrupted => {
                self.interrupt.request();
                // The sweep notices Ctrl-C within its 50 ms poll and abandons this worker.
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        m
    }
}

/// A sweep of managed llama-servers (`m.gguf` with each num_gpu, `repetitions` times) run by `exec`; with the
/// store's records and the events.
struct Outcome {
    end: RunEnd,
    records: Vec<Record>,
    events: Vec<Value>,
    _dir: tempfile::TempDir,
}

impl Outcome {
    fn events(&self) -> Vec<&str> {
        self.events.iter().map(|e| e["event"].as_str().unwrap()).collect()
    }
}

fn schedule(num_gpu: &[i64], repetitions: u32) -> Schedule {
    let flags = SweepFlags {
        servers: vec!["ls=llama-server:--device,none".into()],
        llama_bin: Some("/opt/llama/bin".into()),
        models: vec!["m.gguf".into()],
        num_gpu: num_gpu.to_vec(),
        repetitions: Some(repetitions),
        ..Default::default()
    };
    let spec = flags.merge_onto(SpecFile::default(), Path::new("/cwd")).unwrap();
    Schedule::of(&resolve(&spec, &mut |_| None).unwrap())
}

fn sweep(schedule: &Schedule, exec: &mut Scripted, recorded_before: &[usize]) -> Outcome {
    let mut events = Collect::default();
    let (end, records, dir) = sweep_into(schedule, exec, recorded_before, &mut events);
    Outcome { end, records, events: events.0, _dir: dir }
}

fn sweep_into(
    schedule: &Schedule,
    exec: &mut Scripted,
    recorded_before: &[usize],
    sink: &mut dyn Sink,
) -> (RunEnd, Vec<Record>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&crate::run::format::target::DbTarget::Sqlite(dir.path().join("db"))).unwrap();
    store
        .create_run(&RunRow {
            run_id: "r".into(),
            created_at: utc_now(),
            finished_at: None,
            status: RunStatus::Running,
            source: RunSource::Sweep,
            run_dir: dir.path().display().to_string(),
            plan_json: "{}".into(),
            cells_total: schedule.cells.len() as u64,
            backscope_version: "test".into(),
            host: None,
            owner: None,
        })
        .unwrap();
    for &i in recorded_before {
        let c = &schedule.cells[i];
        let file = format!("{}/result.json", c.dir);
        let rec = Record { run_id: "r".into(), cell_key: c.key.clone(), seq: c.seq, file, ..Default::default() };
        commit_record(&mut store, dir.path(), &rec).unwrap();
    }
    let end = {
        let mut ctx =
            RunContext { run_id: "r", run_dir: dir.path(), store: &mut store, sink, interrupt: exec.interrupt.clone() };
        execute(&mut ctx, schedule, exec).unwrap()
    };
    let records = store.records("r").unwrap();
    (end, records, dir)
}

fn spawned_ngl(exec: &Scripted) -> Vec<String> {
    let ngl = |l: &String| l.split(' ').skip_while(|a| *a != "-ngl").nth(1).unwrap_or("auto").to_string();
    exec.log().iter().filter(|l| l.starts_with("spawn")).map(ngl).collect()
}

#[test]
fn a_server_that_serves_is_kept_across_its_cells() {
    let mut exec = Scripted::new(vec![Spawn::Serves], vec![Reply::Ok, Reply::Ok, Reply::Ok]);
    let out = sweep(&schedule(&[0], 3), &mut exec, &[]);
    assert_eq!(out.end, RunEnd::Finished);
    assert_eq!(out.records.len(), 3);
    assert!(out.records.iter().all(|r| r.is_ok() && r.server.as_ref().unwrap().start_no == 1), "{:?}", out.records);
    assert_eq!(exec.log().len(), 2, "one spawn, one stop at the end: {:?}", exec.log());
    assert_eq!(out.records[0].decode_tps, Some(500.0), "4 tokens in 8 ms, from the reply's timings");
    assert!(out.records[0].log_slice.as_deref().unwrap().ends_with("/server.log"));
}

#[test]
fn a_new_server_key_restarts_the_server() {
    let mut exec =
        Scripted::new(vec![Spawn::Serves, Spawn::Serves, Spawn::Serves], vec![Reply::Ok, Reply::Ok, Reply::Ok]);
    let out = sweep(&schedule(&[0, 1, -1], 1), &mut exec, &[]);
    assert_eq!(spawned_ngl(&exec), ["0", "1", "auto"], "-1 leaves -ngl out");
    let log = exec.log();
    let kinds: Vec<&str> = log.iter().map(|l| l.split(' ').next().unwrap()).collect();
    let want = ["spawn", "stop", "spawn", "stop", "spawn", "stop"];
    assert_eq!(kinds, want, "the old server stops before the new one starts");
    assert_eq!(out.events().iter().filter(|e| **e == "server_stopped").count(), 3);
}

#[test]
fn a_crash_is_classified_from_the_wait_status_and_the_next_cell_gets_a_fresh_server() {
    let crash = Reply::Fails { class: ErrorClass::Eof, ends: Some(exit_info(None, Some(libc::SIGSEGV))) };
    let mut exec = Scripted::new(vec![Spawn::Serves, Spawn::Serves], vec![crash, Reply::Ok]);
    let out = sweep(&schedule(&[0], 2), &mut exec, &[]);
    let r = &out.records[0];
    assert_eq!((r.status, r.phase, r.error_class), (Status::Fail, Some(Phase::Request), Some(ErrorClass::Crash)));
    assert_eq!((r.signal.as_deref(), r.signal_source.as_deref()), (Some("SIGSEGV"), Some("wait status")));
    assert!(r.error.as_deref().unwrap().starts_with("the server was killed by SIGSEGV during the request"));
    assert!(out.records[1].is_ok());
    assert_eq!(out.records[1].server.as_ref().unwrap().start_no, 2, "restarted after the crash");
    let ev = out.events();
    let first_finished = ev.iter().position(|e| *e == "cell_finished").unwrap();
    assert_eq!(ev[first_finished - 1], "server_stopped", "the dead server is reaped with its cell: {ev:?}");
    assert_eq!(spawned_ngl(&exec).len(), 2);
}

#[test]
fn a_server_that_exits_during_a_request_is_a_server_exit() {
    let exits = Reply::Fails { class: ErrorClass::ConnectionReset, ends: Some(exit_info(Some(3), None)) };
    let mut exec = Scripted::new(vec![Spawn::Serves, Spawn::Serves], vec![exits, Reply::Ok]);
    let out = sweep(&schedule(&[0], 2), &mut exec, &[]);
    let r = &out.records[0];
    assert_eq!((r.error_class, r.exit_code, r.signal.as_deref()), (Some(ErrorClass::ServerExit), Some(3), None));
    assert_eq!(r.error.as_deref(), Some("the server exited with code 3 during the request (the scripted failure)"));
    assert_eq!(out.records[1].server.as_ref().unwrap().start_no, 2, "a dead server is replaced");
}

#[test]
fn a_broken_connection_from_a_live_server_keeps_the_server() {
    let reset = Reply::Fails { class: ErrorClass::ConnectionReset, ends: None };
    let mut exec = Scripted::new(vec![Spawn::Serves], vec![reset, Reply::Ok]);
    let out = sweep(&schedule(&[0], 2), &mut exec, &[]);
    assert_eq!(out.records[0].error_class, Some(ErrorClass::ConnectionReset), "no exit: the socket's class");
    assert_eq!(out.records[1].server.as_ref().unwrap().start_no, 1, "no restart");
}

#[test]
fn a_hung_server_is_stopped_and_restarted_for_the_next_cell() {
    let hang = Reply::Fails { class: ErrorClass::ReadTimeout, ends: None };
    let mut exec = Scripted::new(vec![Spawn::Serves, Spawn::Serves], vec![hang, Reply::Ok]);
    let out = sweep(&schedule(&[0], 2), &mut exec, &[]);
    let r = &out.records[0];
    assert_eq!(r.error_class, Some(ErrorClass::ReadTimeout));
    assert!(r.error.as_deref().unwrap().ends_with("; the server was stopped and will be restarted for the next cell"));
    assert_eq!(exec.log().iter().filter(|l| l.starts_with("spawn")).count(), 2);
    assert_eq!(out.records[1].server.as_ref().unwrap().start_no, 2);
}

#[test]
fn a_server_that_cannot_start_is_the_cells_record_with_phase_start() {
    let mut exec = Scripted::new(vec![Spawn::Fails(io::ErrorKind::NotFound), Spawn::Serves], vec![Reply::Ok]);
    let out = sweep(&schedule(&[0, 1], 1), &mut exec, &[]);
    let r = &out.records[0];
    assert_eq!((r.phase, r.error_class), (Some(Phase::Start), Some(ErrorClass::SpawnFailed)));
    let e = r.error.as_deref().unwrap();
    assert!(e.starts_with("cannot start /opt/llama/bin/llama-server: "), "{e}");
    assert!(e.ends_with(
        "(not found: pass --llama-bin DIR with the llama.cpp build's bin directory, or --program NAME=PATH)"
    ));
    let failed = out.events.iter().find(|e| e["event"] == "server_failed").unwrap();
    assert_eq!((failed["class"].as_str(), &failed["pid"]), (Some("spawn_failed"), &Value::Null));
    assert!(out.records[1].is_ok(), "the next cell starts its own server");
}

#[test]
fn a_server_that_exits_before_it_is_ready_is_named_by_its_log() {
    let abort = Spawn::Exits { log: "load: GGML_ASSERT(ok) failed\n", code: None, signal: Some(libc::SIGABRT) };
    let mut exec = Scripted::new(vec![abort], vec![]);
    let out = sweep(&schedule(&[0], 1), &mut exec, &[]);
    let r = &out.records[0];
    assert_eq!(
        (r.phase, r.error_class, r.signal.as_deref()),
        (Some(Phase::Start), Some(ErrorClass::Crash), Some("SIGABRT"))
    );
    assert!(r.error.as_deref().unwrap().contains("killed by SIGABRT"), "{:?}", r.error);
    assert_eq!(r.log_slice.as_deref(), Some("servers/s001-ls.log"));
}

#[test]
fn ctrl_c_during_a_request_leaves_that_cell_unrecorded() {
    let mut exec = Scripted::new(vec![Spawn::Serves], vec![Reply::Ok, Reply::Interrupted]);
    let out = sweep(&schedule(&[0], 3), &mut exec, &[]);
    assert_eq!(out.end, RunEnd::Interrupted);
    assert_eq!(out.records.len(), 1, "the interrupted cell runs again on --resume");
    assert_eq!(out.events().last(), Some(&"server_stopped"), "the server is stopped on the way out");
}

#[test]
fn a_port_taken_before_the_bind_is_retried_on_a_new_port() {
    let lost = Spawn::Exits {
        log: "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 40001\n",
        code: Some(1),
        signal: None,
    };
    let mut exec = Scripted::new(vec![lost, Spawn::Serves], vec![Reply::Ok]);
    let out = sweep(&schedule(&[0], 1), &mut exec, &[]);
    let r = &out.records[0];
    assert!(r.is_ok(), "{r:?}");
    let ports: Vec<String> = exec
        .log()
        .iter()
        .filter(|l| l.starts_with("spawn"))
        .map(|l| l.split(' ').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(ports, ["40001", "40002"]);
    assert_eq!(r.server.as_ref().map(|s| (s.port, s.start_no)), Some((40002, 2)));
    assert!(!out.events().contains(&"server_failed"), "a retried port is no failure");
}

#[test]
fn a_port_lost_three_times_is_recorded_with_the_bind_line() {
    let lost = || Spawn::Exits { log: "couldn't bind HTTP server socket\n", code: Some(1), signal: None };
    let mut exec = Scripted::new(vec![lost(), lost(), lost()], vec![]);
    let out = sweep(&schedule(&[0], 1), &mut exec, &[]);
    let r = &out.records[0];
    assert_eq!((r.phase, r.error_class), (Some(Phase::Start), Some(ErrorClass::PortInUse)));
    assert_eq!(r.failure_line.as_ref().map(|l| (l.file.as_str(), l.line)), Some(("servers/s003-ls.log", 1)));
    assert_eq!(out.events().iter().filter(|e| **e == "server_failed").count(), 1);
}

#[test]
fn recorded_cells_are_skipped() {
    let mut exec = Scripted::new(vec![Spawn::Serves], vec![Reply::Ok]);
    let s = schedule(&[0, 1], 1);
    let out = sweep(&s, &mut exec, &[0]);
    assert_eq!(spawned_ngl(&exec), ["1"], "only the unrecorded cell ran");
    assert_eq!(out.records.len(), 2);
    let started: Vec<u64> =
        out.events.iter().filter(|e| e["event"] == "cell_started").map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(started, [1]);
}

/// Log bytes read on the runner's thread when each cell was committed.
#[derive(Default)]
struct ReadAtEachCell(Vec<u64>);

impl Sink for ReadAtEachCell {
    fn event(&mut self, e: &Event<'_>) {
        if matches!(e, Event::CellFinished { .. }) {
            self.0.push(crate::commands::sweep::logs::bytes_read_on_this_thread());
        }
    }
}

#[test]
fn each_cell_reads_only_the_log_its_request_appended() {
    // The server logs its device at start and 256 KiB per request; over 24 cells the log grows to 6 MiB. Each
    // cell must read its own 256 KiB (once: the same pass writes its slice), not the log so far, and still know
    // the backend from the start-up lines.
    const HEADER: &str = "\
llama_model_load_from_file_impl: using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) (unknown id) - 7927 MiB free
load_tensors: offloaded 5/5 layers to GPU
";
    const PER_REQUEST: usize = 256 << 10;
    const CELLS: u32 = 24;
    let replies = (0..CELLS).map(|_| Reply::OkLogging(PER_REQUEST)).collect();
    let mut exec = Scripted::new(vec![Spawn::ServesLogging(HEADER)], replies);
    let mut read = ReadAtEachCell::default();
    let before = crate::commands::sweep::logs::bytes_read_on_this_thread();
    let (_, records, dir) = sweep_into(&schedule(&[0], CELLS), &mut exec, &[], &mut read);
    assert_eq!(records.len(), CELLS as usize);
    let per_cell: Vec<u64> =
        read.0.iter().scan(before, |last, &now| Some(now - std::mem::replace(last, now))).collect();
    let appended = (PER_REQUEST / 100 * 100) as u64;
    assert_eq!(per_cell[0], HEADER.len() as u64 + appended, "the first cell also reads the start-up lines");
    assert!(per_cell[1..].iter().all(|&n| n == appended), "bytes read per cell: {per_cell:?}");
    for r in &records {
        let b = r.backend.as_ref().unwrap_or_else(|| panic!("no backend facts in {r:?}"));
        assert_eq!((b.backend.as_str(), b.offloaded), ("Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))", Some((5, 5))));
        let slice = std::fs::metadata(dir.path().join(r.log_slice.as_ref().unwrap())).unwrap().len();
        assert_eq!(slice, appended, "the slice holds what the request logged");
    }
}
