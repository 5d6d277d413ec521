//! Integration tests: real inputs (downloaded by scripts/fixtures.sh), real independent tools. One folder per
//! command (`scan/`, `sweep/`, …), `vulkan/` for the Vulkan layer, `every_command/` for what all commands share, and
//! the helpers in `support/`.
mod code_shape;
mod module_floor;
mod support;

mod bisect;
mod doctor;
mod every_command;
mod gate;
mod logs;
mod maps;
mod predict;
mod push;
mod report;
mod scan;
mod sweep;
mod synth;
mod trace;
mod vulkan;
