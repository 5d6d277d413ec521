//! HIP programs built here with Debian's hipcc: code objects for the legacy targets, and a program that launches a
//! kernel named like ggml's MMVQ (without a GPU the launch fails, but the observer records it).

use std::path::{Path, PathBuf};

use crate::support::util::{backscope, hipcc, observer_library, run, stdout_ok};

/// One kernel and an empty `main`: the smallest program with a code object per target.
pub const SCALE_KERNEL: &str = r#"#include <hip/hip_runtime.h>
__global__ void scale(float* y, float s) { y[threadIdx.x] *= s; }
int main() { return 0; }
"#;

/// `source` written to `dir/k.hip` and built by hipcc into `dir/k` for the legacy targets the investigation was
/// about: gfx900, gfx906 and gfx1030.
pub fn legacy_targets_program(dir: &Path, source: &str) -> PathBuf {
    let src = dir.join("k.hip");
    std::fs::write(&src, source).unwrap();
    let exe = dir.join("k");
    stdout_ok(
        hipcc()
            .args(["--offload-arch=gfx900", "--offload-arch=gfx906", "--offload-arch=gfx1030"])
            .arg(&src)
            .arg("-o")
            .arg(&exe),
    );
    exe
}

/// `dir/mmvq`: a HIP program that launches a kernel named like ggml's `mul_mat_vec_q<Q4_K, 1>` once, through
/// hipLaunchKernel (without a GPU a `<<<>>>` launch stops before it, crates/observer/tests/c/kernels.hip; this one
/// fails with hipErrorNoDevice, and the observer records it).
pub fn mmvq_program(dir: &Path) -> PathBuf {
    const SRC: &str = r#"#include <hip/hip_runtime.h>
enum ggml_type { GGML_TYPE_Q4_K = 12 };
template <ggml_type T, int ncols_dst>
__global__ void mul_mat_vec_q(const void* x, float* y) { y[threadIdx.x] = ncols_dst * (int)T; }
int main() {
    const void* x = nullptr;
    float* y = nullptr;
    void* args[] = {&x, &y};
    hipLaunchKernel((const void*)mul_mat_vec_q<GGML_TYPE_Q4_K, 1>, dim3(1), dim3(32), args, 0, nullptr);
    return 0;
}
"#;
    let src = dir.join("mmvq.hip");
    std::fs::write(&src, SRC).unwrap();
    let exe = dir.join("mmvq");
    stdout_ok(hipcc().arg("--offload-arch=gfx900").arg(&src).arg("-o").arg(&exe));
    exe
}

/// [`mmvq_program`] built in `dir` and run under `backscope trace` with the observer; the trace directory
/// (`dir/traces`) it wrote. The program's launch fails without a GPU, so only its ending by itself is checked.
pub fn traced_mmvq_program(dir: &Path) -> PathBuf {
    let exe = mmvq_program(dir);
    let traces = dir.join("traces");
    let out = run(backscope()
        .args(["trace", "--observer"])
        .arg(observer_library())
        .arg("--dir")
        .arg(&traces)
        .arg("--")
        .arg(&exe));
    assert!(out.status.code().is_some(), "{}", String::from_utf8_lossy(&out.stderr));
    traces
}
