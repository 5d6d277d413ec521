# Sourced by the scripts that need Debian packages: `apt_install_missing PKG…` installs those of PKG… that are
# not installed yet (through sudo unless root), and nothing when all are. Others may run apt-get at the same
# time on a shared machine: it waits for the dpkg lock instead of failing. apt's output goes to standard error,
# so a script whose standard output is its result stays clean.
apt_install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "$(basename "$0" .sh): installing ${missing[*]}" >&2
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
}
