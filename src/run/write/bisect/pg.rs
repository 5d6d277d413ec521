//! The bisect tables in a PostgreSQL store (`backscope.bisect_runs`, `backscope.bisect_steps`, migration 2 of
//! `run::write::pg_schema`): the same columns as the SQLite tables, plus the host that started the bisect and the
//! database role that owns it (`owner_role`, migration 3: set by the server, checked by row-level security). A
//! bisect is continued only by its own role ([`PgBisect::resumable`]); another role's row, whatever host id it
//! claims, is never picked up. Within the role it belongs to one host: another host continues it only with
//! `--take-over` ([`PgBisect::claim`]), which moves it and records the host it came from (migration 4); a step is
//! inserted, and the status set, only while the bisect is this role's and this host's — checked in the same
//! statement — so two hosts never interleave steps. Every statement commits on its own (synchronous commit), so a step is durable before
//! the next one starts. A step is keyed by `(bisect_id, seq)` and inserted with `ON CONFLICT DO NOTHING`; a row
//! already there must be the same step (build, role, outcome, reason, evidence), so a repeated insert is a no-op and
//! a different one an error, never a silent replacement.

use anyhow::{anyhow, bail, Context, Result};
use tokio_postgres::Row;

use crate::host::identity::host_id;
use crate::run::format::bisect::{BisectRow, Outcome, Role, Status, Step, TakeOver, Upstream};
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
    candidates_json, upstream_json, backscope_version, taken_over_from, taken_over_at FROM backscope.bisect_runs";

/// Who owns a stored bisect, against who this connection is.
struct Owner {
    host: String,
    role: String,
    /// This connection's role.
    my_role: String,
    /// When the bisect last wrote a step (its start when it has none).
    last_write: String,
}

/// The server went away (the connection closed, an admin shutdown, a missed deadline) while a step or status was
/// written: the caller may continue into a local file (`BisectStore`'s fallback) instead of stopping.
#[derive(Debug)]
pub struct ServerGone {
    pub target: String,
    pub reason: String,
}

impl std::fmt::Display for ServerGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.target, self.reason)
    }
}

impl std::error::Error for ServerGone {}

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

    /// [`ServerGone`] for a lost connection, else the error as [`PgBisect::err`] words it.
    fn err_or_gone(&self, e: PgError) -> anyhow::Error {
        if e.is_connection_loss() {
            return ServerGone { target: self.target.clone(), reason: e.to_string() }.into();
        }
        self.err(e)
    }

    pub fn create(&mut self, row: &BisectRow) -> Result<()> {
        let host = self.host_id.clone();
        insert_bisect(&mut self.client, row, &host)
            .map_err(|e| self.err(e))
            .with_context(|| format!("cannot record bisect {}", row.bisect_id))?;
        Ok(())
    }

    pub fn append_step(&mut self, bisect_id: &str, step: &Step) -> Result<()> {
        let host = self.host_id.clone();
        let inserted = insert_step(&mut self.client, bisect_id, step, &host)
            .map_err(|e| self.err_or_gone(e))
            .with_context(|| format!("cannot record step {} (b{}) of bisect {bisect_id}", step.seq, step.build))?;
        if inserted {
            return Ok(());
        }
        // Not inserted: the bisect is no longer this host's (taken over), or the step is there already.
        self.still_mine(bisect_id, &format!("step {} (b{}) not recorded", step.seq, step.build))?;
        let target = self.target.clone();
        match stored_step_is(&mut self.client, bisect_id, step).map_err(|e| self.err(e))? {
            Some(Ok(())) => Ok(()),
            Some(Err(there)) => bail!(
                "{target}: step {} of bisect {bisect_id} is already recorded as another step (b{there}); not replaced",
                step.seq
            ),
            None => bail!("{target}: step {} of bisect {bisect_id} was not recorded", step.seq),
        }
    }

    /// Upload a bisect and its steps from a local store (`backscope push`), in one transaction: the row is created
    /// when missing; steps are inserted by `(bisect_id, seq)`, a step there already must be the same step; the
    /// status is set as the local copy has it unless that is still running (or would take a finished bisect back).
    /// A bisect the server holds as another role's is left as it is ([`BisectPush::NotOurs`]); so is another host's
    /// of this role, unless `take_over` moves it here first (recording that host and the time, as `claim` does).
    pub fn push(&mut self, row: &BisectRow, steps: &[Step], take_over: bool) -> Result<BisectPush> {
        let (me, target, id) = (self.host_id.clone(), self.target.clone(), row.bisect_id.as_str());
        let at = |e: PgError| anyhow!("{target}: bisect {id}: {e}");
        let mut tx = self.client.transaction().map_err(at)?;
        let owner = tx
            .query_opt(
                "SELECT host_id, owner_role, current_user::text FROM backscope.bisect_runs WHERE bisect_id = $1",
                &[&id],
            )
            .map_err(at)?;
        let created = match owner {
            Some(o) if o.get::<_, &str>(1) != o.get::<_, &str>(2) => {
                return Ok(BisectPush::NotOurs { host: o.get(0), role: o.get(1) });
            }
            Some(o) if o.get::<_, &str>(0) != me && !take_over => {
                return Ok(BisectPush::NotOurs { host: o.get(0), role: o.get(1) });
            }
            Some(o) if o.get::<_, &str>(0) != me => {
                let from: String = o.get(0);
                if !move_to_host(&mut tx, id, &me, &from).map_err(at)? {
                    bail!("{target}: bisect {id} changed hands while it was being taken over; not pushed");
                }
                crate::output::messages::note(format_args!("took over bisect {id} from host `{from}`"));
                false
            }
            Some(_) => false,
            None => {
                insert_bisect(&mut tx, row, &me).map_err(at)?;
                true
            }
        };
        let (mut uploaded, mut already_stored) = (0u64, 0u64);
        for step in steps {
            if insert_step(&mut tx, id, step, &me).map_err(at)? {
                uploaded += 1;
                continue;
            }
            match stored_step_is(&mut tx, id, step).map_err(at)? {
                Some(Ok(())) => already_stored += 1,
                Some(Err(there)) => bail!(
                    "{target}: step {} of bisect {id} is stored already as another step (b{there}); the stored one is \
                     kept and nothing of this bisect was pushed",
                    step.seq
                ),
                None => bail!("{target}: step {} of bisect {id} was not recorded (taken over meanwhile?)", step.seq),
            }
        }
        if row.status != Status::Running {
            let upstream = row.upstream.as_ref().map(serde_json::to_string).transpose()?;
            tx.execute(
                "UPDATE backscope.bisect_runs SET status = $2, finished_at = $3, upstream_json = $4
                 WHERE bisect_id = $1 AND owner_role = current_user AND host_id = $5
                   AND (status <> 'finished' OR $2 = 'finished')",
                &[&id, &row.status.as_str(), &row.finished_at, &upstream, &me],
            )
            .map_err(at)?;
        }
        tx.commit().map_err(at)?;
        Ok(BisectPush::Stored { created, uploaded, already_stored })
    }

    pub fn finish(&mut self, bisect_id: &str, status: Status, upstream: Option<&Upstream>) -> Result<()> {
        let finished = (status == Status::Finished).then(utc_now);
        let upstream = upstream.map(serde_json::to_string).transpose()?;
        let n = self
            .client
            .execute(
                "UPDATE backscope.bisect_runs SET status = $2, finished_at = $3, upstream_json = $4
                 WHERE bisect_id = $1 AND owner_role = current_user AND host_id = $5",
                &[&bisect_id, &status.as_str(), &finished, &upstream, &self.host_id],
            )
            .map_err(|e| self.err_or_gone(e))?;
        if n != 1 {
            self.still_mine(bisect_id, &format!("its status ({}) was not set", status.as_str()))?;
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

    /// Who owns bisect `bisect_id`; an error when there is no such bisect.
    fn owner(&mut self, bisect_id: &str) -> Result<Owner> {
        let row = self
            .client
            .query_opt(
                "SELECT b.host_id, b.owner_role, current_user::text,
                    coalesce((SELECT max(s.recorded_at) FROM backscope.bisect_steps s WHERE s.bisect_id = b.bisect_id),
                             b.created_at)
                 FROM backscope.bisect_runs b WHERE b.bisect_id = $1",
                &[&bisect_id],
            )
            .map_err(|e| self.err(e))?
            .ok_or_else(|| anyhow!("no bisect {bisect_id} in {}", self.target))?;
        Ok(Owner { host: row.get(0), role: row.get(1), my_role: row.get(2), last_write: row.get(3) })
    }

    /// Why this connection may not write bisect `bisect_id` (another role's, or another host's), if it may not.
    fn refusal(&self, bisect_id: &str, o: &Owner) -> Option<String> {
        let what = format!("bisect {bisect_id} in {}", self.target);
        if o.role != o.my_role {
            return Some(not_this_role(&what, &o.role, &o.my_role));
        }
        (o.host != self.host_id).then(|| {
            format!(
                "{what} belongs to host `{}` (it last wrote a step at {}); this host is `{}`. Resume it on `{}`, or \
                 pass --take-over to move it to this host (only when `{}` no longer runs it)",
                o.host, o.last_write, self.host_id, o.host, o.host
            )
        })
    }

    /// An error, ending with `what`, when bisect `bisect_id` is not (or no longer) this role's and host's.
    fn still_mine(&mut self, bisect_id: &str, what: &str) -> Result<()> {
        let owner = self.owner(bisect_id)?;
        match self.refusal(bisect_id, &owner) {
            Some(why) => bail!("{why}: {what}"),
            None => Ok(()),
        }
    }

    /// Bisect `bisect_id`, when this connection's role owns it and it is this host's, or `take_over` will move it
    /// here (what `--resume ID` may continue). Another role's bisect is refused, naming its role: its command is
    /// not this host's to run; another host's is refused without `take_over`, naming the host and when it last
    /// wrote a step. Nothing is moved here: [`PgBisect::claim`] does that once the resume is under way.
    pub fn resumable(&mut self, bisect_id: &str, take_over: bool) -> Result<BisectRow> {
        let owner = self.owner(bisect_id)?;
        let other_host_allowed = take_over && owner.role == owner.my_role;
        if let Some(why) = self.refusal(bisect_id, &owner).filter(|_| !other_host_allowed) {
            bail!("{why}: not resumed");
        }
        self.run(bisect_id)?.ok_or_else(|| anyhow!("no bisect {bisect_id} in {}", self.target))
    }

    /// Make bisect `bisect_id` this host's to write: it is already, or `take_over` moves it here from another host
    /// of this role, recording that host and the time. The move is conditional on the owner read just before, so of
    /// two hosts taking over at once one wins and the other is refused.
    pub fn claim(&mut self, bisect_id: &str, take_over: bool) -> Result<()> {
        let owner = self.owner(bisect_id)?;
        let Some(why) = self.refusal(bisect_id, &owner) else { return Ok(()) };
        if !take_over || owner.role != owner.my_role {
            bail!("{why}: not resumed");
        }
        let me = self.host_id.clone();
        if !move_to_host(&mut self.client, bisect_id, &me, &owner.host).map_err(|e| self.err(e))? {
            bail!("{}: bisect {bisect_id} changed hands while it was being taken over; not resumed", self.target);
        }
        crate::output::messages::note(format_args!(
            "took over bisect {bisect_id} from host `{}` (it last wrote a step at {})",
            owner.host, owner.last_write
        ));
        Ok(())
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

/// What [`PgBisect::push`] did with one bisect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BisectPush {
    /// Stored: the row was `created` (else it was there, this host's), `uploaded` steps are new, `already_stored`
    /// were there (the same steps).
    Stored { created: bool, uploaded: u64, already_stored: u64 },
    /// The server holds this bisect as another host's or role's: nothing was written.
    NotOurs { host: String, role: String },
}

/// Move this role's bisect `bisect_id` from host `from` to host `to`, recording `from` and the time. Whether it
/// moved: not when it no longer belongs to `from` (another host took it over first).
fn move_to_host(c: &mut PgConn, bisect_id: &str, to: &str, from: &str) -> Result<bool, PgError> {
    let moved = c.execute(
        "UPDATE backscope.bisect_runs SET host_id = $2, taken_over_from = host_id, taken_over_at = $3
         WHERE bisect_id = $1 AND owner_role = current_user AND host_id = $4",
        &[&bisect_id, &to, &utc_now(), &from],
    )?;
    Ok(moved == 1)
}

/// Insert a bisect row as host `host`; its `owner_role` is the server's `current_user` (the column's default).
fn insert_bisect(c: &mut PgConn, row: &BisectRow, host: &str) -> Result<(), PgError> {
    let candidates = serde_json::to_string(&row.candidates).expect("a list of numbers serialises");
    let upstream = row.upstream.as_ref().map(|u| serde_json::to_string(u).expect("plain fields serialise"));
    c.execute(
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
            &host,
        ],
    )?;
    Ok(())
}

/// Insert a step while its bisect is this role's and host `host`'s — checked in the same statement, so a host
/// whose bisect was taken over writes nothing — unless a step with its `seq` is there; whether it was inserted.
fn insert_step(c: &mut PgConn, bisect_id: &str, step: &Step, host: &str) -> Result<bool, PgError> {
    let evidence = serde_json::to_string(&step.evidence).expect("plain fields serialise");
    let n = c.execute(
        "INSERT INTO backscope.bisect_steps (bisect_id, seq, build, role, outcome, reason, evidence_json,
         build_secs, from_cache, test_secs, recorded_at)
         SELECT $1::text, $2::bigint, $3::bigint, $4::text, $5::text, $6::text, $7::text, $8::float8,
            $9::boolean, $10::float8, $11::text
         WHERE EXISTS (SELECT 1 FROM backscope.bisect_runs
                       WHERE bisect_id = $1 AND owner_role = current_user AND host_id = $12)
         ON CONFLICT (bisect_id, seq) DO NOTHING",
        &[
            &bisect_id,
            &i64::from(step.seq),
            &i64::from(step.build),
            &step.role.as_str(),
            &step.outcome.as_str(),
            &step.reason,
            &evidence,
            &step.build_secs,
            &step.from_cache,
            &step.test_secs,
            &step.recorded_at,
            &host,
        ],
    )?;
    Ok(n == 1)
}

/// The step stored under `step.seq`: none; the same step (build, role, outcome, reason, evidence); or another one,
/// given by its build.
fn stored_step_is(c: &mut PgConn, bisect_id: &str, step: &Step) -> Result<Option<Result<(), i64>>, PgError> {
    let evidence = serde_json::to_string(&step.evidence).expect("plain fields serialise");
    let there = c.query_opt(
        "SELECT build, role, outcome, reason, evidence_json FROM backscope.bisect_steps
         WHERE bisect_id = $1 AND seq = $2",
        &[&bisect_id, &i64::from(step.seq)],
    )?;
    Ok(there.map(|there| {
        let same = there.get::<_, i64>(0) == i64::from(step.build)
            && there.get::<_, &str>(1) == step.role.as_str()
            && there.get::<_, &str>(2) == step.outcome.as_str()
            && there.get::<_, &str>(3) == step.reason
            && there.get::<_, &str>(4) == evidence;
        if same {
            Ok(())
        } else {
            Err(there.get::<_, i64>(0))
        }
    }))
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
            taken_over: match (r.get::<_, Option<String>>(12), r.get::<_, Option<String>>(13)) {
                (Some(from_host), Some(at)) => Some(TakeOver { from_host, at }),
                _ => None,
            },
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
