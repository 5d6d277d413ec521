//! The `sweep` command bodies: run (or resume) a sweep, and `export`, `import`, `report` on the database. Each takes
//! an options value; the command line that fills them is the binary's business.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;

use super::cells::Schedule;
use super::events::{Event, JsonLines, Progress, Sink, Sinks};
use super::executor::Machine;
use super::flags::SweepFlags;
use super::plan::{self, Plan};
use super::runner::{self, RunEnd};
use super::spec::SpecFile;
use super::supervise::Ledger;
use super::{dryrun, envsnap, http, import, supervise, view};
use crate::exit;
use crate::host::identity::host_id;
use crate::output::shell::{self, shell_quoted};
use crate::output::{messages, Document, Excerpt, Format, Inputs, Output, OutputOptions, Rendered};
use crate::run::format::host::this_host;
use crate::run::format::ids::{new_run_id, utc_now};
use crate::run::format::paths::absolute;
use crate::run::format::record::RunSource;
use crate::run::format::run_dir::RunDir;
use crate::run::format::run_row::{RunRow, RunStatus};
use crate::run::format::target::DbValue;
use crate::run::write::durable::write_atomic;
use crate::run::write::store::Store;

/// One `backscope sweep` invocation.
#[derive(Debug)]
pub enum SweepCommand {
    // Boxed: the run's options are many, and the other commands should not be as large.
    Run(Box<RunOptions>),
    Export(ExportOptions),
    Import(ImportOptions),
    Report(ReportOptions),
}

/// Run a new sweep, or resume one.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// A TOML spec (docs/sweep.md); the flags add endpoints to it and replace the lists they give.
    pub spec: Option<PathBuf>,
    pub flags: SweepFlags,
    /// The store of records: an SQLite file (created if missing) or a PostgreSQL database.
    pub db: DbValue,
    /// Where run directories are created.
    pub runs_dir: PathBuf,
    /// Continue an interrupted run with its stored plan instead of planning a new one.
    pub resume: Option<Resume>,
    /// No progress bar and no table; only the run id line.
    pub quiet: bool,
    /// Format and destination: JSON is the event stream (JSON Lines) instead of the table; the other formats are
    /// the final report.
    pub output: OutputOptions,
    /// Print what would run, run nothing.
    pub dry_run: bool,
    /// `--resume` a run that another host owns in a shared PostgreSQL store, moving it to this host.
    pub take_over: bool,
    /// `--resume` a run whose stored plan starts programs (managed servers): this command line names none, so
    /// without it they are shown and the resume refused.
    pub yes: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resume {
    /// The latest sweep in the database.
    Latest,
    Run(String),
}

/// Print stored records as JSON Lines.
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    pub db: DbValue,
    /// Only these runs; every run when empty.
    pub runs: Vec<String>,
    /// A file instead of standard output.
    pub output: Option<PathBuf>,
}

/// Store llama-bench output as the records of a new run.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// llama-bench `-o json` / `-o jsonl` files.
    pub files: Vec<PathBuf>,
    pub db: DbValue,
    pub runs_dir: PathBuf,
    /// The endpoint name the records get.
    pub endpoint: String,
}

/// Print the table and claims of a stored run again.
#[derive(Clone, Debug, Default)]
pub struct ReportOptions {
    /// The run; the latest when `None`.
    pub run_id: Option<String>,
    pub db: DbValue,
    /// Format (JSON: the claims) and destination.
    pub output: OutputOptions,
}

pub fn run(command: SweepCommand) -> Result<u8> {
    match command {
        SweepCommand::Run(o) => sweep(*o),
        SweepCommand::Export(o) => export(o),
        SweepCommand::Import(o) => import(o),
        SweepCommand::Report(o) => report(o),
    }
}

/// The plan of a new run: the spec file, the flags merged onto it, resolved.
fn new_plan(opts: &RunOptions) -> Result<Plan> {
    let file = match &opts.spec {
        Some(p) => SpecFile::read(p)?,
        None => SpecFile::default(),
    };
    let spec = opts.flags.merge_onto(file, &absolute(Path::new(".")))?;
    // External endpoints without an `api` are asked now, so that a llama-server (which cannot change -ngl per
    // request) gets one cell per combination instead of one per num_gpu value. Unreachable ones are asked again
    // per cell.
    let timeouts =
        http::Timeouts { connect: Duration::from_secs(2), read: Duration::from_secs(5), total: Duration::from_secs(5) };
    plan::resolve(&spec, &mut |url| {
        http::detect_api(&http::HttpClient::new(url, timeouts), Duration::from_secs(5)).ok().map(|(api, _)| api)
    })
}

/// A run to execute: new or resumed.
struct OpenRun {
    run_id: String,
    run_dir: PathBuf,
    schedule: Schedule,
    resumed: bool,
}

/// The run `--resume` names, with its stored plan checked as a new one is ([`Plan::check`]): the row is data
/// someone may have rewritten.
fn resumed_run(store: &Store, which: &Resume, db: &DbValue) -> Result<(OpenRun, Plan)> {
    let row = match which {
        Resume::Latest => {
            store.latest_sweep_run()?.with_context(|| format!("no sweep run in {} to resume", db.display()))?
        }
        Resume::Run(id) => store.run(id)?.with_context(|| format!("no run {id} in {}", db.display()))?,
    };
    if row.source != RunSource::Sweep {
        bail!("run {} holds imported {} records; only sweeps can be resumed", row.run_id, row.source);
    }
    let plan = stored_plan(&row.plan_json).with_context(|| format!("run {}", row.run_id))?;
    // The run directory receives the cells' files and the ledgers of the processes a leftover reclaim kills.
    crate::host::inputs::private_dir(Path::new(&row.run_dir))
        .map_err(|e| anyhow::anyhow!("run {}: its stored run directory is refused: {e}", row.run_id))?;
    let open = OpenRun {
        run_id: row.run_id,
        run_dir: PathBuf::from(row.run_dir),
        schedule: Schedule::of(&plan),
        resumed: true,
    };
    Ok((open, plan))
}

/// A plan as `--resume` reads it back from the store: parsed, then held to every check a new plan passes.
fn stored_plan(json: &str) -> Result<Plan> {
    let plan: Plan =
        serde_json::from_str(json).context("the stored plan does not parse (written by another backscope version?)")?;
    plan.check().context("the stored plan is refused")?;
    Ok(plan)
}

/// What `--resume` makes of a stored plan before it starts anything: the plan read back and checked
/// ([`stored_plan`]), its cells laid out, and what it would run (what the confirmation shows). Returns the number of
/// cells and those lines. The entry of the `sweep_plan` fuzz target: no stored bytes may panic it.
pub fn read_stored_plan(json: &str) -> Result<(usize, Vec<(String, String)>)> {
    let plan = stored_plan(json)?;
    Ok((Schedule::of(&plan).cells.len(), plan.what_runs()))
}

/// A resume starts the programs its stored plan names only when this command line says so (`--yes`): the plan
/// came from the store, not from these flags. A plan of external endpoints starts nothing and needs no `--yes`.
fn confirmed(opts: &RunOptions, run_id: &str, plan: &Plan) -> Result<()> {
    if opts.yes || !plan.starts_programs() {
        return Ok(());
    }
    let intro =
        format!("run {run_id} in {} would start what its stored plan names, not this command line:", opts.db.display());
    let retry = format!(
        "backscope sweep --resume {} --db {} --yes",
        shell_quoted(run_id),
        shell_quoted(&opts.db.given().to_string_lossy())
    );
    Err(shell::refuse_unconfirmed(intro, &plan.what_runs(), retry))
}

fn new_run(store: &mut Store, opts: &RunOptions, plan: &Plan, schedule: Schedule) -> Result<OpenRun> {
    let run_id = new_run_id();
    let host = this_host();
    let run_dir = absolute(&opts.runs_dir.join(&run_id));
    std::fs::create_dir_all(&opts.runs_dir)
        .with_context(|| format!("cannot create the runs directory {}", opts.runs_dir.display()))?;
    // Private (0700, whatever the umask): it holds the ledgers of the processes a later sweep may kill as leftovers,
    // and a reclaim trusts only a directory no other user can write to.
    crate::host::inputs::private_dir(&run_dir)
        .map_err(|e| anyhow::anyhow!("cannot create the run directory {}: {e}", run_dir.display()))?;
    store.create_run(&RunRow {
        run_id: run_id.clone(),
        created_at: utc_now(),
        finished_at: None,
        status: RunStatus::Running,
        source: RunSource::Sweep,
        run_dir: run_dir.display().to_string(),
        plan_json: serde_json::to_string(plan)?,
        cells_total: schedule.cells.len() as u64,
        backscope_version: env!("CARGO_PKG_VERSION").into(),
        host: Some(host.clone()),
        owner: None,
    })?;
    let argv: Vec<String> = std::env::args().collect();
    // A PostgreSQL target as shown without secrets (a password is refused in --db, so argv holds none either).
    let db = match store {
        Store::Sqlite(_) => json!(absolute(opts.db.given())),
        Store::Pg(_) => json!(store.describe()),
    };
    let meta = json!({"run_id": run_id, "created_at": utc_now(), "db": db, "argv": argv, "plan": plan, "host": host});
    write_atomic(&RunDir::new(&run_dir).run_json_path(), &serde_json::to_vec_pretty(&meta)?)?;
    let env = envsnap::snapshot(plan, &Ledger::watched(&run_dir));
    write_atomic(&RunDir::new(&run_dir).env_json_path(), &serde_json::to_vec_pretty(&env)?)?;
    Ok(OpenRun { run_id, run_dir, schedule, resumed: false })
}

fn sweep(opts: RunOptions) -> Result<u8> {
    let shaped = opts.spec.is_some() || !opts.flags.is_empty();
    if opts.resume.is_some() && shaped {
        bail!("--resume continues a run with its stored plan; drop --spec and the other sweep flags (keep --db, --quiet, --json)");
    }
    if opts.resume.is_none() && !shaped {
        bail!("nothing to sweep: give --endpoint NAME=URL or --server NAME=llama-server with --model (see --help), a --spec file, or --resume");
    }
    // Before the database is created or written: `-o` must not replace it or a file the plan is read from.
    let out = Output::open(&opts.output, &run_inputs(&opts))?;
    if opts.dry_run {
        return dry_run(&opts, out);
    }
    let mut store = Store::open(opts.db.target()?)?;
    reclaim_leftovers(&store)?;
    let open = match &opts.resume {
        Some(which) => {
            let (open, plan) = resumed_run(&store, which, &opts.db)?;
            confirmed(&opts, &open.run_id, &plan)?;
            store.claim_run(&open.run_id, opts.take_over)?;
            open
        }
        None => {
            let plan = new_plan(&opts)?;
            let schedule = Schedule::of(&plan);
            new_run(&mut store, &opts, &plan, schedule)?
        }
    };
    execute(&opts, &mut store, open, out)
}

/// What a sweep reads, which its `-o` must not replace: the database (also when it does not exist yet: the sweep
/// creates it), the spec, the prompt files and the observer libraries.
fn run_inputs(opts: &RunOptions) -> Inputs {
    let f = &opts.flags;
    Inputs::none()
        .path(opts.db.given())
        .maybe(opts.spec.as_ref())
        .paths(&f.prompt_files)
        .maybe(f.observer.as_ref())
        .maybe(f.vklayer.as_ref())
}

/// `--dry-run`: print what would run. Creates no file and changes none: the database is read (for `--resume`)
/// without being created or written.
fn dry_run(opts: &RunOptions, out: Output) -> Result<u8> {
    let schedule = match &opts.resume {
        Some(which) => resumed_run(&Store::open_read_only(opts.db.target()?)?, which, &opts.db)?.0.schedule,
        None => Schedule::of(&new_plan(opts)?),
    };
    print_dry_run(out, &schedule)
}

/// Kill what the servers of sweeps whose backscope died (SIGKILL, a second Ctrl-C) left running, from their run
/// directories' ledgers, and say so. Runs of a backscope that still runs are left alone.
fn reclaim_leftovers(store: &Store) -> Result<()> {
    let me = host_id();
    for row in store.runs()?.into_iter().filter(|r| reclaimable(r, &me)) {
        for r in supervise::reclaim(Path::new(&row.run_dir)) {
            if r.stopped.is_empty() {
                continue;
            }
            let killed: Vec<String> = r.stopped.iter().map(|s| format!("{} ({})", s.pid, s.comm)).collect();
            messages::note(format_args!(
                "run {} ended without stopping what `{}` started (its backscope, pid {}, was killed); killed the processes left running: {}",
                row.run_id,
                r.argv.join(" "),
                r.owner_pid,
                killed.join(", ")
            ));
        }
    }
    Ok(())
}

/// Whether a run's leftover processes may be looked for and killed: a sweep of this host (in a shared store another
/// host's ledger names processes of that host, and its pids mean nothing, or something else, here), stored by this
/// database role (the host id is what the row says of itself: another role could plant a row claiming this host),
/// whose run directory exists and is private to this user (else its ledgers could have been written by anyone,
/// naming any process).
fn reclaimable(row: &RunRow, me: &str) -> bool {
    let this_host = row.host.as_ref().is_none_or(|h| h.host_id == me);
    let this_role = row.owner.as_ref().is_none_or(|o| o.is_current);
    let dir = Path::new(&row.run_dir);
    // Checked only when it exists: the check creates a missing directory, and a gone run has nothing to reclaim.
    let private = std::fs::symlink_metadata(dir).is_ok() && crate::host::inputs::private_dir(dir).is_ok();
    row.source == RunSource::Sweep && this_host && this_role && private
}

/// The dry run's plan as lines to read or copy (text in every format but Markdown and HTML, which wrap it).
fn print_dry_run(mut out: Output, schedule: &Schedule) -> Result<u8> {
    let text = dryrun::describe(schedule);
    match out.format() {
        Format::Markdown | Format::Html => {
            let mut document = Document::new("backscope sweep --dry-run");
            document.push(Excerpt::verbatim(text.lines().map(str::to_string)));
            out.emit(&Rendered { document, json: serde_json::Value::Null })?;
        }
        Format::Text | Format::Json => {
            out.write_raw(text.as_bytes())?;
        }
    }
    out.finish()?;
    Ok(exit::OK)
}

fn execute(opts: &RunOptions, store: &mut Store, open: OpenRun, out: Output) -> Result<u8> {
    let OpenRun { run_id, run_dir, schedule, resumed } = open;
    let interrupt = supervise::Interrupt::install().context("cannot install the Ctrl-C handler")?;
    // Orphans of the servers' processes are adopted by backscope while it runs, so they can be found and stopped
    // even if they left their group and tag. Without it (kernels before 3.4) the group and the tag still work.
    let _ = supervise::become_subreaper();
    let cells_total = schedule.cells.len() as u64;
    let cells_done = store.completed_keys(&run_id)?.len() as u64;
    let mut out = Some(out);
    let json = opts.output.json();
    let mut sinks = Sinks::default();
    sinks.0.push(Box::new(Progress::new(cells_total, cells_done, !opts.quiet)));
    // The event stream: to `-o FILE` it appears there when the run ends (interrupted or not); see `Output`.
    let stream = out.take_if(|_| json).map(Output::into_stream);
    if let Some(stream) = &stream {
        sinks.0.push(Box::new(JsonLines::new(stream.writer())));
    }
    let run_dir_s = run_dir.display().to_string();
    let db_s = opts.db.display().to_string();
    sinks.event(&Event::RunStarted {
        run_id: &run_id,
        run_dir: &run_dir_s,
        db: &db_s,
        cells_total,
        cells_done,
        resumed,
    });
    store.set_run_status(&run_id, RunStatus::Running)?;
    let end = {
        let mut ctx = runner::RunContext { run_id: &run_id, run_dir: &run_dir, store, sink: &mut sinks, interrupt };
        runner::execute(&mut ctx, &schedule, &mut Machine { ledger: Ledger::watched(&run_dir) })?
    };
    let (summary, claims) = view::summarize(store, &run_id, &run_dir)?;
    if let Some(local) = store.fallback_in_use() {
        messages::note(format_args!(
            "the shared store went away during this run: what follows covers the cells recorded in {} only. Push it (backscope push --from {} --db …), then report from the shared store",
            local.display(),
            local.display()
        ));
    }
    let status = match end {
        RunEnd::Finished => RunStatus::Finished,
        RunEnd::Interrupted => RunStatus::Interrupted,
    };
    store.set_run_status(&run_id, status)?;
    write_atomic(&RunDir::new(&run_dir).claims_path(), &serde_json::to_vec_pretty(&claims)?)?;
    let (ok, failed) = (summary.ok as u64, summary.failed as u64);
    let status = status.as_str();
    sinks.event(&Event::RunFinished { run_id: &run_id, status, cells_ok: ok, cells_failed: failed, claims: &claims });
    drop(sinks);
    if let Some(stream) = stream {
        stream.finish()?;
    }
    if let Some(mut out) = out {
        if opts.quiet {
            let line = format!(
                "run {run_id}: {} of {cells_total} cells recorded, {ok} ok, {failed} failed ({status})\n",
                summary.cells
            );
            out.write_raw(line.as_bytes())?;
        } else {
            out.emit(&view::RunReport {
                run_id: &run_id,
                run_dir: &run_dir_s,
                status,
                summary: &summary,
                claims: &claims,
            })?;
        }
        out.finish()?;
    }
    if end == RunEnd::Interrupted {
        messages::note(format_args!(
            "interrupted; {} of {cells_total} cells are recorded. Continue with: backscope sweep --resume {run_id} --db {}",
            summary.cells,
            opts.db.display()
        ));
        return Ok(exit::INTERRUPTED);
    }
    Ok(if failed > 0 { exit::FAILED_CELLS } else { exit::OK })
}

fn export(o: ExportOptions) -> Result<u8> {
    missing_file_refused(&o.db)?;
    let options = OutputOptions { format: Format::Json, path: o.output.clone(), all: false };
    let mut out = Output::open(&options, &Inputs::none().path(o.db.given()))?;
    let store = Store::open(o.db.target()?)?;
    let lines = store.record_json(&o.runs)?;
    for l in lines {
        out.write_raw(l.as_bytes())?;
        out.write_raw(b"\n")?;
    }
    out.finish()?;
    Ok(exit::OK)
}

fn import(o: ImportOptions) -> Result<u8> {
    let import::Imported { run_id, run_dir, tests } = import::import(&o.files, &o.db, &o.runs_dir, &o.endpoint)?;
    let line =
        format!("run {run_id}: imported {tests} llama-bench tests into {} ({})\n", o.db.display(), run_dir.display());
    let mut out = Output::open(&OutputOptions::default(), &Inputs::none())?;
    out.write_raw(line.as_bytes())?;
    out.finish()?;
    Ok(exit::OK)
}

fn report(o: ReportOptions) -> Result<u8> {
    missing_file_refused(&o.db)?;
    let mut out = Output::open(&o.output, &Inputs::none().path(o.db.given()))?;
    let store = Store::open(o.db.target()?)?;
    let row = match &o.run_id {
        Some(id) => store.run(id)?.with_context(|| format!("no run {id} in {}", o.db.display()))?,
        None => store.runs()?.pop().with_context(|| format!("no runs in {}", o.db.display()))?,
    };
    let (summary, claims) = view::summarize(&store, &row.run_id, Path::new(&row.run_dir))?;
    out.emit(&view::RunReport {
        run_id: &row.run_id,
        run_dir: &row.run_dir,
        status: row.status.as_str(),
        summary: &summary,
        claims: &claims,
    })?;
    out.finish()?;
    Ok(exit::OK)
}

/// `export` and `report` read an existing SQLite file, or a PostgreSQL store (a bad PostgreSQL value is reported
/// when the store is opened).
fn missing_file_refused(db: &DbValue) -> Result<()> {
    match db.sqlite_file() {
        Some(file) if !file.exists() => bail!("{} does not exist: run a sweep first or pass --db", db.display()),
        _ => Ok(()),
    }
}
