#!/usr/bin/env bash
# Session-8 device call: the layer of main against the leaner layer (h-vkcost), each as what `trace --env` leaves a
# service with (layer observing, black box on, no ggml labels), in one machine start: in-process A/B (observing vs
# paused) alternating the two builds, then separate processes pinned to the same cores (plain, plain2, env).
set -uo pipefail
C=$PWD/.carry; T0=$(date +%s); W=/var/tmp/bscost
mkdir -p $OUT $W
export BACKSCOPE_OBSERVER_SO=$C/bb/libbackscope_observer.so
for f in $C/debs/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -x $W/backscope ] || { xz -dc $C/backscope.xz > $W/backscope; chmod +x $W/backscope; }
[ -d $W/llama ] || { mkdir -p $W/llama; tar -xJf $C/llama.tar.xz -C $W/llama; }
BIN=$(dirname "$(find $W/llama -name llama-bench -type f | head -1)")
if [ ! -f $W/q4.gguf ]; then
  LD_LIBRARY_PATH=$BIN $W/backscope synth --preset tinyllama-1.1b --type f16 --vocab $C/ggml-vocab-llama-spm.gguf -o $W/f16.gguf >/dev/null 2>&1
  LD_LIBRARY_PATH=$BIN $BIN/llama-quantize $W/f16.gguf $W/q4.gguf Q4_K_M >/dev/null 2>&1
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt 2>&1
echo "setup at $(( $(date +%s) - T0 )) s"
i=0
for arm in ${ARMS-main new main new main new}; do
  i=$((i + 1))
  # vk_decode_ab finds the layer's switch by the library's file name (libbackscope_vklayer*).
  mkdir -p /var/tmp/layers/$arm && cp $C/bb/$arm.so /var/tmp/layers/$arm/libbackscope_vklayer.so
  LD_LIBRARY_PATH=$BIN MARKERS=0 MODEL=$W/q4.gguf AB_GROUPS=${AB_GROUPS:-40} CONTROL_GROUPS=${CONTROL_GROUPS:-6} TESTS=${TESTS:-tg} \
    WORK=/var/tmp/bsvkab timeout ${AB_S:-200} bash bench/gpu/vk_overhead_ab.sh $W/backscope /var/tmp/layers/$arm/libbackscope_vklayer.so $BIN $C/src/llama.cpp $OUT/ab-$i-$arm > $OUT/ab-$i-$arm.log 2>&1
  echo "$i $arm rc=$? at $(( $(date +%s) - T0 )) s: $(grep -h '^summary' $OUT/ab-$i-$arm/summary.txt | tr '\n' ' ' | cut -c1-400)"
done
if [ -n "${COST_ROUNDS:-}" ]; then
  cp $C/bb/${COST_LAYER:-new}.so $C/bb/libbackscope_vklayer.so
  ARMS="${COST_ARMS:-plain env plain2}" ROUNDS=$COST_ROUNDS TESTS="-p 0 -n 128" REPS=${REPS:-3} PIN=${PIN:-2-9} \
    timeout $(( ${END_S:-560} - ($(date +%s) - T0) )) bash bench/gpu/blackbox_cost.sh $OUT/cost > $OUT/cost.log 2>&1
  echo "cost rc=$? at $(( $(date +%s) - T0 )) s"; cat $OUT/cost/summary.txt; rm -f $OUT/cost/traces.txt
fi
