//! `backscope report` and its evidence bundle.

pub(crate) mod cli;
pub(crate) mod hostile;
pub(crate) mod redaction;
