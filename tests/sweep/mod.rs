//! `backscope sweep`: real llama-servers, endpoint faults, tracing, import, resume, what a sweep leaves behind, PostgreSQL fleets.

pub(crate) mod faults;
pub(crate) mod import;
pub(crate) mod leftovers;
pub(crate) mod postgres;
pub(crate) mod real;
pub(crate) mod resume;
pub(crate) mod trace;
