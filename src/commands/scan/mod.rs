//! `backscope scan`: what GPU code the given binaries and install trees contain, as records and claims (the
//! engine is [`crate::gpu::binaries`]; this is the command: its options, its run and its output).

mod command;

pub use command::{run, ScanCommand};
