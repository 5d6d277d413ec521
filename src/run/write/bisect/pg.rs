//! The bisect tables in a PostgreSQL store (`backscope.bisect_runs`, `backscope.bisect_steps`, migration 2 of
//! `run::write::pg_schema`): the same columns as the SQLite tables, plus the host that started the bisect and the
//! database role that owns it (`owner_role`, migration 3: set by the server, checked by row-level security). A
//! bisect is continued only by its own role ([`PgBisect::resumable`]); another role's row, whatever host id it
//! claims, is never picked up. Every statement commits on its own (synchronous commit), so a step is durable before
//! the next one starts. A step is keyed by `(bisect_id, seq)` and inserted with `ON CONFLICT DO NOTHING`; a row
//! already there must be the same step (build, role, outcome, reason, evidence), so a repeated insert is a no-op and
//! a different one an error, never a silent replacement.

use anyhow::{anyhow, bail, Context, Result};
use tokio_postgres::Row;

use crate::host::identity::host_id;
use crate::run::format::bisect::{BisectRow, Outcome, Role, Status, Step, Upstream};
use crate::run::format::ids::utc_now;
use crate::run::format::target::PgTarget;
use crate::run::write::pg::{connect_client, not_this_role};
use crate::run::write::pg_conn::{PgConn, PgError};

pub struct PgBisect {
    client: PgConn,
    target: String,
    host_id: String,
}

impl std::fmt::Debug for PgBisect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgBisect").field("target", &self.target).field("host_id", &self.host_id).finish()
    }
}

const SELECT_RUN: &str = "SELECT bisect_id, created_at, finished_at, status, good, bad, builds, test, spec_json,
    candidates_json, upstream_json, backscope_version FROM backscope.bisect_runs";

/// A build number or step index as stored (BIGINT); a value outside u32 is a corrupt row, named.
fn small(v: i64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| anyhow!("{what} {v} is out of range"))
}

impl PgBisect {
    /// Connect and migrate (`write`) or check the schema (a reader).
    pub fn connect(t: &PgTarget, write: bool) -> Result<PgBisect> {
        let mut client = connect_client(t)?;
        let host_id = host_id();
        crate::run::write::pg_schema::migrate(&mut client, write, &host_id, &t.display())?;
        Ok(PgBisect { client, target: t.display(), host_id })
    }

    pub fn describe(&self) -> &str {
        &self.target
    }

    fn err(&self, e: PgError) -> anyhow::Error {
        anyhow!("{}: {e}", self.target)
    }

    pub fn create(&mut self, row: &BisectRow) -> Result<()> {
        let candidates = serde_json::to_string(&row.candidates)?;
        let upstream = row.upstream.as_ref().map(serde_json::to_string).transpose()?;
        self.client
            .execute(
                "INSERT INTO backscope.bisect_runs (bisect_id, created_at, finished_at, status, good, bad, builds, test,
                 spec_json, candidates_json, upstream_json, backscope_version, host_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                &[
                    &row.bisect_id,
                    &row.created_at,
                    &row.finished_at,
                    &row.status.as_str(),
                    &i64::from(row.good),
                    &i64::from(row.bad),
                    &row.builds,
                    &row.test,
                    &row.spec_json,
                    &candidates,
                    &upstream,
                    &row.backscope_version,
                    &self.host_id,
                ],
            )
            .map_err(|e| self.err(e))
            .with_context(|| format!("cannot record bisect {}", row.bisect_id))?;
        Ok(())
    }

    pub fn append_step(&mut self, bisect_id: &str, step: &Step) -> Result<()> {
        let evidence = serde_json::to_string(&step.evidence)?;
        let seq = i64::from(step.seq);
        let inserted = self
            .client
            .execute(
                "INSERT INTO backscope.bisect_steps (bisect_id, seq, build, role, outcome, reason, evidence_json,
                 build_secs, from_cache, test_secs, recorded_at)
                 SELECT $1::text, $2::bigint, $3::bigint, $4::text, $5::text, $6::text, $7::text, $8::float8,
                    $9::boolean, $10::float8, $11::text
                 WHERE EXISTS (SELECT 1 FROM backscope.bisect_runs WHERE bisect_id = $1 AND owner_role = current_user)
                 ON CONFLICT (bisect_id, seq) DO NOTHING",
                &[
                    &bisect_id,
                    &seq,
                    &i64::from(step.build),
                    &step.role.as_str(),
                    &step.outcome.as_str(),
                    &step.reason,
                    &evidence,
                    &step.build_secs,
                    &step.from_cache,
                    &step.test_secs,
                    &step.recorded_at,
                ],
            )
            .map_err(|e| self.err(e))
            .with_context(|| format!("cannot record step {} (b{}) of bisect {bisect_id}", step.seq, step.build))?;
        if inserted == 1 {
            return Ok(());
        }
        let there = self
            .client
            .query_opt(
                "SELECT build, role, outcome, reason, evidence_json FROM backscope.bisect_steps
                 WHERE bisect_id = $1 AND seq = $2",
                &[&bisect_id, &seq],
            )
            .map_err(|e| self.err(e))?;
        let Some(there) = there else {
            self.resumable(bisect_id)?;
            bail!("{}: step {} of bisect {bisect_id} was not recorded", self.target, step.seq);
        };
        let same = there.get::<_, i64>(0) == i64::from(step.build)
            && there.get::<_, &str>(1) == step.role.as_str()
            && there.get::<_, &str>(2) == step.outcome.as_str()
            && there.get::<_, &str>(3) == step.reason
            && there.get::<_, &str>(4) == evidence;
        if !same {
            bail!(
                "{}: step {} of bisect {bisect_id} is already recorded as another step (b{}); not replaced",
                self.target,
                step.seq,
                there.get::<_, i64>(0)
            );
        }
        Ok(())
    }

    pub fn finish(&mut self, bisect_id: &str, status: Status, upstream: Option<&Upstream>) -> Result<()> {
        let finished = (status == Status::Finished).then(utc_now);
        let upstream = upstream.map(serde_json::to_string).transpose()?;
        let n = self
            .client
            .execute(
                "UPDATE backscope.bisect_runs SET status = $2, finished_at = $3, upstream_json = $4
                 WHERE bisect_id = $1 AND owner_role = current_user",
                &[&bisect_id, &status.as_str(), &finished, &upstream],
            )
            .map_err(|e| self.err(e))?;
        if n != 1 {
            self.resumable(bisect_id)?;
            bail!("{}: bisect {bisect_id}: its status was not set", self.target);
        }
        Ok(())
    }

    pub fn run(&mut self, bisect_id: &str) -> Result<Option<BisectRow>> {
        let sql = format!("{SELECT_RUN} WHERE bisect_id = $1");
        let row = self.client.query_opt(&sql, &[&bisect_id]).map_err(|e| self.err(e))?;
        row.as_ref().map(run_of).transpose()
    }

    pub fn runs(&mut self) -> Result<Vec<BisectRow>> {
        let sql = format!("{SELECT_RUN} ORDER BY created_at, bisect_id");
        let rows = self.client.query(&sql, &[]).map_err(|e| self.err(e))?;
        rows.iter().map(run_of).collect()
    }

    /// This host's most recent bisect of this role (what `--resume` without an id continues in a shared
    /// database): a row another role stored, whatever host id it claims, is never this host's.
    pub fn latest_own(&mut self) -> Result<Option<BisectRow>> {
        let sql = format!(
            "{SELECT_RUN} WHERE host_id = $1 AND owner_role = current_user
             ORDER BY created_at DESC, bisect_id DESC LIMIT 1"
        );
        let row = self.client.query_opt(&sql, &[&self.host_id]).map_err(|e| self.err(e))?;
        row.as_ref().map(run_of).transpose()
    }

    /// Bisect `bisect_id`, when this connection's role owns it (what `--resume ID` may continue); another role's
    /// bisect is refused, naming its role: its command is not this host's to run.
    pub fn resumable(&mut self, bisect_id: &str) -> Result<BisectRow> {
        let owner = self
            .client
            .query_opt(
                "SELECT owner_role, current_user::text FROM backscope.bisect_runs WHERE bisect_id = $1",
                &[&bisect_id],
            )
            .map_err(|e| self.err(e))?
            .ok_or_else(|| anyhow!("no bisect {bisect_id} in {}", self.target))?;
        let (owner, me): (String, String) = (owner.get(0), owner.get(1));
        if owner != me {
            bail!("{}: not resumed", not_this_role(&format!("bisect {bisect_id} in {}", self.target), &owner, &me));
        }
        self.run(bisect_id)?.ok_or_else(|| anyhow!("no bisect {bisect_id} in {}", self.target))
    }

    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    pub fn steps(&mut self, bisect_id: &str) -> Result<Vec<Step>> {
        let rows = self
            .client
            .query(
                "SELECT seq, build, role, outcome, reason, evidence_json, build_secs, from_cache, test_secs, recorded_at
                 FROM backscope.bisect_steps WHERE bisect_id = $1 ORDER BY seq",
                &[&bisect_id],
            )
            .map_err(|e| self.err(e))?;
        rows.iter().map(|r| step_of(bisect_id, r)).collect()
    }
}

fn run_of(r: &Row) -> Result<BisectRow> {
    let id: String = r.get(0);
    let parsed = (|| -> Result<BisectRow> {
        let status: &str = r.get(3);
        let candidates: &str = r.get(9);
        let upstream: Option<&str> = r.get(10);
        Ok(BisectRow {
            bisect_id: id.clone(),
            created_at: r.get(1),
            finished_at: r.get(2),
            status: Status::parse(status).with_context(|| format!("unknown status `{status}`"))?,
            good: small(r.get(4), "good")?,
            bad: small(r.get(5), "bad")?,
            builds: r.get(6),
            test: r.get(7),
            spec_json: r.get(8),
            candidates: serde_json::from_str(candidates).context("candidates_json")?,
            upstream: upstream.map(serde_json::from_str).transpose().context("upstream_json")?,
            backscope_version: r.get(11),
        })
    })();
    parsed.with_context(|| format!("bisect {id}: a stored field is not readable"))
}

fn step_of(bisect_id: &str, r: &Row) -> Result<Step> {
    let seq = small(r.get(0), "step")?;
    let role: &str = r.get(2);
    let outcome: &str = r.get(3);
    let evidence: &str = r.get(5);
    Ok(Step {
        seq,
        build: small(r.get(1), "build")?,
        role: Role::parse(role).with_context(|| format!("bisect {bisect_id}: unknown step role `{role}`"))?,
        outcome: Outcome::parse(outcome)
            .with_context(|| format!("bisect {bisect_id}: unknown step outcome `{outcome}`"))?,
        reason: r.get(4),
        evidence: serde_json::from_str(evidence)
            .with_context(|| format!("bisect {bisect_id} step {seq}: evidence is not readable"))?,
        build_secs: r.get(6),
        from_cache: r.get(7),
        test_secs: r.get(8),
        recorded_at: r.get(9),
    })
}
