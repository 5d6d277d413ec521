//! `backscope gate` on real inputs.

mod real;
