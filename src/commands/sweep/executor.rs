//! The runner's seam to the machine, as hyperfine's `Executor`: where servers are spawned, ports found and HTTP
//! clients made. [`Machine`] is the real one — supervised child processes ([`Supervised`]) and TCP ([`HttpClient`]);
//! the runner's unit tests script their own, so the cell loop, the restart policy and the failure classification
//! are tested without processes or sockets. Real servers are tested through the binary (tests/sweep_*.rs).

use std::io;
use std::path::Path;
use std::time::Duration;

use super::http::{Client, HttpClient, Timeouts};
use super::supervise::{self, ExitInfo, Ledger, ProcessSpec, Supervised};

pub trait Executor {
    type Server: Server;
    type Client: Client;

    /// A free loopback port. Another process can take it before the server binds it; the runner retries.
    fn free_port(&mut self) -> io::Result<u16>;

    /// Whether something already listens on 127.0.0.1:`port`.
    fn port_taken(&mut self, port: u16) -> bool;

    /// Start a server with its stdout and stderr appended to `log` (created if missing).
    fn spawn(&mut self, process: &ProcessSpec, log: &Path) -> io::Result<Self::Server>;

    fn client(&mut self, base_url: &str, timeouts: Timeouts) -> Self::Client;
}

/// A started server process.
pub trait Server {
    fn pid(&self) -> u32;

    /// Time since it was spawned.
    fn age(&self) -> Duration;

    /// The exit, if it has ended.
    fn try_exit(&mut self) -> Option<ExitInfo>;

    /// Wait up to `limit` for it to end on its own.
    fn wait_exit(&mut self, limit: Duration) -> Option<ExitInfo>;

    /// Stop it (politely, then not) and say how it ended. Idempotent.
    fn stop(&mut self, grace: Duration) -> ExitInfo;

    fn is_running(&mut self) -> bool {
        self.try_exit().is_none()
    }
}

/// This machine: child processes in their own process groups, recorded in the run's ledger while they run; TCP
/// on loopback.
#[derive(Debug)]
pub struct Machine {
    pub ledger: Ledger,
}

impl Executor for Machine {
    type Server = Supervised;
    type Client = HttpClient;

    fn free_port(&mut self) -> io::Result<u16> {
        supervise::free_port()
    }

    fn port_taken(&mut self, port: u16) -> bool {
        supervise::port_taken(port)
    }

    fn spawn(&mut self, process: &ProcessSpec, log: &Path) -> io::Result<Supervised> {
        Supervised::spawn(process, log, Some(&self.ledger))
    }

    fn client(&mut self, base_url: &str, timeouts: Timeouts) -> HttpClient {
        HttpClient::new(base_url, timeouts)
    }
}

impl Server for Supervised {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn age(&self) -> Duration {
        self.spawned.elapsed()
    }

    fn try_exit(&mut self) -> Option<ExitInfo> {
        Supervised::try_exit(self)
    }

    fn wait_exit(&mut self, limit: Duration) -> Option<ExitInfo> {
        Supervised::wait_exit(self, limit)
    }

    fn stop(&mut self, grace: Duration) -> ExitInfo {
        Supervised::stop(self, grace)
    }
}
