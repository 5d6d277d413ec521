//! The fields of a stored record that the statistics read, as borrowed views of its JSON text: a record is folded
//! into its group without being parsed whole.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;

use crate::run::format::record::{ErrorClass, Status};

/// The fields of a stored record the statistics read, borrowed from its JSON where it has no escapes.
#[derive(Debug, Deserialize)]
pub(super) struct RecordView<'a> {
    #[serde(borrow)]
    pub(super) run_id: Cow<'a, str>,
    pub(super) seq: u64,
    #[serde(borrow)]
    pub(super) file: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) endpoint: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) model: Cow<'a, str>,
    pub(super) num_gpu: i64,
    #[serde(borrow)]
    pub(super) prompt: Cow<'a, str>,
    pub(super) num_predict: i64,
    pub(super) status: Status,
    #[serde(default)]
    pub(super) error_class: Option<ErrorClass>,
    #[serde(default, borrow)]
    pub(super) signal: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) exit_code: Option<i32>,
    #[serde(default)]
    pub(super) http_status: Option<u16>,
    #[serde(default)]
    pub(super) wall_ms: Option<f64>,
    #[serde(default)]
    pub(super) ttft_ms: Option<f64>,
    #[serde(default)]
    pub(super) ttf_ms: Option<f64>,
    #[serde(default)]
    pub(super) server_timings: TimingsView,
    #[serde(default)]
    pub(super) prompt_tps: Option<f64>,
    #[serde(default)]
    pub(super) decode_tps: Option<f64>,
    #[serde(default)]
    pub(super) prompt_count_includes_cache: bool,
    #[serde(default, borrow)]
    pub(super) backend: Option<BackendView<'a>>,
    #[serde(default)]
    pub(super) server: Option<ServerView>,
    #[serde(default, borrow)]
    pub(super) trace: Option<TraceView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct TimingsView {
    #[serde(default)]
    pub(super) load_ms: Option<f64>,
    #[serde(default)]
    pub(super) prompt_n: Option<u64>,
    #[serde(default)]
    pub(super) decode_n: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct BackendView<'a> {
    #[serde(borrow)]
    pub(super) backend: Cow<'a, str>,
    #[serde(default)]
    pub(super) offloaded: Option<(u32, u32)>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ServerView {
    pub(super) start_no: u32,
}

#[derive(Debug, Deserialize)]
pub(super) struct TraceView<'a> {
    pub(super) total_launches: u64,
    /// Whether the server ran with the Vulkan layer (so Vulkan dispatches were counted too).
    #[serde(default)]
    pub(super) vulkan_layer: Option<bool>,
    #[serde(borrow)]
    pub(super) families: BTreeMap<Cow<'a, str>, u64>,
    #[serde(default)]
    pub(super) cut: Vec<serde::de::IgnoredAny>,
    #[serde(default)]
    pub(super) observer_loaded: Option<bool>,
    #[serde(default)]
    pub(super) interval_ms: u64,
    #[serde(default, borrow)]
    pub(super) kernels: Vec<TraceKernelView<'a>>,
    #[serde(default, borrow)]
    pub(super) processes: Vec<TraceProcessView<'a>>,
    #[serde(default, borrow)]
    pub(super) dir: Cow<'a, str>,
}

#[derive(Debug, Deserialize)]
pub(super) struct TraceKernelView<'a> {
    #[serde(borrow)]
    pub(super) api: Cow<'a, str>,
}

#[derive(Debug, Deserialize)]
pub(super) struct TraceProcessView<'a> {
    #[serde(borrow)]
    pub(super) file: Cow<'a, str>,
    pub(super) launches: u64,
}

impl RecordView<'_> {
    pub(super) fn is_ok(&self) -> bool {
        self.status == Status::Ok
    }

    /// The outcome as the sweep's table names it (`Record::outcome`).
    pub(super) fn outcome(&self) -> String {
        crate::run::format::record::outcome(
            self.status,
            self.error_class,
            self.signal.as_deref(),
            self.exit_code,
            self.http_status,
        )
    }
}
