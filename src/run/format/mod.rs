//! What a run is, on disk and in a database, before anything writes or reads it: the stored record's schema
//! ([`record`]), a run's row ([`run_row`]), the names of a run directory's files ([`run_dir`]), the ids and UTC times
//! rows are stamped with ([`ids`]), the bisect rows and ids ([`bisect`]), the host a run records ([`host`]), paths
//! made absolute once and names made file-name-safe ([`paths`]), and what a `--db` value names ([`target`]).

pub mod bisect;
pub mod host;
pub mod ids;
pub mod paths;
pub mod record;
pub mod run_dir;
pub mod run_row;
pub mod target;
