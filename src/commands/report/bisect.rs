//! `backscope report DB --bisect [ID]`: a bisect stored in the database, rendered as `backscope bisect` rendered it
//! when it ended (the view is the run format's: `run::bisect::view`), for any state it is in — finished,
//! interrupted, failed.

use std::path::Path;

use anyhow::Result;

use crate::exit;
use crate::output::{Inputs, Output, OutputOptions};
use crate::run::bisect::view::BisectView;
use crate::run::bisect::BisectStore;

pub fn run(db: &Path, id: Option<&str>, output: &OutputOptions) -> Result<u8> {
    let mut out = Output::open(output, &Inputs::none().path(db))?;
    let store = BisectStore::open_read_only(db)?;
    let row = store.find(id)?;
    let steps = store.steps(&row.bisect_id)?;
    out.emit(&BisectView::new(row, steps))?;
    out.finish()?;
    Ok(exit::OK)
}
