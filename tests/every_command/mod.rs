//! What every command does the same way: the output layer, hostile text, special files and outputs, a hostile PostgreSQL `--db`.

pub(crate) mod files;
pub(crate) mod hostile_text;
pub(crate) mod output;
pub(crate) mod postgres_hostile;
pub(crate) mod numeric_flags;
