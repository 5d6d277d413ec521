//! The PostgreSQL store: many hosts' runs in one database (`--db postgres://…` or a libpq `key=value` string).
//!
//! Same promises as the SQLite store — a record is committed (its own statement, synchronous commit) before the next
//! cell starts; `--resume` continues from the stored rows — plus what many writers need:
//! - a record's key is [`record_id`] (run id + cell key + repetition), inserted with `ON CONFLICT DO NOTHING`; when
//!   the row is there already it must be the same record (its JSON), so a repeated insert (a push done twice) is a
//!   no-op and a different one is an error, never a silent replacement;
//! - a run belongs to the host that created it (`runs.host_id`); a record is inserted only while the run is this
//!   host's, and another host continues a run only with `--take-over` ([`PgStore::claim_run`]);
//! - when the server goes away mid-run (connection closed, admin shutdown) the run continues into a local SQLite file
//!   beside its run directory (`RUN_DIR.local.db`), with a note saying how to `backscope push` it later.
//!
//! TLS: rustls with the ring provider (no OpenSSL headers needed to build), roots from the system store plus
//! `sslrootcert`; `sslmode=prefer` (the default) uses TLS when a TCP server offers it. Unix sockets carry no TLS.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use postgres::{Client, GenericClient, NoTls, ToStatement};

use super::host::HostIdentity;
use super::ids::{record_id, utc_now};
use super::record::{Record, RunSource};
use super::run_row::{RunRow, RunStatus};
use super::sqlite::{host_from_json, SqliteStore};
use super::target::{PgTarget, SslMode};

const RUN_COLUMNS: &str =
    "run_id, created_at, finished_at, status, source, run_dir, plan_json, cells_total, backscope_version, host_id, host_json";

pub struct PgStore {
    /// `None` once the server went away: everything goes to `fallback` from then on.
    client: RefCell<Option<Client>>,
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

/// The server went away (not: a query was wrong). Connection exceptions (SQLSTATE class 08), operator
/// intervention (57P: admin or crash shutdown) and a closed or broken socket.
pub fn is_connection_loss(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return code.code().starts_with("08") || code.code().starts_with("57P");
    }
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// A PostgreSQL error in words: the server's message and SQLSTATE for a database error (the crate's own text is
/// only "db error"), else the error and its causes.
pub fn error_text(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {} (SQLSTATE {})", db.severity(), db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

fn tls_connector(t: &PgTarget) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(file) = &t.sslrootcert {
        let pem = crate::inputs::read_limited(file, 1 << 20)
            .with_context(|| format!("--db: sslrootcert: {}", file.display()))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| anyhow!("--db: sslrootcert: {}: {e:?}", file.display()))?;
            roots.add(cert).map_err(|e| anyhow!("--db: sslrootcert: {}: {e}", file.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// Connect to `t` with the password from the environment or `~/.pgpass`.
pub fn connect_client(t: &PgTarget) -> Result<Client> {
    let mut c = postgres::Config::new();
    if t.is_socket() {
        c.host_path(&t.host);
    } else {
        c.host(&t.host);
    }
    c.port(t.port).user(&t.user).dbname(&t.dbname).connect_timeout(Duration::from_secs(t.connect_timeout_s));
    c.keepalives(t.keepalives);
    if let Some(idle) = t.keepalives_idle_s {
        c.keepalives_idle(Duration::from_secs(idle));
    }
    if let Some(a) = &t.application_name {
        c.application_name(a);
    }
    if let Some(o) = &t.options {
        c.options(o);
    }
    if t.target_session_attrs.as_deref() == Some("read-write") {
        c.target_session_attrs(postgres::config::TargetSessionAttrs::ReadWrite);
    }
    if let Some(p) = super::pgpass::password_for(t) {
        c.password(p);
    }
    let connected = match t.sslmode {
        SslMode::Disable => c.ssl_mode(postgres::config::SslMode::Disable).connect(NoTls),
        _ if t.is_socket() => c.ssl_mode(postgres::config::SslMode::Disable).connect(NoTls),
        mode => {
            let m = if mode == SslMode::Require {
                postgres::config::SslMode::Require
            } else {
                postgres::config::SslMode::Prefer
            };
            c.ssl_mode(m).connect(tls_connector(t)?)
        }
    };
    connected.map_err(|e| anyhow!("cannot connect to {}: {}", t.display(), error_text(&e)))
}

impl PgStore {
    /// Connect and bring the schema up to date (`write`) or check it (a reader).
    pub fn connect(t: &PgTarget, write: bool) -> Result<PgStore> {
        let mut client = connect_client(t)?;
        let host_id = HostIdentity::current().host_id;
        super::pg_schema::migrate(&mut client, write, &host_id, &t.display())?;
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
    fn with_client<T>(&self, f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>) -> Option<Result<T>> {
        let mut guard = self.client.borrow_mut();
        let client = guard.as_mut()?;
        Some(f(client).map_err(|e| anyhow!("{}: {}", self.target.display(), error_text(&e))))
    }

    fn local(&self) -> Result<&SqliteStore> {
        self.fallback.as_ref().map(|(_, s)| s).ok_or_else(|| anyhow!("{}: the connection is gone", self.describe()))
    }

    pub fn create_run(&mut self, run: &RunRow) -> Result<()> {
        let owner = run.host.as_ref().map(|h| h.host_id.clone()).unwrap_or_else(|| self.host_id.clone());
        let run_c = run.clone();
        self.with_client(|c| insert_run(c, &run_c, &owner))
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

    /// This host's most recent sweep run.
    pub fn latest_sweep_run(&self) -> Result<Option<RunRow>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM backscope.runs WHERE source = 'sweep' AND host_id = $1
             ORDER BY created_at DESC, run_id DESC LIMIT 1"
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
                Some(Err(e)) => match e.downcast_ref::<postgres::Error>() {
                    Some(pe) if is_connection_loss(pe) => {
                        let reason = error_text(pe);
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
        self.owned.get(run_id).map(|r| PathBuf::from(format!("{}.local.db", r.run_dir.trim_end_matches('/'))))
    }

    pub fn set_run_status(&mut self, run_id: &str, status: RunStatus) -> Result<()> {
        if self.fallback.is_none() {
            let finished = (status != RunStatus::Running).then(utc_now);
            let host_id = self.host_id.clone();
            let result = self.client.get_mut().as_mut().map(|c| {
                c.execute(
                    "UPDATE backscope.runs SET status = $2, finished_at = $3 WHERE run_id = $1 AND host_id = $4",
                    &[&run_id, &status.as_str(), &finished, &host_id],
                )
            });
            match result {
                Some(Ok(1)) => return Ok(()),
                Some(Ok(_)) => bail!(
                    "{}: run {run_id} is not this host's (`{host_id}`): taken over by another host?",
                    self.describe()
                ),
                Some(Err(e)) if is_connection_loss(&e) && self.owned.contains_key(run_id) => {
                    self.enter_fallback(run_id, &error_text(&e))?
                }
                Some(Err(e)) => return Err(anyhow!("{}: {}", self.describe(), error_text(&e))),
                None => bail!("{}: the connection is gone", self.describe()),
            }
        }
        self.fallback.as_mut().expect("entered above").1.set_run_status(run_id, status)
    }

    /// Make run `run_id` this host's to write: it is already, or `take_over` moves it here.
    pub fn claim_run(&mut self, run_id: &str, take_over: bool) -> Result<()> {
        let me = self.host_id.clone();
        let host_json = serde_json::to_string(&HostIdentity::current())?;
        let target = self.describe();
        let client = self.client.get_mut().as_mut().ok_or_else(|| anyhow!("{target}: the connection is gone"))?;
        let mut tx = client.transaction()?;
        let owner: String = tx
            .query_opt("SELECT host_id FROM backscope.runs WHERE run_id = $1 FOR UPDATE", &[&run_id])?
            .ok_or_else(|| anyhow!("no run {run_id} in {target}"))?
            .get(0);
        if owner != me {
            if !take_over {
                bail!(
                    "run {run_id} in {target} belongs to host `{owner}`; this host is `{me}`. Resume it on `{owner}`, \
                     or pass --take-over to move it to this host (only when `{owner}` no longer runs it)"
                );
            }
            tx.execute(
                "UPDATE backscope.runs SET host_id = $2, host_json = $3 WHERE run_id = $1",
                &[&run_id, &me, &host_json],
            )?;
            crate::output::messages::note(format_args!("took over run {run_id} from host `{owner}`"));
        }
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
            bail!(
                "run {run_id} has {missing} record(s) only in its local fallback file {} (recorded while the server was \
                 away): push them first (backscope push --from {} --db '{}'), then resume",
                path.display(),
                path.display(),
                self.describe()
            );
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
        use postgres::fallible_iterator::FallibleIterator;
        let mut guard = self.client.borrow_mut();
        let Some(client) = guard.as_mut() else {
            drop(guard);
            return self.local()?.for_each_record_json(run_id, f);
        };
        let at = |key: &str| format!("{}: record {key} of run {run_id}", self.describe());
        let mut rows = client
            .query_raw("SELECT json, cell_key FROM backscope.records WHERE run_id = $1 ORDER BY seq", [run_id])
            .with_context(|| at("?"))?;
        let mut n = 0u64;
        while let Some(row) = rows.next().with_context(|| at("?"))? {
            let key: String = row.get(1);
            f(row.get::<_, &str>(0)).with_context(|| at(&key))?;
            n += 1;
        }
        Ok(n)
    }

    /// A transaction for many rows (an import, a push).
    pub fn batch(&mut self) -> Result<PgBatch<'_>> {
        let host_id = self.host_id.clone();
        let target = self.target.display();
        let client = self.client.get_mut().as_mut().ok_or_else(|| anyhow!("{target}: the connection is gone"))?;
        Ok(PgBatch { tx: client.transaction()?, insert: None, host_id, target })
    }
}

fn run_from_row(r: &postgres::Row) -> Result<RunRow> {
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
    })
}

fn insert_run(c: &mut impl GenericClient, run: &RunRow, owner: &str) -> Result<(), postgres::Error> {
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
            &owner,
            &host_json,
        ],
    )?;
    Ok(())
}

/// The insert of a record, only while its run is the inserting host's; a record there already is not replaced.
const INSERT_RECORD: &str =
    "INSERT INTO backscope.records (record_id, run_id, cell_key, seq, endpoint, model, num_gpu, prompt, num_predict,
        epoch, repetition, status, error_class, signal, http_status, wall_ms, ttft_ms, ttf_ms, prompt_tps, decode_tps,
        backend, file, json, recorded_at, host_id, trace_launches, trace_json)
     SELECT $1::text, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::bigint, $8::text, $9::bigint,
        $10::bigint, $11::bigint, $12::text, $13::text, $14::text, $15::integer, $16::float8, $17::float8,
        $18::float8, $19::float8, $20::float8, $21::text, $22::text, $23::text, $24::text, $25::text,
        $26::bigint, $27::text
     WHERE EXISTS (SELECT 1 FROM backscope.runs WHERE run_id = $2 AND host_id = $25)
     ON CONFLICT DO NOTHING";

/// Insert a record while its run is `host_id`'s; `Ok(false)` when the same record (same JSON) is stored already.
/// Errors: a different record under the same cell, a run that is not (or no longer) this host's.
fn insert_record<S: ToStatement + ?Sized>(
    c: &mut impl GenericClient,
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
            let owner = c.query_opt("SELECT host_id FROM backscope.runs WHERE run_id = $1", &[&rec.run_id])?;
            match owner {
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
    tx: postgres::Transaction<'a>,
    /// [`INSERT_RECORD`] prepared once for the batch's many rows (an import, a push).
    insert: Option<postgres::Statement>,
    host_id: String,
    target: String,
}

impl PgBatch<'_> {
    pub fn create_run(&mut self, run: &RunRow) -> Result<()> {
        let owner = run.host.as_ref().map(|h| h.host_id.clone()).unwrap_or_else(|| self.host_id.clone());
        insert_run(&mut self.tx, run, &owner)
            .with_context(|| format!("{}: cannot record run {}", self.target, run.run_id))
    }

    /// Make run `run` (from a local file) present here and this host's: created when missing; when present, it
    /// must be this host's already, or `take_over` moves it. Returns whether the run was created.
    pub fn adopt_run(&mut self, run: &RunRow, take_over: bool) -> Result<bool> {
        let owner =
            self.tx.query_opt("SELECT host_id FROM backscope.runs WHERE run_id = $1 FOR UPDATE", &[&run.run_id])?;
        let Some(owner) = owner.map(|r| r.get::<_, String>(0)) else {
            let mut mine = run.clone();
            mine.host.get_or_insert_with(HostIdentity::current).host_id = self.host_id.clone();
            self.create_run(&mine)?;
            return Ok(true);
        };
        if owner != self.host_id {
            if !take_over {
                bail!(
                    "run {} in {} belongs to host `{owner}`; this host is `{}`: pass --take-over to push into it anyway",
                    run.run_id,
                    self.target,
                    self.host_id
                );
            }
            self.tx
                .execute("UPDATE backscope.runs SET host_id = $2 WHERE run_id = $1", &[&run.run_id, &self.host_id])?;
        }
        Ok(false)
    }

    /// Set a run's status as its local copy has it.
    pub fn set_run_status(&mut self, run_id: &str, status: RunStatus, finished_at: Option<&str>) -> Result<()> {
        self.tx.execute(
            "UPDATE backscope.runs SET status = $2, finished_at = $3 WHERE run_id = $1",
            &[&run_id, &status.as_str(), &finished_at],
        )?;
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
