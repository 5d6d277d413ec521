//! `backscope maps` on real running processes.

pub(crate) mod live;
