//! What was observed to compare a prediction with: the kernels (CUDA/HIP) or pipelines (Vulkan) a trace saw, each
//! classified from its name, and where they came from. Reading them is each backend's (`cuda::observed`,
//! `vulkan::observed`).

use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;

/// How an observed kernel's name was read, which decides what it says of itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAs {
    /// A CUDA/HIP kernel's mangled name: its demangled form, and the weight type and column count its template
    /// arguments carry.
    CudaKernel,
    /// A Vulkan pipeline's debug name: the shaders behind it, the ggml op it computes, whether it is a helper.
    VulkanPipeline,
}

/// One observed kernel or pipeline, classified from its name (the family is recomputed from the name, not trusted
/// from the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedKernel {
    pub read_as: ReadAs,
    pub name: String,
    /// The demangled name of a CUDA/HIP kernel; a pipeline's own name.
    pub demangled: String,
    /// The embedded shaders behind a Vulkan pipeline, when the trace knows them.
    pub shaders: Vec<String>,
    pub family: String,
    /// The weight type: the `ggml_type` template argument (MMVQ, MMQ), the element type (MMVF, MMF: `__half` is
    /// F16) or the type in a conversion kernel's name (`dequantize_block_q4_K`); the type a pipeline's name spells.
    pub ggml_type: Option<String>,
    /// Columns of a CUDA/HIP vector kernel (`ncols_dst`).
    pub ncols: Option<u64>,
    /// The ggml op a Vulkan pipeline computes (MUL_MAT, MUL_MAT_VEC, MUL_MAT_ID, …).
    pub op: Option<String>,
    /// A Vulkan helper dispatch (q8_1 quantization, split-k reduce).
    pub helper: bool,
    pub launches: u64,
}

impl Serialize for ObservedKernel {
    /// What its name says as it was read: a kernel's demangled name, type and column count, or a pipeline's shaders,
    /// op and helper flag.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut k = s.serialize_struct("ObservedKernel", 6)?;
        k.serialize_field("name", &self.name)?;
        match self.read_as {
            ReadAs::CudaKernel => {
                k.serialize_field("demangled", &self.demangled)?;
                k.serialize_field("family", &self.family)?;
                match &self.ggml_type {
                    Some(t) => k.serialize_field("ggml_type", t)?,
                    None => k.skip_field("ggml_type")?,
                }
                match &self.ncols {
                    Some(n) => k.serialize_field("ncols", n)?,
                    None => k.skip_field("ncols")?,
                }
            }
            ReadAs::VulkanPipeline => {
                k.serialize_field("shaders", &self.shaders)?;
                k.serialize_field("family", &self.family)?;
                match &self.op {
                    Some(op) => k.serialize_field("op", op)?,
                    None => k.skip_field("op")?,
                }
                k.serialize_field("helper", &self.helper)?;
            }
        }
        k.serialize_field("launches", &self.launches)?;
        k.end()
    }
}

/// Observed kernels from one source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Observed {
    /// `trace-dir`, `trace-summary`, `sweep-record`.
    pub kind: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The trace files behind it.
    pub files: Vec<String>,
    pub kernels: Vec<ObservedKernel>,
    /// Every launched kernel is in `kernels` (false for a sweep record's top list).
    pub complete: bool,
    /// A trace was cut: counts are lower bounds (presence still holds).
    pub counts_lower_bound: bool,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VkObservation {
    pub kind: String,
    pub path: String,
    pub files: Vec<String>,
    pub pipelines: Vec<ObservedKernel>,
    /// The dispatches of one request (a sweep record's trace window): counts are judged.
    pub per_request: bool,
    /// Every pipeline that ran is listed (a record lists the most dispatched only).
    pub complete: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
