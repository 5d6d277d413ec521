//! Where a run's records come from, for every command that reads a finished run (`report`, `predict --run`): a sweep
//! database (one run of it: `--run`, else the latest) or a run directory (its `cells/*/result.json`, or
//! `records.jsonl` of an import; no database needed, so a run directory copied elsewhere still reports).
//! Either way the records reach the caller one at a time, in plan order, as their stored JSON text, so memory
//! follows one record, not the run; a record that cannot be read or parsed is a problem naming it, and the rest go
//! on.

use std::io::{BufRead, Read};
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::run::format::run_dir::RunDir;
use crate::run::format::target::DbValue;
use crate::run::read::db::SweepDb;

/// Largest `result.json` read: a record is a few KiB (a traced one a few more), so anything near this is not one.
const MAX_RECORD_BYTES: u64 = 64 << 20;
/// Largest `run.json` or `env.json` read: a plan and an environment snapshot are tens of KiB.
pub const MAX_META_BYTES: u64 = 16 << 20;

/// `rel` as a path inside a run directory, lexically: relative, with no `..`, root or prefix component. A record
/// names its files relative to its run directory; anything else is not one of the run's files.
pub fn lexically_inside(rel: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// The file `rel` of the run directory, when it is one of the run's files: a relative path inside the directory,
/// inside it still with every symlink resolved (a log linked to `~/.ssh/id_ed25519` is not), and a regular file
/// (not a FIFO, a device or a directory, which would hang or never end a reader). Otherwise why not, naming it.
pub fn run_file(run_dir: &Path, rel: &str) -> Result<PathBuf, String> {
    let Some(inside) = lexically_inside(rel) else {
        return Err(format!("{rel}: not a path inside the run directory"));
    };
    let path = run_dir.join(inside);
    std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !crate::host::inputs::resolved_inside(run_dir, &path) {
        let target = std::fs::canonicalize(&path).map(|t| t.display().to_string()).unwrap_or_default();
        return Err(format!("{}: a link to {target}, outside the run directory", path.display()));
    }
    // Opened (without blocking) to tell a regular file from a FIFO or a device, with the reason in words.
    crate::host::inputs::open_input(&path).map_err(|e| e.to_string())?;
    Ok(path)
}

/// Clears the log paths of `r` that are not files of the run ([`run_file`]), each a problem naming the record,
/// the field and why, so that nothing later (timelines, crash analysis, the bundle) opens them.
pub fn vet_record(r: &mut crate::run::format::record::Record, run_dir: &Path, problems: &mut Vec<String>) {
    let file = r.file.clone();
    let mut ok = |field: &str, rel: &str| match run_file(run_dir, rel) {
        Ok(_) => true,
        Err(why) => {
            let p = format!("record {file}: {field} {why}; not read");
            if !problems.contains(&p) {
                problems.push(p);
            }
            false
        }
    };
    if let Some(slice) = r.log_slice.clone() {
        if !ok("log_slice", &slice) {
            r.log_slice = None;
        }
    }
    if let Some(server) = r.server.as_mut() {
        if !server.log.is_empty() && !ok("server.log", &server.log) {
            server.log.clear();
        }
    }
}

/// A JSON file of the run directory (`run.json`, `env.json`): none when it is absent; a problem, naming it, when
/// it is there but not a regular file inside the run, larger than [`MAX_META_BYTES`] or not JSON.
pub fn read_run_json(run_dir: &Path, name: &str, problems: &mut Vec<String>) -> Option<Value> {
    let path = run_dir.join(name);
    if std::fs::symlink_metadata(&path).is_err() {
        return None;
    }
    let path = match run_file(run_dir, name) {
        Ok(p) => p,
        Err(why) => {
            problems.push(format!("{why}; not read"));
            return None;
        }
    };
    let bytes = match crate::host::inputs::read_limited(&path, MAX_META_BYTES) {
        Ok(b) => b,
        Err(e) => {
            problems.push(format!("{e}; not read"));
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            problems.push(format!("{}: not JSON ({e}); not read", path.display()));
            None
        }
    }
}

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

/// Opens `input`: a run directory (a directory), or a sweep database (a file or a PostgreSQL store) and `run` in it
/// (the latest when none is given).
pub fn open(input: &DbValue, run: Option<&str>, problems: &mut Vec<String>) -> Result<(RunMeta, Records)> {
    let path = input.given();
    if path.is_dir() {
        if run.is_some() {
            bail!("{} is a run directory, which holds one run; --run picks a run in a database", path.display());
        }
        return open_run_dir(path, problems);
    }
    let db = SweepDb::open(input)?;
    let run_id = match run {
        Some(r) => r.to_string(),
        None => db.latest_run()?.with_context(|| format!("{}: no runs yet", path.display()))?,
    };
    let info = db.run_info(&run_id)?;
    let run_dir = PathBuf::from(&info.run_dir);
    let plan = read_run_json(&run_dir, RunDir::RUN_JSON, problems)
        .and_then(|v| v.get("plan").cloned())
        .or_else(|| serde_json::from_str(&info.plan_json).ok());
    let meta = RunMeta {
        run_id: info.run_id,
        run_dir: info.run_dir,
        db: Some(match input.sqlite_file() {
            Some(file) => std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf()).display().to_string(),
            None => db.path().to_string(),
        }),
        status: Some(info.status.as_str().to_string()),
        source: info.source.as_str().to_string(),
        created_at: Some(info.created_at),
        cells_planned: Some(info.cells_total),
        plan,
    };
    Ok((meta, Records::Db(db)))
}

fn open_run_dir(dir: &Path, problems: &mut Vec<String>) -> Result<(RunMeta, Records)> {
    // Absolute, without a trailing `/`: records and claims name files under it.
    let dir: PathBuf = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()).components().collect();
    // A sweep's records are under cells/, an import's in records.jsonl (earlier imports: under records/); each
    // directory is named by the record's position in the plan (`00042-vk-ngl1-e1r2`), and the number sorts them.
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    // An import's records, vetted as every file a run names is (inside the run with links resolved, regular).
    let lines = RunDir::new(&dir).records_path();
    let lines_ok = match (lines.exists(), run_file(&dir, RunDir::RECORDS_JSONL)) {
        (false, _) => false,
        (true, Ok(_)) => true,
        (true, Err(why)) => {
            problems.push(format!("{why}; the import's records are not read"));
            false
        }
    };
    let mut found = lines_ok;
    for sub in RunDir::RECORD_DIRS {
        let cells = dir.join(sub);
        let Ok(entries) = std::fs::read_dir(&cells) else { continue };
        found = true;
        for e in entries {
            let e = e.with_context(|| format!("cannot list {}", cells.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
            let Ok(seq) = digits.parse::<u64>() else { continue };
            let rel = RunDir::record_file(sub, &name);
            if std::fs::symlink_metadata(dir.join(&rel)).is_err() {
                continue;
            }
            match run_file(&dir, &rel) {
                Ok(result) => files.push((seq, result)),
                Err(why) => problems.push(format!("{why}; this record is left out")),
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
    let run_json = read_run_json(&dir, RunDir::RUN_JSON, problems);
    let first: Option<Value> = if lines_ok {
        first_line_json(&lines)
    } else {
        files
            .first()
            .and_then(|(_, f)| crate::host::inputs::read_limited(f, MAX_RECORD_BYTES).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
    };
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
    if lines_ok {
        return Ok((meta, Records::Lines(lines)));
    }
    Ok((meta, Records::Files(files.into_iter().map(|(_, f)| f).collect())))
}

/// The first record of a `records.jsonl`.
fn first_line_json(path: &Path) -> Option<Value> {
    let mut line = Vec::new();
    let file = crate::host::inputs::open_input(path).ok()?.file;
    std::io::BufReader::new(file).take(MAX_RECORD_BYTES).read_until(b'\n', &mut line).ok()?;
    serde_json::from_slice(&line).ok()
}

impl Records {
    /// Calls `f` with each record's JSON text, in plan order. A record that cannot be read, or that `f` refuses
    /// (it does not parse), is a problem naming it, and the rest go on; returns how many were read.
    pub fn for_each(
        &self,
        run_id: &str,
        problems: &mut Vec<String>,
        mut f: impl FnMut(&str) -> Result<()>,
    ) -> Result<u64> {
        match self {
            Records::Db(db) => {
                let mut n = 0u64;
                db.for_each_record_json(run_id, |json| {
                    n += 1;
                    if let Err(e) = f(json) {
                        problems
                            .push(format!("{}: record {n} of run {run_id}: {e:#}; this record is left out", db.path()));
                    }
                    Ok(())
                })?;
                Ok(n)
            }
            Records::Files(files) => {
                let mut n = 0u64;
                for file in files {
                    let text = match crate::host::inputs::read_text_limited(file, MAX_RECORD_BYTES) {
                        Ok(t) => t,
                        Err(e) => {
                            problems.push(format!(
                                "{e} (records are a few KiB; at most {} MiB is read); this record is left out",
                                MAX_RECORD_BYTES >> 20
                            ));
                            continue;
                        }
                    };
                    match f(&text) {
                        Ok(()) => n += 1,
                        Err(e) => problems.push(format!("{}: {e:#}; this record is left out", file.display())),
                    }
                }
                Ok(n)
            }
            Records::Lines(path) => {
                let file = crate::host::inputs::open_input(path).map_err(anyhow::Error::new)?.file;
                let mut reader = std::io::BufReader::new(file);
                let (mut n, mut lineno, mut line) = (0u64, 0u64, Vec::new());
                loop {
                    line.clear();
                    (&mut reader)
                        .take(MAX_RECORD_BYTES + 1)
                        .read_until(b'\n', &mut line)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    if line.is_empty() {
                        return Ok(n);
                    }
                    lineno += 1;
                    if line.len() as u64 > MAX_RECORD_BYTES {
                        bail!(
                            "{}, line {lineno}: longer than {} MiB, not a record",
                            path.display(),
                            MAX_RECORD_BYTES >> 20
                        );
                    }
                    let outcome = match std::str::from_utf8(&line) {
                        Ok(text) => f(text.trim_end()),
                        Err(e) => Err(anyhow::Error::new(e).context("not UTF-8")),
                    };
                    match outcome {
                        Ok(()) => n += 1,
                        Err(e) => {
                            problems.push(format!("{}, line {lineno}: {e:#}; this record is left out", path.display()))
                        }
                    }
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
        let mut problems = Vec::new();
        let (meta, records) = open(&DbValue::sqlite(dir.path().to_path_buf()), None, &mut problems).unwrap();
        assert_eq!(meta.run_id, "r9", "from the first record, without run.json");
        let mut seqs = Vec::new();
        let n = records
            .for_each("r9", &mut problems, |j| {
                seqs.push(serde_json::from_str::<Value>(j)?["seq"].as_u64().unwrap());
                Ok(())
            })
            .unwrap();
        assert_eq!((n, seqs), (3, vec![7, 99_999, 100_000]));
        assert!(problems.is_empty(), "{problems:?}");
        assert!(open(&DbValue::sqlite(dir.path().to_path_buf()), Some("r9"), &mut problems)
            .unwrap_err()
            .to_string()
            .contains("holds one run"));
        // A result.json far larger than any record is refused before it is read.
        let big = dir.path().join("cells/00008-a");
        std::fs::create_dir_all(&big).unwrap();
        std::fs::File::create(big.join("result.json")).unwrap().set_len(MAX_RECORD_BYTES + 1).unwrap();
        let (_, records) = open(&DbValue::sqlite(dir.path().to_path_buf()), None, &mut problems).unwrap();
        assert_eq!(records.for_each("r9", &mut problems, |_| Ok(())).unwrap(), 3, "the others are read");
        assert!(problems.len() == 1 && problems[0].contains("00008-a/result.json is 67108865 bytes"), "{problems:?}");
        let empty = tempfile::tempdir().unwrap();
        assert!(open(&DbValue::sqlite(empty.path().to_path_buf()), None, &mut problems)
            .unwrap_err()
            .to_string()
            .contains("not a run directory"));
    }
}
