//! `backscope report` and its evidence bundle.

mod cli;
mod hostile;
mod hosts;
mod redaction;
