#!/usr/bin/env bash
# What each way of learning GPU progress costs a decode-shaped stream of work on the GPU machine's own driver, with
# no layer loaded: bench/gpu/vk_marker_cost.c (its header lists the modes: buffer markers in host or device memory,
# at the end or the start of a buffer, at COMPUTE_SHADER, NVIDIA's checkpoints, a timeline semaphore in an extra
# batch or in the application's). Five runs: the default (1 workgroup a dispatch), 64 workgroups a dispatch (busier
# GPU work between the same commands), with VK_EXT_device_fault enabled on the device as the layer enables it,
# with only the buffers of 32 dispatches or more marked (4 of the 7: fewer markers, as the layer's
# BACKSCOPE_VK_MARKER_MIN_DISPATCHES gives by counting dispatches since the last marked buffer),
# and NVIDIA's checkpoints against markers on a device with that extension enabled (the layer never enables it).
# Run from the repository root with .carry/ laid out by bench/gpu/make_carry.sh (bb/vk_marker_cost, bb/noop.spv,
# debs/). About a minute.
# Usage: [ROUNDS=2000] bash bench/gpu/marker_cost.sh OUT_DIR
set -euo pipefail
C=$PWD/.carry
OUT=$(mkdir -p "$1" && realpath "$1")
# The GPU machine has no Vulkan loader of its own (elsewhere, e.g. lavapipe with VK_DRIVER_FILES set, nothing is
# unpacked).
if [ -d /usr/local/nvidia ] && [ ! -f /var/tmp/bscost/.unpacked ] && [ ! -f /var/tmp/marker-cost.unpacked ]; then
  for f in "$C"/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
  touch /var/tmp/marker-cost.unpacked
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1 || true
run() { # NAME ENV...
  local name=$1
  shift
  env "$@" "$C/bb/vk_marker_cost" "$C/bb/noop.spv" "${ROUNDS:-2000}" >"$OUT/$name.jsonl" 2>"$OUT/$name.txt" || true
  echo "== $name ($*)"
  cat "$OUT/$name.txt"
}
run default
run groups64 MARKER_COST_GROUPS=64
run fault MARKER_COST_FAULT=1
run mark32 MARKER_COST_MARK_MIN=32
run checkpoints MARKER_COST_CHECKPOINTS=1 MARKER_COST_MODES="none marker_host checkpoint"
