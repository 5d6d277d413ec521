//! The GPU floor: which GPU a name means ([`arch`]), what GPU code a file holds ([`binaries`]), what a kernel name
//! says ([`kernels`]) and the data tables with a source on every row ([`knowledge`]).

pub mod arch;
pub mod binaries;
pub mod kernels;
pub mod knowledge;
