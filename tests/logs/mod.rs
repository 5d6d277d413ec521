//! `backscope logs`: the command line, logs of every era, hostile logs, the scored corpus of public logs.

mod cli;
mod corpus;
mod eras;
mod hostile;
