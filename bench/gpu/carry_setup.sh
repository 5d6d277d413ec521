#!/usr/bin/env bash
# Sourced by the GPU machine's scripts: lays out what a device call carries in .carry/ (backscope.xz, debs/ with
# Debian's Vulkan loader and GL libraries, llama.tar.xz with a stripped Vulkan llama.cpp bin dir, and
# ggml-vocab-llama-spm.gguf) under /var/tmp/bscost, once per machine start, and makes a model for each preset asked.
# Sets: C (the carry dir), W (the work dir), BIN (llama.cpp's bin dir; LLAMA_BIN overrides it), MODEL (the Q4_K_M of
# PRESET, default tinyllama-1.1b, with zero weights: the speed of a Q4_K_M matrix product does not depend on its
# values, and llama-quantize gets through zeros in seconds), and exports the loader's NVIDIA ICD and LD_LIBRARY_PATH.
C=$PWD/.carry
W=/var/tmp/bscost
mkdir -p $W
if [ ! -f $W/.unpacked ]; then
  for f in "$C"/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
  xz -dc "$C/backscope.xz" >$W/backscope && chmod +x $W/backscope
  if [ -z "${LLAMA_BIN:-}" ]; then mkdir -p $W/llama && tar -xJf "$C/llama.tar.xz" -C $W/llama; fi
  touch $W/.unpacked
fi
BIN=${LLAMA_BIN:-$(dirname "$(find $W/llama -name llama-bench -type f | head -1)")}
PRESET=${PRESET:-tinyllama-1.1b}
MODEL=$W/$PRESET-q4km.gguf
if [ ! -f "$MODEL" ]; then
  vocab=$C/ggml-vocab-llama-spm.gguf
  [ -f "$vocab" ] || vocab=$BIN/ggml-vocab-llama-spm.gguf
  LD_LIBRARY_PATH=$BIN $W/backscope synth --preset "$PRESET" --zero-weights --type f16 --vocab "$vocab" \
    -o $W/f16.gguf >&2
  LD_LIBRARY_PATH=$BIN "$BIN/llama-quantize" $W/f16.gguf "$MODEL.part" Q4_K_M >/dev/null 2>&1
  mv "$MODEL.part" "$MODEL"
  rm -f $W/f16.gguf
fi
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json LD_LIBRARY_PATH=$BIN
