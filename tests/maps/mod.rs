//! `backscope maps` on real running processes.

mod live;
