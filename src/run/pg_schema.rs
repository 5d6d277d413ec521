//! The PostgreSQL schema of a shared store and its migrations.
//!
//! Everything lives in the schema `backscope` (so that a fleet host's role can be granted exactly that). Applied
//! migrations are rows of `backscope.schema_migrations`; whichever host connects first with the schema behind takes
//! `pg_advisory_lock(MIGRATION_LOCK)`, checks again and applies what is missing in one transaction, so hosts that
//! start together apply each migration once. A host that finds the schema current takes no lock and needs no
//! DDL right: a fleet host's role (INSERT/SELECT, UPDATE of a run's status) never migrates (docs/fleet.md).

use anyhow::{bail, Context, Result};
use postgres::Client;

/// `pg_advisory_lock` key of the migration lock: "backscop" as a big-endian integer.
pub const MIGRATION_LOCK: i64 = 0x6261_636b_7363_6f70;

/// The migrations in order: version, SQL.
pub const MIGRATIONS: &[(i32, &str)] = &[(1, V1), (2, V2)];

/// The schema this build writes.
pub const LATEST: i32 = 2;

/// Version 1: the SQLite schema's runs and records (version 3 there), plus what many writers need: the owning host
/// of a run (`runs.host_id`), the host that stored each record, and a deterministic `record_id`
/// (`run::store::record_id`) as the key, so that the same record stored twice is stored once.
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

/// Version 2: the bisect tables (`run::bisect`), the SQLite columns plus the host that started a bisect. A step is
/// keyed by `(bisect_id, seq)`, so it is stored once.
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

/// The applied version; 0 when the schema has no migrations table yet.
fn applied(client: &mut Client) -> Result<i32> {
    let exists: bool = client.query_one("SELECT to_regclass('backscope.schema_migrations') IS NOT NULL", &[])?.get(0);
    if !exists {
        return Ok(0);
    }
    Ok(client.query_one("SELECT coalesce(max(version), 0) FROM backscope.schema_migrations", &[])?.get(0))
}

/// Bring the schema to [`LATEST`] (`write`), or check that it is there (a reader: `write` false). `who` names the
/// host in `schema_migrations.applied_by`; `target` names the database in errors.
pub fn migrate(client: &mut Client, write: bool, who: &str, target: &str) -> Result<()> {
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

fn apply_locked(client: &mut Client, who: &str) -> Result<()> {
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
