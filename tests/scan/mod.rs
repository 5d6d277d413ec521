//! `backscope scan` (and `scan --disasm`): real GPU libraries against independent readers, hostile and broken inputs, budgets.

pub(crate) mod budgets;
pub(crate) mod disasm;
pub(crate) mod disasm_budgets;
pub(crate) mod hostile;
pub(crate) mod real;
pub(crate) mod vulkan;
