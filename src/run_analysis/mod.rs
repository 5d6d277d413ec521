//! The analysis of runs, on the floor above the run format (`crate::run`): what `report`, `sweep` and `bisect` say
//! about the records and files a run left behind. Nothing here writes a run or knows about a command.
//!
//! - [`aggregate`]: a run's records folded into groups of matched cells (cold and warm requests apart, outliers,
//!   times to failure, kernels per request, endpoint ratios), one pass in bounded memory: records come in one at a
//!   time as their stored JSON, so memory follows the number of groups, not of records;
//! - [`stats`]: the statistics they rest on (pure functions; Welch's interval is also bisect's speed test);
//! - [`claims`]: the claims about them, one claim-id scheme (`report.ENDPOINT.MODEL.nglN.PROMPT.nN.…`), with the
//!   log forensics of failed cells ([`forensics`]) and the capability claims of a run's Vulkan traces ([`vulkan`]);
//! - [`bisect`]: a stored bisect's search state, verdict and view, from its rows alone.

pub mod aggregate;
pub mod bisect;
pub mod claims;
pub mod forensics;
pub mod stats;
pub mod vulkan;

/// Records as a sweep writes them, for the unit tests of the summary and of its views.
#[cfg(test)]
pub(crate) mod test_records {
    use crate::run::format::record::{ErrorClass, Record, RunSource, Status, RECORD_SCHEMA};

    /// A successful record of one cell (model `m`, prompt `p`, 8 tokens, epoch and repetition 1), nothing measured.
    pub fn cell(ep: &str, ngl: i64, seq: u64) -> Record {
        Record {
            schema: RECORD_SCHEMA,
            run_id: "r".into(),
            cell_key: format!("{ep}|m|ngl={ngl}|p|n=8|e1|r{seq}"),
            seq,
            source: RunSource::Sweep,
            file: format!("cells/{seq:05}-{ep}/result.json"),
            endpoint: ep.into(),
            model: "m".into(),
            num_gpu: ngl,
            prompt: "p".into(),
            num_predict: 8,
            epoch: 1,
            repetition: 1,
            status: Status::Ok,
            ..Default::default()
        }
    }

    /// A cell that measured `value`: its wall time (ms; decode tokens/s a tenth of it, prompt tokens/s equal to it)
    /// when it succeeded, its time to failure (ms) when it crashed with SIGSEGV.
    pub fn measured(ep: &str, ngl: i64, seq: u64, ok: bool, value: f64) -> Record {
        let mut r = cell(ep, ngl, seq);
        if ok {
            r.wall_ms = Some(value);
            r.decode_tps = Some(value / 10.0);
            r.prompt_tps = Some(value);
        } else {
            r.status = Status::Fail;
            r.error_class = Some(ErrorClass::Crash);
            r.signal = Some("SIGSEGV".into());
            r.ttf_ms = Some(value);
        }
        r
    }
}
