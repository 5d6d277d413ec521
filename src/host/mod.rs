//! The host floor: processes ([`proc`]), how files are opened and read ([`inputs`]) and backscope's cache
//! ([`cache`]).

pub mod cache;
pub mod inputs;
pub mod proc;
