//! `backscope doctor` on this machine and on fake host trees.

mod real;
