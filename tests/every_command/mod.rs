//! What every command does the same way: the output layer, hostile text, special files and outputs, numeric flags at
//! their extremes, a hostile PostgreSQL `--db`.

mod files;
mod hostile_text;
mod numeric_flags;
mod output;
mod postgres_hostile;
