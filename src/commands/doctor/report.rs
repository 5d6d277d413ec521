//! Everything `doctor` says, in the form `--json` prints.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{access, env, gpus, runtimes, tools, vulkan};
use crate::evidence::Claim;
use crate::support_matrix::GateReport;

pub const SCHEMA: &str = "backscope.doctor/1";

/// The gate for one GPU found, or why there is none.
#[derive(Clone, Debug, Serialize)]
pub struct GpuGate {
    pub gpu: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<GateReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_none: Option<String>,
}

/// An HSA override and what it means for each AMD GPU.
#[derive(Clone, Debug, Serialize)]
pub struct OverrideFinding {
    pub variable: String,
    pub value: String,
    pub origin: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub per_gpu: Vec<env::OverrideRisk>,
}

/// Everything `doctor` says, in the form `--json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct DoctorReport {
    pub schema: &'static str,
    pub root: String,
    pub elapsed_ms: f64,
    pub gpus: gpus::GpuProbe,
    pub users: Vec<access::User>,
    pub device_access: Vec<access::NodeAccess>,
    /// Kernel modules of interest and whether they are loaded.
    pub modules: BTreeMap<String, bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules_source: Option<String>,
    pub vulkan: vulkan::VulkanSetup,
    pub environment: Vec<env::Setting>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<env::ServiceUnit>,
    pub overrides: Vec<OverrideFinding>,
    pub runtimes: runtimes::RuntimeProbe,
    pub tools: Vec<tools::ToolRun>,
    pub gates: Vec<GpuGate>,
    pub claims: Vec<Claim>,
}
