//! The weights a model multiplies with, read from a GGUF file (tensor names, types and shapes) or given as a
//! single weight type: which are matrix multiplications, which sit after the last layer's output-row gather,
//! and the attention shape.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use gguf::{GgmlType, Gguf};

/// How one weight enters the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum MatmulOp {
    #[serde(rename = "MUL_MAT")]
    MulMat,
    /// Expert weights (`*_exps`), selected per token (MoE).
    #[serde(rename = "MUL_MAT_ID")]
    MulMatId,
}

/// One weight tensor that ggml multiplies activations with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WeightTensor {
    pub name: String,
    pub ggml_type: String,
    /// ne0 (row length K), ne1 (rows N), ne2 (experts) as far as known.
    pub ne00: Option<u64>,
    pub ne01: Option<u64>,
    pub experts: u64,
    pub op: MatmulOp,
    /// After the last layer's gather of output rows (`build_inp_out_ids`): the last layer's FFN and the output
    /// head see only the rows that produce logits.
    pub after_gather: bool,
    /// The repeating layer it belongs to (`blk.N.`), which decides where it lives with `-ngl`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<u64>,
    /// The output head (`output.weight`, or `token_embd.weight` where the model ties them): the output layer.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub head: bool,
}

/// The attention shape of the model (for the flash-attention prediction).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttentionShape {
    pub head_dim: u64,
    pub dv: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
}

/// What `predict` multiplies: a model's weights, or one weight type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelWeights {
    /// The file, or `--type T` for a single weight.
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_layer: Option<u64>,
    pub tensors: Vec<WeightTensor>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionShape>,
}

/// What a prediction says of the model it read.
#[derive(Clone, Debug, Serialize)]
pub struct ModelSummary {
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_layer: Option<u64>,
    /// Matmul weights per ggml type.
    pub weights_per_type: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionShape>,
}

impl ModelSummary {
    /// What a prediction says of the model it read: its source and shape, and its matmul weights per type.
    pub fn of(weights: &ModelWeights) -> Self {
        let mut weights_per_type = BTreeMap::new();
        for t in &weights.tensors {
            *weights_per_type.entry(t.ggml_type.clone()).or_insert(0u64) += 1;
        }
        ModelSummary {
            source: weights.source.clone(),
            architecture: weights.architecture.clone(),
            n_layer: weights.n_layer,
            weights_per_type,
            attention: weights.attention.clone(),
        }
    }
}

/// Type facts `ggml_is_quantized` and `ggml_type_size` give: quantized types are the block types (block size
/// above one element, ggml.c type_traits), and float types have a per-element size.
pub fn type_facts(name: &str) -> Result<(GgmlType, bool, u64)> {
    let t = GgmlType::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = GgmlType::all().map(|(_, i)| i.name).collect();
        anyhow!("unknown ggml type `{name}` (known: {})", known.join(", "))
    })?;
    let info = t.info().expect("from_name returns known types");
    let quantized = info.block_size > 1;
    Ok((t, quantized, if quantized { 0 } else { info.type_size }))
}

/// Layer index and the part after `blk.N.` of a tensor name.
fn layer_of(name: &str) -> Option<(u64, &str)> {
    let rest = name.strip_prefix("blk.")?;
    let (n, tail) = rest.split_once('.')?;
    Some((n.parse().ok()?, tail))
}

/// The weights of a GGUF model. Every `.weight` tensor with two or more dimensions that is not a norm is a
/// matrix multiplication, except the token embedding (a row lookup), which is the output head only when the
/// model has no `output.weight` (tied embeddings). Expert tensors (`_exps`) are MUL_MAT_ID with ne2 experts.
pub fn from_gguf(path: &Path) -> Result<ModelWeights> {
    let file = crate::gguf_file::open_gguf(path)?;
    let g = crate::gguf_file::parse_gguf(&file)?;
    let weights = from_parsed(&g, &path.display().to_string());
    // What was parsed is copied out by now; a file cut short meanwhile read as zeros, which is not the model.
    file.check_whole()?;
    weights
}

pub fn from_parsed(g: &Gguf<'_>, source: &str) -> Result<ModelWeights> {
    let has_output = g.tensor("output.weight").is_some();
    let n_layer =
        g.block_count().or_else(|| g.tensors.iter().filter_map(|t| layer_of(t.name)).map(|(n, _)| n + 1).max());
    let last_layer = n_layer.and_then(|n| n.checked_sub(1));
    let mut tensors = Vec::new();
    for t in &g.tensors {
        let dims = t.dims();
        if dims.len() < 2 || !t.name.ends_with(".weight") || t.name.contains("norm") {
            continue;
        }
        let head = t.name == "output.weight" || (t.name == "token_embd.weight" && !has_output);
        if t.name.starts_with("token_embd") && !head {
            continue;
        }
        let layer = layer_of(t.name);
        if layer.is_none() && !head {
            // Position embeddings, vision towers and other non-block tensors are not the text model's matmuls.
            continue;
        }
        let Some(info) = t.ggml_type.info() else {
            bail!("{source}: tensor {} has ggml type {} that backscope does not know", t.name, t.ggml_type.0);
        };
        let experts = if t.name.contains("_exps") { dims.get(2).copied().unwrap_or(1) } else { 0 };
        let after_gather = head
            || matches!((layer, last_layer), (Some((n, tail)), Some(last)) if n == last && tail.starts_with("ffn_"));
        tensors.push(WeightTensor {
            name: t.name.to_string(),
            ggml_type: info.name.to_string(),
            ne00: dims.first().copied(),
            ne01: dims.get(1).copied(),
            experts,
            op: if experts > 0 { MatmulOp::MulMatId } else { MatmulOp::MulMat },
            after_gather,
            layer: layer.map(|(n, _)| n),
            head,
        });
    }
    if tensors.is_empty() {
        bail!("{source}: no weight matrices found (expected tensors such as blk.0.attn_q.weight)");
    }
    let attention = match (g.head_count(), g.head_count_kv().or(g.head_count())) {
        (Some(n_head), Some(n_head_kv)) if n_head > 0 && n_head_kv > 0 => {
            let key = g.arch_u64("attention.key_length");
            let value = g.arch_u64("attention.value_length");
            let head_dim = key.or_else(|| g.embedding_length().map(|e| e / n_head));
            head_dim.map(|d| AttentionShape { head_dim: d, dv: value.unwrap_or(d), n_head, n_head_kv })
        }
        _ => None,
    };
    Ok(ModelWeights {
        source: source.to_string(),
        architecture: g.architecture().map(str::to_string),
        n_layer,
        tensors,
        attention,
    })
}

/// The weights of the model a sweep record names (`predict --run` without `--model`): a GGUF file (the path
/// llama-server was given, relative to the working directory), else an Ollama model name, whose GGUF is the
/// blob its manifest names.
pub fn of_record(model: &str) -> Result<ModelWeights> {
    let path = Path::new(model);
    if path.is_file() {
        return from_gguf(path);
    }
    match ollama_blob(model)? {
        Some(blob) => from_gguf(&blob).with_context(|| format!("model {model} (Ollama blob {})", blob.display())),
        None => bail!(
            "model {model} is neither a GGUF file here nor an Ollama model in {} ($OLLAMA_MODELS); pass --model M.gguf",
            ollama_models_dir().display()
        ),
    }
}

/// Where Ollama keeps its models: $OLLAMA_MODELS, else ~/.ollama/models (Ollama's envconfig.Models).
fn ollama_models_dir() -> PathBuf {
    match std::env::var_os("OLLAMA_MODELS").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".ollama/models"),
    }
}

/// The model blob of an Ollama name (`qwen2:0.5b`, `user/model:tag`, `host/namespace/model:tag`; the tag is
/// `latest` when not given): Ollama's manifest `manifests/HOST/NAMESPACE/MODEL/TAG` (registry.ollama.ai and
/// library by default), its layer of media type `application/vnd.ollama.image.model`, whose digest
/// `sha256:HEX` is stored as `blobs/sha256-HEX` (Ollama's types/model/name.go and server/manifest.go). `None`
/// when there is no such manifest.
fn ollama_blob(name: &str) -> Result<Option<PathBuf>> {
    let (path, tag) = match name.rsplit_once(':') {
        Some((p, t)) if !t.contains('/') => (p, t),
        _ => (name, "latest"),
    };
    let parts: Vec<&str> = path.split('/').collect();
    let (host, namespace, model) = match parts[..] {
        [m] => ("registry.ollama.ai", "library", m),
        [n, m] => ("registry.ollama.ai", n, m),
        [h, n, m] => (h, n, m),
        _ => return Ok(None),
    };
    // A name is a path below the models directory only where each part is a plain name.
    let plain = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0']);
    if ![host, namespace, model, tag].into_iter().all(plain) {
        return Ok(None);
    }
    let dir = ollama_models_dir();
    let manifest = dir.join("manifests").join(host).join(namespace).join(model).join(tag);
    if !manifest.is_file() {
        return Ok(None);
    }
    let text = crate::host::inputs::read_text_limited(&manifest, 1 << 20)
        .map_err(|e| anyhow!("{}: {e}", manifest.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not a JSON manifest", manifest.display()))?;
    let digest = json["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["mediaType"] == "application/vnd.ollama.image.model")
        .and_then(|l| l["digest"].as_str())
        .with_context(|| format!("{}: no layer of type application/vnd.ollama.image.model", manifest.display()))?;
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .with_context(|| format!("{}: model digest {digest:?} is not sha256:<64 hex digits>", manifest.display()))?;
    Ok(Some(dir.join("blobs").join(format!("sha256-{hex}"))))
}

/// One weight of type `weight_type`, `n` rows of `k` elements where given.
pub fn single(weight_type: &str, n: Option<u64>, k: Option<u64>) -> Result<ModelWeights> {
    let (t, _, _) = type_facts(weight_type)?;
    let name = t.to_string();
    if let (Some(k), Some(info)) = (k, t.info()) {
        if k % info.block_size != 0 {
            bail!("--k {k} is not a multiple of {name}'s block of {} elements", info.block_size);
        }
    }
    Ok(ModelWeights {
        source: format!("--type {name}"),
        architecture: None,
        n_layer: None,
        tensors: vec![WeightTensor {
            name: format!("{name} weight"),
            ggml_type: name,
            ne00: k,
            ne01: n,
            experts: 0,
            op: MatmulOp::MulMat,
            after_gather: false,
            layer: None,
            head: false,
        }],
        attention: None,
    })
}
