//! The run format, shared by every command that writes or reads runs: the stored record's schema (`record`), the
//! SQLite store with its durability promise (`store`, files written whole by `durable`; the run's row in `run_row`
//! and the ids and times it is stamped with in `ids`, so that the stores never reach back up into `store`), the
//! read-only view of a database that `report`, `predict` and `gate` open (`db`), the one streaming reader of a
//! finished run's records from a database or a run directory that `report` and `predict --run` share (`input`), the run directory's names
//! (`paths`), the log-slice reading of a failed cell (`forensics`), the summary statistics over a group of records
//! (`stats`), and the one aggregation of a run's records into groups, statistics and claims that `report` and
//! `sweep` both show (`summary`).
//!
//! The store is chosen by the `--db` value (`target`): an SQLite file (`sqlite`) or a PostgreSQL database shared by
//! many hosts (`pg`, its schema and migrations in `pg_schema`, its password from `pgpass`); every run records the
//! host that ran it (`host`).
//!
//! `sweep`, `sweep import` and `push` write through it; nothing here knows about a command.

pub mod bisect;
pub mod db;
pub mod durable;
pub mod host;
pub mod ids;
pub mod input;
pub mod paths;
pub mod pg;
pub mod pg_conn;
pub mod pg_schema;
pub mod pgpass;
pub mod record;
pub mod run_row;
pub mod sqlite;
pub mod store;
pub mod target;
