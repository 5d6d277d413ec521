#!/usr/bin/env bash
# Session-13 device call: the Vulkan layer's in-process decode cost (observing vs paused, black box on, ggml labels
# off: what `trace --env` leaves a service with) with the recording path of branch h-vkappend (a dispatch is one append
# to its command buffer's log; entries, trail and pipeline slots are made from the log at vkEndCommandBuffer) against
# main's (a3a38b4), the two layers alternated arm by arm in one machine start. Each arm is one A/B of
# bench/gpu/vk_overhead_ab.sh through ../gpu-2026-12-04-record-cost/calls.sh (its default arm).
# Run from the repository root on the GPU machine with .carry/ as bench/gpu/carry_setup.sh describes, plus
# .carry/bb/ab/{new,main}.so (the two stripped layers), .carry/bb/libbackscope_observer.so and .carry/src/llama.cpp
# (llama.h and ggml's headers): OUT=DIR bash docs/validation/gpu-2026-12-04-append/calls.sh
# Arms: new*, main* (the layer), newnm*, mainnm* (that layer with BACKSCOPE_VK_MARKERS=none: no GPU marker in any command
# buffer; the black box follows submissions by the layer's timeline semaphore instead). Call 1: the default ARMS;
# call 2: ARMS="newnm1 new1 newnm2 new2 newnm3 new3".
set -uo pipefail
C=$PWD/.carry
for arm in ${ARMS:-new1 main1 new2 main2 new3 main3}; do
  kind=${arm%%[0-9]*}
  markers=()
  case $kind in *nm) kind=${kind%nm} markers=(BACKSCOPE_VK_MARKERS=none) ;; esac
  cp "$C/bb/ab/$kind.so" "$C/bb/libbackscope_vklayer.so"
  env "${markers[@]}" OUT="$OUT" ARMS="$arm" bash docs/validation/gpu-2026-12-04-record-cost/calls.sh
done
