//! The facts a log states about the runtime's setup, each with the line it rests on.

use serde::Serialize;

use crate::event::{BufferKind, TimingKind};

/// A failure the runtime handled: the lines that said it failed, and the line where it went on.
#[derive(Clone, Debug, Serialize)]
pub struct Handled {
    /// What failed, as its first line says.
    pub failure: String,
    pub line: u64,
    pub last_line: u64,
    /// The line where the runtime went on (a retry it announced, another allocation attempt).
    pub retry_line: u64,
    pub retry: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Sourced<T> {
    pub value: T,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Backend {
    pub name: String,
    pub path: String,
    pub line: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Device {
    /// `CUDA`, `ROCm`, `MUSA` or `Vulkan`.
    pub backend: String,
    pub index: u32,
    pub name: String,
    pub arch: Option<String>,
    pub compute_capability: Option<String>,
    pub vmm: Option<bool>,
    pub wave_size: Option<u32>,
    pub vram_mib: Option<u64>,
    pub driver: Option<String>,
    pub uma: Option<bool>,
    pub fp16: Option<bool>,
    pub warp_size: Option<u32>,
    pub int_dot: Option<bool>,
    pub matrix_cores: Option<String>,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Offload {
    pub offloaded: u32,
    pub total: u32,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Graph {
    pub nodes: Option<u64>,
    pub splits: Option<u64>,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Buffer {
    pub device: String,
    pub kind: BufferKind,
    pub mib: f64,
    pub line: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Timing {
    pub which: TimingKind,
    pub ms: f64,
    pub tokens: Option<u64>,
    pub line: u64,
}
