//! The subcommands, one folder or file each: its options, its `run` (options in, exit status out) and its view.
//! A command stands on the floor modules beside this folder and never names another command: what two commands
//! share moves down to the floor.

pub mod bisect;
pub mod doctor;
pub mod gate;
pub mod logs;
pub mod maps;
pub mod predict;
pub mod push;
pub mod report;
pub mod scan;
pub mod sweep;
pub mod synth;
pub mod trace;
