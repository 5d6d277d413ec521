//! Numeric flags of every command at their extremes exit 2 with an error naming the flag, never with a panic. The
//! binary runs under the bounded runner.

use std::path::Path;
use std::time::Duration;

use crate::support::bounded::{self, Bounds};

fn bounds(dir: &Path, seconds: u64) -> Bounds {
    Bounds { deadline: Duration::from_secs(seconds), cwd: Some(dir.to_path_buf()), ..Bounds::default() }
}

/// One numeric flag's case: the command line before the flag, the flag, the values to try, what follows the flag.
type Case<'a> = (&'a [&'a str], &'a str, &'a [&'a str], &'a [&'a str]);

/// "No panic from any numeric flag": each command with its numeric flags at their extremes (u64::MAX, i64::MAX,
/// 4294967295, the most negative i64, NaN and infinities for the decimal ones) exits 2 with an error naming the
/// flag, before it does anything else. (`--n-layer 4294967295` aborted `synth` on a failed allocation; NaN in
/// `maps --interval` and `doctor --tool-timeout` panicked in `Duration::from_secs_f64`.)
#[test]
fn no_numeric_flag_panics() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::support::util::marker_builds(d, 100..=104, 103);
    let huge = ["18446744073709551615", "9223372036854775807", "4294967295", "-9223372036854775808", "-1"];
    // Where -1 (and for tokens to generate, -2) is a meaning of its own.
    let signed = ["18446744073709551615", "9223372036854775807", "4294967295", "-9223372036854775808", "-3"];
    let decimal = ["1e308", "NaN", "inf", "-inf", "-1"];
    let beyond_2_40 = ["18446744073709551615", "9223372036854775807", "-9223372036854775808", "-1"];
    let bisect_base: &[&str] =
        &["bisect", "--good", "100", "--bad", "104", "--builds", "dir:builds", "--db", "x.db", "--runs-dir", "runs"];
    let sweep_base: &[&str] = &["sweep", "--endpoint", "a=http://127.0.0.1:9", "--model", "m", "--dry-run"];
    let predict_base: &[&str] = &["predict", "--arch", "sm_86", "--type", "q4_k", "--n", "4096", "--k", "4096"];
    let synth_base: &[&str] = &["synth", "--preset", "tiny", "--output", "synth.gguf"];
    let cell: &[&str] = &["--crash", "--model", "m.gguf"];
    let cases: Vec<Case> = vec![
        (bisect_base, "--test-timeout", &huge, &["--", "true"]),
        (bisect_base, "--repeat", &huge, &["--", "true"]),
        (bisect_base, "--jobs", &huge, &["--", "true"]),
        (bisect_base, "--num-gpu", &signed, cell),
        (bisect_base, "--num-predict", &signed, cell),
        (bisect_base, "--prompt-tokens", &huge, cell),
        (bisect_base, "--epochs", &huge, cell),
        (bisect_base, "--factor", &decimal, &["--slower", "decode", "--model", "m.gguf"]),
        (sweep_base, "--epochs", &huge, &[]),
        (sweep_base, "--repetitions", &huge, &[]),
        (sweep_base, "--num-gpu", &signed, &[]),
        (sweep_base, "--num-predict", &huge, &[]),
        (sweep_base, "--prompt-tokens", &huge, &[]),
        (sweep_base, "--trace-interval-ms", &huge, &["--trace"]),
        (sweep_base, "--connect-timeout", &decimal, &[]),
        (sweep_base, "--read-timeout", &decimal, &[]),
        (sweep_base, "--request-timeout", &decimal, &[]),
        (sweep_base, "--ready-timeout", &decimal, &[]),
        (sweep_base, "--grace", &decimal, &[]),
        (sweep_base, "--temperature", &decimal[..4], &[]),
        (predict_base, "--prompt-tokens", &beyond_2_40, &[]),
        (predict_base, "--ne11", &beyond_2_40, &[]),
        (predict_base, "--ubatch", &beyond_2_40, &["--prompt-tokens", "100"]),
        (predict_base, "--decode-tokens", &beyond_2_40, &["--prompt-tokens", "100"]),
        (synth_base, "--n-embd", &huge, &[]),
        (synth_base, "--n-layer", &huge, &[]),
        (synth_base, "--n-head", &huge, &[]),
        (synth_base, "--n-head-kv", &huge, &[]),
        (synth_base, "--n-ff", &huge, &[]),
        (synth_base, "--n-vocab", &huge, &[]),
        (synth_base, "--n-expert", &huge, &[]),
        (synth_base, "--n-expert-used", &huge, &[]),
        (&["trace", "--env", "--dir", "t"], "--interval-ms", &huge, &[]),
        (&["maps", "--watch", "1"], "--interval", &decimal, &[]),
        (&["doctor", "--no-tools", "--no-scan"], "--tool-timeout", &decimal, &[]),
    ];
    let mut failures = Vec::new();
    for (before, flag, values, after) in cases {
        for value in values.iter() {
            let flag_value = format!("{flag}={value}");
            let mut args: Vec<&str> = before.to_vec();
            args.push(&flag_value);
            args.extend(after);
            let done = bounded::run(&args, bounds(d, 30));
            // The message names the flag, or the field a spec file sets it with (`--num-gpu`: `num_gpu`).
            let field = flag.trim_start_matches('-').replace('-', "_");
            let named = done.stderr.contains(flag) || done.stderr.contains(&field);
            let ok = done.code == Some(2) && !done.stderr.contains("panicked") && named;
            if !ok {
                failures.push(format!("{}: {}", args.join(" "), done.describe()));
            }
        }
    }
    assert!(failures.is_empty(), "{} case(s):\n{}", failures.len(), failures.join("\n"));
}
