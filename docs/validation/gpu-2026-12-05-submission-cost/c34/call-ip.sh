#!/usr/bin/env bash
# Session 34's in-process call, from the repository root on the GPU machine: the layer observing against paused in
# one process (bench/gpu/vk_overhead_ab.sh), in rounds short enough that a group of four (ABBA, about 60 ms) sits
# inside one speed state of a host whose cores change speed every second or so (c34/scan-raw.txt: every core of
# session 34's H100 did). Eight tokens a round, the first untimed; AB ABBA groups (3000) and CONTROL A/A groups
# (1000). The card's name and core 3's fixed loop (host_speed.sh, 20 runs) are written first, to describe the host.
# Usage: [AB=3000] [CONTROL=1000] bash call-ip.sh NAME   (writes $OUT/NAME/)
set -uo pipefail
o=$OUT/$1; mkdir -p "$o"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$o/gpu-first.txt"
bash bench/gpu/host_speed.sh 3 20 "$o/host-raw.txt" | tee "$o/host.txt"
. bench/gpu/carry_setup.sh
(cd "$C/.." && sha256sum .carry/bb/*.so .carry/bb/vk_decode_ab) > "$o/carry.sha256"
VK_DECODE_AB=$C/bb/vk_decode_ab MODEL=$MODEL N_GEN=8 AB_GROUPS=${AB:-3000} CONTROL_GROUPS=${CONTROL:-1000} \
  TESTS=tg bash bench/gpu/vk_overhead_ab.sh "$W/backscope" "$C/bb/libbackscope_vklayer.so" "$BIN" - "$o" 2>&1 | tail -12
