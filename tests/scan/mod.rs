//! `backscope scan` (and `scan --disasm`): real GPU libraries against independent readers, hostile and broken inputs,
//! budgets.

mod budgets;
mod disasm;
mod disasm_budgets;
mod hostile;
mod real;
mod vulkan;
