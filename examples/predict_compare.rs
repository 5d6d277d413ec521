//! Prediction vs observation for one traced llama-bench case, for bench/gpu/validate_predict.sh (until
//! `backscope predict` is wired into the command line): predicts the kernel families of a GGUF model on an arch
//! for a prompt of N tokens and G decode steps, compares them with a `backscope trace --json` summary, and prints
//! one tab-separated row per predicted (phase, type) plus one per observed kernel no phase predicts.
//!
//!     cargo run --release --example predict_compare -- --arch sm_90 --model tl-q4km.gguf \
//!         --prompt 9 --decode 0 --trace trace-q4km-p9.json [--ggml 11434] [--label q4km-p9] [--json out.json]

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use backscope::predict::{self, Batch, ObservedSource, PredictOptions, WeightSource};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut arch, mut model, mut trace, mut json, mut label) = (None, None, None, None, String::new());
    let (mut prompt, mut decode, mut ggml) = (0u64, 0u64, String::from("11434"));
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--arch" => arch = Some(value()?),
            "--model" => model = Some(PathBuf::from(value()?)),
            "--trace" => trace = Some(PathBuf::from(value()?)),
            "--json" => json = Some(PathBuf::from(value()?)),
            "--label" => label = value()?,
            "--prompt" => prompt = value()?.parse().context("--prompt")?,
            "--decode" => decode = value()?.parse().context("--decode")?,
            "--ggml" => ggml = value()?,
            other => bail!("unknown argument {other}"),
        }
    }
    let (Some(arch), Some(model), Some(trace)) = (arch, model, trace) else {
        bail!("usage: predict_compare --arch A --model M.gguf --prompt N --decode G --trace T.json [--ggml V] [--label L] [--json OUT]");
    };
    let mut o = PredictOptions::new(arch, WeightSource::Model(model), Batch::PromptTokens(prompt));
    o.decode_tokens = Some(decode);
    o.ggml = ggml;
    o.observed = Some(ObservedSource::TraceSummary(trace));
    let r = predict::run(&o)?;
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_vec(&r)?).with_context(|| format!("writing {}", path.display()))?;
    }
    let c = r.comparison.as_ref().context("comparison missing")?;
    for it in &c.items {
        println!(
            "{label}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            it.phase,
            it.ggml_type,
            it.ne11,
            it.predicted.as_deref().unwrap_or("-"),
            it.verdict,
            it.matching_launches,
            it.note
        );
    }
    for u in &c.unexplained {
        println!(
            "{label}\tobserved\t{}\t{}\t-\tContradicted\t{}\tpredicted by no phase: {}",
            u.ggml_type.as_deref().unwrap_or("-"),
            u.ncols.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
            u.launches,
            u.kernel
        );
    }
    Ok(())
}
