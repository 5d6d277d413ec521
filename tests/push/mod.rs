//! `backscope push`: a local store's runs into a shared PostgreSQL store, once, also after the server went away
//! mid-run.

mod postgres;
mod wal;
