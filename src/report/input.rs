//! Where a report's records come from: a sweep database (one run of it: `--run`, else the latest) or a run
//! directory (its `cells/*/result.json`, or `records.jsonl` of an import; no database needed, so a run directory copied elsewhere still reports).
//! Either way the records reach the statistics one at a time, in plan order, as their stored JSON text.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::sweep_db::SweepDb;

/// Largest `result.json` read: a record is a few KiB (a traced one a few more), so anything near this is not one.
const MAX_RECORD_BYTES: u64 = 64 << 20;

/// The run a report is about.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunMeta {
    pub run_id: String,
    /// Absolute: record paths, log slices and `env.json` are under it.
    pub run_dir: String,
    /// The database read, when the input was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub db: Option<String>,
    /// `running`, `finished`, `interrupted`; none when read from a run directory alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// `sweep`, or `llama-bench` for imported results.
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Cells the plan has (a run still going or interrupted has recorded fewer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cells_planned: Option<u64>,
    /// The run's plan (from `run.json`, else the database).
    #[serde(skip)]
    pub plan: Option<Value>,
}

/// An opened input.
#[derive(Debug)]
pub enum Records {
    Db(SweepDb),
    /// `result.json` files in plan order.
    Files(Vec<PathBuf>),
    /// An import's `records.jsonl`: one record per line, in order.
    Lines(PathBuf),
}

/// Opens `path`: a run directory (a directory), or a sweep database (a file) and `run` in it (the latest when
/// none is given).
pub fn open(path: &Path, run: Option<&str>) -> Result<(RunMeta, Records)> {
    if path.is_dir() {
        if run.is_some() {
            bail!("{} is a run directory, which holds one run; --run picks a run in a database", path.display());
        }
        return open_run_dir(path);
    }
    let db = SweepDb::open(path)?;
    let run_id = match run {
        Some(r) => r.to_string(),
        None => db.latest_run()?.with_context(|| format!("{}: no runs yet", path.display()))?,
    };
    let info = db.run_info(&run_id)?;
    let run_dir = PathBuf::from(&info.run_dir);
    let plan = read_json(&run_dir.join("run.json"))
        .and_then(|v| v.get("plan").cloned())
        .or_else(|| serde_json::from_str(&info.plan_json).ok());
    let meta = RunMeta {
        run_id: info.run_id,
        run_dir: info.run_dir,
        db: Some(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()).display().to_string()),
        status: Some(info.status.as_str().to_string()),
        source: info.source.as_str().to_string(),
        created_at: Some(info.created_at),
        cells_planned: Some(info.cells_total),
        plan,
    };
    Ok((meta, Records::Db(db)))
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn open_run_dir(dir: &Path) -> Result<(RunMeta, Records)> {
    // Absolute, without a trailing `/`: records and claims name files under it.
    let dir: PathBuf = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()).components().collect();
    // A sweep's records are under cells/, an import's in records.jsonl (earlier imports: under records/); each
    // directory is named by the record's position in the plan (`00042-vk-ngl1-e1r2`), and the number sorts them.
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    let lines = dir.join("records.jsonl");
    let mut found = lines.is_file();
    for sub in ["cells", "records"] {
        let cells = dir.join(sub);
        let Ok(entries) = std::fs::read_dir(&cells) else { continue };
        found = true;
        for e in entries {
            let e = e.with_context(|| format!("cannot list {}", cells.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
            let Ok(seq) = digits.parse::<u64>() else { continue };
            let result = e.path().join("result.json");
            if result.is_file() {
                files.push((seq, result));
            }
        }
    }
    if !found {
        bail!(
            "{}: not a run directory (no cells/, records.jsonl or records/; pass the directory `backscope sweep` printed)",
            dir.display()
        );
    }
    files.sort();
    let run_json = read_json(&dir.join("run.json"));
    let first = if lines.is_file() { first_line_json(&lines) } else { files.first().and_then(|(_, f)| read_json(f)) };
    let field =
        |v: &Option<Value>, k: &str| v.as_ref().and_then(|v| v.get(k)).and_then(Value::as_str).map(str::to_string);
    let run_id = field(&run_json, "run_id")
        .or_else(|| field(&first, "run_id"))
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let meta = RunMeta {
        run_id,
        run_dir: dir.display().to_string(),
        db: None,
        status: None,
        source: field(&first, "source").unwrap_or_else(|| "sweep".into()),
        created_at: field(&run_json, "created_at"),
        cells_planned: None,
        plan: run_json.as_ref().and_then(|v| v.get("plan").cloned()),
    };
    if lines.is_file() {
        return Ok((meta, Records::Lines(lines)));
    }
    Ok((meta, Records::Files(files.into_iter().map(|(_, f)| f).collect())))
}

/// The first record of a `records.jsonl`.
fn first_line_json(path: &Path) -> Option<Value> {
    let mut line = Vec::new();
    let file = crate::inputs::open_input(path).ok()?.file;
    std::io::BufReader::new(file).take(MAX_RECORD_BYTES).read_until(b'\n', &mut line).ok()?;
    serde_json::from_slice(&line).ok()
}

impl Records {
    /// Calls `f` with each record's JSON text, in plan order; returns how many there were.
    pub fn for_each(&self, run_id: &str, mut f: impl FnMut(&str) -> Result<()>) -> Result<u64> {
        match self {
            Records::Db(db) => db.for_each_record_json(run_id, f),
            Records::Files(files) => {
                for file in files {
                    let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
                    if size > MAX_RECORD_BYTES {
                        bail!(
                            "{}: {size} bytes, not a record (records are a few KiB; at most {} MiB is read)",
                            file.display(),
                            MAX_RECORD_BYTES >> 20
                        );
                    }
                    let text =
                        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
                    f(&text).with_context(|| file.display().to_string())?;
                }
                Ok(files.len() as u64)
            }
            Records::Lines(path) => {
                let file = crate::inputs::open_input(path).map_err(anyhow::Error::new)?.file;
                let mut reader = std::io::BufReader::new(file);
                let (mut n, mut line) = (0u64, Vec::new());
                loop {
                    line.clear();
                    (&mut reader)
                        .take(MAX_RECORD_BYTES + 1)
                        .read_until(b'\n', &mut line)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    if line.is_empty() {
                        return Ok(n);
                    }
                    n += 1;
                    if line.len() as u64 > MAX_RECORD_BYTES {
                        bail!("{}, line {n}: longer than {} MiB, not a record", path.display(), MAX_RECORD_BYTES >> 20);
                    }
                    let text = std::str::from_utf8(&line)
                        .with_context(|| format!("{}, line {n}: not UTF-8", path.display()))?;
                    f(text.trim_end()).with_context(|| format!("{}, line {n}", path.display()))?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_directory_is_read_in_plan_order_and_refuses_what_is_not_a_record() {
        let dir = tempfile::tempdir().unwrap();
        // Past 99,999 cells the directory names have six digits: the number sorts them, not the name.
        for (name, seq) in [("100000-a-ngl0-e1r1", 100_000u64), ("99999-a-ngl0-e1r1", 99_999), ("00007-a", 7)] {
            let cell = dir.path().join("cells").join(name);
            std::fs::create_dir_all(&cell).unwrap();
            std::fs::write(cell.join("result.json"), format!("{{\"seq\": {seq}, \"run_id\": \"r9\"}}")).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("cells/notes")).unwrap();
        let (meta, records) = open(dir.path(), None).unwrap();
        assert_eq!(meta.run_id, "r9", "from the first record, without run.json");
        let mut seqs = Vec::new();
        let n = records
            .for_each("r9", |j| {
                seqs.push(serde_json::from_str::<Value>(j)?["seq"].as_u64().unwrap());
                Ok(())
            })
            .unwrap();
        assert_eq!((n, seqs), (3, vec![7, 99_999, 100_000]));
        assert!(open(dir.path(), Some("r9")).unwrap_err().to_string().contains("holds one run"));
        // A result.json far larger than any record is refused before it is read.
        let big = dir.path().join("cells/00008-a");
        std::fs::create_dir_all(&big).unwrap();
        std::fs::File::create(big.join("result.json")).unwrap().set_len(MAX_RECORD_BYTES + 1).unwrap();
        let (_, records) = open(dir.path(), None).unwrap();
        let e = records.for_each("r9", |_| Ok(())).unwrap_err().to_string();
        assert!(e.contains("not a record"), "{e}");
        let empty = tempfile::tempdir().unwrap();
        assert!(open(empty.path(), None).unwrap_err().to_string().contains("not a run directory"));
    }
}
