//! The phases of a prediction, for either backend's rules: per phase of the plan ([`super::phases`]), the weights
//! grouped by type, op, placement and prediction (every layer's attn_q is one group), and the phase's attention.
//! What differs between ggml-cuda's and ggml-vulkan's rules (the query, the prediction, how predictions are
//! remembered, the attention) is the [`Rules`] each backend implements.

use std::borrow::Cow;

use anyhow::Result;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::model::{MatmulOp, ModelWeights, WeightTensor};
use super::phases::{PhasePlan, WeightSet};
use super::placement::{Offload, Placed, Where};

/// What a backend's rules predict for one weight in one phase.
pub trait Predicted: Clone + std::fmt::Debug + Serialize {
    /// What the rules were asked (kept with a group for re-evaluating it).
    type Query: Clone + std::fmt::Debug;
    /// A phase's attention prediction.
    type Attention: Clone + std::fmt::Debug + Serialize + Empty;
    /// The JSON key of a group's graph op: `op`, or `ggml_op` where the flattened prediction has an `op` of its own.
    const OP_KEY: &'static str;
    /// Whether weights with these two predictions share a group.
    fn groups_with(&self, other: &Self) -> bool;
}

/// Whether an attention prediction says nothing (and is left out of the JSON).
pub trait Empty {
    fn is_empty(&self) -> bool;
}

impl<T> Empty for Vec<T> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

impl<T> Empty for Option<T> {
    fn is_empty(&self) -> bool {
        self.is_none()
    }
}

/// The weights of one type in one phase that take the same path.
#[derive(Clone, Debug)]
pub struct WeightGroup<P: Predicted> {
    pub ggml_type: String,
    /// The graph node: MUL_MAT or MUL_MAT_ID.
    pub op: MatmulOp,
    /// Columns these weights see (for MUL_MAT_ID: tokens).
    pub ne11: u64,
    pub tensors: u64,
    /// Up to four tensor names.
    pub examples: Vec<String>,
    /// Matmul nodes over the phase: tensors × repeat.
    pub nodes: u64,
    /// Where these weights live and where their matmuls run in this phase ([`super::placement`]). For weights that run
    /// on the CPU, `prediction` is what the GPU would have run: what a trace must not show for them.
    pub placement: Placed,
    pub prediction: P,
    /// The first weight's query, for re-evaluating with another build.
    pub query: P::Query,
}

/// A graph op under the key the prediction gives it, as a map of one entry for a flattened field.
struct OpEntry(&'static str, MatmulOp);

impl Serialize for OpEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(self.0, &self.1)?;
        map.end()
    }
}

impl<P: Predicted> Serialize for WeightGroup<P> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        /// The group in JSON: its fields in order, the op under `P::OP_KEY`, the prediction flattened in.
        #[derive(Serialize)]
        struct Json<'a, P> {
            ggml_type: &'a str,
            #[serde(flatten)]
            op: OpEntry,
            ne11: u64,
            tensors: u64,
            examples: &'a [String],
            nodes: u64,
            placement: &'a Placed,
            #[serde(flatten)]
            prediction: &'a P,
        }
        Json {
            ggml_type: &self.ggml_type,
            op: OpEntry(P::OP_KEY, self.op),
            ne11: self.ne11,
            tensors: self.tensors,
            examples: &self.examples,
            nodes: self.nodes,
            placement: &self.placement,
            prediction: &self.prediction,
        }
        .serialize(s)
    }
}

/// One phase of the request.
#[derive(Clone, Debug, Serialize)]
pub struct Phase<P: Predicted> {
    /// `prefill`, `prefill-last`, `last-rows`, `decode`, `batch`.
    pub id: String,
    pub label: String,
    pub ne11: u64,
    /// How many times the phase runs (ubatches, decode steps).
    pub repeat: u64,
    pub weights: Vec<WeightGroup<P>>,
    #[serde(skip_serializing_if = "Empty::is_empty")]
    pub attention: P::Attention,
}

/// A backend's rules, as the phases ask them.
pub(super) trait Rules {
    type Prediction: Predicted;
    /// What the rules are asked of weight `t` in a phase whose matmuls see `ne11` columns.
    fn query(&self, t: &WeightTensor, ne11: u64) -> Result<<Self::Prediction as Predicted>::Query>;
    /// The prediction weights are grouped by, borrowed where the rules remember it across weights and phases (a
    /// model of 300k weights has a handful of distinct queries: only a new group takes a copy).
    fn matmul(&mut self, q: &<Self::Prediction as Predicted>::Query) -> Result<Cow<'_, Self::Prediction>>;
    /// The prediction a new group shows: the grouping one, or one with more of its decision path.
    fn shown(&self, _q: &<Self::Prediction as Predicted>::Query, grouping: Self::Prediction) -> Self::Prediction {
        grouping
    }
    /// A group's node count grown by another weight in phase `p` (the group counts it already).
    fn add_nodes(&self, g: &WeightGroup<Self::Prediction>, p: &PhasePlan) -> Result<u64>;
    /// Phase `p`'s attention; `layer_on_gpu`: whether a layer's matmul runs on the GPU in it, which attention follows.
    fn attention(&self, p: &PhasePlan, layer_on_gpu: bool) -> Result<<Self::Prediction as Predicted>::Attention>;
}

/// The phases a prediction lists, and those where attention runs on the CPU.
pub(super) struct Phases<P: Predicted> {
    pub(super) phases: Vec<Phase<P>>,
    /// Phases with attention where no layer's matmul runs on the GPU, so neither does its attention.
    pub(super) attention_on_cpu: Vec<&'static str>,
}

/// Every phase's weight groups and attention. A weight whose matmul runs on the CPU (placement) keeps the prediction
/// the GPU would have run, which a trace must then not show for it.
pub(super) fn predict<R: Rules>(
    rules: &mut R,
    plans: &[PhasePlan],
    weights: &ModelWeights,
    offload: &Offload,
) -> Result<Phases<R::Prediction>> {
    let mut phases = Vec::new();
    let mut attention_on_cpu = Vec::new();
    for p in plans {
        let mut groups: Vec<WeightGroup<R::Prediction>> = Vec::new();
        // Attention has no weight: the scheduler runs it next to its layer's matmuls (attention-follows-matmuls).
        let mut layer_on_gpu = false;
        let members = weights.tensors.iter().filter(|t| match p.weights {
            WeightSet::All => true,
            WeightSet::BeforeGather => !t.after_gather,
            WeightSet::AfterGather => t.after_gather,
        });
        for t in members {
            let q = rules.query(t, p.ne11)?;
            let placed = offload.runs_on(t, p.ne11);
            layer_on_gpu |= !t.head && placed.runs_on == Where::Gpu;
            let prediction = rules.matmul(&q)?;
            let same = |g: &WeightGroup<R::Prediction>| {
                g.placement == placed
                    && g.ggml_type == t.ggml_type
                    && g.op == t.op
                    && g.prediction.groups_with(&prediction)
            };
            match groups.iter().position(same) {
                Some(i) => {
                    drop(prediction);
                    groups[i].tensors += 1;
                    groups[i].nodes = rules.add_nodes(&groups[i], p)?;
                    if groups[i].examples.len() < 4 {
                        groups[i].examples.push(t.name.clone());
                    }
                }
                None => {
                    let prediction = prediction.into_owned();
                    groups.push(WeightGroup {
                        ggml_type: t.ggml_type.clone(),
                        op: t.op,
                        ne11: p.ne11,
                        tensors: 1,
                        examples: vec![t.name.clone()],
                        nodes: p.repeat,
                        placement: placed,
                        prediction: rules.shown(&q, prediction),
                        query: q,
                    });
                }
            }
        }
        if !layer_on_gpu && !p.kv_lens.is_empty() {
            attention_on_cpu.push(p.id);
        }
        phases.push(Phase {
            id: p.id.to_string(),
            label: p.label.clone(),
            ne11: p.ne11,
            repeat: p.repeat,
            weights: groups,
            attention: rules.attention(p, layer_on_gpu)?,
        });
    }
    Ok(Phases { phases, attention_on_cpu })
}
