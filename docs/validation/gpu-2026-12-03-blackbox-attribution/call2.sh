#!/usr/bin/env bash
# Session-6 device call 2: the layer's own share in one process (black box on, ggml labels off: what `trace --env`
# leaves a service with), then the real side of the dispatch-order check.
set -uo pipefail
C=$PWD/.carry; T0=$(date +%s); W=/var/tmp/bscost
export BACKSCOPE_OBSERVER_SO=$C/bb/libbackscope_observer.so
mkdir -p $OUT/ab $OUT/order $W
for f in $C/debs/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -x $W/backscope ] || { xz -dc $C/backscope.xz > $W/backscope; chmod +x $W/backscope; }
[ -d $W/llama ] || { mkdir -p $W/llama; tar -xJf $C/llama.tar.xz -C $W/llama; }
BIN=$(dirname "$(find $W/llama -name llama-bench -type f | head -1)")
if [ ! -f $W/q4.gguf ]; then
  LD_LIBRARY_PATH=$BIN $W/backscope synth --preset tinyllama-1.1b --type f16 --vocab $C/ggml-vocab-llama-spm.gguf -o $W/f16.gguf >/dev/null 2>&1
  LD_LIBRARY_PATH=$BIN $BIN/llama-quantize $W/f16.gguf $W/q4.gguf Q4_K_M >/dev/null 2>&1
fi
echo "setup at $(( $(date +%s) - T0 )) s"
if [[ " ${DO:-ab order} " == *" ab "* ]]; then
  LD_LIBRARY_PATH=$BIN MARKERS=0 MODEL=$W/q4.gguf AB_GROUPS=${AB_GROUPS:-40} CONTROL_GROUPS=${CONTROL_GROUPS:-12} NVIDIA_DEBS=$C/debs WORK=/var/tmp/bsvkab \
    timeout ${AB_S:-300} bash bench/gpu/vk_overhead_ab.sh $W/backscope $C/bb/libbackscope_vklayer.so $BIN $C/src/llama.cpp $OUT/ab > $OUT/ab/log.txt 2>&1
  echo "ab rc=$? at $(( $(date +%s) - T0 )) s"; grep -E 'summary|trace:|A/A|vs' $OUT/ab/summary.txt | tail -12
fi
if [[ " ${DO:-ab order} " == *" cost "* ]]; then
  mkdir -p $OUT/cost
  ARMS="${ARMS:-plain env nopre present}" ROUNDS=${ROUNDS:-25} TESTS="${TESTS:--p 0 -n 128}" timeout ${COST_S:-240} bash bench/gpu/blackbox_cost.sh $OUT/cost > $OUT/cost/log.txt 2>&1
  echo "cost rc=$? at $(( $(date +%s) - T0 )) s"; cat $OUT/cost/summary.txt; rm -f $OUT/cost/traces.txt
fi
[[ " ${DO:-ab order} " == *" order "* ]] || exit 0
V=/var/tmp/vc; mkdir -p $V; cp $W/backscope $V/backscope
cp $C/bb/libbackscope_vklayer.so $C/ggml-vocab-llama-spm.gguf $V/; ln -sfn $BIN $V/llama
REAL_ONLY=1 WORK_DIR=/var/tmp/bsvkorder timeout $(( ${END_S:-570} - ($(date +%s) - T0) )) bash bench/gpu/verify_vulkan_order.sh $V $OUT/order > $OUT/order/log.txt 2>&1
echo "order rc=$? at $(( $(date +%s) - T0 )) s"; tail -4 $OUT/order/summary.txt; grep -c RECORDED $OUT/order/summary.txt
(cd $OUT/order && tar -czf traces.tar.gz traces logs && rm -rf traces logs impersonated)
