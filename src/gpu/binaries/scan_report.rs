//! What one scan found: every file's records, the install tree's view, the coverage matrix and the claims, with the
//! disassembly's report when asked. It stands above both the records and the disassembly, which reads only the
//! records, so that neither imports the other's report. Its JSON form is `docs/scan-json.md`'s.

use serde::Serialize;

use super::disasm::DisasmReport;
use super::records::{ArchAnswer, CoverageCell, FileRecord, MiopenDb, Problem, VendorBlasDir};
use crate::evidence::Claim;

/// The JSON form's schema: changes whenever a field of the report or of its records is removed or changes meaning.
pub const SCHEMA: &str = "backscope.scan/1";

#[derive(Clone, Debug, Serialize)]
pub struct ScanReport {
    pub schema: &'static str,
    pub roots: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    pub files: Vec<FileRecord>,
    pub vendor_blas: Vec<VendorBlasDir>,
    pub miopen: Vec<MiopenDb>,
    pub coverage: Vec<CoverageCell>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch_answer: Option<ArchAnswer>,
    pub claims: Vec<Claim>,
    pub problems: Vec<Problem>,
    pub stats: ScanStats,
    /// `--disasm`: the instruction mix of every selected kernel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disasm: Option<DisasmReport>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ScanStats {
    pub files_seen: u64,
    pub files_with_records: u64,
    pub bytes_scanned: u64,
    pub elapsed_ms: f64,
}
