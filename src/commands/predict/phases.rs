//! How a request becomes phases before anything is predicted: the prefill ubatches, the last layer's rows after the
//! gather, the decode steps, and the KV lengths attention sees in each (see the module notes of `predict`); and the
//! token counts a report states. Both backends' predictions (`cuda`, `vulkan`) plan with it.

use serde::Serialize;

use super::model::ModelWeights;
use super::options::{Batch, PredictOptions, PromptFromRun};

/// The KV cache view length is padded to this (src/llama-kv-cache.cpp:1285: max(n_pad, 256)).
pub const KV_PAD: u64 = 256;

/// KV view length ggml sees with `used` cells: padded to 256, at least 256.
pub(super) fn kv_len(used: u64) -> u64 {
    used.max(1).div_ceil(KV_PAD).saturating_mul(KV_PAD)
}

/// The token counts a prediction is for, as its report states them.
#[derive(Clone, Debug, Serialize)]
pub struct TokensInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ne11: Option<u64>,
    pub ubatch: u64,
    pub decode_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_run: Option<PromptFromRun>,
}

impl TokensInfo {
    /// The token counts of a prediction for `batch`.
    pub fn new(batch: Batch, ubatch: u64, decode_tokens: u64, from_run: Option<PromptFromRun>) -> Self {
        let (prompt_tokens, ne11) = match batch {
            Batch::PromptTokens(n) => (Some(n), None),
            Batch::Ne11(n) => (None, Some(n)),
        };
        TokensInfo { prompt_tokens, ne11, ubatch, decode_tokens, from_run }
    }
}

/// A phase before prediction: which weights see how many columns.
pub(super) struct PhasePlan {
    pub(super) id: &'static str,
    pub(super) label: String,
    pub(super) ne11: u64,
    pub(super) repeat: u64,
    /// Which weights take part: all, those before the gather, or those after it.
    pub(super) weights: WeightSet,
    /// KV lengths to predict attention at (empty: no attention in this phase).
    pub(super) kv_lens: Vec<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum WeightSet {
    All,
    BeforeGather,
    AfterGather,
}

/// The phases of the request `opts` describes, for `weights` (whose last layer's FFN and output head, where it has
/// them, see only the gathered rows).
pub(super) fn plan_for(opts: &PredictOptions, weights: &ModelWeights) -> Vec<PhasePlan> {
    let gathered = weights.tensors.iter().any(|t| t.after_gather);
    plan(opts.batch, opts.ubatch, opts.decode_steps(), gathered)
}

fn plan(batch: Batch, ubatch: u64, decode: u64, gathered: bool) -> Vec<PhasePlan> {
    let mut out = Vec::new();
    match batch {
        Batch::Ne11(n) => out.push(PhasePlan {
            id: "batch",
            label: format!("one batch of {n} token(s)"),
            ne11: n,
            repeat: 1,
            weights: WeightSet::All,
            kv_lens: vec![kv_len(n)],
        }),
        Batch::PromptTokens(0) => {}
        Batch::PromptTokens(n) => {
            let ubatches = n.div_ceil(ubatch);
            let last = n - (ubatches - 1) * ubatch;
            if ubatches > 1 {
                let full = ubatches - 1;
                out.push(PhasePlan {
                    id: "prefill",
                    label: if full == 1 {
                        format!("prefill ubatch 1 of {ubatches}")
                    } else {
                        format!("prefill ubatches 1-{full} of {ubatches}")
                    },
                    ne11: ubatch,
                    repeat: full,
                    // Earlier ubatches produce no logits: the gathered rows are empty there.
                    weights: if gathered { WeightSet::BeforeGather } else { WeightSet::All },
                    kv_lens: vec![kv_len(ubatch), kv_len(full * ubatch)],
                });
            }
            // With one token in the last ubatch (or one in all), nothing is gathered away: every weight sees it.
            let split = gathered && last > 1;
            out.push(PhasePlan {
                id: "prefill-last",
                label: if ubatches == 1 {
                    format!("prefill, one ubatch of {n} token(s)")
                } else {
                    format!("prefill ubatch {ubatches} of {ubatches}")
                },
                ne11: last,
                repeat: 1,
                weights: if split { WeightSet::BeforeGather } else { WeightSet::All },
                kv_lens: vec![kv_len(n)],
            });
            if split {
                out.push(PhasePlan {
                    id: "last-rows",
                    label: "last layer FFN and output head after the row gather (last ubatch)".into(),
                    ne11: 1,
                    repeat: 1,
                    weights: WeightSet::AfterGather,
                    kv_lens: Vec::new(),
                });
            }
        }
    }
    if decode > 0 {
        let prompt = match batch {
            Batch::PromptTokens(n) | Batch::Ne11(n) => n,
        };
        out.push(PhasePlan {
            id: "decode",
            label: format!("decode, {decode} step(s) of one token"),
            ne11: 1,
            repeat: decode,
            weights: WeightSet::All,
            kv_lens: vec![kv_len(prompt + 1), kv_len(prompt + decode)],
        });
    }
    out
}
