//! A crash's signature: the signal, the cause that names the failure best, the op and the first frames, normalised
//! so that identical crashes group.

use crate::signature::{self, SIGNATURE_FRAMES};

use super::crash::{Crash, Frame, Signature};

/// How much a cause line tells about what failed: the most specific one names a crash (an assertion or the GPU
/// runtime's error string before ggml's generic `abort at ggml-cuda.cu:97: CUDA error`).
pub(super) fn cause_rank(kind: &str) -> u8 {
    match kind {
        "ggml_assert" => 0,
        "gpu_error" | "blas_error" | "device_lost" => 1,
        "out_of_memory" | "cpp_terminate" | "load_error" | "go_fatal" | "discovery_failure" => 2,
        "abort" => 4,
        "op_failed" | "gpu_error_location" | "gpu_driver" => 5,
        "header_cut" => 6,
        _ => 3,
    }
}

/// Functions of a GPU error's location that name the op (`ggml_cuda_op_mul_mat_cublas`), not the dispatcher or a
/// synchronisation (`ggml_cuda_compute_forward`, `ggml_backend_cuda_synchronize`).
pub(super) fn is_op_function(function: &[u8]) -> bool {
    [&b"ggml_cuda_op_"[..], b"ggml_cuda_mul_mat", b"ggml_cuda_flash_attn"].iter().any(|p| function.starts_with(p))
}

pub(super) fn signature_of(c: &Crash, known: impl FnOnce(&str) -> Option<String>) -> Signature {
    let mut parts: Vec<String> = Vec::new();
    if let Some(s) = &c.signal {
        if !s.name.is_empty() {
            parts.push(s.name.clone());
        } else if s.in_foreign_code {
            parts.push("signal in cgo".into());
        }
    }
    // The cause that names the failure best (the error string, not ggml's generic abort), then the op that ran.
    // A cut header says nothing of the failure: the runner's own words after it (post predict EOF, its exit status)
    // decide, and the same crash pasted whole or cut groups together.
    let deciding = c.causes.iter().enumerate().filter(|(_, x)| x.kind != "header_cut");
    if let Some(cause) = deciding.min_by_key(|(i, x)| (cause_rank(x.kind), *i)).map(|(_, x)| x) {
        parts.push(signature::normalise_text(&cause.text));
    } else if parts.is_empty() {
        if let Some(first) = c.consequences.first().or(c.causes.first()) {
            parts.push(signature::normalise_text(&first.text));
        }
    }
    if let Some(op) = &c.op {
        parts.push(format!("op {}", op.value));
    } else if let Some(at) = c.causes.iter().find(|x| x.kind == "gpu_error_location") {
        // Where the GPU call failed, when no op is named (`in ggml_cuda_pool_malloc_leg`: the compute pool, not the
        // weights): the function, without the line numbers that change between builds.
        if let Some(function) = at.text.strip_prefix("in ").and_then(|t| t.split(' ').next()) {
            parts.push(format!("in {function}"));
        }
    }
    let go: Vec<String> = c
        .frames
        .iter()
        .filter(|f| !f.native && !signature::is_go_runtime(&f.function))
        .map(|f| signature::go_function(&f.function))
        .collect();
    // A native frame without a symbol (`libggml-base.so.0!?`) is an address, which differs between builds: only named
    // frames decide.
    let frames: Vec<String> = if go.is_empty() {
        let named = |f: &&Frame| f.native && !f.function.ends_with('?');
        c.frames.iter().filter(named).map(|f| f.function.clone()).take(SIGNATURE_FRAMES).collect()
    } else {
        go.into_iter().take(SIGNATURE_FRAMES).collect()
    };
    if !frames.is_empty() {
        parts.push(frames.join(" > "));
    }
    let text = parts.join(" | ");
    let id = known(&text).unwrap_or_else(|| signature::id_of(&text));
    Signature { id, text, frames }
}
