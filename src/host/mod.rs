//! The host floor: processes ([`proc`]), how files are opened and read ([`inputs`]), backscope's cache
//! ([`cache`]) and who this host is ([`identity`]: the host name, kernel, GPUs and driver versions a run records).

pub mod cache;
pub mod identity;
pub mod inputs;
pub mod proc;
