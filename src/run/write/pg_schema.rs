//! The PostgreSQL schema of a shared store and its migrations.
//!
//! Everything lives in the schema `backscope` (so that a fleet host's role can be granted exactly that). Applied
//! migrations are rows of `backscope.schema_migrations`; whichever host connects first with the schema behind takes
//! `pg_advisory_lock(MIGRATION_LOCK)`, checks again and applies what is missing in one transaction, so hosts that
//! start together apply each migration once. A host that finds the schema current takes no lock and needs no
//! DDL right: a fleet host's role (INSERT/SELECT, UPDATE of a run's status) never migrates (docs/fleet.md).
//!
//! Migration 3 makes the database role, not the self-declared host id, the owner of every row hosts write: an
//! `owner_role` column the server fills with `current_user`, and row-level security that lets a role insert and
//! update only its own rows while every role reads all of them (cross-host reports).

use anyhow::{bail, Context, Result};

use crate::run::write::pg_conn::PgConn;

/// `pg_advisory_lock` key of the migration lock: "backscop" as a big-endian integer.
pub const MIGRATION_LOCK: i64 = 0x6261_636b_7363_6f70;

/// The migrations in order: version, SQL.
pub const MIGRATIONS: &[(i32, &str)] = &[(1, V1), (2, V2), (3, V3)];

/// The schema this build writes.
pub const LATEST: i32 = 3;

/// Version 1: the SQLite schema's runs and records (version 3 there), plus what many writers need: the owning host
/// of a run (`runs.host_id`), the host that stored each record, and a deterministic `record_id`
/// (`run::format::ids::record_id`) as the key, so that the same record stored twice is stored once.
const V1: &str = "
CREATE TABLE backscope.runs (
    run_id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    source TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    plan_json TEXT NOT NULL,
    cells_total BIGINT NOT NULL,
    backscope_version TEXT NOT NULL,
    host_id TEXT NOT NULL,
    host_json TEXT
);
CREATE INDEX runs_by_host ON backscope.runs(host_id, source, created_at);
CREATE TABLE backscope.records (
    record_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES backscope.runs(run_id),
    cell_key TEXT NOT NULL,
    seq BIGINT NOT NULL,
    endpoint TEXT NOT NULL,
    model TEXT NOT NULL,
    num_gpu BIGINT NOT NULL,
    prompt TEXT NOT NULL,
    num_predict BIGINT NOT NULL,
    epoch BIGINT NOT NULL,
    repetition BIGINT NOT NULL,
    status TEXT NOT NULL,
    error_class TEXT,
    signal TEXT,
    http_status INTEGER,
    wall_ms DOUBLE PRECISION,
    ttft_ms DOUBLE PRECISION,
    ttf_ms DOUBLE PRECISION,
    prompt_tps DOUBLE PRECISION,
    decode_tps DOUBLE PRECISION,
    backend TEXT,
    file TEXT NOT NULL,
    json TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    host_id TEXT NOT NULL,
    trace_launches BIGINT,
    trace_json TEXT,
    UNIQUE (run_id, cell_key)
);
CREATE INDEX records_by_point ON backscope.records(run_id, endpoint, model, num_gpu);
";

/// Version 2: the bisect tables (`run::write::bisect`), the SQLite columns plus the host that started a bisect. A
/// step is keyed by `(bisect_id, seq)`, so it is stored once.
const V2: &str = "
CREATE TABLE backscope.bisect_runs (
    bisect_id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    good BIGINT NOT NULL,
    bad BIGINT NOT NULL,
    builds TEXT NOT NULL,
    test TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    candidates_json TEXT NOT NULL,
    upstream_json TEXT,
    backscope_version TEXT NOT NULL,
    host_id TEXT NOT NULL
);
CREATE TABLE backscope.bisect_steps (
    bisect_id TEXT NOT NULL REFERENCES backscope.bisect_runs(bisect_id),
    seq BIGINT NOT NULL,
    build BIGINT NOT NULL,
    role TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    evidence_json TEXT NOT NULL,
    build_secs DOUBLE PRECISION,
    from_cache BOOLEAN,
    test_secs DOUBLE PRECISION NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (bisect_id, seq)
);
";

/// Version 3: ownership by database role. Each table hosts write gets `owner_role` (default `current_user`: the
/// server stamps it; rows stored before this migration belong to the role that applied it) and row-level security:
/// every role reads every row; a role inserts only rows it owns, and records and steps only into a run or bisect it
/// owns; a role updates only the runs and bisects it owns and may not hand them to another role. No policy allows
/// UPDATE of records or steps, nor DELETE of anything. The schema's owner (the migration role) and superusers
/// bypass these policies: they are the admin roles (`--take-over` of another role's run, docs/fleet.md).
const V3: &str = "
ALTER TABLE backscope.runs ADD COLUMN owner_role TEXT NOT NULL DEFAULT current_user;
ALTER TABLE backscope.records ADD COLUMN owner_role TEXT NOT NULL DEFAULT current_user;
ALTER TABLE backscope.bisect_runs ADD COLUMN owner_role TEXT NOT NULL DEFAULT current_user;
ALTER TABLE backscope.bisect_steps ADD COLUMN owner_role TEXT NOT NULL DEFAULT current_user;
CREATE INDEX runs_by_owner ON backscope.runs(owner_role, host_id, source, created_at);
CREATE INDEX bisect_runs_by_owner ON backscope.bisect_runs(owner_role, host_id, created_at);

ALTER TABLE backscope.runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY runs_read ON backscope.runs FOR SELECT USING (true);
CREATE POLICY runs_insert ON backscope.runs FOR INSERT WITH CHECK (owner_role = current_user);
CREATE POLICY runs_update ON backscope.runs FOR UPDATE
    USING (owner_role = current_user) WITH CHECK (owner_role = current_user);

ALTER TABLE backscope.records ENABLE ROW LEVEL SECURITY;
CREATE POLICY records_read ON backscope.records FOR SELECT USING (true);
CREATE POLICY records_insert ON backscope.records FOR INSERT WITH CHECK (
    owner_role = current_user
    AND EXISTS (SELECT 1 FROM backscope.runs r WHERE r.run_id = records.run_id AND r.owner_role = current_user));

ALTER TABLE backscope.bisect_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY bisect_runs_read ON backscope.bisect_runs FOR SELECT USING (true);
CREATE POLICY bisect_runs_insert ON backscope.bisect_runs FOR INSERT WITH CHECK (owner_role = current_user);
CREATE POLICY bisect_runs_update ON backscope.bisect_runs FOR UPDATE
    USING (owner_role = current_user) WITH CHECK (owner_role = current_user);

ALTER TABLE backscope.bisect_steps ENABLE ROW LEVEL SECURITY;
CREATE POLICY bisect_steps_read ON backscope.bisect_steps FOR SELECT USING (true);
CREATE POLICY bisect_steps_insert ON backscope.bisect_steps FOR INSERT WITH CHECK (
    owner_role = current_user
    AND EXISTS (SELECT 1 FROM backscope.bisect_runs b
                WHERE b.bisect_id = bisect_steps.bisect_id AND b.owner_role = current_user));
";

/// The applied version; 0 when the schema has no migrations table yet.
fn applied(client: &mut PgConn) -> Result<i32> {
    let exists: bool = client.query_one("SELECT to_regclass('backscope.schema_migrations') IS NOT NULL", &[])?.get(0);
    if !exists {
        return Ok(0);
    }
    Ok(client.query_one("SELECT coalesce(max(version), 0) FROM backscope.schema_migrations", &[])?.get(0))
}

/// Bring the schema to [`LATEST`] (`write`), or check that it is there (a reader: `write` false). `who` names the
/// host in `schema_migrations.applied_by`; `target` names the database in errors.
pub fn migrate(client: &mut PgConn, write: bool, who: &str, target: &str) -> Result<()> {
    let version = applied(client).with_context(|| format!("{target}: cannot read the schema version"))?;
    if version > LATEST {
        bail!(
            "{target} was migrated by a newer backscope (schema {version}, this one knows {LATEST}); use that version"
        );
    }
    if version == LATEST {
        return Ok(());
    }
    if !write {
        if version == 0 {
            bail!("{target} holds no backscope schema: record runs into it first (`backscope sweep … --db` or `backscope push`)");
        }
        bail!("{target} has schema {version}, older than this backscope's {LATEST}: a sweep or push migrates it");
    }
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])?;
    let result = apply_locked(client, who);
    // Unlocked whatever happened (the lock is the session's: a failed transaction does not release it).
    let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
    result.map_err(|e| {
        anyhow::anyhow!(
            "{target}: cannot apply the backscope schema migrations: {e:#}. A fleet host's role only inserts and \
             selects; apply them once with the migration role (docs/fleet.md)"
        )
    })?;
    unlocked?;
    Ok(())
}

fn apply_locked(client: &mut PgConn, who: &str) -> Result<()> {
    let mut tx = client.transaction()?;
    // Another host may have applied them while this one waited for the lock: ask again, inside the lock.
    let exists: bool = tx.query_one("SELECT to_regclass('backscope.schema_migrations') IS NOT NULL", &[])?.get(0);
    if !exists {
        tx.batch_execute(
            "CREATE SCHEMA IF NOT EXISTS backscope;
             CREATE TABLE backscope.schema_migrations (
                 version INTEGER PRIMARY KEY,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                 applied_by TEXT NOT NULL
             );",
        )?;
    }
    let version: i32 = tx.query_one("SELECT coalesce(max(version), 0) FROM backscope.schema_migrations", &[])?.get(0);
    for (v, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > version) {
        tx.batch_execute(sql).with_context(|| format!("migration {v}"))?;
        tx.execute("INSERT INTO backscope.schema_migrations (version, applied_by) VALUES ($1, $2)", &[v, &who])?;
    }
    tx.commit()?;
    Ok(())
}
