#!/usr/bin/env bash
# Benchmark: the evidence bundle's redaction (src/output/redact.rs, `redact::text`) over a large server log.
#
#   bench/redact.sh [RUNS] [MIB] [REV]      (defaults: 3 runs, 50 MiB; REV: also time redact.rs as of that commit)
#
# The log repeats the real fixtures of crates/logs/tests/data (llama.cpp and Ollama logs) with the secrets and
# look-alikes corpus of tests/data/redaction once per copy, until it reaches MIB MiB. redact.rs is compiled alone
# (release, beside regex-lite, aho-corasick and serde_json, offline from the local registry) into a small harness
# that redacts the log once to warm up, then RUNS times, and prints the medians of wall and CPU time (user +
# system, of the process) and how many values were replaced. On a shared machine the CPU figure is the code's own
# speed.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"
MIB="${2:-50}"
REV="${3:-}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat crates/logs/tests/data/*.log tests/data/redaction/secrets.txt tests/data/redaction/not-secrets.txt >"$WORK/unit.log"
unit=$(stat -c %s "$WORK/unit.log")
reps=$(( (MIB * 1024 * 1024 + unit - 1) / unit ))
for _ in $(seq 1 "$reps"); do cat "$WORK/unit.log"; done >"$WORK/big.log"
echo "log: $(stat -c %s "$WORK/big.log") bytes, $(wc -l <"$WORK/big.log") lines; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

harness() { # DIR REDACT_RS
  mkdir -p "$1/src" "$1/examples"
  cp Cargo.lock "$1/"
  cat >"$1/Cargo.toml" <<'EOF'
[package]
name = "redact-bench"
version = "0.1.0"
edition = "2021"
[dependencies]
regex-lite = "0.1.9"
aho-corasick = "1.1"
serde_json = "1"
EOF
  printf '#[path = "%s"]\npub mod redact;\n' "$2" >"$1/src/lib.rs"
  cat >"$1/examples/bench.rs" <<'EOF'
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let text = std::fs::read_to_string(&args[1]).unwrap();
    let runs: usize = args[2].parse().unwrap();
    let (_, n) = redact_bench::redact::text(&text);
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (t, c) = (std::time::Instant::now(), cpu_s());
        std::hint::black_box(redact_bench::redact::text(&text));
        wall.push(t.elapsed().as_secs_f64());
        cpu.push(cpu_s() - c);
    }
    let med = |v: &mut Vec<f64>| { v.sort_by(|a, b| a.partial_cmp(b).unwrap()); v[v.len() / 2] };
    let (w, c) = (med(&mut wall), med(&mut cpu));
    println!("{n} replaced; {runs} runs: median wall {w:.2} s, median CPU {c:.2} s ({:.1} MB/s)", text.len() as f64 / c / 1e6);
}
EOF
  (cd "$1" && CARGO_TARGET_DIR="$1/target" cargo build -q --offline --release --example bench)
  "$1/target/release/examples/bench" "$WORK/big.log" "$RUNS"
}

echo -n "working tree: "
harness "$WORK/now" "$PWD/src/output/redact.rs"
if [ -n "$REV" ]; then
  # The old file's corpus tests are not compiled (no cfg(test)), so its include_str! paths need not resolve.
  # It lived in src/report/ before it moved to the output floor.
  git show "$REV:src/output/redact.rs" >"$WORK/redact_old.rs" 2>/dev/null ||
    git show "$REV:src/report/redact.rs" >"$WORK/redact_old.rs"
  echo -n "$REV: "
  harness "$WORK/old" "$WORK/redact_old.rs"
fi
