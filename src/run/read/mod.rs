//! The one reader of finished runs, for the commands that look at runs without writing any: a sweep database opened
//! read-only ([`db`]: `predict --run`, `gate --runs`, `report --hosts`, `bisect`'s cells), and the streaming reader
//! of one run's records from a database or from a run directory alone ([`input`]: `report`, `predict --run`).

pub mod db;
pub mod input;
