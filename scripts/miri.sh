#!/usr/bin/env bash
# Miri over the unit tests of the code that shares memory without the borrow checker's help: the trace crate (its
# sinks, records and clocks) and the Vulkan layer's per-queue ring and completion trail, which ggml's threads write
# while a reader (the crash handler, the hang watcher) reads. Miri checks every access against Stacked Borrows and the
# reads against the writers' stores for data races; it found a pointer to one trail entry used for a whole half and a
# short positional read taken as a whole tail (session 38). Not part of scripts/test.sh: Miri is a rustup component,
# and the CI machine reaches only crates, PyPI, Debian and npm. About 6 minutes on 2 cores after its first build.
# Usage: scripts/miri.sh   (needs `rustup +nightly component add miri rust-src`)
# Left out: what Miri cannot run (signals, fork, the Vulkan loader): the trace crate's by --skip, the layer's by naming
# only the modules it can.
set -euo pipefail
cd "$(dirname "$0")/.."
# Isolation off: the tests read the environment and write temporary files. Leaks allowed: the layer keeps its
# per-device state for the process's life on purpose (a crash handler may read it at any moment).
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation -Zmiri-ignore-leaks}"
cargo +nightly miri test -p backscope-trace --lib -- --skip fork --skip crash::
cargo +nightly miri test -p backscope-vklayer --lib -- locus:: progress::
