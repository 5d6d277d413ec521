//! The phase of a crash: the rules of [`crate::analysis`], from the runner's milestones and the crash's own lines
//! and stack.

use super::crash::{Frame, Phase};
use super::state::Lifetime;
use crate::patterns::{ByteSet, Needle};

/// Functions whose presence in the crashing stack tells the phase.
/// (`ggml_backend_load_all` is not one: every runner loads its backends when it starts, discovery or not.)
pub(super) const DISCOVERY_FUNCTIONS: &[Needle] =
    &[Needle::new("discover."), Needle::new("GetGPUInfo"), Needle::new("cuda_init"), Needle::new("bootstrapDevices")];

pub(super) const LOAD_FUNCTIONS: &[Needle] = &[
    // KoboldCpp's launcher (`koboldcpp.py` load_model) and llama-server's `server_context::load_model`.
    Needle::new("load_model"),
    // Ollama's in-process server of 2024 (O v0.1.29 llm/dyn_ext_server.go:81 newDynExtServer → dyn_init).
    Needle::new("newLlmServer"),
    Needle::new("newDynExtServer"),
    Needle::new("llama_model_load"),
    Needle::new("llama_load_model"),
    Needle::new("LoadModelFromFile"),
    Needle::new("loadModel"),
    Needle::new("NewContextWithModel"),
    Needle::new("llama_init_from_model"),
    Needle::new("llama_new_context"),
    Needle::new("clip_model_load"),
    Needle::new("NewClipContext"),
    Needle::new("mtmd_init"),
    Needle::new("NewMtmdContext"),
];

/// Init functions that run the warm-up compute after the model and context are loaded (a load frame above them in the
/// stack decides load first).
pub(super) const WARMUP_FUNCTIONS: &[Needle] =
    &[Needle::new("common_init_from_params"), Needle::new("llama_init_from_gpt_params")];

/// Server functions that compute for a request (llama-server's slot loop, Ollama's runner batch loop).
pub(super) const REQUEST_FUNCTIONS: &[Needle] = &[
    Needle::new("update_slots"),
    Needle::new("handle_completions"),
    Needle::new("process_token"),
    Needle::new("processBatch"),
    Needle::new("forwardBatch"),
];

pub(super) const COMPUTE_FUNCTIONS: &[Needle] = &[
    Needle::new("ggml_compute_forward"),
    Needle::new("ggml_graph_compute"),
    Needle::new("ggml_cuda_compute_forward"),
    Needle::new("llama_decode"),
    Needle::new("Decode"),
    Needle::new("processBatch"),
    Needle::new("Compute"),
    Needle::new("graph_compute"),
    Needle::new("ggml_backend_sched_graph_compute"),
    Needle::new("forwardBatch"),
];

/// The line of the first frame whose function holds one of `names`; `sets` are the frames' bytes.
pub(super) fn stack_has(frames: &[Frame], sets: &[ByteSet], names: &[Needle]) -> Option<u64> {
    let has = |f: &Frame, set: &ByteSet| names.iter().any(|n| n.find_with(f.function.as_bytes(), set).is_some());
    frames.iter().zip(sets).find(|(f, set)| has(f, set)).map(|(f, _)| f.line)
}

/// What a crash incident adds to its runner's milestones for the phase rules.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct CrashEvidence<'a> {
    /// The incident's first line.
    pub(super) line: Option<u64>,
    /// It begins with a GPU-discovery failure.
    pub(super) discovery_failure: bool,
    pub(super) frames: &'a [Frame],
    /// A line of it names graph compute (a failing op, `ggml_compute_forward_*`).
    pub(super) compute_line: Option<u64>,
    /// A line of it says the model load failed (`error loading model`, Ollama's `Load failed`).
    pub(super) load_error: Option<u64>,
    /// A line of it says the KV cache needed a K-shift (the context was full).
    pub(super) k_shift: Option<u64>,
}

pub(super) fn decide_phase(lt: &Lifetime, ev: CrashEvidence<'_>) -> (Phase, String, Vec<u64>) {
    let lines = |xs: &[Option<u64>]| xs.iter().flatten().copied().collect::<Vec<_>>();
    if ev.discovery_failure {
        return (Phase::Discovery, "the incident begins with a GPU-discovery failure".into(), lines(&[ev.line]));
    }
    if lt.discovery_runner {
        return (
            Phase::Discovery,
            "the crashing runner was started without a model (a discovery runner)".into(),
            lines(&[lt.start]),
        );
    }
    // The stack is searched for several lists of names: the bytes of each frame are read once.
    let sets: Vec<ByteSet> = ev.frames.iter().map(|f| ByteSet::of(f.function.as_bytes())).collect();
    let in_stack = |names| stack_has(ev.frames, &sets, names);
    if let Some(l) = in_stack(DISCOVERY_FUNCTIONS) {
        return (Phase::Discovery, "the crashing stack is in GPU discovery code".into(), vec![l]);
    }
    if let Some(l) = in_stack(LOAD_FUNCTIONS) {
        return (Phase::Load, "the crashing stack is in model-loading code".into(), vec![l]);
    }
    // The stack outranks milestones and the fragment rules: llama-cli and the common library run the warm-up inside
    // their init function, before any request (L common/common.cpp common_init_from_params; before 2024-09
    // llama_init_from_gpt_params), and llama-cli has no runner whose ready line would tell it.
    if let Some(l) = in_stack(WARMUP_FUNCTIONS) {
        return (
            Phase::FirstCompute,
            format!("the crashing stack is in the load-time warm-up (line {l}: the init function computes once on the model after loading it): the first compute"),
            vec![l],
        );
    }
    if let Some(l) = ev.load_error.filter(|_| lt.ready.is_none()) {
        return (
            Phase::Load,
            format!("the runtime says the model load failed (line {l}) and the runner was not ready"),
            vec![l],
        );
    }
    if let Some(l) = ev.k_shift {
        // ggml aborts when the KV cache must shift and the model cannot (L src/llama-kv-cache.cpp:877): the context
        // filled up while tokens were being generated.
        return (
            Phase::Decode,
            format!("the KV cache needed a K-shift (line {l}): the context was full, the request was generating"),
            vec![l],
        );
    }
    if lt.request_done.is_some() || lt.prompt_done.is_some() {
        let rule = match lt.request_done {
            Some(r) => format!("a request had finished in this runner before the crash (line {r})"),
            None => "the current request had finished its prompt and was generating".to_string(),
        };
        return (Phase::Decode, rule, lines(&[lt.request_done, lt.prompt_done]));
    }
    if let Some((l, task)) = lt.earlier_tasks {
        // llama-server numbers the tasks it creates from 0 (L tools/server/server-queue.h:17 `id = 0`, get_new_id): a
        // task above 0 means the server had already run others.
        return (
            Phase::Decode,
            format!("the request began as task {task} (line {l}): llama-server numbers its tasks from 0, so earlier requests had run in this server (runner-up: the first compute, if none of them finished)"),
            vec![l],
        );
    }
    let compute = in_stack(COMPUTE_FUNCTIONS).or(ev.compute_line);
    if let Some(r) = lt.request_open.filter(|_| lt.ready.is_none() && lt.warmup.is_none()) {
        return (
            Phase::FirstCompute,
            format!("a request's prompt was being processed (line {r}) and the log shows no request or prompt finished before it: the first compute (runner-up: unknown, if the log begins after earlier requests)"),
            lines(&[Some(r), compute]),
        );
    }
    let load_only = lt
        .load_only
        .map(|l| format!("; the answer at line {l} was the load-only request Ollama's CLI sends when a model starts (same second, about the start time), no computation"))
        .unwrap_or_default();
    if lt.ready.is_some() || lt.warmup.is_some() {
        let rule = match (lt.ready, lt.warmup) {
            (Some(r), _) => format!(
                "the runner was ready (line {r}) and no request had finished since: the first request's compute{load_only}"
            ),
            _ => "the load-time warm-up had begun: the first compute on the model".to_string(),
        };
        return (Phase::FirstCompute, rule, lines(&[lt.ready, lt.warmup, lt.load_only, compute]));
    }
    if let Some(c) = compute {
        if let Some(l) = lt.loading {
            return (
                Phase::FirstCompute,
                format!("the crash is in graph compute (line {c}) and the log shows the model load (line {l}) with no request finished since: the first compute on the model"),
                vec![l, c],
            );
        }
        // The log begins after the runner loaded (a fragment, or a paste that starts mid-backtrace): the lines
        // that would tell a first compute from a later request are not in it. A stack in a request handler says it
        // was a request's compute, not the warm-up; which request it still cannot say.
        if let Some(r) = in_stack(REQUEST_FUNCTIONS) {
            return (
                Phase::Unknown,
                format!("the crashing stack computes for a request (line {r}), not the load or warm-up, but the log begins after the runner loaded: whether an earlier request had finished cannot be told"),
                vec![r, c],
            );
        }
        let maybe = lt
            .maybe_load_only
            .map(|l| {
                format!(" (the answer at line {l} may be the load-only request Ollama's CLI sends when a model starts)")
            })
            .unwrap_or_default();
        return (
            Phase::Unknown,
            format!("the crash is in graph compute (line {c}), but the log begins after the runner loaded: whether a request had finished before it cannot be told{maybe}"),
            lines(&[lt.maybe_load_only, Some(c)]),
        );
    }
    if lt.loading.is_some() {
        return (Phase::Load, "model loading had begun and the runner was not ready".into(), lines(&[lt.loading]));
    }
    (Phase::Unknown, "the log shows no runner milestones and no stack that tells the phase".into(), vec![])
}
