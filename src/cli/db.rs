//! `--db`, the database flag of every command that records or reads runs (`sweep` and its subcommands, `bisect`,
//! `predict`), defined once with its one default, and read into the [`DbValue`] the commands' options carry.

use std::path::PathBuf;

use backscope::run::format::target::{DbValue, DEFAULT_DB};
use clap::Args;

#[derive(Debug, Args)]
pub struct DbFlag {
    /// The database: an SQLite file (created by the commands that record) or a shared PostgreSQL store
    /// (`postgres://user@host/db` or `host=… dbname=… user=…`; password from PGPASSWORD or ~/.pgpass; docs/fleet.md).
    #[arg(long, default_value = DEFAULT_DB, value_name = "FILE|POSTGRES")]
    pub db: PathBuf,
}

impl From<DbFlag> for DbValue {
    /// Read once, here; a value that names no store is reported by the command when it first needs the store.
    fn from(f: DbFlag) -> Self {
        DbValue::read(f.db)
    }
}
