//! Where a report's records come from: the run format's streaming reader ([`crate::run::read::input`]), which `predict
//! --run` reads runs with too; here under the name the report's files use.

pub use crate::run::read::input::*;
