//! Fuzz target `log_milestones`: the bounded parser of the era milestone file (data/log_milestones.toml) over any
//! text, and the table it yields searching the same bytes: errors are values, nothing panics, work stays bounded.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(rows) = logs::milestones::parse(&text) {
        assert!(rows.len() <= logs::milestones::MAX_ROWS);
        let table = logs::milestones::Table::new(rows);
        if let Some((index, _)) = table.find(data) {
            assert!(table.get(index).is_some());
        }
    }
});
