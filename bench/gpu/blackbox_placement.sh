#!/usr/bin/env bash
# The black box's marker placements on the GPU machine: llama-bench (TinyLlama-shaped Q4_K_M, pp512 + tg128, -r 5) per
# round for each arm of ARMS (plain; sync, dispatch, barrier, buffer: BACKSCOPE_VK_MARKERS; off: BACKSCOPE_VK_BLACKBOX=0),
# then vkspin's hang, grouped hang and crash under the default placement. Run from the repository root with .carry/
# as bench/gpu/blackbox_h200.sh describes (bb/ also holding vkspin, spin.spv, liblost_layer.so, the layer).
# Usage: [ARMS="plain sync dispatch off"] [ROUNDS="1 2 3"] bash bench/gpu/blackbox_placement.sh
C=$PWD/.carry; W=/var/tmp/ab
if [ ! -f $W/q4.gguf ]; then
  mkdir -p $W; for f in $C/debs/*.deb; do dpkg -x $f /; done; ldconfig
  xz -dc $C/backscope.xz > $W/backscope; chmod +x $W/backscope
  mkdir -p $W/llama; tar -xJf $C/llama.tar.xz -C $W/llama
  B0=$(dirname $(find $W/llama -name llama-bench -type f|head -1))
  LD_LIBRARY_PATH=$B0 $W/backscope synth --preset tinyllama-1.1b --type f16 --vocab $C/ggml-vocab-llama-spm.gguf -o $W/f16.gguf >/dev/null 2>&1
  LD_LIBRARY_PATH=$B0 $B0/llama-quantize $W/f16.gguf $W/q4.gguf Q4_K_M >/dev/null 2>&1
fi
BIN=$(dirname $(find $W/llama -name llama-bench -type f|head -1))
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json LD_LIBRARY_PATH=$BIN
man() { mkdir -p $1; printf '{"file_format_version":"1.1.2","layer":{"name":"%s","type":"GLOBAL","library_path":"%s","api_version":"1.3.0","implementation_version":"1","description":"t","functions":{"vkNegotiateLoaderLayerInterfaceVersion":"vkNegotiateLoaderLayerInterfaceVersion"}}}\n' $2 $3 > $1/l.json; }
man $W/m VK_LAYER_BACKSCOPE_dispatch $C/bb/libbackscope_vklayer.so
man $W/g VK_LAYER_TEST_lost $C/bb/liblost_layer.so
for r in ${ROUNDS:-1 2 3}; do for arm in ${ARMS:-plain sync dispatch off}; do
  e=(); [ $arm != plain ] && e=(VK_ADD_LAYER_PATH=$W/m VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch BACKSCOPE_TRACE_DIR=$W/t-$arm-$r)
  [ $arm = off ] && e+=(BACKSCOPE_VK_BLACKBOX=0); [ $arm = dispatch ] && e+=(BACKSCOPE_VK_MARKERS=dispatch); [ $arm = sync ] && e+=(BACKSCOPE_VK_MARKERS=sync); [ $arm = barrier ] && e+=(BACKSCOPE_VK_MARKERS=barrier); [ $arm = buffer ] && e+=(BACKSCOPE_VK_MARKERS=buffer)
  mkdir -p $W/t-$arm-$r
  echo "$r $arm pp512,tg128 t/s: $(env "${e[@]}" $BIN/llama-bench -m $W/q4.gguf -ngl 99 -p 512 -n 128 -r 5 -o csv 2>/dev/null | tail -2 | awk -F, '{printf "%s ", $(NF-1)}')"
done; done
for mode in "hang 3" "hang 3 grouped" "segv"; do
  rm -rf $W/s; mkdir $W/s
  LOST_AFTER=1000 BACKSCOPE_VK_HANG_MS=500 VK_ADD_LAYER_PATH=$W/m:$W/g VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch:VK_LAYER_TEST_lost \
    BACKSCOPE_TRACE_DIR=$W/s timeout 30 $C/bb/vkspin $C/bb/spin.spv $mode >/dev/null 2>&1
  echo "vkspin $mode: $(grep -ho '"progress":{[^}]*}' $W/s/*.jsonl | head -1)"
done
