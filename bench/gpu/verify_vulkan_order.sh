#!/usr/bin/env bash
# Issue 29 item 3, "dispatch for dispatch": on the GPU machine, each case runs twice through the same llama.cpp Vulkan
# build, with the Vulkan layer recording the order of dispatches (its `sequence` records: each distinct sequence of
# pipelines a submitted command buffer dispatched):
#   1. for real on the NVIDIA GPU (NVIDIA's Vulkan driver): `backscope trace -- llama-bench …`;
#   2. impersonating the H200's captured profile on lavapipe (Mesa's CPU Vulkan driver, from carried .debs unpacked
#      into a private root under the work directory, never onto the system): `backscope predict --backend vulkan
#      --device PROFILE … --verify LLAMA_BENCH --against REAL_DIR --json`, which runs llama-bench with the same
#      arguments and holds the impersonated run against the real one: per pipeline and shader the dispatches, then
#      sequence by sequence the order, naming the first dispatch where they differ (sequence, position, expected vs
#      got).
# Both sides run with ggml's debug markers (backscope sets GGML_VK_DEBUG_MARKERS=1), so pipelines carry ggml's names.
#
# Usage: [CASES="…"] [PROFILE=h200-nvidia] [REAL_ONLY=1 | RECORDED=DIR] bench/gpu/verify_vulkan_order.sh CARRY_DIR OUT_DIR
#   CARRY_DIR holds: backscope and libbackscope_vklayer.so (release builds of the same commit), llama/ (the bin
#   directory of scripts/llama-build.sh vulkan), debs/ (the Vulkan loader as for record_vulkan_dispatch.sh: libvulkan1
#   libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 from Debian bookworm; not needed where a loader is installed),
#   ggml-vocab-llama-spm.gguf, and lavapipe for the impersonated side, either as lavapipe.tar.xz (a root tree with
#   usr/lib/x86_64-linux-gnu/libvulkan_lvp.so and the libraries it links; made from the debs below with
#   `tar -cJf lavapipe.tar.xz lib/x86_64-linux-gnu usr/lib/x86_64-linux-gnu` in the directory they were unpacked to,
#   about 41 MB) or as lavapipe/, the debs themselves (about 49 MB), from Debian bookworm:
#     apt-get download mesa-vulkan-drivers libllvm15 libdrm2 libdrm-common libedit2 libelf1 libexpat1 libffi8 \
#       libicu72 libxml2 libz3-4 libzstd1 zlib1g libtinfo6 libbsd0 libmd0 liblzma5 libwayland-client0 libx11-xcb1 \
#       libxau6 libxdmcp6 libxcb1 libxcb-dri3-0 libxcb-present0 libxcb-randr0 libxcb-shm0 libxcb-sync1 \
#       libxcb-xfixes0 libxshmfence1
#   — libc6, libgcc-s1 and libstdc++6 are deliberately not among them: the system's serve. Where lavapipe is
#   installed (the CI machine) neither is needed.
#   Modes, for a machine where carrying lavapipe does not fit: REAL_ONLY=1 records the real side only (OUT_DIR/traces,
#   no lavapipe needed); RECORDED=DIR then runs only the impersonated side, anywhere with lavapipe, against the
#   real traces DIR/CASE.traces a REAL_ONLY run wrote. Both halves together are the default.
#   A case is [cm1-]MODEL-ngl-N-SIZE: MODEL one of tl-f16 tl-q4km tl-q8 (TinyLlama-1.1B-shaped) moe-q8 moe-q4km
#   (Mixtral-routed tiny-moe), N the layers offloaded (-ngl), SIZE pN (an N-token prompt, no decode) or tgN (an
#   N-token decode, no prompt); `cm1-` sets GGML_VK_DISABLE_COOPMAT2=1 on both sides. The default is the 54 cases of
#   tests/vulkan/impersonate.rs. A case takes seconds (the impersonated side's shaders do no work); split CASES over
#   several calls where one call may take at most 10 minutes (OUT_DIR accumulates).
#   Dry run anywhere with lavapipe (no NVIDIA): REAL_ICD=lavapipe REAL_IMPERSONATE=PROFILE makes the "real" side an
#   impersonated run too (every case must then be EQUAL); REAL_ICD=lavapipe alone runs plain lavapipe (cases differ
#   where ggml's rules for the two devices do).
# Results: OUT_DIR/summary.txt (one line per case: EQUAL, DIFFER with the first difference, RECORDED (REAL_ONLY), or
#   FAILED, then totals; "EQUAL (order not recorded)" where RECORDED traces came from a layer without order records), OUT_DIR/order.jsonl (per case predict's `against` object), OUT_DIR/traces/CASE.traces (the
#   real run's trace, with its sequence records: the expected side tests/vulkan/impersonate.rs holds impersonation
#   against, once committed), OUT_DIR/impersonated/CASE.traces, OUT_DIR/devices.txt, OUT_DIR/logs/ (each run's
#   output). The exit status is 0 when every case ran and was EQUAL (or recorded), 1 otherwise.
set -euo pipefail
CARRY=$(realpath "$1")
OUT=$(realpath -m "$2")
PROFILE=${PROFILE:-h200-nvidia}
[ -n "${RECORDED:-}" ] && RECORDED=$(realpath "$RECORDED")
W=${WORK_DIR:-/var/tmp/bsvkorder}
mkdir -p "$W" "$OUT/traces" "$OUT/impersonated" "$OUT/logs"
BS="$CARRY/backscope"
LAYER="$CARRY/libbackscope_vklayer.so"
BIN="$CARRY/llama"
chmod +x "$BS" "$BIN"/llama-* 2>/dev/null || true
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

# The Vulkan loader onto the system (as the other GPU scripts do), lavapipe into a private root.
if [ -d "$CARRY/debs" ]; then
  for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
LVP_ROOT="$W/lavapipe-root"
LVP_ICD="$W/lvp_icd.json"
rm -rf "$LVP_ROOT" && mkdir -p "$LVP_ROOT"
if [ -f "$CARRY/lavapipe.tar.xz" ]; then
  tar -xJf "$CARRY/lavapipe.tar.xz" -C "$LVP_ROOT"
elif [ -d "$CARRY/lavapipe" ]; then
  for f in "$CARRY"/lavapipe/*.deb; do dpkg -x "$f" "$LVP_ROOT"; done
fi
if [ -f "$LVP_ROOT/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so" ]; then
  LVP_LIB="$LVP_ROOT/usr/lib/x86_64-linux-gnu"
  # Debian's packages still put some libraries under /lib.
  LVP_PATH="$LVP_LIB:$LVP_ROOT/lib/x86_64-linux-gnu"
else
  LVP_LIB=/usr/lib/x86_64-linux-gnu # a machine with lavapipe installed (the CI machine, a dry run)
  LVP_PATH=$LVP_LIB
fi
if [ -z "${REAL_ONLY:-}" ] || [ "${REAL_ICD:-nvidia}" = lavapipe ]; then
  [ -f "$LVP_LIB/libvulkan_lvp.so" ] || { log "no lavapipe: $LVP_LIB/libvulkan_lvp.so (carry lavapipe.tar.xz)"; exit 2; }
fi
printf '{"file_format_version":"1.0.0","ICD":{"library_path":"%s","api_version":"1.3.230"}}\n' \
  "$LVP_LIB/libvulkan_lvp.so" >"$LVP_ICD"
NVIDIA_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
case ${REAL_ICD:-nvidia} in
  nvidia) REAL_ENV=(VK_DRIVER_FILES="$NVIDIA_ICD") ;;
  # ggml leaves a CPU-type device (lavapipe) out unless it is named.
  lavapipe) REAL_ENV=(VK_DRIVER_FILES="$LVP_ICD" GGML_VK_VISIBLE_DEVICES=0
    LD_LIBRARY_PATH="$LVP_PATH:$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}") ;;
  *) echo "REAL_ICD: nvidia or lavapipe" >&2; exit 2 ;;
esac
IMP_ENV=(VK_DRIVER_FILES="$LVP_ICD" LD_LIBRARY_PATH="$LVP_PATH:$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset GGML_VK_VISIBLE_DEVICES
{
  if [ -z "${RECORDED:-}" ]; then
    echo "== real side (${REAL_ICD:-nvidia})"
    env "${REAL_ENV[@]}" "$BIN/llama-bench" --list-devices 2>&1 || true
  fi
  if [ -z "${REAL_ONLY:-}" ]; then
    echo "== impersonating side (lavapipe)"
    env "${IMP_ENV[@]}" GGML_VK_VISIBLE_DEVICES=0 "$BIN/llama-bench" --list-devices 2>&1 || true
  fi
} >"$OUT/devices.txt"
log "devices: $(grep -i 'vulkan\|llvmpipe\|NVIDIA' "$OUT/devices.txt" | tr '\n' ' ')"

synth() { # PRESET NAME
  [ -f "$W/$2-f16.gguf" ] || "$BS" synth --preset "$1" --type f16 --vocab "$CARRY/ggml-vocab-llama-spm.gguf" \
    -o "$W/$2-f16.gguf" >>"$OUT/logs/models.log" 2>&1
}
quantize() { # NAME SUFFIX TYPE
  [ -f "$W/$1-$2.gguf" ] || "$BIN/llama-quantize" "$W/$1-f16.gguf" "$W/$1-$2.gguf" "$3" >>"$OUT/logs/models.log" 2>&1
}

DEFAULT_CASES=""
for name in tl-f16 tl-q4km tl-q8; do
  for s in p1 p8 p9 p64 p512 tg16; do DEFAULT_CASES+=" $name-ngl-99-$s"; done
  for s in p8 p64 p512; do DEFAULT_CASES+=" cm1-$name-ngl-99-$s"; done
done
for m in moe-q8-ngl-99 moe-q4km-ngl-99 moe-q4km-ngl-1 tl-q4km-ngl-0 tl-q4km-ngl-11; do
  for s in p1 p9 p64 p512 tg16; do DEFAULT_CASES+=" $m-$s"; done
done
DEFAULT_CASES+=" cm1-moe-q4km-ngl-99-p64 cm1-moe-q4km-ngl-99-p512"

status=0
for case in ${CASES:-$DEFAULT_CASES}; do
  switches=()
  case $case in cm1-*) switches=(GGML_VK_DISABLE_COOPMAT2=1) ;; esac
  rest=${case#cm1-}
  model=${rest%%-ngl-*}
  rest=${rest#*-ngl-}
  ngl=${rest%%-*}
  size=${rest#*-}
  case $size in
    tg*) prompt=0 decode=${size#tg} ;;
    p*) prompt=${size#p} decode=0 ;;
    *) log "$case: SIZE must be pN or tgN"; status=1; continue ;;
  esac
  case $model in
    tl-*) synth tinyllama-1.1b tl ;;
    moe-*) synth tiny-moe moe ;;
    *) log "$case: unknown model $model"; status=1; continue ;;
  esac
  base=${model%-*}
  case ${model##*-} in
    f16) ;;
    q4km) quantize "$base" q4km Q4_K_M ;;
    q8) quantize "$base" q8 Q8_0 ;;
  esac
  gguf="$W/$model.gguf"
  # The real run, with exactly the llama-bench arguments `predict --verify` gives the impersonated one.
  real="$W/real-$case"
  rm -rf "$real"
  if [ -n "${RECORDED:-}" ]; then
    mkdir -p "$real"
    [ -f "$RECORDED/$case.traces" ] || { log "$case: FAILED (no $RECORDED/$case.traces)"; status=1; continue; }
    cp "$RECORDED/$case.traces" "$real/trace-1.jsonl"
  else
    impersonate=()
    [ -n "${REAL_IMPERSONATE:-}" ] && impersonate=(--impersonate "$REAL_IMPERSONATE")
    if ! env "${REAL_ENV[@]}" "${switches[@]}" "$BS" trace --dir "$real" --vklayer "$LAYER" "${impersonate[@]}" -- \
      "$BIN/llama-bench" -m "$gguf" -ngl "$ngl" -r 1 -p "$prompt" -n "$decode" -ub 512 -ctk f16 -ctv f16 \
      >"$OUT/logs/$case.real.log" 2>&1; then
      log "$case: FAILED (the real run): $(tail -3 "$OUT/logs/$case.real.log" | tr '\n' ' ')"
      status=1
      continue
    fi
    files=("$real"/trace-*.jsonl)
    [ -f "${files[0]}" ] && cp "${files[0]}" "$OUT/traces/$case.traces"
    if [ -n "${REAL_ONLY:-}" ]; then
      log "$case: RECORDED ($(grep -c '"sequence"' "${files[0]}" || true) dispatch sequences)"
      continue
    fi
  fi
  json="$W/predict-$case.json"
  if ! env "${IMP_ENV[@]}" "${switches[@]}" "$BS" predict --json --backend vulkan --device "$PROFILE" --model "$gguf" \
    --prompt-tokens "$prompt" --decode-tokens "$decode" --num-gpu "$ngl" --vklayer "$LAYER" \
    --verify "$BIN/llama-bench" --against "$real" >"$json" 2>"$OUT/logs/$case.impersonated.log"; then
    log "$case: FAILED (the impersonated run): $(tail -3 "$OUT/logs/$case.impersonated.log" | tr '\n' ' ')"
    status=1
    continue
  fi
  imp_dir=$(sed -n 's/.*; trace in \(.*\)$/\1/p' "$OUT/logs/$case.impersonated.log" | tail -1)
  imp_files=("$imp_dir"/trace-*.jsonl)
  [ -n "$imp_dir" ] && [ -f "${imp_files[0]}" ] && cp "${imp_files[0]}" "$OUT/impersonated/$case.traces"
  line=$(python3 - "$case" "$json" "$OUT/order.jsonl" <<'PY'
import json, sys
case, path, out = sys.argv[1:4]
report = json.load(open(path))
against = report["against"]
with open(out, "a") as f:
    f.write(json.dumps({"case": case, "against": against}) + "\n")
pipelines, order = against["pipelines"], against["order"]
said = {c["id"].rsplit(".", 1)[1]: c["statement"] for c in report["claims"]
        if c["id"].startswith("predict.vulkan.verify.against.")}
if pipelines["equal"] and order["verdict"] == "equal":
    verdict = "EQUAL"
elif pipelines["equal"] and order["verdict"] == "not_recorded":
    verdict = "EQUAL (order not recorded)"
else:
    verdict = "DIFFER"
print(f"{verdict} | pipelines: {said['dispatches']} | order: {said['order']}")
PY
  ) || { log "$case: FAILED (reading predict's JSON)"; status=1; continue; }
  log "$case: $line"
  case $line in EQUAL*) ;; *) status=1 ;; esac
done
log "totals: $(grep -c ': EQUAL |' "$OUT/summary.txt" || true) EQUAL," \
  "$(grep -c ': EQUAL (order not recorded)' "$OUT/summary.txt" || true) EQUAL with order not recorded," \
  "$(grep -c ': DIFFER' "$OUT/summary.txt" || true) DIFFER," \
  "$(grep -c ': RECORDED' "$OUT/summary.txt" || true) RECORDED, $(grep -c ': FAILED' "$OUT/summary.txt" || true) FAILED" \
  "(all calls into this OUT_DIR)"
exit $status
