#!/usr/bin/env bash
# The Debian package, as a user gets it (issue 27): build it, install it as root with dpkg, then use only the
# installed files, from an empty environment in a directory outside the checkout: `backscope --version`,
# `man backscope` and a subcommand's page, the bash completion, `trace --env`/`--systemd` naming the installed paths,
# and a `trace` of a Vulkan compute program on lavapipe (Mesa's CPU Vulkan driver) that counts its pipelines through
# the installed layer. Then `dpkg -r` (and `--purge`, were anything left), and nothing of it may be left.
# Usage: scripts/test-package.sh [PROFILE]   (default: dev, the build `cargo test` already made; release for the
# package users get). Needs root (or sudo), gcc, glslc, the Vulkan headers and lavapipe (scripts/llama-build.sh
# vulkan installs them) and man-db (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE="${1:-dev}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
started=$SECONDS
log() { echo "test-package: [$((SECONDS - started))s] $*" >&2; }
fail() { echo "test-package: FAILED: $*" >&2; exit 1; }

if dpkg-query -W -f='${Status}' backscope 2>/dev/null | grep -q "install ok installed"; then
  fail "a backscope package is installed already; this test installs and purges its own (dpkg --purge backscope)"
fi
WORK="$(mktemp -d)"
cleanup() {
  # A failed run still leaves the machine as it found it.
  case "$(dpkg-query -W -f='${db:Status-Status}' backscope 2>/dev/null || true)" in
    "" | not-installed) ;;
    *) $SUDO dpkg --purge backscope >/dev/null 2>&1 || true ;;
  esac
  rm -rf "$WORK"
}
trap cleanup EXIT

log "building the package ($PROFILE)"
# --fast: lighter compression of the same contents (here cargo-deb's xz took 98 s of a loaded machine, --fast 20 s).
DEB="$(bash scripts/package-deb.sh "$PROFILE" --fast | tail -n 1)"
[ -f "$DEB" ] || fail "scripts/package-deb.sh printed no package: '$DEB'"
log "$DEB: $(du -h "$DEB" | cut -f1)"

# The Vulkan program: vkcrash (crates/vklayer/tests/c/) in its `exit` mode records alpha_pipeline (4,1,1) and
# beta_pipeline (2,1,1) into one command buffer and submits it 3 times.
gcc -O2 -Wall -Werror -o "$WORK/vkcrash" crates/vklayer/tests/c/vkcrash.c -lvulkan
glslc bench/vklayer/noop.comp -o "$WORK/noop.spv"

$SUDO dpkg -i "$DEB" >/dev/null
log "installed"
LISTED="$WORK/listed"
dpkg -L backscope | sort >"$LISTED"
for f in /usr/bin/backscope /usr/lib/backscope/libbackscope_observer.so /usr/lib/backscope/libbackscope_vklayer.so \
  /usr/share/vulkan/explicit_layer.d/VkLayer_backscope_dispatch.json /usr/share/man/man1/backscope.1.gz \
  /usr/share/man/man1/backscope-trace.1.gz /usr/share/bash-completion/completions/backscope \
  /usr/share/zsh/vendor-completions/_backscope /usr/share/fish/vendor_completions.d/backscope.fish \
  /usr/share/doc/backscope/README.md /usr/share/doc/backscope/copyright /usr/share/doc/backscope/LICENSE-MIT \
  /usr/share/doc/backscope/LICENSE-APACHE; do
  grep -qx "$f" "$LISTED" || fail "the package does not hold $f"
  [ -f "$f" ] || fail "$f is not installed"
done

# Only the installed files: an empty environment (PATH reaches /usr/bin, not the checkout), run from elsewhere.
installed() { (cd "$WORK" && env -i PATH=/usr/bin:/bin HOME="$WORK" TMPDIR="$WORK" "$@"); }
expected_version="backscope $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
version="$(installed backscope --version)"
[ "$version" = "$expected_version" ] || fail "backscope --version says '$version', Cargo.toml '$expected_version'"

# man(1) finds the pages by name in the system's manual path (man-db).
installed env MANPAGER=cat MANWIDTH=100 man backscope >"$WORK/man.txt" 2>&1 || fail "man backscope: $(cat "$WORK/man.txt")"
grep -q "backscope-trace(1)" "$WORK/man.txt" || fail "man backscope lists no backscope-trace(1): $(head -n 30 "$WORK/man.txt")"
installed env MANPAGER=cat MANWIDTH=100 man backscope-trace >"$WORK/man-trace.txt" 2>&1 || fail "man backscope-trace"
grep -q -- "--vklayer" "$WORK/man-trace.txt" || fail "man backscope-trace does not document --vklayer"

# The bash completion, loaded as bash-completion would (by file), completing a command and a flag.
complete_words() {
  installed bash -c 'source /usr/share/bash-completion/completions/backscope
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    _backscope backscope "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    printf "%s\n" "${COMPREPLY[@]}"' bash "$@"
}
[ "$(complete_words backscope tra)" = trace ] || fail "bash completes 'backscope tra' to '$(complete_words backscope tra)'"
complete_words backscope trace --vkl | grep -qx -- --vklayer || fail "bash does not complete 'backscope trace --vkl'"

# `trace --env` and `--systemd` name the installed files.
installed backscope trace --env --dir "$WORK/service" >"$WORK/env.txt"
grep -qx "export LD_PRELOAD=/usr/lib/backscope/libbackscope_observer.so" "$WORK/env.txt" || fail "trace --env: $(cat "$WORK/env.txt")"
grep -qx "export VK_ADD_LAYER_PATH=/usr/share/vulkan/explicit_layer.d" "$WORK/env.txt" || fail "trace --env: $(cat "$WORK/env.txt")"
installed backscope trace --env --systemd ollama.service --dir "$WORK/service" >"$WORK/systemd.txt"
grep -qx 'Environment="LD_PRELOAD=/usr/lib/backscope/libbackscope_observer.so"' "$WORK/systemd.txt" \
  || fail "trace --env --systemd: $(cat "$WORK/systemd.txt")"
grep -qx 'Environment="VK_ADD_LAYER_PATH=/usr/share/vulkan/explicit_layer.d"' "$WORK/systemd.txt" \
  || fail "trace --env --systemd: $(cat "$WORK/systemd.txt")"

# A trace through the installed observer and layer, on lavapipe.
installed backscope trace --json --dir "$WORK/traces" -- "$WORK/vkcrash" "$WORK/noop.spv" exit \
  >"$WORK/trace.json" 2>"$WORK/trace.err" || fail "backscope trace: $(cat "$WORK/trace.err")"
python3 - "$WORK/trace.json" "$WORK/trace.err" <<'EOF' || fail "the installed trace"
import json, sys
summary = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
err = open(sys.argv[2]).read()
assert "not observed" not in err, err  # both libraries were found
kernels = {k["name"]: k["launches"] for k in summary["kernels"]}
assert kernels == {"alpha_pipeline": 3, "beta_pipeline": 3}, (kernels, err)
devices = [d["name"] for d in summary["devices"]]
assert any(name.startswith("llvmpipe") for name in devices), devices
EOF
[ ! -e /usr/lib/backscope/vulkan ] || fail "trace wrote a manifest beside the installed layer (dpkg would leave it)"
log "used: --version, man, bash completion, trace --env/--systemd, trace on lavapipe"

$SUDO dpkg -r backscope >/dev/null
while read -r f; do
  [ -d "$f" ] || [ ! -e "$f" ] || fail "dpkg -r left $f"
done <"$LISTED"
# The package has no configuration files, so `dpkg -r` leaves nothing for --purge; purge whatever state is left.
state="$(dpkg-query -W -f='${db:Status-Status}' backscope 2>/dev/null || true)"
case "$state" in "" | not-installed) ;; *) $SUDO dpkg --purge backscope >/dev/null ;; esac
state="$(dpkg-query -W -f='${db:Status-Status}' backscope 2>/dev/null || true)"
case "$state" in "" | not-installed) ;; *) fail "dpkg still has backscope ($state) after --purge" ;; esac
left="$(find /usr /etc /var/lib/dpkg/info -name '*backscope*' 2>/dev/null || true)"
[ -z "$left" ] || fail "left after dpkg --purge: $left"
log "removed and purged: nothing left"
