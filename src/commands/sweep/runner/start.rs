//! Starting the managed server a cell needs: a port (fixed, or a free one, retried when another process takes it
//! first), the trace directory with `--trace`, the spawn, the wait until it is ready — and, when it does not come
//! up, a [`StartFailure`] (`start_failure`) that becomes the cell's record, announced to the sinks by one [`Runner::fail`].

use std::time::{Duration, Instant};

use super::start_failure::{StartError, StartFailure};
use super::{Runner, Running, ServerTrace};
use crate::commands::sweep::cells::ManagedServer;
use crate::commands::sweep::events::Event;
use crate::commands::sweep::executor::{Executor, Server};
use crate::commands::sweep::http::Client;
use crate::commands::sweep::logs::{LogReader, LogScan};
use crate::commands::sweep::supervise::ExitInfo;
use crate::commands::sweep::tracejoin::{self, TraceDir};
use crate::run::format::record::{ErrorClass, ServerRef};
use crate::run::format::run_dir::RunDir;

/// Readiness polling interval.
const READY_POLL: Duration = Duration::from_millis(50);
/// Attempts at a free port when another process grabs it between our choice and the server's bind.
const PORT_ATTEMPTS: u32 = 3;

enum Ready {
    Yes,
    Exited(ExitInfo),
    TimedOut,
    Interrupted,
}

/// One attempt at starting a server.
enum Attempt<E: Executor> {
    Up(Box<Running<E>>),
    /// Another process bound the port first (the message says so); a new port may work.
    PortLost(String, StartFailure),
}

impl<E: Executor> Runner<'_, '_, E> {
    /// Start the server a cell needs, retrying with a new port when another process takes the chosen one first.
    pub(super) fn start_server(&mut self, s: &ManagedServer, model_name: &str) -> Result<Running<E>, StartError> {
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
        let log_rel = RunDir::server_log(self.server_logs, &s.file_stem);
        let log_path = self.ctx.run_dir.join(&log_rel);
        // --trace: the observer goes into the server (and whatever it starts) with a trace directory of this
        // start's own, named like its log.
        let mut trace = None;
        if let Some(observer) = &self.schedule.observer {
            let rel = RunDir::trace_dir(self.server_logs, &s.file_stem);
            let dir = self.ctx.run_dir.join(&rel);
            if let Err(e) = std::fs::create_dir_all(&dir) {
                let message = format!("cannot create the trace directory {}: {e}", dir.display());
                return Err(StartFailure::before_start(ErrorClass::SpawnFailed, message).into());
            }
            let inherited = std::env::var("LD_PRELOAD").ok();
            tracejoin::server_env(&mut ps.env, &observer.library, &dir, observer.interval_ms, inherited);
            if let Some(manifest) = &observer.vulkan_manifest {
                tracejoin::vulkan_server_env(&mut ps.env, manifest, |k| std::env::var(k).ok());
            }
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
        // The log so far, for a start failure's message; the reader then follows the log through the server's cells.
        let reader = self.logs.entry(log_path.clone()).or_insert_with(|| LogReader::new(&log_path, &log_rel));
        let scan = reader.advance(u64::MAX, 0, None).unwrap_or_else(|_| LogScan::default());
        if !matches!(outcome, Ready::Yes) {
            self.logs.remove(&log_path);
        }
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
}
