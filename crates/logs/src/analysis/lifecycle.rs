//! The milestones of a runner lifetime: its start, load, warm-up, readiness, requests and shutdown, as the lines tell
//! them.

use crate::event::{Event, EventKind, TimingKind};
use crate::milestones::Meaning;
use crate::time::Timestamp;

use super::state::{Analyzer, Lifetime};
use super::text::{find_bytes, go_duration_s};

impl Analyzer {
    pub(super) fn lifecycle(&mut self, e: &Event<'_>, time: Option<Timestamp>) {
        use EventKind::*;
        let l = e.line;
        // A request that finished after a crash line was written did not run before it: while an incident is open,
        // answers do not count as finished requests.
        let crashed = self.open.is_some();
        match e.kind {
            RunnerStarting { cmd, with_model } => {
                if find_bytes(cmd, b"llama-server").is_some() {
                    self.saw_llama_server_runner = true;
                } else {
                    self.saw_go_runner = true;
                }
                self.close_incident();
                self.lifetime = Lifetime {
                    start: Some(l),
                    began: Some(l),
                    discovery_runner: !with_model,
                    loading: with_model.then_some(l),
                    ..Lifetime::default()
                };
            }
            ModelLoading { .. } => {
                self.lifetime.loading.get_or_insert(l);
                self.lifetime.began.get_or_insert(l);
                self.lifetime.discovery_runner = false;
            }
            LayersOffloaded { .. } | DeviceUsed { .. } => {
                self.lifetime.loading.get_or_insert(l);
                self.lifetime.discovery_runner = false;
            }
            // The model's buffers, the context's KV, compute and output buffers and its graph are set up while loading.
            BufferSize { .. } | Graph { .. } => {
                self.lifetime.loading.get_or_insert(l);
            }
            Warmup => {
                self.lifetime.warmup.get_or_insert(l);
            }
            RunnerStarted { seconds } if self.lifetime.ready.is_none() => {
                self.lifetime.ready = Some(l);
                self.lifetime.ready_time = time;
                self.lifetime.started_s = Some(seconds);
            }
            ServerReady => {
                self.lifetime.ready.get_or_insert(l);
            }
            Milestone { index, number } => self.milestone(l, index, number),
            RequestStarted { task } => {
                self.lifetime.prompt_done = None;
                self.lifetime.request_open = Some(l);
                if let Some(t) = task.filter(|&t| t > 0) {
                    self.lifetime.earlier_tasks.get_or_insert((l, t));
                }
            }
            // A request's prompt is being processed (KoboldCpp's progress has no task line before it).
            Progress { decoding: false, .. } => {
                self.lifetime.request_open.get_or_insert(l);
            }
            PromptDone { .. } | Progress { decoding: true, .. } => {
                self.lifetime.prompt_done.get_or_insert(l);
            }
            Shutdown => self.lifetime.shutdown = Some(l),
            RequestDone { .. } | Timing { which: TimingKind::Total, .. } if !crashed => {
                self.lifetime.request_done = Some(l);
                self.lifetime.prompt_done = None;
                self.lifetime.request_open = None;
            }
            HttpRequest { status, path, latency, .. }
                if (200..300).contains(&status) && is_inference_route(path) && !crashed =>
            {
                if self.is_load_only(path, latency, time) {
                    self.lifetime.load_only = Some(l);
                } else if path.starts_with(b"/api/generate")
                    && self.lifetime.ready_time.is_none()
                    && self.lifetime.request_done.is_none()
                {
                    // Without the runner's ready line the load-only request cannot be told from a computation.
                    self.lifetime.maybe_load_only.get_or_insert(l);
                } else {
                    self.lifetime.request_done = Some(l);
                    self.lifetime.prompt_done = None;
                }
            }
            _ => {}
        }
    }

    /// A line of the era table ([`crate::milestones`]).
    pub(super) fn milestone(&mut self, l: u64, index: u16, number: Option<u32>) {
        let Some(row) = crate::milestones::table().get(index) else { return };
        if row.era.starts_with("ollama") {
            self.saw_ollama = true;
            self.saw_go_runner = true;
        }
        let crashed = self.open.is_some();
        // Another allocation attempt after allocation failures: the runtime handled them (Ollama's fit loop asks the
        // runner again with fewer layers; llama.cpp retries without pipeline parallelism, L src/llama-context.cpp:680).
        let retry = row.meaning == Meaning::Retry || (row.meaning == Meaning::Load && row.number_after.is_some());
        if let Some(open) = self.open.as_mut().filter(|o| retry && o.only_allocation_failures()) {
            open.recovered = Some((l, format!("{}: {}", row.meaning.label(), row.pattern)));
        }
        let lt = &mut self.lifetime;
        match row.meaning {
            Meaning::Discovery => {
                if lt.loading.is_none() {
                    lt.discovery_runner = true;
                }
            }
            Meaning::VocabOnly => {
                // The model-loader lines before it were a tokenizer-only load (Ollama's server reads the vocabulary
                // itself), not the runner's load.
                lt.loading = None;
            }
            Meaning::RunnerStart => {
                lt.began.get_or_insert(l);
                if !lt.discovery_runner {
                    lt.loading.get_or_insert(l);
                }
            }
            Meaning::Load => {
                lt.loading.get_or_insert(l);
                lt.discovery_runner = false;
                if row.number_after.is_some() {
                    lt.attempt = Some((l, number));
                }
            }
            Meaning::Ready => {
                lt.ready.get_or_insert(l);
            }
            Meaning::RequestStarted => {
                lt.prompt_done = None;
                lt.request_open = Some(l);
            }
            Meaning::PromptDone => {
                lt.prompt_done.get_or_insert(l);
            }
            Meaning::RequestDone if !crashed => {
                lt.request_done = Some(l);
                lt.prompt_done = None;
                lt.request_open = None;
            }
            Meaning::RequestDone => {}
            Meaning::Compute => {
                if let Some(open) = self.open.as_mut() {
                    open.compute_line.get_or_insert(l);
                }
            }
            Meaning::Retry => {}
        }
    }

    /// Ollama's CLI (`ollama run`) first sends an empty `/api/generate` that only loads the model: it is answered
    /// as soon as the runner is up, in about the runner's start time and in the second the runner reported
    /// ready. Such an answer is no computation on the model (O24 `cmd/cmd.go:469-517` loadOrUnloadModel sends a
    /// `GenerateRequest` without a prompt; `server/routes.go:429-436` answers it, `done_reason` "load").
    pub(super) fn is_load_only(&self, path: &[u8], latency: Option<&[u8]>, time: Option<Timestamp>) -> bool {
        let lt = &self.lifetime;
        if lt.request_done.is_some() || !(path.starts_with(b"/api/generate") || path.starts_with(b"/api/chat")) {
            return false;
        }
        let (Some(ready), Some(started), Some(at), Some(latency)) =
            (lt.ready_time, lt.started_s, time, latency.and_then(go_duration_s))
        else {
            return false;
        };
        let gap = (at.micros - ready.micros) as f64 / 1e6;
        at.clock == ready.clock && (-1.0..=1.0).contains(&gap) && latency + 0.5 >= started && latency <= started + 1.5
    }
}

/// Routes whose successful answer means the model computed something.
pub(super) fn is_inference_route(path: &[u8]) -> bool {
    const ROUTES: &[&[u8]] = &[
        b"/api/generate",
        b"/api/chat",
        b"/api/embed",
        b"/completion",
        b"/completions",
        b"/v1/",
        b"/chat/completions",
        b"/infill",
        b"/embedding",
        b"/rerank",
    ];
    ROUTES.iter().any(|r| path.starts_with(r))
}
