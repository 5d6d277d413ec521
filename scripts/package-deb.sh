#!/usr/bin/env bash
# Build backscope's Debian package: /usr/bin/backscope, the CUDA/HIP observer and the Vulkan layer in
# /usr/lib/backscope/, the layer's manifest in /usr/share/vulkan/explicit_layer.d/, manual pages, bash/zsh/fish
# completions, README and licenses (the assets: Cargo.toml, [package.metadata.deb]). Prints the .deb's path.
# Usage: scripts/package-deb.sh [PROFILE]   (default: release; tests pass `dev` to package the build they already have)
#        scripts/package-deb.sh --tool      (only install cargo-deb; scripts/test.sh does it beside other work)
# Installs cargo-deb (pinned) with `cargo install` into the cache the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE="${1:-release}"
CARGO_DEB_VERSION=3.8.0
log() { echo "package-deb: $*" >&2; }

# cargo-deb lives in the cache keyed by its version, so a CI machine with the cache does not build it again
# (3.5 minutes on 2 cores); `cargo deb` finds it on the PATH as a cargo subcommand.
TOOLS="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}/tools/cargo-deb-$CARGO_DEB_VERSION"
export PATH="$TOOLS/bin:$PATH"
if [ "$(cargo deb --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
  log "installing cargo-deb $CARGO_DEB_VERSION into $TOOLS"
  cargo install cargo-deb --locked --version "$CARGO_DEB_VERSION" --root "$TOOLS" >&2
fi
[ "$PROFILE" = --tool ] && exit 0

# The workspace's default members: the binary, the observer and the layer, in one build.
cargo build --profile "$PROFILE" -q >&2
TARGET="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
OUT_DIR="$TARGET/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")"
# Made by the binary just built, from the definitions it runs with (src/cli/generate.rs). cargo-deb compresses
# man pages it does not see as built; these are under the target directory, so they are compressed here.
GEN="$OUT_DIR/package"
rm -rf "$GEN"
"$OUT_DIR/backscope" generate man "$GEN/man"
gzip -9n "$GEN"/man/*.1
"$OUT_DIR/backscope" generate completions "$GEN/completions"
"$OUT_DIR/backscope" generate vulkan-manifest --library /usr/lib/backscope/libbackscope_vklayer.so "$GEN"

# --no-build: built above; cargo-deb maps the assets' `target/release/` to the profile's directory.
cargo deb --no-build --strip --profile "$PROFILE" -p backscope -q "${@:2}"
