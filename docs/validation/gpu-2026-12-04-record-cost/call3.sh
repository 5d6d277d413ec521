#!/usr/bin/env bash
# Session-12 device call 3: which part of the recording hooks' cost (call2.sh): the bind hook's pipeline lookup, a
# dispatch's entry (compare-or-append and the sequence hash), or its black-box trail? Switches of
# experiment-switches.patch (not kept): BACKSCOPE_VK_EXP_NOBIND=1 (the bind hook does not observe), _NOENTRY=1 (no
# entry, no hash), _NOTRAIL=1 (no trail). Same setup as call1.sh.
set -uo pipefail
T0=$(date +%s)
# shellcheck source=bench/gpu/carry_setup.sh
. bench/gpu/carry_setup.sh
export BACKSCOPE_OBSERVER_SO=$C/bb/libbackscope_observer.so
echo "setup at $(( $(date +%s) - T0 )) s; model $MODEL"
for arm in ${ARMS:-on nobind noentry notrail on2 nobind2}; do
  e=()
  case $arm in nobind*) e=(BACKSCOPE_VK_EXP_NOBIND=1) ;; noentry*) e=(BACKSCOPE_VK_EXP_NOENTRY=1) ;; notrail*) e=(BACKSCOPE_VK_EXP_NOTRAIL=1) ;; esac
  mkdir -p "$OUT/$arm"
  env "${e[@]}" MARKERS=0 MODEL="$MODEL" TESTS=tg AB_GROUPS="${AB_GROUPS:-50}" CONTROL_GROUPS="${CONTROL_GROUPS:-4}" \
    NVIDIA_DEBS="$C/debs" WORK=/var/tmp/bsvkab timeout "${AB_S:-150}" bash bench/gpu/vk_overhead_ab.sh "$W/backscope" \
    "$C/bb/libbackscope_vklayer.so" "$BIN" "$C/src/llama.cpp" "$OUT/$arm" >"$OUT/$arm/log.txt" 2>&1
  echo "$arm rc=$? at $(( $(date +%s) - T0 )) s"
  grep -E '^summary|trace:' "$OUT/$arm/summary.txt" | sed "s/^/$arm: /"
done
