//! Why a managed server did not come up ([`StartFailure`], which becomes the record of the cell that needed it), and
//! how starting ends when it does not ([`StartError`]). `start` makes them, the runner (`mod.rs`) records them; kept
//! apart so that the runner never reaches into `start`, which extends the runner.

use crate::commands::sweep::supervise::ExitInfo;
use crate::run::format::record::{ErrorClass, LogRef, Phase, Record, ServerRef, Status};

/// Why a managed server did not come up; becomes the record of the cell that needed it.
pub(super) struct StartFailure {
    pub(super) class: ErrorClass,
    pub(super) message: String,
    pub(super) ttf_ms: f64,
    pub(super) exit: Option<ExitInfo>,
    pub(super) server: Option<ServerRef>,
    pub(super) line: Option<LogRef>,
}

impl StartFailure {
    /// A failure before any process ran (no port, no trace directory, no program).
    pub(super) fn before_start(class: ErrorClass, message: String) -> Self {
        StartFailure { class, message, ttf_ms: 0.0, exit: None, server: None, line: None }
    }

    pub(super) fn into_record(self, mut rec: Record) -> Record {
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

pub(super) enum StartError {
    Failed(Box<StartFailure>),
    /// Ctrl-C while the server was starting; it was stopped.
    Interrupted,
}

impl From<StartFailure> for StartError {
    fn from(f: StartFailure) -> Self {
        StartError::Failed(Box::new(f))
    }
}
