//! What a request's outcome means: the measurement into the record, and a failure's class refined by what else is
//! known (how the server ended, a signal named in the error body or the server log).

use std::time::Duration;

use crate::commands::sweep::api;
use crate::commands::sweep::http::{Failure, Measurement};
use crate::commands::sweep::logs::LogScan;
use crate::commands::sweep::supervise::ExitInfo;
use crate::run::format::record::{tokens_per_second, Api, ErrorClass, Phase, Record, Status};

/// A failure the client never reported (the worker thread was abandoned or died).
pub(super) fn synthetic_failure(class: ErrorClass, message: &str, total: Duration) -> Measurement {
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

pub(super) fn fill_measurement(rec: &mut Record, m: &Measurement, api: Api) {
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
pub(super) fn classify_failure(rec: &mut Record, m: &Measurement, exit: Option<&ExitInfo>, scan: &LogScan) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::format::record::LogRef;

    fn failed(class: ErrorClass, message: &str) -> Measurement {
        Measurement {
            http_status: Some(500),
            wall_ms: 40.0,
            ttft_ms: None,
            state: api::StreamState::new(Api::Ollama),
            body_bytes: 0,
            failure: Some((Failure::new(class, message), 35.0)),
        }
    }

    fn classified(m: &Measurement, exit: Option<&ExitInfo>, scan: &LogScan) -> Record {
        let mut rec = Record::default();
        classify_failure(&mut rec, m, exit, scan);
        rec
    }

    #[test]
    fn the_wait_status_outranks_what_the_socket_said() {
        let exit = ExitInfo { code: None, signal: Some(libc::SIGBUS), after_ms: 1.0 };
        let r = classified(&failed(ErrorClass::Eof, "the connection closed early"), Some(&exit), &LogScan::default());
        assert_eq!((r.error_class, r.signal.as_deref()), (Some(ErrorClass::Crash), Some("SIGBUS")));
        assert_eq!((r.phase, r.ttf_ms), (Some(Phase::Request), Some(35.0)));
    }

    #[test]
    fn ollama_names_its_runners_death_in_the_error_body() {
        // The 500 Ollama answers when its runner dies names the signal after `llama runner process has terminated:`.
        let m =
            failed(ErrorClass::HttpStatus, "HTTP 500: llama runner process has terminated: signal: segmentation fault");
        let r = classified(&m, None, &LogScan::default());
        assert_eq!((r.error_class, r.signal.as_deref()), (Some(ErrorClass::Crash), Some("SIGSEGV")));
        assert_eq!(r.signal_source.as_deref(), Some("error body"));
    }

    #[test]
    fn a_crash_line_in_the_log_names_the_signal_and_is_cited() {
        let line = LogRef { file: "servers/s001-ol.log".into(), line: 7, text: "SIGABRT: abort".into() };
        let scan = LogScan { crash: Some(line.clone()), ..Default::default() };
        let r = classified(&failed(ErrorClass::Eof, "the connection closed early"), None, &scan);
        assert_eq!((r.error_class, r.signal.as_deref()), (Some(ErrorClass::Crash), Some("SIGABRT")));
        assert_eq!((r.signal_source.as_deref(), r.failure_line), (Some("server log"), Some(line)));
    }

    #[test]
    fn a_failure_nothing_explains_keeps_its_class_and_success_is_ok() {
        let r = classified(&failed(ErrorClass::ReadTimeout, "timeout"), None, &LogScan::default());
        assert_eq!((r.status, r.error_class, r.signal), (Status::Fail, Some(ErrorClass::ReadTimeout), None));
        let mut ok = failed(ErrorClass::Eof, "");
        ok.failure = None;
        assert_eq!(classified(&ok, None, &LogScan::default()).status, Status::Ok);
    }
}
