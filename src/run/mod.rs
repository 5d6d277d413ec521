//! The run format and its stores, shared by every command that writes or reads runs, split the way gimli-rs/object
//! splits a format from its reading and writing:
//!
//! - [`format`]: what a run is — the stored record's schema, the run's row, the ids and times rows are stamped with,
//!   the bisect rows, the names of a run directory's files, and what a `--db` value names;
//! - [`write`]: the stores — an SQLite file or a PostgreSQL database shared by many hosts, behind one `Store`, and
//!   the files of a run directory written whole and durably; the bisect tables beside them;
//! - [`read`]: the one reader of a finished run, from a database or from a run directory alone.
//!
//! `write` and `read` stand on `format`; `read` opens a database through the stores' read-only open. What is said
//! about a run (statistics, claims, crash forensics, bisect verdicts) is the floor above, `crate::run_analysis`.
//! Every run records the host that ran it (`format::host`). Nothing here knows about a command.

pub mod format;
pub mod read;
pub mod write;
