//! The bisect store: what `backscope bisect` stores in the same SQLite file as the sweeps whose records its
//! steps cite. Two tables, created beside the sweep's (`CREATE TABLE IF NOT EXISTS`; the sweep schema's
//! `user_version` is not touched, so a sweep database stays a sweep database and a bisect database opens in every
//! backscope that reads sweeps):
//!
//! - `bisect_runs`: one row per bisect — its ends, the build source and test as given, the whole spec (so that
//!   `--resume` replays it without the original command line), the builds in range, and once decided the upstream
//!   range;
//! - `bisect_steps`: one row per tested build, committed in one transaction before the next step starts — the
//!   outcome, why, the evidence (sweep run ids and record files, or the external command's exit and output), and
//!   the build and test timings.
//!
//! The rows are the run format's (`crate::run::format::bisect`); the search state, the verdict and its claims are
//! computed from them alone, and rendered by one view (`crate::run_analysis::bisect`), so that `backscope bisect` and
//! `backscope report --bisect` show the same thing. Nothing here knows about a command. On PostgreSQL (`--db
//! postgres://…`) the same two tables live in the shared `backscope` schema ([`pg`]); when that server goes away
//! mid-bisect, the steps go on into a local SQLite file armed beforehand ([`BisectStore::arm_fallback`]), which
//! `backscope push` uploads later.

pub mod pg;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OptionalExtension};

use self::pg::PgBisect;
use crate::run::format::bisect::{BisectRow, Outcome, Role, Status, Step, Upstream};
use crate::run::format::ids::utc_now;
use crate::run::format::target::DbTarget;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS bisect_runs (
    bisect_id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    good INTEGER NOT NULL,
    bad INTEGER NOT NULL,
    builds TEXT NOT NULL,
    test TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    candidates_json TEXT NOT NULL,
    upstream_json TEXT,
    backscope_version TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS bisect_steps (
    bisect_id TEXT NOT NULL REFERENCES bisect_runs(bisect_id),
    seq INTEGER NOT NULL,
    build INTEGER NOT NULL,
    role TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    evidence_json TEXT NOT NULL,
    build_secs REAL,
    from_cache INTEGER,
    test_secs REAL NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (bisect_id, seq)
);
";

/// The bisect tables of the store a `--db` value names: an SQLite file, or a PostgreSQL database ([`pg`]).
#[derive(Debug)]
pub struct BisectStore {
    backend: Backend,
    /// The file, or the PostgreSQL target as shown in messages (no secrets).
    pub path: PathBuf,
    /// Where a PostgreSQL bisect continues if the server goes away, and what seeds that file.
    armed: Option<Armed>,
    /// The local file the bisect continued into after the server went away.
    fell_back: Option<PathBuf>,
}

/// A fallback file and the bisect as this process knows it: its row and every step stored so far.
#[derive(Debug)]
struct Armed {
    path: PathBuf,
    row: BisectRow,
    steps: Vec<Step>,
}

#[derive(Debug)]
enum Backend {
    Sqlite(Connection),
    Pg(Box<std::cell::RefCell<PgBisect>>),
}

impl BisectStore {
    /// Open (creating and migrating what is missing) the store a `--db` value names, for writing.
    pub fn open(db: &DbTarget) -> Result<BisectStore> {
        match db {
            DbTarget::Sqlite(path) => BisectStore::open_sqlite(path),
            DbTarget::Postgres(t) => BisectStore::open_pg(t, true),
        }
    }

    /// Open the store a `--db` value names for reading only (no file created, no migration applied).
    pub fn open_read_only(db: &DbTarget) -> Result<BisectStore> {
        match db {
            DbTarget::Sqlite(path) => BisectStore::open_sqlite_read_only(path),
            DbTarget::Postgres(t) => BisectStore::open_pg(t, false),
        }
    }

    fn open_pg(t: &crate::run::format::target::PgTarget, write: bool) -> Result<BisectStore> {
        let pg = PgBisect::connect(t, write)?;
        let path = PathBuf::from(pg.describe());
        Ok(BisectStore::over(Backend::Pg(Box::new(std::cell::RefCell::new(pg))), path))
    }

    /// A store over `backend`, shown as `path`, with no local fallback armed or in use.
    fn over(backend: Backend, path: PathBuf) -> BisectStore {
        BisectStore { backend, path, armed: None, fell_back: None }
    }

    /// Open (creating the file and the tables if missing) for writing, in WAL mode with `synchronous = FULL` like
    /// the sweep store, so that a committed step survives a power cut and a sweep can write beside it.
    fn open_sqlite(path: &Path) -> Result<BisectStore> {
        let conn = crate::run::write::sqlite::connect_durable(path, Duration::from_secs(30))?;
        conn.execute_batch(SCHEMA).with_context(|| format!("{}: cannot create the bisect tables", path.display()))?;
        Ok(BisectStore::over(Backend::Sqlite(conn), path.to_path_buf()))
    }

    /// Open an existing database for reading only, creating and changing no file (the sweep store's rule: through
    /// the WAL companions when a writer has them, else as immutable).
    fn open_sqlite_read_only(path: &Path) -> Result<BisectStore> {
        if !path.is_file() {
            bail!("{}: no such database (run `backscope bisect … --db FILE` first)", path.display());
        }
        match BisectStore::open_local_if_any(path)? {
            Some(store) => Ok(store),
            None => bail!("{}: holds no bisect (no `bisect_runs` and `bisect_steps` tables)", path.display()),
        }
    }

    /// An existing SQLite file's bisects for reading only, or none when it has no bisect tables (a database only
    /// sweeps wrote): what `backscope push` uploads besides the runs.
    pub fn open_local_if_any(path: &Path) -> Result<Option<BisectStore>> {
        crate::host::inputs::open_input(path)?;
        let conn = crate::run::write::sqlite::connect_read_only(path, Duration::from_secs(10))?;
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('bisect_runs', 'bisect_steps')",
                [],
                |r| r.get(0),
            )
            .with_context(|| format!("{}: not an SQLite database", path.display()))?;
        Ok((tables == 2).then(|| BisectStore::over(Backend::Sqlite(conn), path.to_path_buf())))
    }

    /// Upload a bisect and its steps read from a local store into this PostgreSQL store, once
    /// (`pg::PgBisect::push`).
    pub fn push(&mut self, row: &BisectRow, steps: &[Step], take_over: bool) -> Result<pg::BisectPush> {
        match &mut self.backend {
            Backend::Pg(p) => p.get_mut().push(row, steps, take_over),
            Backend::Sqlite(_) => {
                bail!("{}: bisects are pushed into a PostgreSQL store, not a file", self.path.display())
            }
        }
    }

    pub fn create(&mut self, row: &BisectRow) -> Result<()> {
        let conn = match &mut self.backend {
            Backend::Sqlite(c) => c,
            Backend::Pg(p) => return p.get_mut().create(row),
        };
        conn.execute(
                "INSERT INTO bisect_runs (bisect_id, created_at, finished_at, status, good, bad, builds, test, spec_json,
                 candidates_json, upstream_json, backscope_version) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    row.bisect_id,
                    row.created_at,
                    row.finished_at,
                    row.status.as_str(),
                    row.good,
                    row.bad,
                    row.builds,
                    row.test,
                    row.spec_json,
                    serde_json::to_string(&row.candidates)?,
                    row.upstream.as_ref().map(serde_json::to_string).transpose()?,
                    row.backscope_version,
                ],
            )
            .with_context(|| format!("cannot record bisect {}", row.bisect_id))?;
        Ok(())
    }

    /// Where bisect `row` continues if the PostgreSQL server goes away mid-bisect: a local SQLite file, seeded then
    /// with the row and every step stored until then (`steps`, and those appended since). A file store has no
    /// server to lose: nothing to arm.
    pub fn arm_fallback(&mut self, path: PathBuf, row: &BisectRow, steps: &[Step]) {
        if let Backend::Pg(_) = self.backend {
            self.armed = Some(Armed { path, row: row.clone(), steps: steps.to_vec() });
        }
    }

    /// The local file the bisect went on into, once the server went away.
    pub fn fallback_in_use(&self) -> Option<&Path> {
        self.fell_back.as_deref()
    }

    /// Continue into the armed local file: seed it, say so (and how to push it), write there from now on.
    fn enter_fallback(&mut self, reason: &str) -> Result<()> {
        let server = self.path.display().to_string();
        let Some(armed) = self.armed.take() else {
            bail!("{server}: the server went away ({reason}) and no local file was set for this bisect");
        };
        let id = armed.row.bisect_id.clone();
        let mut local = BisectStore::open_sqlite(&armed.path)?;
        if local.run(&id)?.is_none() {
            local.create(&BisectRow { status: Status::Running, finished_at: None, ..armed.row })?;
        }
        let there: Vec<u32> = local.steps(&id)?.iter().map(|s| s.seq).collect();
        for step in armed.steps.iter().filter(|s| !there.contains(&s.seq)) {
            local.append_step(&id, step)?;
        }
        crate::output::messages::note(format_args!(
            "the PostgreSQL server {server} went away ({reason}); bisect {id} continues into the local file {}. \
             Upload it later with: backscope push --from {} --db '{server}'",
            armed.path.display(),
            armed.path.display()
        ));
        self.backend = local.backend;
        self.path = armed.path.clone();
        self.fell_back = Some(armed.path);
        Ok(())
    }

    /// Record one step, in one transaction; its `seq` must be the next one (a step is never recorded twice).
    pub fn append_step(&mut self, bisect_id: &str, step: &Step) -> Result<()> {
        let conn = match &mut self.backend {
            Backend::Sqlite(c) => c,
            Backend::Pg(p) => {
                match p.get_mut().append_step(bisect_id, step) {
                    Err(e) if e.is::<pg::ServerGone>() && self.armed.is_some() => {
                        self.enter_fallback(&e.downcast::<pg::ServerGone>()?.reason)?;
                        return self.append_step(bisect_id, step);
                    }
                    Ok(()) => self.armed.iter_mut().for_each(|a| a.steps.push(step.clone())),
                    Err(e) => return Err(e),
                }
                return Ok(());
            }
        };
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO bisect_steps (bisect_id, seq, build, role, outcome, reason, evidence_json, build_secs,
             from_cache, test_secs, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                bisect_id,
                step.seq,
                step.build,
                step.role.as_str(),
                step.outcome.as_str(),
                step.reason,
                serde_json::to_string(&step.evidence)?,
                step.build_secs,
                step.from_cache,
                step.test_secs,
                step.recorded_at,
            ],
        )
        .with_context(|| format!("cannot record step {} (b{}) of bisect {bisect_id}", step.seq, step.build))?;
        tx.commit()?;
        Ok(())
    }

    /// Set the status; `Finished` also stamps the end and stores the upstream range (if any).
    pub fn finish(&mut self, bisect_id: &str, status: Status, upstream: Option<&Upstream>) -> Result<()> {
        let conn = match &mut self.backend {
            Backend::Sqlite(c) => c,
            Backend::Pg(p) => {
                return match p.get_mut().finish(bisect_id, status, upstream) {
                    Err(e) if e.is::<pg::ServerGone>() && self.armed.is_some() => {
                        self.enter_fallback(&e.downcast::<pg::ServerGone>()?.reason)?;
                        self.finish(bisect_id, status, upstream)
                    }
                    other => other,
                };
            }
        };
        let finished = (status == Status::Finished).then(utc_now);
        conn.execute(
            "UPDATE bisect_runs SET status = ?2, finished_at = ?3, upstream_json = ?4 WHERE bisect_id = ?1",
            params![bisect_id, status.as_str(), finished, upstream.map(serde_json::to_string).transpose()?],
        )?;
        Ok(())
    }

    pub fn run(&self, bisect_id: &str) -> Result<Option<BisectRow>> {
        let conn = match &self.backend {
            Backend::Sqlite(c) => c,
            Backend::Pg(p) => return p.borrow_mut().run(bisect_id),
        };
        let mut stmt = conn.prepare(&format!("{SELECT_RUN} WHERE bisect_id = ?1"))?;
        stmt.query_row([bisect_id], row_of).optional()?.transpose()
    }

    /// Every bisect, oldest first.
    pub fn runs(&self) -> Result<Vec<BisectRow>> {
        let conn = match &self.backend {
            Backend::Sqlite(c) => c,
            Backend::Pg(p) => return p.borrow_mut().runs(),
        };
        let mut stmt = conn.prepare(&format!("{SELECT_RUN} ORDER BY created_at, bisect_id"))?;
        let rows = stmt.query_map([], row_of)?;
        rows.map(|r| r?).collect()
    }

    /// One bisect by id, or the latest when `id` is none; an unknown id names the bisects there are.
    pub fn find(&self, id: Option<&str>) -> Result<BisectRow> {
        let runs = self.runs()?;
        let found = match id {
            Some(id) => runs.iter().find(|r| r.bisect_id == id),
            None => runs.last(),
        };
        match found {
            Some(r) => Ok(r.clone()),
            None => {
                let ids: Vec<&str> = runs.iter().rev().take(5).map(|r| r.bisect_id.as_str()).collect();
                bail!(
                    "no bisect {} in {} ({} bisect(s){}{})",
                    id.unwrap_or("at all"),
                    self.path.display(),
                    runs.len(),
                    if ids.is_empty() { "" } else { ", latest: " },
                    ids.join(", ")
                )
            }
        }
    }

    /// The bisect `--resume [ID]` continues: by id, else the latest — in a PostgreSQL store the latest this host
    /// started, so that a host never picks up another host's bisect by default, and only one of this database
    /// role's (another role's bisect, by id or not, is never continued; another host's by id only with
    /// `take_over`: `pg::PgBisect::resumable`).
    pub fn find_to_resume(&self, id: Option<&str>, take_over: bool) -> Result<BisectRow> {
        let Backend::Pg(pg) = &self.backend else { return self.find(id) };
        let mut pg = pg.borrow_mut();
        if let Some(id) = id {
            return pg.resumable(id, take_over);
        }
        match pg.latest_own()? {
            Some(row) => Ok(row),
            None => bail!("no bisect of host `{}` in {} to resume (give its id)", pg.host_id(), self.path.display()),
        }
    }

    /// Make a stored bisect this host's to continue: in a PostgreSQL store it is already, or `take_over` moves it
    /// from another host of this role (`pg::PgBisect::claim`); an SQLite file has one writer: always.
    pub fn claim(&mut self, bisect_id: &str, take_over: bool) -> Result<()> {
        match &mut self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Pg(p) => p.get_mut().claim(bisect_id, take_over),
        }
    }

    /// The steps of one bisect in the order they were taken.
    pub fn steps(&self, bisect_id: &str) -> Result<Vec<Step>> {
        let conn = match &self.backend {
            Backend::Sqlite(c) => c,
            Backend::Pg(p) => return p.borrow_mut().steps(bisect_id),
        };
        let mut stmt = conn.prepare(
            "SELECT seq, build, role, outcome, reason, evidence_json, build_secs, from_cache, test_secs, recorded_at
             FROM bisect_steps WHERE bisect_id = ?1 ORDER BY seq",
        )?;
        let rows = stmt.query_map([bisect_id], |r| {
            let role: String = r.get(2)?;
            let outcome: String = r.get(3)?;
            let evidence: String = r.get(5)?;
            Ok((role, outcome, evidence, r.get(0)?, r.get(1)?, r.get(4)?, r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (role, outcome, evidence, seq, build, reason, build_secs, from_cache, test_secs, recorded_at) = row?;
            out.push(Step {
                seq,
                build,
                role: Role::parse(&role).with_context(|| format!("bisect {bisect_id}: unknown step role `{role}`"))?,
                outcome: Outcome::parse(&outcome)
                    .with_context(|| format!("bisect {bisect_id}: unknown step outcome `{outcome}`"))?,
                reason,
                evidence: serde_json::from_str(&evidence)
                    .with_context(|| format!("bisect {bisect_id} step {seq}: evidence is not readable"))?,
                build_secs,
                from_cache,
                test_secs,
                recorded_at,
            });
        }
        Ok(out)
    }
}

const SELECT_RUN: &str = "SELECT bisect_id, created_at, finished_at, status, good, bad, builds, test, spec_json,
    candidates_json, upstream_json, backscope_version FROM bisect_runs";

/// A `bisect_runs` row; the inner result carries a column that does not parse.
fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<BisectRow>> {
    let id: String = r.get(0)?;
    let status: String = r.get(3)?;
    let candidates: String = r.get(9)?;
    let upstream: Option<String> = r.get(10)?;
    let parsed = (|| -> Result<BisectRow> {
        Ok(BisectRow {
            bisect_id: id.clone(),
            created_at: r.get(1)?,
            finished_at: r.get(2)?,
            status: Status::parse(&status).with_context(|| format!("unknown status `{status}`"))?,
            good: r.get(4)?,
            bad: r.get(5)?,
            builds: r.get(6)?,
            test: r.get(7)?,
            spec_json: r.get(8)?,
            candidates: serde_json::from_str(&candidates).context("candidates_json")?,
            upstream: upstream.as_deref().map(serde_json::from_str).transpose().context("upstream_json")?,
            backscope_version: r.get(11)?,
            taken_over: None,
        })
    })();
    Ok(parsed.with_context(|| format!("bisect {id}: a stored field is not readable")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::format::bisect::test_rows::row;
    use crate::run::format::bisect::{is_bisect_id, new_bisect_id, Evidence};

    fn step(seq: u32, build: u32, outcome: Outcome) -> Step {
        Step {
            seq,
            build,
            role: Role::Probe,
            outcome,
            reason: "r".into(),
            evidence: Evidence::default(),
            build_secs: Some(1.5),
            from_cache: Some(false),
            test_secs: 0.25,
            recorded_at: utc_now(),
        }
    }

    #[test]
    fn steps_round_trip_and_a_step_is_never_recorded_twice() {
        let dir = tempfile::tempdir().unwrap();
        let db = DbTarget::Sqlite(dir.path().join("b.db"));
        let mut s = BisectStore::open(&db).unwrap();
        s.create(&row("b1")).unwrap();
        s.append_step("b1", &step(0, 100, Outcome::Good)).unwrap();
        s.append_step("b1", &step(1, 104, Outcome::Bad)).unwrap();
        assert!(s.append_step("b1", &step(1, 102, Outcome::Skip)).is_err(), "seq 1 twice");
        s.finish("b1", Status::Finished, Some(&Upstream::new(100, 101, vec![]))).unwrap();
        drop(s);
        let r = BisectStore::open_read_only(&db).unwrap();
        let run = r.find(None).unwrap();
        assert_eq!((run.status, run.candidates.len()), (Status::Finished, 5));
        assert_eq!(run.upstream.unwrap().compare_url, "https://github.com/ggml-org/llama.cpp/compare/b100...b101");
        let steps = r.steps("b1").unwrap();
        assert_eq!(
            steps.iter().map(|s| (s.build, s.outcome)).collect::<Vec<_>>(),
            [(100, Outcome::Good), (104, Outcome::Bad)]
        );
        assert_eq!(steps[0].build_secs, Some(1.5));
        let e = format!("{:#}", r.find(Some("nope")).unwrap_err());
        assert!(e.contains("no bisect nope") && e.contains("latest: b1"), "{e}");
    }

    #[test]
    fn only_the_generated_id_shape_is_a_bisect_id() {
        assert!(is_bisect_id(&new_bisect_id()));
        assert!(is_bisect_id("bisect-20261202-021855-0a9f"));
        for bad in [
            "",
            "bisect-",
            "../../etc",
            "bisect-20261202-021855-0a9f/..",
            "/tmp/x",
            "bisect-20261202-021855-0A9F",
            "bisect-2026120-0218550-0a9f",
            "bisect-20261202-021855-0a9",
            "bisect-20261202-021855-0a9fe",
            "bisect-20261202\u{0}021855-0a9f",
        ] {
            assert!(!is_bisect_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_sweep_schema_version_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.db");
        let db = DbTarget::Sqlite(path.clone());
        BisectStore::open(&db).unwrap();
        let v: i64 = Connection::open(&path).unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, 0, "a sweep store opening this file later migrates from its own version 0");
        let mut store = crate::run::write::store::Store::open(&db).unwrap();
        assert!(store.runs().unwrap().is_empty());
        store.set_run_status("none", crate::run::format::run_row::RunStatus::Finished).unwrap();
        assert!(BisectStore::open_read_only(&db).unwrap().runs().unwrap().is_empty());
    }
}
