#!/usr/bin/env bash
# Session-11 device call 6: what BACKSCOPE_VK_MARKERS=none does on a driver that offers buffer markers. vkspin's
# hang (a real GPU spin in submission 2; watcher at 0.5 s), with the default and with `none`: the default's record
# says `by: command_buffer_marker`, `none`'s must say `by: submission` and still name the spinning pipeline as
# unfinished.
set -uo pipefail
C=$PWD/.carry
W=/var/tmp/bs6
mkdir -p $W
for f in "$C"/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p $W/ours
printf '{"file_format_version":"1.1.2","layer":{"name":"VK_LAYER_BACKSCOPE_dispatch","type":"GLOBAL","library_path":"%s","api_version":"1.3.0","implementation_version":"1","description":"t","functions":{"vkNegotiateLoaderLayerInterfaceVersion":"vkNegotiateLoaderLayerInterfaceVersion"}}}\n' \
  "$C/bb/libbackscope_vklayer.so" >$W/ours/layer.json
for markers in buffer none; do
  mkdir -p $W/$markers
  VK_ADD_LAYER_PATH=$W/ours VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch BACKSCOPE_TRACE_DIR=$W/$markers \
    BACKSCOPE_VK_MARKERS=$markers BACKSCOPE_VK_HANG_MS=500 timeout 60 "$C/bb/vkspin" "$C/bb/spin.spv" hang 3 \
    >$W/$markers.stdout 2>&1
  echo "markers=$markers exit $?: $(tr '\n' ' ' <$W/$markers.stdout | cut -c1-300)"
  mkdir -p $OUT/$markers && cp $W/$markers/*.jsonl $OUT/$markers/
  grep -hoE '"hang_ms":.*' $W/$markers/*.jsonl | cut -c1-700
done
