//! Integration tests: real inputs (downloaded by scripts/fixtures.sh), real independent tools.
mod util;

mod gguf_synth;
mod output_cli;
mod scan_bad_input;
mod scan_real;
mod sweep_common;
mod sweep_faults;
mod sweep_real;
mod sweep_trace;
mod trace_cli;
