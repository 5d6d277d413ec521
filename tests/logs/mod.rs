//! `backscope logs`: the command line, logs of every era, the scored corpus of public logs.

pub(crate) mod cli;
pub(crate) mod corpus;
pub(crate) mod eras;
