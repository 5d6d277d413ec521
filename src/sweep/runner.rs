//! The sweep loop: for each cell of the plan not yet recorded, make sure its server is running (starting,
//! restarting or replacing managed servers), send the request from a worker thread while the main thread watches
//! for Ctrl-C, classify the outcome, slice the server log, and commit the record before the next cell starts.
//!
//! Nothing a server does ends the sweep: a crash, an exit, a hang, a port conflict or garbage on the wire becomes a
//! record with its class and time to failure, and the next cell gets a fresh server when it needs one. Only
//! backscope's own I/O errors (database, run directory) and Ctrl-C stop it.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Map, Value};

use super::api::{self, GenParams};
use super::events::{Event, Sink};
use super::http::{detect_api, Failure, HttpClient, Measurement, Timeouts};
use super::logs::{scan_log, LogScan};
use super::record::{tokens_per_second, Api, ErrorClass, Phase, Record, ServerRef, Status, RECORD_SCHEMA};
use super::spec::{Cell, Endpoint, EndpointKind, Plan, Preset};
use super::store::{commit_record, utc_now, Store};
use super::supervise::{copy_slice, free_port, port_taken, ExitInfo, Interrupt, Supervised};
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

pub enum RunEnd {
    Finished,
    Interrupted,
}

pub struct RunContext<'a> {
    pub plan: &'a Plan,
    pub run_id: &'a str,
    pub run_dir: &'a Path,
    pub store: &'a mut Store,
    pub sink: &'a mut dyn Sink,
    pub interrupt: Interrupt,
}

/// A managed server that is up.
struct Running {
    key: String,
    proc: Supervised,
    client: HttpClient,
    api: Api,
    server: ServerRef,
    info: Map<String, Value>,
    trace: Option<ServerTrace>,
}

/// `--trace` state of a managed server: its trace directory (relative to the run directory and read as it grows)
/// and whether the observer was mapped into it.
struct ServerTrace {
    rel: String,
    dir: TraceDir,
    observer_loaded: Option<bool>,
}

/// What the sweep knows about an external endpoint.
struct External {
    client: HttpClient,
    api: Option<Api>,
    info: Option<Map<String, Value>>,
}

enum Ready {
    Yes,
    Exited(ExitInfo),
    TimedOut,
}

/// Why a managed server did not come up; becomes the record of the cell that needed it.
struct StartFailure {
    class: ErrorClass,
    message: String,
    ttf_ms: f64,
    exit: Option<ExitInfo>,
    server: Option<ServerRef>,
    line: Option<super::record::LogRef>,
}

enum StartError {
    Failed(Box<StartFailure>),
    Interrupted,
}

fn start_failed(
    class: ErrorClass,
    message: String,
    ttf_ms: f64,
    exit: Option<ExitInfo>,
    server: Option<ServerRef>,
    line: Option<super::record::LogRef>,
) -> StartError {
    StartError::Failed(Box::new(StartFailure { class, message, ttf_ms, exit, server, line }))
}

struct Runner<'a, 'b> {
    ctx: &'b mut RunContext<'a>,
    current: Option<Running>,
    externals: HashMap<usize, External>,
    starts: HashMap<String, u32>,
    server_logs: u32,
    /// `--trace` directories of external endpoints, by endpoint index.
    ext_traces: HashMap<usize, TraceDir>,
}

fn client_timeouts(plan: &Plan) -> Timeouts {
    Timeouts {
        connect: Duration::from_secs_f64(plan.timeouts.connect_s),
        read: Duration::from_secs_f64(plan.timeouts.read_s),
        total: Duration::from_secs_f64(plan.timeouts.request_s),
    }
}

fn probe_limit(plan: &Plan) -> Duration {
    Duration::from_secs_f64(plan.timeouts.connect_s + 10.0)
}

pub fn execute(ctx: &mut RunContext<'_>) -> Result<RunEnd> {
    let done: HashSet<String> = ctx.store.completed_keys(ctx.run_id)?;
    let servers_dir = ctx.run_dir.join("servers");
    std::fs::create_dir_all(&servers_dir)?;
    // On resume, new server logs continue the numbering instead of overwriting the earlier ones.
    let server_logs = std::fs::read_dir(&servers_dir)?.count() as u32;
    let mut runner = Runner {
        ctx,
        current: None,
        externals: HashMap::new(),
        starts: HashMap::new(),
        server_logs,
        ext_traces: HashMap::new(),
    };
    let cells = runner.ctx.plan.cells();
    let mut end = RunEnd::Finished;
    for cell in cells {
        let key = runner.ctx.plan.cell_key(&cell);
        if done.contains(&key) {
            continue;
        }
        if runner.ctx.interrupt.requested() {
            end = RunEnd::Interrupted;
            break;
        }
        let pid = runner.current.as_ref().map(|r| r.server.pid);
        runner.ctx.sink.event(&Event::CellStarted { seq: cell.seq, cell_key: &key, pid });
        match runner.run_cell(&cell, &key)? {
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

impl Runner<'_, '_> {
    fn plan(&self) -> &Plan {
        self.ctx.plan
    }

    fn stop_current(&mut self) {
        if let Some(mut r) = self.current.take() {
            let exit = r.proc.stop(Duration::from_secs_f64(self.ctx.plan.timeouts.grace_s));
            self.ctx.sink.event(&Event::ServerStopped {
                endpoint: endpoint_of(&r.key),
                pid: r.server.pid,
                how: &exit.describe(),
            });
        }
    }

    fn base_record(&self, cell: &Cell, key: &str) -> Record {
        let plan = self.plan();
        let ep = &plan.endpoints[cell.endpoint];
        Record {
            schema: RECORD_SCHEMA,
            run_id: self.ctx.run_id.to_string(),
            cell_key: key.to_string(),
            seq: cell.seq,
            source: "sweep".into(),
            file: format!("{}/result.json", plan.cell_dir(cell)),
            endpoint: ep.name.clone(),
            api: ep.api(),
            managed: ep.is_managed(),
            model: plan.models[cell.model].label.clone(),
            num_gpu: cell.num_gpu,
            prompt: plan.prompts[cell.prompt].name.clone(),
            num_predict: cell.num_predict,
            epoch: cell.epoch,
            repetition: cell.repetition,
            stream: plan.stream,
            started_at: utc_now(),
            status: Status::Ok,
            ..Default::default()
        }
    }

    /// `None` when Ctrl-C interrupted the cell (it stays unrecorded and runs again on `--resume`).
    fn run_cell(&mut self, cell: &Cell, key: &str) -> Result<Option<Record>> {
        let plan = self.ctx.plan;
        let ep = &plan.endpoints[cell.endpoint];
        let mut rec = self.base_record(cell, key);
        if ep.is_managed() {
            let model = &plan.models[cell.model];
            let skey = ep.server_key(model, cell.num_gpu);
            let alive = self.current.as_mut().is_some_and(|r| r.key == skey && r.proc.is_running());
            if !alive {
                self.stop_current();
                match self.start_server(ep, cell, &skey) {
                    Ok(r) => self.current = Some(r),
                    Err(StartError::Interrupted) => return Ok(None),
                    Err(StartError::Failed(f)) => {
                        let StartFailure { class, message, ttf_ms, exit, server, line } = *f;
                        rec.status = Status::Fail;
                        rec.phase = Some(Phase::Start);
                        rec.error_class = Some(class);
                        rec.error = Some(message);
                        rec.ttf_ms = Some(ttf_ms);
                        if let Some(e) = &exit {
                            rec.exit_code = e.code;
                            rec.signal = e.signal_name();
                            rec.signal_source = e.signal.map(|_| "wait status".to_string());
                        }
                        rec.log_slice = server.as_ref().map(|s| s.log.clone());
                        rec.server = server;
                        rec.failure_line = line;
                        return Ok(Some(rec));
                    }
                }
            }
            return self.request_managed(cell, rec);
        }
        self.request_external(cell, rec)
    }

    fn start_server(&mut self, ep: &Endpoint, cell: &Cell, skey: &str) -> Result<Running, StartError> {
        let plan = self.ctx.plan;
        let EndpointKind::Managed { preset, api, port: fixed_port, ready_timeout_s, program, .. } = &ep.kind else {
            unreachable!("start_server is only called for managed endpoints")
        };
        let model = &plan.models[cell.model];
        let mut last_err = None;
        for attempt in 1..=PORT_ATTEMPTS {
            let port = match fixed_port {
                Some(p) => {
                    if port_taken(*p) {
                        return Err(start_failed(ErrorClass::PortInUse, format!("127.0.0.1:{p} is already in use by another process; stop it or drop the fixed `port` of `{}`", ep.name), 0.0, None, None, None));
                    }
                    *p
                }
                None => match free_port() {
                    Ok(p) => p,
                    Err(e) => {
                        return Err(start_failed(
                            ErrorClass::PortInUse,
                            format!("no free port on 127.0.0.1: {e}"),
                            0.0,
                            None,
                            None,
                            None,
                        ))
                    }
                },
            };
            let Some(mut ps) = ep.server_process(model, cell.num_gpu, port) else {
                unreachable!("managed endpoint has a process")
            };
            self.server_logs += 1;
            let log_rel = format!("servers/s{:03}-{}.log", self.server_logs, super::spec::sanitize(&ep.name));
            let log_path = self.ctx.run_dir.join(&log_rel);
            // --trace: the observer goes into the server (and whatever it starts) with a trace directory of this
            // start's own, named like its log.
            let mut trace = None;
            if let Some(super::spec::TracePlan { observer: Some(observer), interval_ms, .. }) = &plan.trace {
                let rel = format!("traces/s{:03}-{}", self.server_logs, super::spec::sanitize(&ep.name));
                let dir = self.ctx.run_dir.join(&rel);
                if let Err(e) = std::fs::create_dir_all(&dir) {
                    let message = format!("cannot create the trace directory {}: {e}", dir.display());
                    return Err(start_failed(ErrorClass::SpawnFailed, message, 0.0, None, None, None));
                }
                let inherited = std::env::var("LD_PRELOAD").ok();
                tracejoin::server_env(&mut ps.env, observer, &dir, *interval_ms, inherited);
                trace = Some((rel, dir, observer.clone()));
            }
            let argv = ps.argv();
            self.ctx.sink.event(&Event::ServerStarting { endpoint: &ep.name, argv: &argv, port, log: &log_rel });
            let start_no = {
                let n = self.starts.entry(ep.name.clone()).or_insert(0);
                *n += 1;
                *n
            };
            let mut proc = match Supervised::spawn(&ps, &log_path) {
                Ok(p) => p,
                Err(e) => {
                    let hint = if e.kind() == std::io::ErrorKind::NotFound {
                        match preset {
                            Preset::LlamaServer => " (not found: pass --llama-bin DIR with the llama.cpp build's bin directory, or --program NAME=PATH)",
                            _ => " (not found: pass --program NAME=PATH)",
                        }
                    } else {
                        ""
                    };
                    let message = format!("cannot start {}: {e}{hint}", program.display());
                    self.ctx.sink.event(&Event::ServerFailed {
                        endpoint: &ep.name,
                        pid: None,
                        class: ErrorClass::SpawnFailed.as_str(),
                        message: &message,
                    });
                    return Err(start_failed(ErrorClass::SpawnFailed, message, 0.0, None, None, None));
                }
            };
            let server = ServerRef { pid: proc.pid, port, argv: argv.clone(), log: log_rel.clone(), start_no };
            let client = HttpClient::new(&format!("http://127.0.0.1:{port}"), client_timeouts(plan));
            let ready_path = match api {
                Api::Ollama => "/api/version",
                Api::LlamaCpp => "/health",
                Api::OpenAi => "/v1/models",
            };
            let deadline = Instant::now() + Duration::from_secs_f64(*ready_timeout_s);
            let outcome = loop {
                if self.ctx.interrupt.requested() {
                    proc.stop(Duration::from_secs_f64(plan.timeouts.grace_s));
                    return Err(StartError::Interrupted);
                }
                if let Some(exit) = proc.try_exit() {
                    break Ready::Exited(exit);
                }
                if let Ok((200, _)) = client.get(ready_path, Duration::from_secs(2)) {
                    // The answer must come from our child, not from a process that holds the port.
                    if proc.is_running() {
                        break Ready::Yes;
                    }
                }
                if Instant::now() >= deadline {
                    break Ready::TimedOut;
                }
                std::thread::sleep(READY_POLL);
            };
            let log_bytes = std::fs::read(&log_path).unwrap_or_default();
            let scan = scan_log(&log_bytes, &log_rel, 0);
            match outcome {
                Ready::Yes => {
                    let after_ms = proc.spawned.elapsed().as_secs_f64() * 1e3;
                    self.ctx.sink.event(&Event::ServerReady { endpoint: &ep.name, pid: proc.pid, port, after_ms });
                    let info = self.server_info(&client, *api, ep.model_name(model));
                    let trace = trace.map(|(rel, dir, observer)| ServerTrace {
                        rel,
                        dir: TraceDir::new(dir),
                        observer_loaded: tracejoin::observer_mapped(proc.pid, &observer),
                    });
                    return Ok(Running { key: skey.to_string(), proc, client, api: *api, server, info, trace });
                }
                Ready::TimedOut => {
                    // Never answered in time: stop it (it may be stuck loading) and say where it got to.
                    let waited = proc.spawned.elapsed().as_secs_f64() * 1e3;
                    proc.stop(Duration::from_secs_f64(plan.timeouts.grace_s));
                    let last = scan
                        .tail
                        .last()
                        .map(|l| format!("; last log line: {l}"))
                        .unwrap_or_else(|| "; the log is empty".into());
                    let message = format!("no HTTP 200 from GET {ready_path} within {ready_timeout_s} s{last}");
                    self.ctx.sink.event(&Event::ServerFailed {
                        endpoint: &ep.name,
                        pid: Some(server.pid),
                        class: ErrorClass::NotReady.as_str(),
                        message: &message,
                    });
                    return Err(start_failed(ErrorClass::NotReady, message, waited, None, Some(server), None));
                }
                Ready::Exited(exit) => {
                    if let Some(bind) = scan.bind_error.clone() {
                        let msg = format!("port {port} was taken before the server could bind it: {}", bind.text);
                        if fixed_port.is_none() && attempt < PORT_ATTEMPTS {
                            last_err = Some(msg);
                            continue;
                        }
                        self.ctx.sink.event(&Event::ServerFailed {
                            endpoint: &ep.name,
                            pid: Some(server.pid),
                            class: ErrorClass::PortInUse.as_str(),
                            message: &msg,
                        });
                        return Err(start_failed(
                            ErrorClass::PortInUse,
                            msg,
                            exit.after_ms,
                            Some(exit),
                            Some(server),
                            Some(bind),
                        ));
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
                    self.ctx.sink.event(&Event::ServerFailed {
                        endpoint: &ep.name,
                        pid: Some(server.pid),
                        class: class.as_str(),
                        message: &message,
                    });
                    return Err(start_failed(class, message, exit.after_ms, Some(exit), Some(server), line));
                }
            }
        }
        Err(start_failed(
            ErrorClass::PortInUse,
            last_err.unwrap_or_else(|| "no port could be bound".into()),
            0.0,
            None,
            None,
            None,
        ))
    }

    /// What the server says about itself and the model; optional facts, failures ignored.
    fn server_info(&self, client: &HttpClient, api: Api, model: &str) -> Map<String, Value> {
        let limit = probe_limit(self.plan());
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

    fn gen_params<'p>(&self, plan: &'p Plan, cell: &Cell, model_name: &'p str) -> GenParams<'p> {
        GenParams {
            model: model_name,
            prompt: &plan.prompts[cell.prompt].text,
            num_predict: cell.num_predict,
            num_gpu: cell.num_gpu,
            temperature: plan.temperature,
            seed: plan.seed,
            stream: plan.stream,
            options: &plan.options,
            request: &plan.request,
        }
    }

    /// Send the request on a worker thread; the main thread keeps watching Ctrl-C. `None` = interrupted. With the
    /// measurement comes the request's window in CLOCK_MONOTONIC ns (just before sending, after the last byte), the
    /// clock of the dispatch observer's trace windows.
    fn send(
        &mut self,
        client: &HttpClient,
        api: Api,
        body: Value,
        cell: &Cell,
        key: &str,
        pid: Option<u32>,
    ) -> Option<(Measurement, [u64; 2])> {
        enum Msg {
            FirstToken(f64),
            Done(Box<Measurement>, [u64; 2]),
        }
        let (tx, rx) = mpsc::channel();
        let worker_client = client.clone();
        let stream = self.plan().stream;
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
        let backstop = Instant::now() + client.timeouts.total + Duration::from_secs(30);
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Msg::FirstToken(t)) => {
                    self.ctx.sink.event(&Event::FirstToken { seq: cell.seq, cell_key: key, ttft_ms: t, pid })
                }
                Ok(Msg::Done(m, window)) => return Some((*m, window)),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if self.ctx.interrupt.requested() {
                        return None;
                    }
                    if Instant::now() > backstop {
                        return Some((
                            synthetic_failure(
                                ErrorClass::TotalTimeout,
                                "the request outlived its timeout; the worker was abandoned",
                                client,
                            ),
                            [sent, tracejoin::monotonic_ns()],
                        ));
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Some((
                        synthetic_failure(
                            ErrorClass::Protocol,
                            "the request thread ended without a result (a backscope bug; please report it)",
                            client,
                        ),
                        [sent, tracejoin::monotonic_ns()],
                    ));
                }
            }
        }
    }

    fn request_managed(&mut self, cell: &Cell, mut rec: Record) -> Result<Option<Record>> {
        let plan = self.ctx.plan;
        let ep = &plan.endpoints[cell.endpoint];
        let Some(running) = self.current.as_ref() else { unreachable!("a managed cell runs with its server up") };
        let (client, api, pid) = (running.client.clone(), running.api, running.server.pid);
        let model_name = ep.model_name(&plan.models[cell.model]).to_string();
        let body = api::request_body(api, &self.gen_params(plan, cell, &model_name));
        let log_path = running.proc.log_path.clone();
        let log_rel = running.server.log.clone();
        rec.server = Some(running.server.clone());
        rec.api = Some(api);
        rec.extra.insert("server_info".into(), Value::Object(running.info.clone()));
        let log_start = running.proc.log_len();
        rec.started_at = utc_now();
        let Some((m, window)) = self.send(&client, api, body, cell, &rec.cell_key.clone(), Some(pid)) else {
            self.stop_current();
            return Ok(None);
        };
        let mut exit = None;
        if let Some((f, _)) = &m.failure {
            if let Some(r) = self.current.as_mut() {
                exit = match f.class {
                    // A broken connection or an error status may be the server dying: wait for its exit status.
                    ErrorClass::Eof
                    | ErrorClass::ConnectionReset
                    | ErrorClass::ConnectionRefused
                    | ErrorClass::HttpStatus
                    | ErrorClass::ServerError
                    | ErrorClass::Protocol => r.proc.wait_exit(EXIT_AFTER_BREAK),
                    _ => r.proc.try_exit(),
                };
            }
        }
        let log_end = settle_log(&log_path);
        let scan = {
            let bytes = read_prefix(&log_path, log_end);
            scan_log(&bytes, &log_rel, log_start)
        };
        let slice_rel = format!("{}/server.log", plan.cell_dir(cell));
        let slice_path = self.ctx.run_dir.join(&slice_rel);
        if let Some(dir) = slice_path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        copy_slice(&log_path, log_start, log_end, &slice_path)?;
        rec.log_slice = Some(slice_rel);
        rec.backend = scan.backend.clone();
        fill_measurement(&mut rec, &m, api);
        classify_failure(&mut rec, &m, exit.as_ref(), &scan);
        if let (Some(tp), Some(st)) = (&plan.trace, self.current.as_mut().and_then(|r| r.trace.as_mut())) {
            let run_dir = self.ctx.run_dir;
            let label = |p: &Path| p.strip_prefix(run_dir).unwrap_or(p).display().to_string();
            let mut t = tracejoin::observe(&mut st.dir, &st.rel, &label, window, tp.interval_ms);
            t.observer_loaded = st.observer_loaded;
            rec.trace = Some(t);
        }
        if let Some((f, _)) = &m.failure {
            let hung = matches!(f.class, ErrorClass::ReadTimeout | ErrorClass::TotalTimeout);
            if hung || exit.is_some() {
                // A hung server cannot serve the next cell; a dead one is reaped. Either way the next cell starts fresh.
                self.stop_current();
                if hung {
                    rec.error = rec
                        .error
                        .map(|e| format!("{e}; the server was stopped and will be restarted for the next cell"));
                }
            }
        } else if let Some(r) = self.current.as_ref() {
            let (client, api, model) = (r.client.clone(), r.api, model_name.clone());
            self.after_success(&client, api, &model, &mut rec);
        }
        Ok(Some(rec))
    }

    fn request_external(&mut self, cell: &Cell, mut rec: Record) -> Result<Option<Record>> {
        let plan = self.ctx.plan;
        let ep = &plan.endpoints[cell.endpoint];
        let EndpointKind::External { url, api: planned_api, log_file } = &ep.kind else {
            unreachable!("external endpoint")
        };
        let started = Instant::now();
        let ext = self.externals.entry(cell.endpoint).or_insert_with(|| External {
            client: HttpClient::new(url, client_timeouts(plan)),
            api: *planned_api,
            info: None,
        });
        if ext.api.is_none() {
            match detect_api(&ext.client, probe_limit(plan)) {
                Ok((api, info)) => {
                    ext.api = Some(api);
                    ext.info = Some(info);
                }
                Err(f) => {
                    rec.status = Status::Fail;
                    rec.phase = Some(Phase::Request);
                    rec.error_class = Some(f.class);
                    rec.error = Some(f.message);
                    rec.ttf_ms = Some(started.elapsed().as_secs_f64() * 1e3);
                    return Ok(Some(rec));
                }
            }
        }
        let (client, mut api) = (ext.client.clone(), ext.api.unwrap_or(Api::Ollama));
        let model_name = ep.model_name(&plan.models[cell.model]).to_string();
        if self.externals[&cell.endpoint].info.is_none() {
            let info = self.server_info(&client, api, &model_name);
            if let Some(e) = self.externals.get_mut(&cell.endpoint) {
                e.info = Some(info);
            }
        }
        if api != Api::Ollama && cell.num_gpu == -1 && plan.num_gpu.iter().any(|&n| n != -1) {
            rec.extra.insert(
                "note".into(),
                "num_gpu cannot be set on an external llama-server; it ran with the -ngl it was started with".into(),
            );
        }
        rec.extra.insert(
            "server_info".into(),
            Value::Object(self.externals[&cell.endpoint].info.clone().unwrap_or_default()),
        );
        let log_start = log_file.as_ref().map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0));
        rec.started_at = utc_now();
        let mut body = api::request_body(api, &self.gen_params(plan, cell, &model_name));
        let key = rec.cell_key.clone();
        let Some((mut m, mut window)) = self.send(&client, api, body, cell, &key, None) else { return Ok(None) };
        if api == Api::LlamaCpp && m.http_status == Some(404) {
            // Not llama-server's native route: fall back to the OpenAI-compatible one, for good.
            api = Api::OpenAi;
            if let Some(e) = self.externals.get_mut(&cell.endpoint) {
                e.api = Some(api);
            }
            body = api::request_body(api, &self.gen_params(plan, cell, &model_name));
            let Some((m2, w2)) = self.send(&client, api, body, cell, &key, None) else { return Ok(None) };
            m = m2;
            window = w2;
        }
        rec.api = Some(api);
        let mut scan = LogScan::default();
        if let (Some(path), Some(start)) = (log_file, log_start) {
            let end = settle_log(path);
            let slice_rel = format!("{}/server.log", plan.cell_dir(cell));
            let slice_path = self.ctx.run_dir.join(&slice_rel);
            if let Some(dir) = slice_path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            if copy_slice(path, start, end.max(start), &slice_path).is_ok() {
                // llama-server logs its devices and offload at startup, before any cell's window, so the whole log
                // is read for them, citing the external file itself. A long journal is read only in the window.
                scan = if end <= EXTERNAL_LOG_SCAN_CAP {
                    scan_log(&read_prefix(path, end), &path.display().to_string(), start)
                } else {
                    scan_log(&std::fs::read(&slice_path).unwrap_or_default(), &slice_rel, 0)
                };
                rec.log_slice = Some(slice_rel);
            }
        }
        rec.backend = scan.backend.clone();
        fill_measurement(&mut rec, &m, api);
        classify_failure(&mut rec, &m, None, &scan);
        if let Some(dir) = plan.trace.as_ref().and_then(|tp| tp.dirs.get(&ep.name)) {
            let td = self.ext_traces.entry(cell.endpoint).or_insert_with(|| TraceDir::new(dir.clone()));
            let label = |p: &Path| p.display().to_string();
            // The external server's observer interval is read from its trace headers (50 ms unless it was told).
            let interval = td.interval_ms().unwrap_or(50);
            rec.trace = Some(tracejoin::observe(td, &dir.display().to_string(), &label, window, interval));
        }
        if m.failure.is_none() {
            self.after_success(&client, api, &model_name, &mut rec);
        }
        Ok(Some(rec))
    }

    /// Facts read after a successful request: Ollama's placement of the model (`/api/ps`), llama-server's counters.
    fn after_success(&self, client: &HttpClient, api: Api, model: &str, rec: &mut Record) {
        let limit = probe_limit(self.plan());
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

fn endpoint_of(server_key: &str) -> &str {
    server_key.split('|').next().unwrap_or(server_key)
}

fn synthetic_failure(class: ErrorClass, message: &str, client: &HttpClient) -> Measurement {
    let wall = client.timeouts.total.as_secs_f64() * 1e3;
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

/// Wait until a log stops growing (bounded), return its length.
fn settle_log(path: &Path) -> u64 {
    let len = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let deadline = Instant::now() + LOG_SETTLE;
    let mut last = len();
    loop {
        std::thread::sleep(Duration::from_millis(15));
        let now = len();
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
