//! `backscope sweep`: real llama-servers, endpoint faults, tracing, import, resume, what a sweep leaves behind,
//! PostgreSQL fleets.

mod faults;
mod import;
mod leftovers;
mod postgres;
mod real;
mod resume;
mod trace;
