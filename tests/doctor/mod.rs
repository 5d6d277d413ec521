//! `backscope doctor` on this machine and on fake host trees.

pub(crate) mod real;
