//! Where runs are written: the store a `--db` value names ([`store`]) — an SQLite file ([`sqlite`]) or a PostgreSQL
//! database shared by many hosts ([`pg`]: its connection with deadlines and caps in [`pg_conn`], its schema and
//! migrations in [`pg_schema`], its password from [`pgpass`]) — and a run directory's files written whole
//! ([`durable`]). The bisect tables live in the same stores ([`bisect`]).
//!
//! The stores also read what they hold (a run to resume, the records of a run); a read-only open changes nothing,
//! and `crate::run::read` reads finished runs through it.

pub mod bisect;
pub mod durable;
pub mod pg;
pub mod pg_conn;
pub mod pg_schema;
pub mod pgpass;
pub mod sqlite;
pub mod store;
