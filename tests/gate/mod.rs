//! `backscope gate` on real inputs.

pub(crate) mod real;
