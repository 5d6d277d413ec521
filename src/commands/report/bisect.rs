//! `backscope report DB --bisect [ID]`: a bisect stored in the database, rendered as `backscope bisect` rendered it
//! when it ended (the view is the run analysis's: `run_analysis::bisect::view`), for any state it is in — finished,
//! interrupted, failed.

use anyhow::Result;

use crate::exit;
use crate::output::{Inputs, Output, OutputOptions};
use crate::run::format::target::DbValue;
use crate::run::write::bisect::BisectStore;
use crate::run_analysis::bisect::view::BisectView;

pub fn run(db: &DbValue, id: Option<&str>, output: &OutputOptions) -> Result<u8> {
    let mut out = Output::open(output, &Inputs::none().path(db.given()))?;
    let store = BisectStore::open_read_only(db.target()?)?;
    let row = store.find(id)?;
    let steps = store.steps(&row.bisect_id)?;
    out.emit(&BisectView::new(row, steps))?;
    out.finish()?;
    Ok(exit::OK)
}
