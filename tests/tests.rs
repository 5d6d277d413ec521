//! Integration tests: real inputs (downloaded by scripts/fixtures.sh), real independent tools.
mod bounded;
mod util;

mod disasm_real;
mod doctor;
mod gate;
mod gguf_synth;
mod hardening_trace;
mod maps_live;
mod output_cli;
mod predict;
mod predict_cli;
mod report_cli;
mod scan_bad_input;
mod scan_budgets;
mod scan_real;
mod sweep_common;
mod sweep_faults;
mod sweep_hardening;
mod sweep_real;
mod sweep_trace;
mod trace_cli;
mod vulkan_trace;
