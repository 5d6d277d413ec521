//! The PostgreSQL store: many hosts' runs in one database (`--db postgres://…` or a libpq `key=value` string).
//!
//! Same promises as the SQLite store — a record is committed (its own statement, synchronous commit) before the next
//! cell starts; `--resume` continues from the stored rows — plus what many writers need:
//! - a record's key is [`record_id`] (run id + cell key + repetition), inserted with `ON CONFLICT DO NOTHING`; when
//!   the row is there already it must be the same record (its JSON), so a repeated insert (a push done twice) is a
//!   no-op and a different one is an error, never a silent replacement;
//! - a run belongs to the database role that created it (`runs.owner_role`, set by the server to `current_user`,
//!   never by the client) and, within that role, to the host that created it (`runs.host_id`, self-declared: a guard
//!   against mix-ups between hosts that share a role, not a security boundary). Row-level security
//!   (`pg_schema`, migration 3) lets a role insert and update only its own rows; the checks here compare
//!   `owner_role` with `current_user` first. A record is inserted only while the run is this role's and this host's;
//!   another host of the same role continues a run only with `--take-over`, and a run of another role only an admin
//!   role (one that bypasses row-level security) can take over ([`PgStore::claim_run`]);
//! - when the server goes away mid-run (connection closed, admin shutdown) the run continues into a local SQLite file
//!   beside its run directory (`RUN_DIR.local.db`), with a note saying how to `backscope push` it later.
//!
//! The connection and its deadlines, size cap and TLS are `pg_conn`'s.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use tokio_postgres::ToStatement;

use crate::host::identity::host_id;
use crate::run::format::host::this_host;
use crate::run::format::ids::{record_id, utc_now};
use crate::run::format::record::{Record, RunSource};
use crate::run::format::run_dir::RunDir;
use crate::run::format::run_row::{RunOwner, RunRow, RunStatus};
use crate::run::format::target::PgTarget;
use crate::run::write::pg_conn::{PgConn, PgError};
use crate::run::write::sqlite::{host_from_json, SqliteStore};

/// A run's columns as [`run_from_row`] reads them; the last two say who owns it and whether that is this role.
const RUN_COLUMNS: &str = "run_id, created_at, finished_at, status, source, run_dir, plan_json, cells_total, \
     backscope_version, host_id, host_json, owner_role, owner_role = current_user";

pub struct PgStore {
    /// `None` once the server went away: everything goes to `fallback` from then on.
    client: RefCell<Option<PgConn>>,
    target: PgTarget,
    host_id: String,
    /// Runs this process created or claimed: their rows seed the fallback file.
    owned: HashMap<String, RunRow>,
    fallback: Option<(PathBuf, SqliteStore)>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("target", &self.target.display()).field("host_id", &self.host_id).finish()
    }
}

/// Connect to `t` with the password from the environment or `~/.pgpass`, under `pg_conn`'s deadlines.
pub fn connect_client(t: &PgTarget) -> Result<PgConn> {
    crate::run::write::pg_conn::connect(t, crate::run::write::pgpass::password_for(t))
        .map_err(|e| anyhow!("cannot connect to {}: {e:#}", t.display()))
}

/// The message for a run (or bisect) of another role: what can be done about it.
pub fn not_this_role(what: &str, owner: &str, me: &str) -> String {
    format!(
        "{what} belongs to the database role `{owner}`; this connection's role is `{me}`. Only `{owner}` or an admin \
         role (one that bypasses row-level security: the schema's owner or a superuser) can continue it (docs/fleet.md)"
    )
}

impl PgStore {
    /// Connect and bring the schema up to date (`write`) or check it (a reader).
    pub fn connect(t: &PgTarget, write: bool) -> Result<PgStore> {
        let mut client = connect_client(t)?;
        let host_id = host_id();
        crate::run::write::pg_schema::migrate(&mut client, write, &host_id, &t.display())?;
        Ok(PgStore {
            client: RefCell::new(Some(client)),
            target: t.clone(),
            host_id,
            owned: HashMap::new(),
            fallback: None,
        })
    }

    pub fn describe(&self) -> String {
        self.target.display()
    }

    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    /// Run `f` on the connection; `None` when the server is gone (the fallback file answers instead).
    fn with_client<T>(&self, f: impl FnOnce(&mut PgConn) -> Result<T, PgError>) -> Option<Result<T>> {
        let mut guard = self.client.borrow_mut();
        let client = guard.as_mut()?;
        Some(f(client).map_err(|e| anyhow!("{}: {e}", self.target.display())))
    }

    fn local(&self) -> Result<&SqliteStore> {
        self.fallback.as_ref().map(|(_, s)| s).ok_or_else(|| anyhow!("{}: the connection is gone", self.describe()))
    }

    pub fn create_run(&mut self, run: &RunRow) -> Result<()> {
        let host = run.host.as_ref().map(|h| h.host_id.clone()).unwrap_or_else(|| self.host_id.clone());
        let run_c = run.clone();
        self.with_client(|c| insert_run(c, &run_c, &host))
            .unwrap_or_else(|| bail!("{}: the connection is gone", self.describe()))
            .with_context(|| format!("cannot record run {}", run.run_id))?;
        self.owned.insert(run.run_id.clone(), run.clone());
        Ok(())
    }

    pub fn run(&self, run_id: &str) -> Result<Option<RunRow>> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM backscope.runs WHERE run_id = $1");
        match self.with_client(|c| c.query_opt(&sql, &[&run_id])) {
            Some(row) => row?.map(|r| run_from_row(&r)).transpose(),
            None => self.local()?.run(run_id),
        }
    }

    /// This host's most recent sweep run, among this role's runs: another role's run never counts, whatever host
    /// id it claims.
    pub fn latest_sweep_run(&self) -> Result<Option<RunRow>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM backscope.runs WHERE source = 'sweep' AND host_id = $1
             AND owner_role = current_user ORDER BY created_at DESC, run_id DESC LIMIT 1"
        );
        match self.with_client(|c| c.query_opt(&sql, &[&self.host_id])) {
            Some(row) => row?.map(|r| run_from_row(&r)).transpose(),
            None => self.local()?.latest_sweep_run(),
        }
    }

    pub fn runs(&self) -> Result<Vec<RunRow>> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM backscope.runs ORDER BY created_at, run_id");
        match self.with_client(|c| c.query(&sql, &[])) {
            Some(rows) => rows?.iter().map(run_from_row).collect(),
            None => self.local()?.runs(),
        }
    }

    pub fn completed_keys(&self, run_id: &str) -> Result<HashSet<String>> {
        match self.with_client(|c| c.query("SELECT cell_key FROM backscope.records WHERE run_id = $1", &[&run_id])) {
            Some(rows) => Ok(rows?.iter().map(|r| r.get(0)).collect()),
            None => self.local()?.completed_keys(run_id),
        }
    }

    /// Insert one record; `false` when the same record was stored already. Once the server is gone, the record goes
    /// to the fallback file.
    pub fn insert_record(&mut self, rec: &Record) -> Result<bool> {
        if self.fallback.is_none() {
            let json = serde_json::to_string(rec)?;
            let host_id = self.host_id.clone();
            let result = self.client.get_mut().as_mut().map(|c| insert_record(c, INSERT_RECORD, rec, &json, &host_id));
            match result {
                Some(Ok(inserted)) => return Ok(inserted),
                Some(Err(e)) => match e.downcast_ref::<PgError>() {
                    Some(pe) if pe.is_connection_loss() => {
                        let reason = pe.to_string();
                        self.enter_fallback(&rec.run_id, &reason)?
                    }
                    _ => return Err(e.context(format!("cannot record cell {} of run {}", rec.cell_key, rec.run_id))),
                },
                None => bail!("{}: the connection is gone", self.describe()),
            }
        }
        let local = &mut self.fallback.as_mut().expect("entered above").1;
        local.insert_record(rec).map(|_| true)
    }

    /// The server went away while run `run_id` was being written: open its fallback file (creating the run there)
    /// and say so.
    fn enter_fallback(&mut self, run_id: &str, reason: &str) -> Result<()> {
        let path = self.fallback_path(run_id).ok_or_else(|| {
            anyhow!(
                "{}: the server went away ({reason}) and run {run_id} is not this process's to continue locally",
                self.describe()
            )
        })?;
        let row = self.owned[run_id].clone();
        let mut local = SqliteStore::open(&path)?;
        if local.run(run_id)?.is_none() {
            local.create_run(&RunRow { status: RunStatus::Running, ..row })?;
        }
        crate::output::messages::note(format_args!(
            "the PostgreSQL server {} went away ({reason}); run {run_id} continues into the local file {}. Upload it later with: backscope push --from {} --db '{}'",
            self.describe(),
            path.display(),
            path.display(),
            self.describe()
        ));
        *self.client.get_mut() = None;
        self.fallback = Some((path, local));
        Ok(())
    }

    /// The fallback file, once the server went away.
    pub fn fallback_in_use(&self) -> Option<&std::path::Path> {
        self.fallback.as_ref().map(|(p, _)| p.as_path())
    }

    /// Where run `run_id`'s records go if the server goes away: `RUN_DIR.local.db`, beside its run directory.
    pub fn fallback_path(&self, run_id: &str) -> Option<PathBuf> {
        self.owned.get(run_id).map(|r| RunDir::new(&r.run_dir).local_db_path())
    }

    pub fn set_run_status(&mut self, run_id: &str, status: RunStatus) -> Result<()> {
        if self.fallback.is_none() {
            let finished = (status != RunStatus::Running).then(utc_now);
            let host_id = self.host_id.clone();
            let result = self.client.get_mut().as_mut().map(|c| {
                c.execute(
                    "UPDATE backscope.runs SET status = $2, finished_at = $3
                     WHERE run_id = $1 AND host_id = $4 AND owner_role = current_user",
                    &[&run_id, &status.as_str(), &finished, &host_id],
                )
            });
            match result {
                Some(Ok(1)) => return Ok(()),
                Some(Ok(_)) => bail!(
                    "{}: run {run_id} is not this role's and host's (`{host_id}`): taken over by another host?",
                    self.describe()
                ),
                Some(Err(e)) if e.is_connection_loss() && self.owned.contains_key(run_id) => {
                    self.enter_fallback(run_id, &e.to_string())?
                }
                Some(Err(e)) => return Err(anyhow!("{}: {e}", self.describe())),
                None => bail!("{}: the connection is gone", self.describe()),
            }
        }
        self.fallback.as_mut().expect("entered above").1.set_run_status(run_id, status)
    }

    /// Make run `run_id` this host's to write: it is already, or `take_over` moves it here ([`take_run`]).
    pub fn claim_run(&mut self, run_id: &str, take_over: bool) -> Result<()> {
        let host_json = serde_json::to_string(&this_host())?;
        let target = self.describe();
        let me = self.host_id.clone();
        let client = self.client.get_mut().as_mut().ok_or_else(|| anyhow!("{target}: the connection is gone"))?;
        let mut tx = client.transaction()?;
        take_run(&mut tx, run_id, &me, Some(&host_json), take_over, &target)?
            .ok_or_else(|| anyhow!("no run {run_id} in {target}"))?;
        tx.commit()?;
        let row = self.run(run_id)?.ok_or_else(|| anyhow!("no run {run_id} in {target}"))?;
        self.owned.insert(run_id.to_string(), row);
        self.refuse_unpushed_fallback(run_id)
    }

    /// A run that fell back to its local file must have that file pushed before it continues here: otherwise the
    /// cells recorded only locally would run again and their new records clash with the local ones at push time.
    fn refuse_unpushed_fallback(&self, run_id: &str) -> Result<()> {
        let Some(path) = self.fallback_path(run_id).filter(|p| p.is_file()) else { return Ok(()) };
        let local = SqliteStore::open_read_only(&path)?;
        if local.run(run_id)?.is_none() {
            return Ok(());
        }
        let shared = self.completed_keys(run_id)?;
        let missing = local.completed_keys(run_id)?.into_iter().filter(|k| !shared.contains(k)).count();
        if missing > 0 {
            let what = format!("run {run_id}");
            return Err(super::durable::unpushed_fallback(&what, missing, "record(s)", &path, &self.describe()));
        }
        Ok(())
    }

    pub fn record_json(&self, run_ids: &[String]) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let ids: Vec<String> =
            if run_ids.is_empty() { self.runs()?.into_iter().map(|r| r.run_id).collect() } else { run_ids.to_vec() };
        for id in &ids {
            if self.run(id)?.is_none() {
                bail!("no run {id} in {}", self.describe());
            }
            self.for_each_record_json(id, |j| {
                out.push(j.to_string());
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// Each record of one run as stored, in plan order, streamed from the server.
    pub fn for_each_record_json(&self, run_id: &str, mut f: impl FnMut(&str) -> Result<()>) -> Result<u64> {
        let mut guard = self.client.borrow_mut();
        let Some(client) = guard.as_mut() else {
            drop(guard);
            return self.local()?.for_each_record_json(run_id, f);
        };
        let at = |key: &str| format!("{}: record {key} of run {run_id}", self.describe());
        let mut last_key = String::from("?");
        client
            .for_each_row(
                "SELECT json, cell_key FROM backscope.records WHERE run_id = $1 ORDER BY seq",
                &[run_id],
                |row| {
                    last_key = row.get::<_, String>(1);
                    f(row.get::<_, &str>(0))
                },
            )
            .with_context(|| at(&last_key))
    }

    /// A transaction for many rows (an import, a push).
    pub fn batch(&mut self) -> Result<PgBatch<'_>> {
        let host_id = self.host_id.clone();
        let target = self.target.display();
        let client = self.client.get_mut().as_mut().ok_or_else(|| anyhow!("{target}: the connection is gone"))?;
        Ok(PgBatch { tx: client.transaction()?, insert: None, host_id, target })
    }
}

/// Make run `run_id` host `me`'s within this role, inside a transaction; `None` when there is no such run.
/// A run of another role is refused, or with `take_over` moved to this role — which only an admin role can do: a
/// host role has no UPDATE right on `owner_role`, and row-level security hides other roles' rows from its
/// updates. A run of another host of this role is refused, or with `take_over` moved to `me` (and `host_json`).
fn take_run(
    tx: &mut PgConn,
    run_id: &str,
    me: &str,
    host_json: Option<&str>,
    take_over: bool,
    target: &str,
) -> Result<Option<()>> {
    let Some(row) = tx.query_opt(
        "SELECT host_id, owner_role, current_user::text FROM backscope.runs WHERE run_id = $1",
        &[&run_id],
    )?
    else {
        return Ok(None);
    };
    let (host, owner, role): (String, String, String) = (row.get(0), row.get(1), row.get(2));
    if owner != role {
        let refusal = not_this_role(&format!("run {run_id} in {target}"), &owner, &role);
        if !take_over {
            bail!("{refusal}; --take-over moves it only for such a role");
        }
        let moved = tx.execute(
            "UPDATE backscope.runs SET owner_role = current_user, host_id = $2, host_json = coalesce($3, host_json)
             WHERE run_id = $1",
            &[&run_id, &me, &host_json],
        );
        match moved {
            Ok(1) => {}
            Ok(_) => bail!("{refusal}; --take-over was refused (row-level security)"),
            Err(e) if e.code() == Some("42501") => bail!("{refusal}; --take-over was refused: {e}"),
            Err(e) => return Err(e.into()),
        }
        crate::output::messages::note(format_args!("took over run {run_id} from role `{owner}` (host `{host}`)"));
        return Ok(Some(()));
    }
    // This role's: lock it (visible to this role's UPDATE policy, so FOR UPDATE finds it) and check the host.
    tx.query_opt("SELECT 1 FROM backscope.runs WHERE run_id = $1 FOR UPDATE", &[&run_id])?;
    if host != me {
        if !take_over {
            bail!(
                "run {run_id} in {target} belongs to host `{host}`; this host is `{me}`. Resume it on `{host}`, \
                 or pass --take-over to move it to this host (only when `{host}` no longer runs it)"
            );
        }
        tx.execute(
            "UPDATE backscope.runs SET host_id = $2, host_json = coalesce($3, host_json) WHERE run_id = $1",
            &[&run_id, &me, &host_json],
        )?;
        crate::output::messages::note(format_args!("took over run {run_id} from host `{host}`"));
    }
    Ok(Some(()))
}

fn run_from_row(r: &tokio_postgres::Row) -> Result<RunRow> {
    let status: String = r.get(3);
    let source: String = r.get(4);
    Ok(RunRow {
        run_id: r.get(0),
        created_at: r.get(1),
        finished_at: r.get(2),
        status: RunStatus::parse(&status).ok_or_else(|| anyhow!("unknown run status `{status}`"))?,
        source: RunSource::parse(&source).ok_or_else(|| anyhow!("unknown run source `{source}`"))?,
        run_dir: r.get(5),
        plan_json: r.get(6),
        cells_total: r.get::<_, i64>(7) as u64,
        backscope_version: r.get(8),
        host: host_from_json(r.get(10)),
        owner: Some(RunOwner { role: r.get(11), is_current: r.get(12) }),
    })
}

/// Insert a run as host `host`; its `owner_role` is the server's `current_user` (the column's default).
fn insert_run(c: &mut PgConn, run: &RunRow, host: &str) -> Result<(), PgError> {
    let host_json = run.host.as_ref().and_then(|h| serde_json::to_string(h).ok());
    c.execute(
        "INSERT INTO backscope.runs (run_id, created_at, finished_at, status, source, run_dir, plan_json, cells_total,
            backscope_version, host_id, host_json) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        &[
            &run.run_id,
            &run.created_at,
            &run.finished_at,
            &run.status.as_str(),
            &run.source.as_str(),
            &run.run_dir,
            &run.plan_json,
            &(run.cells_total as i64),
            &run.backscope_version,
            &host,
            &host_json,
        ],
    )?;
    Ok(())
}

/// The insert of a record, only while its run is the inserting role's and host's; a record there already is not
/// replaced. The record's `owner_role` is the server's `current_user` (the column's default); row-level security
/// checks the same again.
const INSERT_RECORD: &str =
    "INSERT INTO backscope.records (record_id, run_id, cell_key, seq, endpoint, model, num_gpu, prompt, num_predict,
        epoch, repetition, status, error_class, signal, http_status, wall_ms, ttft_ms, ttf_ms, prompt_tps, decode_tps,
        backend, file, json, recorded_at, host_id, trace_launches, trace_json)
     SELECT $1::text, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::bigint, $8::text, $9::bigint,
        $10::bigint, $11::bigint, $12::text, $13::text, $14::text, $15::integer, $16::float8, $17::float8,
        $18::float8, $19::float8, $20::float8, $21::text, $22::text, $23::text, $24::text, $25::text,
        $26::bigint, $27::text
     WHERE EXISTS (SELECT 1 FROM backscope.runs WHERE run_id = $2 AND host_id = $25 AND owner_role = current_user)
     ON CONFLICT DO NOTHING";

/// Insert a record while its run is `host_id`'s; `Ok(false)` when the same record (same JSON) is stored already.
/// Errors: a different record under the same cell, a run that is not (or no longer) this role's and host's.
fn insert_record<S: ToStatement + ?Sized + Sync>(
    c: &mut PgConn,
    stmt: &S,
    rec: &Record,
    json: &str,
    host_id: &str,
) -> Result<bool> {
    let id = record_id(&rec.run_id, &rec.cell_key, rec.repetition);
    let trace_json = rec.trace.as_ref().map(serde_json::to_string).transpose()?;
    let n = c.execute(
        stmt,
        &[
            &id,
            &rec.run_id,
            &rec.cell_key,
            &(rec.seq as i64),
            &rec.endpoint,
            &rec.model,
            &rec.num_gpu,
            &rec.prompt,
            &rec.num_predict,
            &i64::from(rec.epoch),
            &i64::from(rec.repetition),
            &if rec.is_ok() { "ok" } else { "fail" },
            &rec.error_class.map(|c| c.as_str()),
            &rec.signal,
            &rec.http_status.map(i32::from),
            &rec.wall_ms,
            &rec.ttft_ms,
            &rec.ttf_ms,
            &rec.prompt_tps,
            &rec.decode_tps,
            &rec.backend.as_ref().map(|b| b.backend.clone()),
            &rec.file,
            &json,
            &utc_now(),
            &host_id,
            &rec.trace.as_ref().map(|t| t.total_launches as i64),
            &trace_json,
        ],
    )?;
    if n == 1 {
        return Ok(true);
    }
    let stored = c.query_opt(
        "SELECT json FROM backscope.records WHERE run_id = $1 AND cell_key = $2",
        &[&rec.run_id, &rec.cell_key],
    )?;
    match stored {
        Some(row) if row.get::<_, &str>(0) == json => Ok(false),
        Some(_) => bail!(
            "cell {} of run {} is stored already with a different record; the stored one is kept",
            rec.cell_key,
            rec.run_id
        ),
        None => {
            let owner = c.query_opt(
                "SELECT host_id, owner_role, current_user::text FROM backscope.runs WHERE run_id = $1",
                &[&rec.run_id],
            )?;
            match owner {
                Some(o) if o.get::<_, String>(1) != o.get::<_, String>(2) => bail!(
                    "{}: cell {} not recorded",
                    not_this_role(&format!("run {}", rec.run_id), o.get(1), o.get(2)),
                    rec.cell_key
                ),
                Some(o) => bail!(
                    "run {} belongs to host `{}`, not `{host_id}` (taken over?): cell {} not recorded",
                    rec.run_id,
                    o.get::<_, String>(0),
                    rec.cell_key
                ),
                None => bail!("no run {} to record cell {} into", rec.run_id, rec.cell_key),
            }
        }
    }
}

/// Rows written in one PostgreSQL transaction.
pub struct PgBatch<'a> {
    tx: crate::run::write::pg_conn::PgTx<'a>,
    /// [`INSERT_RECORD`] prepared once for the batch's many rows (an import, a push).
    insert: Option<tokio_postgres::Statement>,
    host_id: String,
    target: String,
}

impl PgBatch<'_> {
    pub fn create_run(&mut self, run: &RunRow) -> Result<()> {
        let host = run.host.as_ref().map(|h| h.host_id.clone()).unwrap_or_else(|| self.host_id.clone());
        insert_run(&mut self.tx, run, &host)
            .with_context(|| format!("{}: cannot record run {}", self.target, run.run_id))
    }

    /// Make run `run` (from a local file) present here and this role's and host's: created when missing; when
    /// present, it must be this host's already, or `take_over` moves it ([`take_run`]). Returns whether the run was
    /// created.
    pub fn adopt_run(&mut self, run: &RunRow, take_over: bool) -> Result<bool> {
        let (me, target) = (self.host_id.clone(), self.target.clone());
        if take_run(&mut self.tx, &run.run_id, &me, None, take_over, &target)?.is_some() {
            return Ok(false);
        }
        let mut mine = run.clone();
        mine.host.get_or_insert_with(this_host).host_id = me;
        self.create_run(&mine)?;
        Ok(true)
    }

    /// Set a run's status as its local copy has it (a run of this role only).
    pub fn set_run_status(&mut self, run_id: &str, status: RunStatus, finished_at: Option<&str>) -> Result<()> {
        let n = self.tx.execute(
            "UPDATE backscope.runs SET status = $2, finished_at = $3 WHERE run_id = $1 AND owner_role = current_user",
            &[&run_id, &status.as_str(), &finished_at],
        )?;
        if n != 1 {
            bail!("{}: run {run_id}: its status was not set (not this role's run)", self.target);
        }
        Ok(())
    }

    /// Insert a record whose JSON text the caller already has; `false` when the same record is stored already.
    pub fn insert_record_json(&mut self, rec: &Record, json: &str) -> Result<bool> {
        let host_id = self.host_id.clone();
        if self.insert.is_none() {
            self.insert = Some(self.tx.prepare(INSERT_RECORD)?);
        }
        let stmt = self.insert.clone().expect("prepared above");
        insert_record(&mut self.tx, &stmt, rec, json, &host_id)
            .with_context(|| format!("{}: cannot record cell {} of run {}", self.target, rec.cell_key, rec.run_id))
    }

    pub fn commit(self) -> Result<()> {
        let target = self.target;
        self.tx.commit().with_context(|| format!("{target}: commit failed"))
    }
}
