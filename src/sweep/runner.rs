//! The sweep loop: for each cell of the schedule not yet recorded, make sure its server is running (starting,
//! restarting or replacing managed servers), send the request from a worker thread while the main thread watches
//! for Ctrl-C, classify the outcome, slice the server log, and commit the record before the next cell starts.
//!
//! Nothing a server does ends the sweep: a crash, an exit, a hang, a port conflict or garbage on the wire becomes a
//! record with its class and time to failure, and the next cell gets a fresh server when it needs one. Only
//! backscope's own I/O errors (database, run directory) and Ctrl-C stop it.
//!
//! Processes, ports and HTTP come from an [`Executor`]; everything the runner needs to know about a cell — its key,
//! its directory, the server it needs — comes computed with the cell ([`super::cells`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Map, Value};

use super::api::{self, GenParams};
use super::cells::{Cell, ExternalEndpoint, ManagedServer, Schedule, Target};
use super::events::{Event, Sink};
use super::executor::{Executor, Server};
use super::http::{detect_api, Client, Failure, Measurement, Timeouts};
use super::logs::{scan_log, LogScan};
use super::presets::ServerKey;
use super::record::{
    tokens_per_second, Api, ErrorClass, LogRef, Phase, Record, RunSource, ServerRef, Status, RECORD_SCHEMA,
};
use super::store::{commit_record, utc_now, Store};
use super::supervise::{copy_slice, ExitInfo, Interrupt};
use super::tracejoin::{self, TraceDir};

/// How long to wait for a managed server's wait status after its connection broke: the kernel closes a dying
/// process's sockets before the parent can reap it, usually within milliseconds.
const EXIT_AFTER_BREAK: Duration = Duration::from_secs(3);
/// Readiness polling interval.
const READY_POLL: Duration = Duration::from_millis(50);
/// Attempts at a free port when another process grabs it between our choice and the server's bind.
const PORT_ATTEMPTS: u32 = 3;
/// Largest external server log read whole for backend facts; beyond it only each cell's window is read.
const EXTERNAL_LOG_SCAN_CAP: u64 = 64 << 20;
/// Longest wait for a server log to stop growing after a request (for the cell's slice).
const LOG_SETTLE: Duration = Duration::from_millis(300);
/// The observer window of an external server whose trace headers do not say (`backscope trace`'s default).
const EXTERNAL_TRACE_INTERVAL_MS: u64 = 50;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    Finished,
    Interrupted,
}

pub struct RunContext<'a> {
    pub run_id: &'a str,
    pub run_dir: &'a Path,
    pub store: &'a mut Store,
    pub sink: &'a mut dyn Sink,
    pub interrupt: Interrupt,
}

/// Run every cell of `schedule` that `ctx.store` has not recorded yet, in order.
pub fn execute<E: Executor>(ctx: &mut RunContext<'_>, schedule: &Schedule, exec: &mut E) -> Result<RunEnd> {
    let done: HashSet<String> = ctx.store.completed_keys(ctx.run_id)?;
    let servers_dir = ctx.run_dir.join("servers");
    std::fs::create_dir_all(&servers_dir)?;
    // On resume, new server logs continue the numbering instead of overwriting the earlier ones.
    let server_logs = std::fs::read_dir(&servers_dir)?.count() as u32;
    let mut runner =
        Runner { ctx, schedule, exec, current: None, externals: HashMap::new(), starts: HashMap::new(), server_logs };
    let mut end = RunEnd::Finished;
    for cell in &schedule.cells {
        if done.contains(&cell.key) {
            continue;
        }
        if runner.ctx.interrupt.requested() {
            end = RunEnd::Interrupted;
            break;
        }
        let pid = runner.current.as_ref().map(|r| r.server.pid);
        runner.ctx.sink.event(&Event::CellStarted { seq: cell.seq, cell_key: &cell.key, pid });
        match runner.run_cell(cell)? {
            Some(rec) => {
                commit_record(runner.ctx.store, runner.ctx.run_dir, &rec)?;
                runner.ctx.sink.event(&Event::CellFinished { record: &rec });
            }
            None => {
                end = RunEnd::Interrupted;
                break;
            }
        }
    }
    runner.stop_current();
    Ok(end)
}

/// A managed server that is up.
struct Running<E: Executor> {
    key: ServerKey,
    proc: E::Server,
    log_path: PathBuf,
    client: E::Client,
    api: Api,
    server: ServerRef,
    info: Map<String, Value>,
    trace: Option<ServerTrace>,
}

impl<E: Executor> Running<E> {
    fn peer(&self) -> Peer<E::Client> {
        Peer {
            client: self.client.clone(),
            api: self.api,
            server: Some(self.server.clone()),
            info: self.info.clone(),
            log: Some(ServerLog {
                path: self.log_path.clone(),
                start: file_len(&self.log_path),
                rel: Some(self.server.log.clone()),
            }),
            may_fall_back: false,
            num_gpu_not_applied: false,
        }
    }
}

/// `--trace` state of a managed server: its trace directory (relative to the run directory and read as it grows)
/// and whether the observer was mapped into it.
struct ServerTrace {
    rel: String,
    dir: TraceDir,
    observer_loaded: Option<bool>,
}

/// What the sweep knows about an external endpoint.
struct External<C> {
    client: C,
    api: Option<Api>,
    info: Option<Map<String, Value>>,
    /// `--trace`: its trace directory, read as it grows.
    trace: Option<TraceDir>,
}

enum Ready {
    Yes,
    Exited(ExitInfo),
    TimedOut,
    Interrupted,
}

/// Why a managed server did not come up; becomes the record of the cell that needed it.
struct StartFailure {
    class: ErrorClass,
    message: String,
    ttf_ms: f64,
    exit: Option<ExitInfo>,
    server: Option<ServerRef>,
    line: Option<LogRef>,
}

impl StartFailure {
    /// A failure before any process ran (no port, no trace directory, no program).
    fn before_start(class: ErrorClass, message: String) -> Self {
        StartFailure { class, message, ttf_ms: 0.0, exit: None, server: None, line: None }
    }

    fn into_record(self, mut rec: Record) -> Record {
        rec.status = Status::Fail;
        rec.phase = Some(Phase::Start);
        rec.error_class = Some(self.class);
        rec.error = Some(self.message);
        rec.ttf_ms = Some(self.ttf_ms);
        if let Some(e) = &self.exit {
            rec.exit_code = e.code;
            rec.signal = e.signal_name();
            rec.signal_source = e.signal.map(|_| "wait status".to_string());
        }
        rec.log_slice = self.server.as_ref().map(|s| s.log.clone());
        rec.server = self.server;
        rec.failure_line = self.line;
        rec
    }
}

enum StartError {
    Failed(Box<StartFailure>),
    /// Ctrl-C while the server was starting; it was stopped.
    Interrupted,
}

impl From<StartFailure> for StartError {
    fn from(f: StartFailure) -> Self {
        StartError::Failed(Box::new(f))
    }
}

/// One attempt at starting a server.
enum Attempt<E: Executor> {
    Up(Box<Running<E>>),
    /// Another process bound the port first (the message says so); a new port may work.
    PortLost(String, StartFailure),
}

/// Where a cell's request goes, with what the sweep knows about it.
struct Peer<C> {
    client: C,
    api: Api,
    /// The managed server that serves it.
    server: Option<ServerRef>,
    /// What the server said about itself and the model.
    info: Map<String, Value>,
    log: Option<ServerLog>,
    /// External servers only: a 404 on llama.cpp's native route switches to the OpenAI-compatible one. A managed
    /// llama-server has the route; a 404 there is a failure to report.
    may_fall_back: bool,
    /// The cell's num_gpu could not be applied: an external llama-server runs with the -ngl it was started with.
    num_gpu_not_applied: bool,
}

/// The log a request's slice is cut from.
struct ServerLog {
    path: PathBuf,
    start: u64,
    /// How log lines are cited: the run-relative name of a managed server's log; `None` for an external log file,
    /// cited by its own path.
    rel: Option<String>,
}

struct Runner<'a, 'b, E: Executor> {
    ctx: &'b mut RunContext<'a>,
    schedule: &'b Schedule,
    exec: &'b mut E,
    current: Option<Running<E>>,
    externals: HashMap<String, External<E::Client>>,
    starts: HashMap<String, u32>,
    server_logs: u32,
}

impl<E: Executor> Runner<'_, '_, E> {
    fn grace(&self) -> Duration {
        Duration::from_secs_f64(self.schedule.timeouts.grace_s)
    }

    fn client_timeouts(&self) -> Timeouts {
        let t = &self.schedule.timeouts;
        Timeouts {
            connect: Duration::from_secs_f64(t.connect_s),
            read: Duration::from_secs_f64(t.read_s),
            total: Duration::from_secs_f64(t.request_s),
        }
    }

    /// The limit of probes (`/props`, `/api/show`, API detection): they must not wait for a model load.
    fn probe_limit(&self) -> Duration {
        Duration::from_secs_f64(self.schedule.timeouts.connect_s + 10.0)
    }

    fn stop(&mut self, mut r: Running<E>) {
        let exit = r.proc.stop(self.grace());
        self.ctx.sink.event(&Event::ServerStopped {
            endpoint: &r.key.endpoint,
            pid: r.server.pid,
            how: &exit.describe(),
        });
    }

    fn stop_current(&mut self) {
        if let Some(r) = self.current.take() {
            self.stop(r);
        }
    }

    fn base_record(&self, cell: &Cell) -> Record {
        Record {
            schema: RECORD_SCHEMA,
            run_id: self.ctx.run_id.to_string(),
            cell_key: cell.key.clone(),
            seq: cell.seq,
            source: RunSource::Sweep,
            file: format!("{}/result.json", cell.dir),
            endpoint: cell.endpoint.clone(),
            api: cell.api,
            managed: cell.is_managed(),
            model: cell.model.clone(),
            num_gpu: cell.num_gpu,
            prompt: cell.prompt.name.clone(),
            num_predict: cell.num_predict,
            epoch: cell.epoch,
            repetition: cell.repetition,
            stream: self.schedule.request.stream,
            started_at: utc_now(),
            status: Status::Ok,
            ..Default::default()
        }
    }

    /// `None` when Ctrl-C interrupted the cell (it stays unrecorded and runs again on `--resume`).
    fn run_cell(&mut self, cell: &Cell) -> Result<Option<Record>> {
        let rec = self.base_record(cell);
        let peer = match &cell.target {
            Target::Managed(server) => {
                // Restart policy: a server keeps serving while it is alive and the cell needs the same process;
                // a new key (model, -ngl) or a dead server means a fresh start.
                let mut current = self.current.take();
                let serves = current.as_mut().is_some_and(|r| r.key == server.key && r.proc.is_running());
                let running = match current {
                    Some(r) if serves => r,
                    previous => {
                        if let Some(p) = previous {
                            self.stop(p);
                        }
                        match self.start_server(server, &cell.model_name) {
                            Ok(r) => r,
                            Err(StartError::Interrupted) => return Ok(None),
                            Err(StartError::Failed(f)) => return Ok(Some(f.into_record(rec))),
                        }
                    }
                };
                let peer = running.peer();
                self.current = Some(running);
                peer
            }
            Target::External(x) => {
                let started = Instant::now();
                match self.external_peer(x, cell) {
                    Ok(p) => p,
                    Err(f) => {
                        let mut rec = rec;
                        rec.status = Status::Fail;
                        rec.phase = Some(Phase::Request);
                        rec.error_class = Some(f.class);
                        rec.error = Some(f.message);
                        rec.ttf_ms = Some(started.elapsed().as_secs_f64() * 1e3);
                        return Ok(Some(rec));
                    }
                }
            }
        };
        self.request(cell, rec, peer)
    }

    /// Start the server a cell needs, retrying with a new port when another process takes the chosen one first.
    fn start_server(&mut self, s: &ManagedServer, model_name: &str) -> Result<Running<E>, StartError> {
        let mut lost = None;
        for attempt in 1..=PORT_ATTEMPTS {
            let port = self.port_for(s)?;
            match self.start_once(s, port, model_name)? {
                Attempt::Up(r) => return Ok(*r),
                Attempt::PortLost(message, failure) => {
                    if s.fixed_port.is_none() && attempt < PORT_ATTEMPTS {
                        lost = Some(message);
                        continue;
                    }
                    return Err(self.fail(&s.endpoint, failure));
                }
            }
        }
        let message = lost.unwrap_or_else(|| "no port could be bound".into());
        Err(StartFailure::before_start(ErrorClass::PortInUse, message).into())
    }

    fn port_for(&mut self, s: &ManagedServer) -> Result<u16, StartError> {
        let message = match s.fixed_port {
            Some(p) if self.exec.port_taken(p) => format!(
                "127.0.0.1:{p} is already in use by another process; stop it or drop the fixed `port` of `{}`",
                s.endpoint
            ),
            Some(p) => return Ok(p),
            None => match self.exec.free_port() {
                Ok(p) => return Ok(p),
                Err(e) => format!("no free port on 127.0.0.1: {e}"),
            },
        };
        Err(StartFailure::before_start(ErrorClass::PortInUse, message).into())
    }

    /// A start failure of a server that was announced (`server_starting`): tell the sinks, then hand it back.
    fn fail(&mut self, endpoint: &str, f: StartFailure) -> StartError {
        let pid = f.server.as_ref().map(|s| s.pid);
        self.ctx.sink.event(&Event::ServerFailed { endpoint, pid, class: f.class.as_str(), message: &f.message });
        f.into()
    }

    fn start_once(&mut self, s: &ManagedServer, port: u16, model_name: &str) -> Result<Attempt<E>, StartError> {
        let mut ps = s.launch.process(port);
        self.server_logs += 1;
        let log_rel = format!("servers/s{:03}-{}.log", self.server_logs, s.file_stem);
        let log_path = self.ctx.run_dir.join(&log_rel);
        // --trace: the observer goes into the server (and whatever it starts) with a trace directory of this
        // start's own, named like its log.
        let mut trace = None;
        if let Some(observer) = &self.schedule.observer {
            let rel = format!("traces/s{:03}-{}", self.server_logs, s.file_stem);
            let dir = self.ctx.run_dir.join(&rel);
            if let Err(e) = std::fs::create_dir_all(&dir) {
                let message = format!("cannot create the trace directory {}: {e}", dir.display());
                return Err(StartFailure::before_start(ErrorClass::SpawnFailed, message).into());
            }
            let inherited = std::env::var("LD_PRELOAD").ok();
            tracejoin::server_env(&mut ps.env, &observer.library, &dir, observer.interval_ms, inherited);
            trace = Some((rel, dir));
        }
        let argv = ps.argv();
        self.ctx.sink.event(&Event::ServerStarting { endpoint: &s.endpoint, argv: &argv, port, log: &log_rel });
        let start_no = {
            let n = self.starts.entry(s.endpoint.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let mut proc = match self.exec.spawn(&ps, &log_path) {
            Ok(p) => p,
            Err(e) => {
                let hint = if e.kind() == std::io::ErrorKind::NotFound { s.launch.not_found_hint() } else { "" };
                let message = format!("cannot start {}: {e}{hint}", ps.program.display());
                return Err(self.fail(&s.endpoint, StartFailure::before_start(ErrorClass::SpawnFailed, message)));
            }
        };
        let server = ServerRef { pid: proc.pid(), port, argv, log: log_rel.clone(), start_no };
        let client = self.exec.client(&format!("http://127.0.0.1:{port}"), self.client_timeouts());
        let ready_path = s.launch.ready_path();
        let outcome = self.wait_ready(&mut proc, &client, ready_path, Duration::from_secs_f64(s.ready_timeout_s));
        let scan = scan_log(&std::fs::read(&log_path).unwrap_or_default(), &log_rel, 0);
        let failure = |class, message, ttf_ms, exit, line| StartFailure {
            class,
            message,
            ttf_ms,
            exit,
            server: Some(server.clone()),
            line,
        };
        match outcome {
            Ready::Interrupted => Err(StartError::Interrupted),
            Ready::Yes => {
                let after_ms = proc.age().as_secs_f64() * 1e3;
                let pid = proc.pid();
                self.ctx.sink.event(&Event::ServerReady { endpoint: &s.endpoint, pid, port, after_ms });
                let info = self.server_info(&client, s.launch.api, model_name);
                let trace = trace.zip(self.schedule.observer.as_ref()).map(|((rel, dir), observer)| ServerTrace {
                    rel,
                    dir: TraceDir::new(dir),
                    observer_loaded: tracejoin::observer_mapped(pid, &observer.library),
                });
                let running =
                    Running { key: s.key.clone(), proc, log_path, client, api: s.launch.api, server, info, trace };
                Ok(Attempt::Up(Box::new(running)))
            }
            Ready::TimedOut => {
                // Never answered in time: stop it (it may be stuck loading) and say where it got to.
                let waited = proc.age().as_secs_f64() * 1e3;
                proc.stop(self.grace());
                let last = (scan.tail.last())
                    .map(|l| format!("; last log line: {l}"))
                    .unwrap_or_else(|| "; the log is empty".into());
                let message = format!("no HTTP 200 from GET {ready_path} within {} s{last}", s.ready_timeout_s);
                Err(self.fail(&s.endpoint, failure(ErrorClass::NotReady, message, waited, None, None)))
            }
            Ready::Exited(exit) => {
                if let Some(bind) = scan.bind_error.clone() {
                    let message = format!("port {port} was taken before the server could bind it: {}", bind.text);
                    let f = failure(ErrorClass::PortInUse, message.clone(), exit.after_ms, Some(exit), Some(bind));
                    return Ok(Attempt::PortLost(message, f));
                }
                let line = scan.crash.clone().or(scan.load_error.clone());
                let why = line.as_ref().map(|l| l.text.clone()).or_else(|| scan.tail.last().cloned());
                let class = if exit.signal.is_some() { ErrorClass::Crash } else { ErrorClass::ServerExit };
                let message = format!(
                    "the server {} {:.2} s after it started, before it was ready{}",
                    exit.describe(),
                    exit.after_ms / 1000.0,
                    why.map(|w| format!("; log: {w}")).unwrap_or_default()
                );
                Err(self.fail(&s.endpoint, failure(class, message, exit.after_ms, Some(exit), line)))
            }
        }
    }

    /// Poll until the server answers 200 on `path`, exits, or `limit` passes. The answer must come from our child,
    /// not from a process that holds the port. Ctrl-C stops the server.
    fn wait_ready(&mut self, proc: &mut E::Server, client: &E::Client, path: &str, limit: Duration) -> Ready {
        let deadline = Instant::now() + limit;
        loop {
            if self.ctx.interrupt.requested() {
                proc.stop(self.grace());
                return Ready::Interrupted;
            }
            if let Some(exit) = proc.try_exit() {
                return Ready::Exited(exit);
            }
            if let Ok((200, _)) = client.get(path, Duration::from_secs(2)) {
                if proc.is_running() {
                    return Ready::Yes;
                }
            }
            if Instant::now() >= deadline {
                return Ready::TimedOut;
            }
            std::thread::sleep(READY_POLL);
        }
    }

    /// The external endpoint's client and API, detecting the API (and asking what the server says about itself)
    /// on its first cell. `Err`: the API could not be detected, the cell's failure.
    fn external_peer(&mut self, x: &ExternalEndpoint, cell: &Cell) -> Result<Peer<E::Client>, Failure> {
        let (probe_limit, timeouts) = (self.probe_limit(), self.client_timeouts());
        let exec = &mut *self.exec;
        let ext = self.externals.entry(x.name.clone()).or_insert_with(|| External {
            client: exec.client(&x.url, timeouts),
            api: x.api,
            info: None,
            trace: x.trace_dir.clone().map(TraceDir::new),
        });
        if ext.api.is_none() {
            let (api, info) = detect_api(&ext.client, probe_limit)?;
            ext.api = Some(api);
            ext.info = Some(info);
        }
        let (client, api, info) = (ext.client.clone(), ext.api.unwrap_or(Api::Ollama), ext.info.clone());
        let info = match info {
            Some(i) => i,
            None => {
                let i = self.server_info(&client, api, &cell.model_name);
                if let Some(e) = self.externals.get_mut(&x.name) {
                    e.info = Some(i.clone());
                }
                i
            }
        };
        Ok(Peer {
            client,
            api,
            server: None,
            info,
            log: x.log_file.as_ref().map(|p| ServerLog { path: p.clone(), start: file_len(p), rel: None }),
            may_fall_back: true,
            num_gpu_not_applied: api != Api::Ollama && cell.num_gpu == -1 && x.num_gpu_swept,
        })
    }

    /// The one request path of managed and external cells: send, note how the server ended if it did, slice its
    /// log, classify, join the kernels it ran, and apply the restart policy.
    fn request(&mut self, cell: &Cell, mut rec: Record, peer: Peer<E::Client>) -> Result<Option<Record>> {
        let Peer { client, mut api, server, info, log, may_fall_back, num_gpu_not_applied } = peer;
        let pid = server.as_ref().map(|s| s.pid);
        rec.api = Some(api);
        rec.server = server;
        if num_gpu_not_applied {
            rec.extra.insert(
                "note".into(),
                "num_gpu cannot be set on an external llama-server; it ran with the -ngl it was started with".into(),
            );
        }
        rec.extra.insert("server_info".into(), Value::Object(info));
        rec.started_at = utc_now();
        let Some((mut m, mut window)) = self.send(&client, api, cell, pid) else { return Ok(None) };
        if may_fall_back && api == Api::LlamaCpp && m.http_status == Some(404) {
            // Not llama-server's native route: fall back to the OpenAI-compatible one, for good.
            api = Api::OpenAi;
            if let Some(e) = self.externals.get_mut(&cell.endpoint) {
                e.api = Some(api);
            }
            let Some(again) = self.send(&client, api, cell, pid) else { return Ok(None) };
            (m, window) = again;
        }
        rec.api = Some(api);
        // An external server is not ours to reap; a managed server still up from an earlier endpoint is not this one.
        let exit = if cell.is_managed() { self.exit_after_failure(&m) } else { None };
        let scan = match &log {
            Some(l) => self.slice_log(l, cell, &mut rec)?,
            None => LogScan::default(),
        };
        rec.backend = scan.backend.clone();
        fill_measurement(&mut rec, &m, api);
        classify_failure(&mut rec, &m, exit.as_ref(), &scan);
        rec.trace = self.observe(cell, window);
        match &m.failure {
            Some((f, _)) if cell.is_managed() => {
                let hung = matches!(f.class, ErrorClass::ReadTimeout | ErrorClass::TotalTimeout);
                if hung || exit.is_some() {
                    // A hung server cannot serve the next cell; a dead one is reaped. Either way the next cell
                    // starts fresh.
                    self.stop_current();
                    if hung {
                        rec.error = (rec.error)
                            .map(|e| format!("{e}; the server was stopped and will be restarted for the next cell"));
                    }
                }
            }
            Some(_) => {}
            None => self.after_success(&client, api, &cell.model_name, &mut rec),
        }
        Ok(Some(rec))
    }

    /// How the managed server ended, if a failed request took it down. A broken connection or an error status may
    /// be the server dying: its wait status is waited for briefly.
    fn exit_after_failure(&mut self, m: &Measurement) -> Option<ExitInfo> {
        let (f, _) = m.failure.as_ref()?;
        let r = self.current.as_mut()?;
        match f.class {
            ErrorClass::Eof
            | ErrorClass::ConnectionReset
            | ErrorClass::ConnectionRefused
            | ErrorClass::HttpStatus
            | ErrorClass::ServerError
            | ErrorClass::Protocol => r.proc.wait_exit(EXIT_AFTER_BREAK),
            _ => r.proc.try_exit(),
        }
    }

    /// Copy what the server logged during the request into the cell's directory and read it.
    fn slice_log(&self, log: &ServerLog, cell: &Cell, rec: &mut Record) -> Result<LogScan> {
        let end = settle_log(&log.path);
        let slice_rel = format!("{}/server.log", cell.dir);
        let slice_path = self.ctx.run_dir.join(&slice_rel);
        if let Some(dir) = slice_path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let scan = match &log.rel {
            Some(rel) => {
                copy_slice(&log.path, log.start, end, &slice_path)?;
                scan_log(&read_prefix(&log.path, end), rel, log.start)
            }
            None => {
                if copy_slice(&log.path, log.start, end.max(log.start), &slice_path).is_err() {
                    return Ok(LogScan::default());
                }
                // llama-server logs its devices and offload at startup, before any cell's window, so the whole log
                // is read for them, citing the external file itself. A long journal is read only in the window.
                if end <= EXTERNAL_LOG_SCAN_CAP {
                    scan_log(&read_prefix(&log.path, end), &log.path.display().to_string(), log.start)
                } else {
                    scan_log(&std::fs::read(&slice_path).unwrap_or_default(), &slice_rel, 0)
                }
            }
        };
        rec.log_slice = Some(slice_rel);
        Ok(scan)
    }

    /// `--trace`: the kernels the server's processes launched during the request's window.
    fn observe(&mut self, cell: &Cell, window: [u64; 2]) -> Option<super::record::RecordTrace> {
        match &cell.target {
            Target::Managed(_) => {
                let interval_ms = self.schedule.observer.as_ref()?.interval_ms;
                let st = self.current.as_mut()?.trace.as_mut()?;
                let run_dir = self.ctx.run_dir;
                let label = |p: &Path| p.strip_prefix(run_dir).unwrap_or(p).display().to_string();
                let mut t = tracejoin::observe(&mut st.dir, &st.rel, &label, window, interval_ms);
                t.observer_loaded = st.observer_loaded;
                Some(t)
            }
            Target::External(x) => {
                let dir = x.trace_dir.as_ref()?;
                let td = self.externals.get_mut(&x.name)?.trace.as_mut()?;
                let label = |p: &Path| p.display().to_string();
                // The external server's observer interval is read from its trace headers.
                let interval = td.interval_ms().unwrap_or(EXTERNAL_TRACE_INTERVAL_MS);
                Some(tracejoin::observe(td, &dir.display().to_string(), &label, window, interval))
            }
        }
    }

    /// What the server says about itself and the model; optional facts, failures ignored.
    fn server_info(&self, client: &E::Client, api: Api, model: &str) -> Map<String, Value> {
        let limit = self.probe_limit();
        let mut info = Map::new();
        match api {
            Api::LlamaCpp => {
                if let Ok(p) = client.get_json("/props", limit) {
                    info = api::llamacpp_props_summary(&p);
                }
            }
            Api::Ollama => {
                if let Ok(v) = client.get_json("/api/version", limit) {
                    if let Some(v) = v.get("version") {
                        info.insert("version".into(), v.clone());
                    }
                }
                if let Ok((200, body)) = client.post_json("/api/show", &serde_json::json!({"model": model}), limit) {
                    if let Ok(show) = serde_json::from_slice::<Value>(&body) {
                        info.insert("show".into(), Value::Object(api::ollama_show_summary(&show)));
                    }
                }
            }
            Api::OpenAi => {}
        }
        info
    }

    /// Send the request on a worker thread; the main thread keeps watching Ctrl-C. `None` = interrupted. With the
    /// measurement comes the request's window in CLOCK_MONOTONIC ns (just before sending, after the last byte), the
    /// clock of the dispatch observer's trace windows.
    fn send(&mut self, client: &E::Client, api: Api, cell: &Cell, pid: Option<u32>) -> Option<(Measurement, [u64; 2])> {
        enum Msg {
            FirstToken(f64),
            Done(Box<Measurement>, [u64; 2]),
        }
        let r = &self.schedule.request;
        let params = GenParams {
            model: &cell.model_name,
            prompt: &cell.prompt.text,
            num_predict: cell.num_predict,
            num_gpu: cell.num_gpu,
            temperature: r.temperature,
            seed: r.seed,
            stream: r.stream,
            options: &r.options,
            request: &r.request,
        };
        let body = api::request_body(api, &params);
        let (tx, rx) = mpsc::channel();
        let worker_client = client.clone();
        let stream = r.stream;
        std::thread::spawn(move || {
            let first = tx.clone();
            let t0 = tracejoin::monotonic_ns();
            let m = worker_client.generate(api, &body, stream, &mut |t| {
                let _ = first.send(Msg::FirstToken(t));
            });
            let t1 = tracejoin::monotonic_ns();
            let _ = tx.send(Msg::Done(Box::new(m), [t0, t1]));
        });
        let sent = tracejoin::monotonic_ns();
        // The client's own timeouts end every request; this is a backstop should a read ignore them.
        let total = client.timeouts().total;
        let backstop = Instant::now() + total + Duration::from_secs(30);
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Msg::FirstToken(t)) => {
                    self.ctx.sink.event(&Event::FirstToken { seq: cell.seq, cell_key: &cell.key, ttft_ms: t, pid })
                }
                Ok(Msg::Done(m, window)) => return Some((*m, window)),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if self.ctx.interrupt.requested() {
                        return None;
                    }
                    if Instant::now() > backstop {
                        let m = synthetic_failure(
                            ErrorClass::TotalTimeout,
                            "the request outlived its timeout; the worker was abandoned",
                            total,
                        );
                        return Some((m, [sent, tracejoin::monotonic_ns()]));
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let m = synthetic_failure(
                        ErrorClass::Protocol,
                        "the request thread ended without a result (a backscope bug; please report it)",
                        total,
                    );
                    return Some((m, [sent, tracejoin::monotonic_ns()]));
                }
            }
        }
    }

    /// Facts read after a successful request: Ollama's placement of the model (`/api/ps`), llama-server's counters.
    fn after_success(&self, client: &E::Client, api: Api, model: &str, rec: &mut Record) {
        let limit = self.probe_limit();
        match api {
            Api::Ollama => {
                if let Ok(ps) = client.get_json("/api/ps", limit) {
                    if let Some(e) = api::ollama_ps_entry(&ps, model) {
                        rec.extra.insert("ollama_ps".into(), Value::Object(e));
                    }
                }
            }
            Api::LlamaCpp if rec.managed => {
                if let Ok((200, body)) = client.get("/metrics", limit) {
                    rec.extra
                        .insert("metrics".into(), Value::Object(api::parse_metrics(&String::from_utf8_lossy(&body))));
                }
            }
            _ => {}
        }
    }
}

fn synthetic_failure(class: ErrorClass, message: &str, total: Duration) -> Measurement {
    let wall = total.as_secs_f64() * 1e3;
    Measurement {
        http_status: None,
        wall_ms: wall,
        ttft_ms: None,
        state: api::StreamState::new(Api::Ollama),
        body_bytes: 0,
        failure: Some((Failure::new(class, message), wall)),
    }
}

fn fill_measurement(rec: &mut Record, m: &Measurement, api: Api) {
    rec.http_status = m.http_status;
    rec.wall_ms = Some(m.wall_ms);
    rec.ttft_ms = m.ttft_ms;
    rec.body_bytes = m.body_bytes;
    rec.response_chars = m.state.response_chars;
    rec.server_timings = m.state.timings.clone();
    rec.prompt_count_includes_cache = api == Api::Ollama;
    rec.prompt_tps = tokens_per_second(rec.server_timings.prompt_n, rec.server_timings.prompt_ms);
    rec.decode_tps = tokens_per_second(rec.server_timings.decode_n, rec.server_timings.decode_ms);
}

/// Turn a failed measurement into the record's class, refining it with what else is known: the managed server's
/// wait status (a signal is a crash whatever the socket said), a signal named in the error body (Ollama reports its
/// runner's death as `signal: segmentation fault`), or a crash line in the server log.
fn classify_failure(rec: &mut Record, m: &Measurement, exit: Option<&ExitInfo>, scan: &LogScan) {
    let Some((f, at)) = &m.failure else {
        rec.status = Status::Ok;
        return;
    };
    rec.status = Status::Fail;
    rec.phase = Some(Phase::Request);
    rec.error_class = Some(f.class);
    rec.error = Some(f.message.clone());
    rec.ttf_ms = Some(*at);
    rec.failure_line = scan.crash.clone();
    if let Some(e) = exit {
        rec.exit_code = e.code;
        if let Some(sig) = e.signal_name() {
            rec.error_class = Some(ErrorClass::Crash);
            rec.signal = Some(sig.clone());
            rec.signal_source = Some("wait status".into());
            rec.error = Some(format!("the server was killed by {sig} during the request ({})", f.message));
        } else {
            rec.error_class = Some(ErrorClass::ServerExit);
            rec.error = Some(format!("the server {} during the request ({})", e.describe(), f.message));
        }
        return;
    }
    if let Some(sig) = api::signal_in_text(&f.message) {
        rec.error_class = Some(ErrorClass::Crash);
        rec.signal = Some(sig.to_string());
        rec.signal_source = Some("error body".into());
        return;
    }
    if let Some(line) = &scan.crash {
        if let Some(sig) = api::signal_in_text(&line.text) {
            rec.error_class = Some(ErrorClass::Crash);
            rec.signal = Some(sig.to_string());
            rec.signal_source = Some("server log".into());
        }
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Wait until a log stops growing (bounded), return its length.
fn settle_log(path: &Path) -> u64 {
    let deadline = Instant::now() + LOG_SETTLE;
    let mut last = file_len(path);
    loop {
        std::thread::sleep(Duration::from_millis(15));
        let now = file_len(path);
        if now == last || Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

fn read_prefix(path: &Path, len: u64) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(len).read_to_end(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    //! The cell loop, restart policy and failure classification against a scripted [`Executor`]: servers that
    //! serve, exit, crash or lose their port on cue, and answers that succeed, break, hang or are cut short by
    //! Ctrl-C. No process is spawned and no socket opened.

    use std::collections::VecDeque;
    use std::io;
    use std::sync::{Arc, Mutex};

    use serde_json::json;

    use super::*;
    use crate::sweep::events::Collect;
    use crate::sweep::flags::SweepFlags;
    use crate::sweep::plan::resolve;
    use crate::sweep::record::RunSource;
    use crate::sweep::spec::SpecFile;
    use crate::sweep::store::{RunRow, RunStatus};
    use crate::sweep::supervise::ProcessSpec;

    /// How the next spawned server behaves.
    enum Spawn {
        /// The program cannot be started.
        Fails(io::ErrorKind),
        /// It writes this to its log and exits before it is ready.
        Exits { log: &'static str, code: Option<i32>, signal: Option<i32> },
        /// It becomes ready and serves.
        Serves,
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
            };
            std::fs::write(log, text)?;
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
            match reply {
                Reply::Ok => {
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
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("db")).unwrap();
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
            })
            .unwrap();
        for &i in recorded_before {
            let c = &schedule.cells[i];
            let file = format!("{}/result.json", c.dir);
            let rec = Record { run_id: "r".into(), cell_key: c.key.clone(), seq: c.seq, file, ..Default::default() };
            commit_record(&mut store, dir.path(), &rec).unwrap();
        }
        let mut events = Collect::default();
        let end = {
            let mut ctx = RunContext {
                run_id: "r",
                run_dir: dir.path(),
                store: &mut store,
                sink: &mut events,
                interrupt: exec.interrupt.clone(),
            };
            execute(&mut ctx, schedule, exec).unwrap()
        };
        let records = store.records("r").unwrap();
        Outcome { end, records, events: events.0, _dir: dir }
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
        assert!(r
            .error
            .as_deref()
            .unwrap()
            .ends_with("; the server was stopped and will be restarted for the next cell"));
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
}
