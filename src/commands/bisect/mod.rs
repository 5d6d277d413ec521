//! `backscope bisect --good N --bad N TEST`: find the first llama.cpp build where a crash, a kernel path, a speed
//! or a log line changed, or where an external command's verdict flips (`git bisect run` semantics).
//!
//! The builds come from a [`Provider`] (`src/builds`: PyPI sdists, a git checkout's tags, a directory of built
//! versions); the test of a build is a [`check::BuildTest`] — an external command ([`check::External`]), or a cell
//! that `backscope sweep` runs as a child process with one managed llama-server from the build's `bin/`
//! ([`cell`], [`speed`]). The search ([`search`]) checks both ends, then binary-searches, skipping builds that
//! cannot be built or tested; every step is committed to the SQLite store (`run::write::bisect`) before the next, so
//! `--resume` continues after Ctrl-C or a crash. The verdict — last good and first bad build, the upstream range
//! and both ends' evidence as claims — is rendered from the store (`run_analysis::bisect::view`), as `backscope
//! report --bisect` renders it.
//!
//! Library entry points: [`run`] (what the command line calls: it picks the provider), [`run_with`] (the same with
//! a provider the caller gives).

pub mod cell;
pub mod check;
pub mod options;
mod plan;
mod progress;
pub mod search;
pub mod speed;
pub mod validate;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::builds::Provider;
use crate::exit;
use crate::output::shell::{self, shell_quoted};
use crate::output::{messages, Output};
use crate::run::format::bisect::{is_bisect_id, new_bisect_id, BisectRow, Status, Step, Upstream};
use crate::run::format::ids::utc_now;
use crate::run::write::bisect::BisectStore;
use crate::run_analysis::bisect::verdict::Verdict;
use crate::run_analysis::bisect::view::BisectView;
pub use options::{BisectOptions, BisectSpec, CellSpec, Rate, Resume, TestSpec};

/// The build source a `--builds` value names, for builds of `backend` (a directory of release archives holds
/// several platforms' archives).
pub fn open_provider(spec: &str, backend: crate::builds::Backend) -> Result<Box<dyn Provider>> {
    crate::builds::provider_for(spec, &crate::builds::default_cache_dir(), backend)
}

/// `backscope bisect`: resolve the spec (new, or stored for `--resume`), open its build source, run.
pub fn run(opts: &BisectOptions) -> Result<u8> {
    let (spec, existing) = resolve(opts)?;
    // An unknown backend stops here, before the build source is opened (the flags reach it with each `prepare`).
    let flags = spec.flags()?;
    let provider = open_provider(&spec.builds, flags.backend)?;
    run_spec(opts, spec, existing, provider.as_ref())
}

/// [`run`] with the build source given by the caller (a test double, a provider built elsewhere).
pub fn run_with(opts: &BisectOptions, provider: &dyn Provider) -> Result<u8> {
    let (spec, existing) = resolve(opts)?;
    run_spec(opts, spec, existing, provider)
}

/// A bisect already in the database, with its steps.
type Stored = (BisectRow, Vec<Step>);

/// The spec to run, and the stored bisect when resuming.
fn resolve(opts: &BisectOptions) -> Result<(BisectSpec, Option<Stored>)> {
    match (&opts.resume, &opts.spec) {
        (Some(_), _) if opts.dry_run => bail!("--dry-run plans a new bisect; it does not go with --resume"),
        (None, _) if opts.take_over => {
            bail!("--take-over moves a stored bisect to this host; it goes with --resume ID")
        }
        (Some(which), _) => {
            let id = match which {
                Resume::Latest => None,
                Resume::Id(id) if is_bisect_id(id) => Some(id.as_str()),
                Resume::Id(id) => {
                    bail!("--resume {id}: not a bisect id (bisect-YYYYMMDD-HHMMSS-xxxx, as `backscope bisect` prints)")
                }
            };
            let store = BisectStore::open_read_only(opts.db.target()?)?;
            let row = store.find_to_resume(id, opts.take_over)?;
            let spec = stored_spec(&row)?;
            confirmed(opts, &row, &spec)?;
            let steps = store.steps(&row.bisect_id)?;
            Ok((spec, Some((row, steps))))
        }
        (None, Some(spec)) => {
            spec.validate()?;
            Ok((spec.clone(), None))
        }
        (None, None) => bail!("give --good, --bad and a test, or --resume"),
    }
}

/// The spec of a stored bisect, checked as a new one is, and its row against it: the row is data someone may have
/// rewritten, and nothing of it may reach a path, a build or a command unchecked.
fn stored_spec(row: &BisectRow) -> Result<BisectSpec> {
    if !is_bisect_id(&row.bisect_id) {
        bail!(
            "the store holds a bisect id `{}` that backscope does not make (bisect-YYYYMMDD-HHMMSS-xxxx); refused",
            row.bisect_id
        );
    }
    let spec = BisectSpec::from_stored(&row.bisect_id, &row.spec_json)?;
    let id = &row.bisect_id;
    if (row.good, row.bad) != (spec.good, spec.bad) {
        bail!(
            "bisect {id}: its row says b{}..b{} but its stored spec b{}..b{}; refused",
            row.good,
            row.bad,
            spec.good,
            spec.bad
        );
    }
    let ascending = row.candidates.windows(2).all(|w| w[0] < w[1]);
    let ends = row.candidates.first() == Some(&spec.good) && row.candidates.last() == Some(&spec.bad);
    if !ascending || !ends {
        bail!(
            "bisect {id}: its stored candidates are not the builds from b{} to b{} ascending; refused",
            spec.good,
            spec.bad
        );
    }
    Ok(spec)
}

/// A resume runs what the stored spec names only when this command line says so (`--yes`), where that is code the
/// row chose ([`BisectSpec::runs_stored_code`]): otherwise the stored command is shown and the resume refused.
fn confirmed(opts: &BisectOptions, row: &BisectRow, spec: &BisectSpec) -> Result<()> {
    if opts.yes || !spec.runs_stored_code() {
        return Ok(());
    }
    let intro = format!(
        "bisect {} in {} would run what its stored spec names, not this command line:",
        row.bisect_id,
        opts.db.display()
    );
    let retry = format!(
        "backscope bisect --resume {} --db {} --yes",
        row.bisect_id,
        shell_quoted(&opts.db.given().to_string_lossy())
    );
    Err(shell::refuse_unconfirmed(intro, &spec.what_runs(), retry))
}

/// The builds the source lists from good to bad; both ends must be among them.
fn candidates(spec: &BisectSpec, provider: &dyn Provider) -> Result<Vec<u32>> {
    let (good, bad) = (crate::builds::BuildNumber(spec.good), crate::builds::BuildNumber(spec.bad));
    let all: Vec<u32> = provider.list_range(good, bad)?.into_iter().map(|b| b.0).collect();
    for (end, flag) in [(spec.good, "--good"), (spec.bad, "--bad")] {
        if !all.contains(&end) {
            // The whole listing where the source has one (the nearest builds may lie outside the range).
            let all: Vec<u32> = provider.list().map_or(all.clone(), |l| l.into_iter().map(|b| b.0).collect());
            let near: Vec<String> = {
                let mut v: Vec<u32> = all.clone();
                v.sort_by_key(|b| b.abs_diff(end));
                v.iter().take(4).map(|b| format!("b{b}")).collect()
            };
            bail!(
                "{flag} b{end} is not a build {} offers ({} build(s){}{})",
                spec.builds,
                all.len(),
                if near.is_empty() { "" } else { "; nearest: " },
                near.join(", ")
            );
        }
    }
    Ok(all.into_iter().filter(|b| (spec.good..=spec.bad).contains(b)).collect())
}

/// The test of a build the spec asks for.
fn tester(
    spec: &BisectSpec,
    opts: &BisectOptions,
    dir: &std::path::Path,
    stop: &Arc<AtomicBool>,
) -> Box<dyn check::BuildTest> {
    // The spec was checked: the timeout is at most validate::MAX_TEST_TIMEOUT_S, so a deadline cannot overflow.
    let limit = Duration::from_secs(spec.test_timeout_s.min(validate::MAX_TEST_TIMEOUT_S));
    let sweeper = || cell::Sweeper {
        exe: opts.exe.clone(),
        // A PostgreSQL `--db` value is passed on as given; a file is made absolute for the sweep's own directory.
        db: opts.db.absolute(),
        runs_dir: spec.runs_dir.clone(),
        dir: dir.to_path_buf(),
        limit,
        stop: Arc::clone(stop),
        cell: spec.cell.clone().unwrap_or_default(),
    };
    match &spec.test {
        TestSpec::External { argv } => {
            Box::new(check::External { argv: argv.clone(), limit, dir: dir.to_path_buf(), stop: Arc::clone(stop) })
        }
        TestSpec::Slower { rate, factor } => Box::new(speed::SpeedTest::new(sweeper(), *rate, *factor, spec.repeat)),
        other => Box::new(cell::CellTest { sweeper: sweeper(), test: other.clone() }),
    }
}

/// SIGINT, SIGTERM and SIGHUP set `stop` (the step in progress is passed the SIGINT and not recorded); a second
/// one exits at once with 130.
fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register_conditional_shutdown(sig, exit::INTERRUPTED.into(), Arc::clone(&stop))?;
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    Ok(stop)
}

fn run_spec(opts: &BisectOptions, spec: BisectSpec, existing: Option<Stored>, provider: &dyn Provider) -> Result<u8> {
    let mut out = Output::open(&opts.output, &crate::output::Inputs::none().path(opts.db.given()))?;
    if opts.dry_run {
        let plan = plan::Plan::new(&spec, candidates(&spec, provider)?);
        out.emit(&plan)?;
        out.finish()?;
        return Ok(exit::OK);
    }
    // The builds are listed before the database is opened: a bisect that cannot start leaves no file behind.
    let listed = match &existing {
        Some(_) => vec![],
        None => candidates(&spec, provider)?,
    };
    let mut store = BisectStore::open(opts.db.target()?)?;
    let (row, steps) = match existing {
        Some((row, _)) => {
            store.claim(&row.bisect_id, opts.take_over)?;
            // Read again after the claim: the steps another host wrote until it was taken over are all there.
            let steps = store.steps(&row.bisect_id)?;
            let row = store.run(&row.bisect_id)?.with_context(|| format!("bisect {} is gone", row.bisect_id))?;
            (row, steps)
        }
        None => {
            let row = BisectRow {
                bisect_id: new_bisect_id(),
                created_at: utc_now(),
                finished_at: None,
                status: Status::Running,
                good: spec.good,
                bad: spec.bad,
                builds: spec.builds.clone(),
                test: spec.test.describe(),
                spec_json: serde_json::to_string(&spec)?,
                candidates: listed,
                upstream: None,
                backscope_version: env!("CARGO_PKG_VERSION").to_string(),
                taken_over: None,
            };
            store.create(&row)?;
            (row, vec![])
        }
    };
    let id = row.bisect_id.clone();
    if row.status != Status::Finished {
        search_to_end(opts, &spec, &mut store, row, steps, provider)?.map_or(Ok(()), Err)?;
    }
    // After the server went away mid-bisect, the whole bisect is in the local file it went on into.
    let store = match store.fallback_in_use() {
        Some(local) => BisectStore::open_read_only(&crate::run::format::target::DbTarget::Sqlite(local.to_path_buf()))?,
        None => BisectStore::open_read_only(opts.db.target()?)?,
    };
    let view = BisectView::new(store.find(Some(&id))?, store.steps(&id)?);
    let verdict = Verdict::of(&view.bisect, &view.steps);
    out.emit(&view)?;
    out.finish()?;
    Ok(match verdict {
        Verdict::Found { .. } => exit::OK,
        Verdict::Open { .. } if view.bisect.status == Status::Interrupted => exit::INTERRUPTED,
        _ => exit::FAILED_CELLS,
    })
}

/// A bisect that went on into its local fallback file while the server was away must have that file pushed before
/// it continues in the shared store: its local steps would otherwise be tested again, and clash at push time.
fn refuse_unpushed_fallback(path: &std::path::Path, id: &str, shared: &[Step], opts: &BisectOptions) -> Result<()> {
    if !path.is_file() || !matches!(opts.db.target()?, crate::run::format::target::DbTarget::Postgres(_)) {
        return Ok(());
    }
    let Some(local) = BisectStore::open_local_if_any(path)? else { return Ok(()) };
    let missing = local.steps(id)?.iter().filter(|l| !shared.iter().any(|s| s.seq == l.seq)).count();
    if missing > 0 {
        let what = format!("bisect {id}");
        return Err(crate::run::write::durable::unpushed_fallback(
            &what,
            missing,
            "step(s)",
            path,
            &opts.db.display().to_string(),
        ));
    }
    Ok(())
}

/// Run the search and record how it ended. The outer error is the store's; the inner one is the search's, after
/// the bisect was marked failed (the view is not printed then: the error is the message).
fn search_to_end(
    opts: &BisectOptions,
    spec: &BisectSpec,
    store: &mut BisectStore,
    row: BisectRow,
    steps: Vec<Step>,
    provider: &dyn Provider,
) -> Result<Option<anyhow::Error>> {
    let id = row.bisect_id.clone();
    // The id is the generated shape (checked when it was read back), so its directory stays under the runs dir.
    if !is_bisect_id(&id) {
        bail!("bisect id `{id}` is not one backscope makes; its logs would leave {}", spec.runs_dir.display());
    }
    let dir = spec.runs_dir.join(&id);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let fallback = spec.runs_dir.join(format!("{id}.local.db"));
    refuse_unpushed_fallback(&fallback, &id, &steps, opts)?;
    store.arm_fallback(fallback, &row, &steps);
    store.finish(&id, Status::Running, None)?;
    messages::note(format_args!(
        "bisect {id}: b{}..b{}, {} build(s) listed, test `{}`; logs in {}",
        row.good,
        row.bad,
        row.candidates.len(),
        row.test,
        dir.display()
    ));
    let stop = stop_flag()?;
    let mut tester = tester(spec, opts, &dir, &stop);
    let flags = spec.flags()?;
    let mut search = search::Search::new(store, row, steps, provider, tester.as_mut(), flags, spec.repeat, stop);
    search.progress = Some(progress::Progress::new());
    let result = search.run();
    drop(search);
    let resume = format!("`backscope bisect --resume {id} --db {}` continues", opts.db.display());
    match result {
        Ok(verdict) => {
            let upstream = match verdict {
                Verdict::Found { last_good, first_bad } | Verdict::Ambiguous { last_good, first_bad, .. } => {
                    let commits = provider
                        .between(crate::builds::BuildNumber(last_good), crate::builds::BuildNumber(first_bad))
                        .unwrap_or_else(|e| {
                            messages::note(format_args!("the commits between b{last_good} and b{first_bad}: {e:#}"));
                            vec![]
                        });
                    Some(Upstream::new(last_good, first_bad, commits))
                }
                _ => None,
            };
            store.finish(&id, Status::Finished, upstream.as_ref())?;
            Ok(None)
        }
        Err(e) if e.is::<check::Interrupted>() => {
            store.finish(&id, Status::Interrupted, None)?;
            messages::note(format_args!("interrupted; every finished step is recorded: {resume}"));
            Ok(None)
        }
        Err(e) => {
            store.finish(&id, Status::Failed, None)?;
            Ok(Some(e.context(format!("bisect {id} stopped; {resume}"))))
        }
    }
}
