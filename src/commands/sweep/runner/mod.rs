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

mod classify;
mod observe;
mod start;
mod start_failure;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Map, Value};

use super::api::{self, GenParams};
use super::cells::{Cell, ExternalEndpoint, Schedule, Target};
use super::events::{Event, Sink};
use super::executor::{Executor, Server};
use super::http::{detect_api, Client, Failure, Measurement, Timeouts};
use super::logs::{LogReader, LogScan};
use super::presets::ServerKey;
use super::supervise::{ExitInfo, Interrupt};
use super::tracejoin::{self, TraceDir};
use crate::run::format::ids::utc_now;
use crate::run::format::record::{Api, ErrorClass, Phase, Record, RunSource, ServerRef, Status, RECORD_SCHEMA};
use crate::run::format::run_dir::RunDir;
use crate::run::write::store::{commit_record, Store};
use classify::{classify_failure, fill_measurement, synthetic_failure};
use start_failure::StartError;

/// How long to wait for a managed server's wait status after its connection broke: the kernel closes a dying
/// process's sockets before the parent can reap it, usually within milliseconds.
const EXIT_AFTER_BREAK: Duration = Duration::from_secs(3);

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
    let run_dir = RunDir::new(ctx.run_dir);
    let servers_dir = run_dir.servers_dir();
    std::fs::create_dir_all(&servers_dir)?;
    // On resume, new server logs continue the numbering instead of overwriting the earlier ones.
    let server_logs = std::fs::read_dir(&servers_dir)?.count() as u32;
    // `--trace`: the kernel's GPU-driver lines while the sweep runs, joined to each request's record.
    let traced = schedule.observer.is_some()
        || schedule.cells.iter().any(|c| matches!(&c.target, Target::External(x) if x.trace_dir.is_some()));
    let kernel = traced.then(|| {
        let capture =
            crate::observe::kernel_log::capture::Capture::start(&run_dir.kernel_log_path(), RunDir::KERNEL_LOG);
        if let Some(why) = capture.unreadable() {
            crate::output::messages::note(format_args!(
                "the kernel's GPU-driver lines are not joined to the records: {why}"
            ));
        }
        capture
    });
    let mut runner = Runner {
        ctx,
        schedule,
        exec,
        current: None,
        externals: HashMap::new(),
        starts: HashMap::new(),
        server_logs,
        logs: HashMap::new(),
        kernel,
    };
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
    if let Some(k) = runner.kernel.take() {
        k.finish();
    }
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
    /// The server logs being read, by path: each cell reads only what was appended since the previous one.
    logs: HashMap<PathBuf, LogReader>,
    /// `--trace`: the kernel log capture (`kernel-log.jsonl` in the run directory).
    kernel: Option<crate::observe::kernel_log::capture::Capture>,
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
        self.logs.remove(&r.log_path);
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
            file: RunDir::result_file(&cell.dir),
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

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}
