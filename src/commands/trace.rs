//! `backscope trace -- CMD ARGS…`: run a command under the dispatch observer (`crates/observer`, loaded with
//! `LD_PRELOAD`) and the Vulkan layer (`crates/vklayer`, enabled through the Vulkan loader's environment), then read
//! the trace files it and its children wrote and report which GPU kernels and Vulkan pipelines really ran,
//! classified into ggml families. `--env` prints what to set to observe a service instead, and `--read DIR`
//! summarises traces written that way.
//!
//! While the command runs, SIGINT and SIGTERM sent to backscope are passed on to it (see [`run_observed`]); then
//! backscope summarises what was written and exits with the command's status. A trace file that cannot be read is
//! reported with its path and line and left out; the others are still summarised. Counts from a trace the observer
//! cut (byte budget, write error) are lower bounds, and the claims say so.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use trace_format::env;

pub use crate::observe::observers::OBSERVER_FILE;
use crate::observe::observers::{find_observer, vulkan_env};
use crate::observe::trace_summary::files::ProcessSummary;
use crate::observe::trace_summary::kernels::short_name;
use crate::observe::trace_summary::{summarise, summarise_read, TraceSummary};
use crate::output::{messages, Block, Column, Document, Excerpt, Output, OutputOptions, Render, Rendered, Table};
use crate::trace;

/// What `backscope trace` does: run a command under the observer, print the environment that observes a service
/// (`env`), or summarise traces already written (`read`).
#[derive(Debug, Clone, Default)]
pub struct TraceOptions {
    /// The observer library (default: $BACKSCOPE_OBSERVER_SO, else next to the backscope executable).
    pub observer: Option<PathBuf>,
    /// The Vulkan layer library (default: $BACKSCOPE_VKLAYER_SO, else next to the backscope executable).
    pub vklayer: Option<PathBuf>,
    /// ggml-vulkan's debug labels (`GGML_VK_DEBUG_MARKERS=1`); `None`: on for a command, off for `env`.
    pub labels: Option<bool>,
    /// Directory for the trace files (default: a new directory under the system temp dir). Must be empty or new.
    pub dir: Option<PathBuf>,
    /// Length of a trace time window in milliseconds; `None`: [`COMMAND_INTERVAL_MS`] for a command,
    /// [`SERVICE_INTERVAL_MS`] for `env`.
    pub interval_ms: Option<u64>,
    /// A trace's byte budget (`BACKSCOPE_TRACE_MAX_BYTES`); `None`: the observers' default, which `env` prints.
    pub max_bytes: Option<u64>,
    /// Segments a trace rotates through (`BACKSCOPE_TRACE_ROTATE`); `None`: none for a command,
    /// [`SERVICE_ROTATE`] for `env`.
    pub rotate: Option<u32>,
    /// Turn ggml's CUDA graphs off in the traced command (GGML_CUDA_DISABLE_GRAPHS=1).
    pub no_graphs: bool,
    /// Print the environment lines that observe a service, then exit.
    pub env: bool,
    /// With `env`: print a systemd drop-in for this unit instead.
    pub systemd: Option<String>,
    /// Summarise the trace files already in this directory instead of running a command.
    pub read: Option<PathBuf>,
    /// Format (JSON: the summary, schema `backscope.trace-summary/1`) and destination.
    pub output: OutputOptions,
    /// Rows of the per-kernel table (0 = all).
    pub top: usize,
    /// Make every Vulkan device answer ggml-vulkan as the profiled one (`crate::observe::vulkan::profile`: a profile id of
    /// data/vulkan_profiles/, or a profile / vulkaninfo --json file): pipelines are ggml's choices for that device,
    /// results are meaningless (the layer runs empty shaders).
    pub impersonate: Option<String>,
    /// The command to run.
    pub command: Vec<String>,
}

/// The window length of `trace -- CMD`: a diagnosis, joined to requests and phases within 50 ms.
pub const COMMAND_INTERVAL_MS: u64 = env::DEFAULT_INTERVAL_MS;
/// The window length `trace --env` prints for a service left traced for days: windows of a busy process are each
/// about as long at any length (one entry per pipeline or kernel that ran), so 1 s windows write about a twentieth
/// of what 50 ms windows do (BENCHMARKS.md, "A service left traced"), and a request is still placed within a second.
pub const SERVICE_INTERVAL_MS: u64 = 1000;
/// Segments `trace --env` rotates a service's traces through, within the 1 GiB budget: four of 256 MiB, so that at
/// least three quarters of the budget (the segments before the one being written) always hold the newest records.
pub const SERVICE_ROTATE: u32 = 4;

/// The layer's variables with ggml-vulkan's debug labels on (`GGML_VK_DEBUG_MARKERS=1`, as `layer_env` adds it
/// unless the environment set it) or off (the variable left out).
fn with_labels(mut vars: Vec<(String, String)>, on: bool) -> Vec<(String, String)> {
    if !on {
        vars.retain(|(k, _)| k != crate::observe::vulkan::GGML_DEBUG_MARKERS);
    } else if !vars.is_empty() && !vars.iter().any(|(k, _)| k == crate::observe::vulkan::GGML_DEBUG_MARKERS) {
        vars.push((crate::observe::vulkan::GGML_DEBUG_MARKERS.to_string(), "1".to_string()));
    }
    vars
}

/// Find the observer library: explicit path, environment, or beside the running executable.
/// Where `trace --env` points a service's traces when no `--dir` is given: `/var/tmp/backscope-traces-UID`, made
/// private to the user (mode 0700, [`crate::host::inputs::private_dir`]) and refused when someone else could have
/// planted traces in it, since `trace --read` takes what it finds there as evidence. `/var/tmp` rather than
/// `$XDG_RUNTIME_DIR`: that is a tmpfs of a few percent of RAM, removed at logout, and a service's traces (up to the
/// observer's 1 GiB per process) outlive sessions.
fn default_env_dir() -> Result<PathBuf> {
    // SAFETY: getuid cannot fail.
    let dir = PathBuf::from(format!("/var/tmp/backscope-traces-{}", unsafe { libc::getuid() }));
    crate::host::inputs::private_dir(&dir).map_err(|e| anyhow::anyhow!("{e}, or name another directory with --dir"))?;
    Ok(dir)
}

/// The observer library for `trace -- CMD`, or `None` (with a note) when none was named and none is found: a
/// Vulkan-only program is still observed by the layer, and [`run_observed`] refuses only when neither is there.
fn optional_observer(explicit: Option<&Path>) -> Result<Option<PathBuf>> {
    match find_observer(explicit) {
        Ok(p) => Ok(Some(p)),
        Err(e) if explicit.is_none() && std::env::var_os("BACKSCOPE_OBSERVER_SO").is_none() => {
            messages::note(format_args!("CUDA/HIP launches are not observed: {e:#}"));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

pub fn run(args: TraceOptions) -> Result<u8> {
    let inputs = crate::output::Inputs::none()
        .maybe(args.read.as_ref())
        .maybe(args.observer.as_ref())
        .maybe(args.vklayer.as_ref());
    let mut out = Output::open(&args.output, &inputs)?;
    if args.env {
        let observer = find_observer(args.observer.as_deref())?;
        // A service starts with its own environment: only what these lines set is assumed.
        let vulkan = with_labels(vulkan_env(args.vklayer.as_deref(), |_| None)?, args.labels.unwrap_or(false));
        let dir = match &args.dir {
            Some(d) => d.clone(),
            None => default_env_dir()?,
        };
        let service = ServiceSettings {
            interval_ms: args.interval_ms.unwrap_or(SERVICE_INTERVAL_MS),
            max_bytes: args.max_bytes.unwrap_or(env::DEFAULT_MAX_BYTES),
            rotate: args.rotate.unwrap_or(SERVICE_ROTATE),
        };
        out.emit(&env_view(&observer, &vulkan, &dir, args.systemd.as_deref(), &service))?;
        out.finish()?;
        return Ok(0);
    }
    let (dir, exit_status, exit_signal) = match &args.read {
        Some(dir) => (dir.clone(), None, None),
        None => {
            if args.command.is_empty() {
                bail!("nothing to trace: give a command after `--` (backscope trace -- llama-bench -m model.gguf), or --read DIR / --env");
            }
            let observer = optional_observer(args.observer.as_deref())?;
            // Everything that can refuse the run (no observer, a bad profile) before the directory exists: a refused
            // run leaves no empty trace directory behind.
            let prepared = prepare_command(observer.as_deref(), &args)?;
            let dir = match &args.dir {
                Some(d) => {
                    std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                    if std::fs::read_dir(d)?.next().is_some() {
                        bail!("{} is not empty: trace files of an earlier run would mix with this one", d.display());
                    }
                    d.clone()
                }
                // A new directory with an unpredictable name, mode 0700, created exclusively: in a shared /tmp a
                // predictable name could be taken first by another user, who would then own the trace files.
                None => tempfile::Builder::new()
                    .prefix(&format!("backscope-trace-{}-", std::process::id()))
                    .tempdir()
                    .context("creating the trace directory")?
                    .keep(),
            };
            // First, so that a run that is killed outright still said where its files are.
            messages::note(format_args!("tracing into {}", dir.display()));
            // The kernel's GPU-driver lines while the command runs (kernel-log.jsonl beside the traces).
            let file = crate::observe::kernel_log::record::FILE_NAME;
            let kernel = crate::observe::kernel_log::capture::Capture::start(&dir.join(file), file);
            let ran = run_observed(prepared, &dir, &args);
            kernel.finish();
            match ran {
                Ok((status, signal)) => (dir, Some(status), signal),
                Err(e) => {
                    if args.dir.is_none() {
                        remove_if_unused(&dir, file);
                    }
                    return Err(e);
                }
            }
        }
    };
    let read = trace::read_dir_folded(&dir)?;
    let mut summary = match &args.read {
        Some(_) => summarise_read(&dir, read.traces, &read.problems),
        None => summarise(&dir, read.traces, &read.problems, exit_status),
    };
    summary.exit_signal = exit_signal.map(|s| trace_format::record::signal_name(s).to_string());
    out.emit(&TraceView { summary: &summary, top: args.top })?;
    out.finish()?;
    // Exit with the traced command's status, so `backscope trace -- cmd` can stand in for `cmd` in scripts.
    Ok(match exit_status {
        Some(s) if (0..=255).contains(&s) => s as u8,
        Some(_) => 1,
        // `--read` with some unreadable trace file: the others are summarised.
        None if !summary.problems.is_empty() => crate::exit::PROBLEMS,
        None => 0,
    })
}

/// What `--env` sets for the trace of a service left traced: window length, budget, rotation.
#[derive(Clone, Copy, Debug)]
struct ServiceSettings {
    interval_ms: u64,
    max_bytes: u64,
    /// Below 2: no rotation (the variable is left out).
    rotate: u32,
}

impl ServiceSettings {
    /// The trace variables, in the order printed.
    fn vars(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![
            (env::TRACE_INTERVAL_MS.name(), self.interval_ms.to_string()),
            (env::TRACE_MAX_BYTES.name(), bytes_text(self.max_bytes)),
        ];
        if self.rotate >= 2 {
            vars.push((env::TRACE_ROTATE.name(), self.rotate.to_string()));
        }
        vars
    }

    /// What the rotation keeps, for the comment above the lines.
    fn comment(&self) -> String {
        match trace_format::sink::rotation_plan(self.max_bytes, self.rotate) {
            Some((keep, segment)) => format!(
                "# each process's trace rotates through {keep} files of {} (BACKSCOPE_TRACE_ROTATE): at least its newest \
                 {} are kept, and a crash, device loss or hang is recorded however long it runs",
                bytes_text(segment),
                bytes_text(segment * u64::from(keep - 1))
            ),
            None if self.max_bytes == 0 => "# no budget: each process's trace grows without limit".to_string(),
            None => format!(
                "# each process's trace stops at {} (no rotation): what comes after, a crash included, is not recorded",
                bytes_text(self.max_bytes)
            ),
        }
    }
}

/// `n` bytes with the largest binary suffix that divides it (`1G`, `256M`, `65537`).
fn bytes_text(n: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n > 0 && n.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", n >> shift);
        }
    }
    n.to_string()
}

/// `--env`: the lines to copy, and (JSON) the variables.
fn env_view(
    observer: &Path,
    vulkan: &[(String, String)],
    dir: &Path,
    systemd_unit: Option<&str>,
    service: &ServiceSettings,
) -> Rendered {
    let text = env_lines(observer, vulkan, dir, systemd_unit, service);
    let mut document = Document::new("backscope trace --env");
    document.push(Excerpt::verbatim(text.lines().map(str::to_string)));
    let mut variables = serde_json::json!({
        "LD_PRELOAD": observer.display().to_string(),
        "BACKSCOPE_TRACE_DIR": dir.display().to_string(),
    });
    for (k, v) in service.vars() {
        variables[k] = serde_json::Value::String(v);
    }
    for (k, v) in vulkan {
        variables[k.as_str()] = serde_json::Value::String(v.clone());
    }
    let json = serde_json::json!({
        "schema": "backscope.trace-env/1",
        "systemd_unit": systemd_unit,
        "variables": variables,
        "text": text,
    });
    Rendered { document, json }
}

/// Environment that loads the observer into a process (and, through inheritance, its children), and enables the
/// Vulkan layer in it (`vulkan`: from [`vulkan_env`]).
fn env_lines(
    observer: &Path,
    vulkan: &[(String, String)],
    dir: &Path,
    systemd_unit: Option<&str>,
    service: &ServiceSettings,
) -> String {
    let mut vars: Vec<(&str, String)> =
        vec![("LD_PRELOAD", observer.display().to_string()), (env::TRACE_DIR.name(), dir.display().to_string())];
    vars.extend(service.vars());
    vars.extend(vulkan.iter().map(|(k, v)| (k.as_str(), v.clone())));
    let mut out = String::new();
    match systemd_unit {
        Some(unit) => {
            let _ = writeln!(out, "# /etc/systemd/system/{unit}.d/backscope-trace.conf");
            let _ = writeln!(
                out,
                "# then: mkdir -p {0} && chown <service user> {0}; systemctl daemon-reload; systemctl restart {unit}",
                dir.display()
            );
            let _ = writeln!(
                out,
                "# runners the service starts inherit LD_PRELOAD; read the traces with: backscope trace --read {}",
                dir.display()
            );
            let _ = writeln!(out, "{}", service.comment());
            if !vulkan.is_empty() {
                let _ = writeln!(
                    out,
                    "# VK_* enable backscope's Vulkan layer (and its black box); with --labels on, GGML_VK_DEBUG_MARKERS \
                     makes ggml-vulkan name its pipelines and graph nodes (7% of decode on an H200)"
                );
            }
            let _ = writeln!(out, "[Service]");
            for (k, v) in vars {
                let _ = writeln!(out, "Environment=\"{k}={v}\"");
            }
        }
        None => {
            let _ = writeln!(
                out,
                "# mkdir -p {0}; export these before starting the service; then: backscope trace --read {0}",
                dir.display()
            );
            let _ = writeln!(out, "{}", service.comment());
            for (k, v) in vars {
                let _ = writeln!(out, "export {k}={v}");
            }
        }
    }
    out
}

/// Removes the trace directory `trace` made for a command that could not be run, when it holds nothing but the
/// kernel's lines (`kernel_log`) of that instant: a refused run leaves no directory behind, and one that got far
/// enough to write traces keeps them.
fn remove_if_unused(dir: &Path, kernel_log: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    if entries.flatten().all(|e| e.file_name() == kernel_log) {
        let _ = std::fs::remove_file(dir.join(kernel_log));
        if std::fs::remove_dir(dir).is_ok() {
            messages::note(format_args!("removed {}: the command did not run", dir.display()));
        }
    }
}

/// The traced command with its environment, all but the trace directory, and the impersonation profile it reads:
/// made before the directory, so that whatever refuses the run does so before anything is created.
struct PreparedCommand {
    cmd: Command,
    /// Kept until the command has run: the layer reads the profile when the command creates its first instance.
    profile_file: Option<tempfile::TempPath>,
}

/// [`PreparedCommand`] for `args`: the observer's preload, the layer's variables, the profile.
fn prepare_command(observer: Option<&Path>, args: &TraceOptions) -> Result<PreparedCommand> {
    let vulkan = vulkan_env(args.vklayer.as_deref(), |k| std::env::var(k).ok())?;
    let vulkan = if args.labels == Some(false) { with_labels(vulkan, false) } else { vulkan };
    if observer.is_none() && vulkan.is_empty() {
        bail!(
            "nothing to observe with: neither the observer library (CUDA/HIP) nor the Vulkan layer was found; build \
             them with `cargo build --release` (the workspace builds both) or pass --observer / --vklayer"
        );
    }
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env(env::TRACE_INTERVAL_MS.name(), args.interval_ms.unwrap_or(COMMAND_INTERVAL_MS).to_string());
    if let Some(max_bytes) = args.max_bytes {
        cmd.env(env::TRACE_MAX_BYTES.name(), max_bytes.to_string());
    }
    if let Some(rotate) = args.rotate {
        cmd.env(env::TRACE_ROTATE.name(), rotate.to_string());
    }
    let profile_file = match &args.impersonate {
        Some(arg) => {
            if vulkan.is_empty() {
                bail!("--impersonate needs the Vulkan layer, which was not found (pass --vklayer)");
            }
            let profile = crate::observe::vulkan::profile::resolve(arg)?;
            let path = crate::observe::vulkan::profile::write_for_layer(&profile, &std::env::temp_dir())?;
            messages::note(format_args!(
                "impersonating {} ({}): Vulkan devices answer ggml as this profile; shaders are replaced by empty ones, \
                 so pipeline choices are ggml's and results are meaningless",
                profile.id, profile.device_name
            ));
            cmd.env(env::VK_IMPERSONATE.name(), &path);
            Some(path)
        }
        None => {
            cmd.env_remove(env::VK_IMPERSONATE.name());
            None
        }
    };
    if let Some(observer) = observer {
        let preload = match std::env::var("LD_PRELOAD") {
            Ok(existing) if !existing.is_empty() => format!("{}:{existing}", observer.display()),
            _ => observer.display().to_string(),
        };
        cmd.env("LD_PRELOAD", preload);
    }
    for (k, v) in vulkan {
        cmd.env(k, v);
    }
    if args.no_graphs {
        cmd.env("GGML_CUDA_DISABLE_GRAPHS", "1");
    }
    Ok(PreparedCommand { cmd, profile_file })
}

/// Runs the traced command and waits for it. SIGINT and SIGTERM are blocked in backscope from here on and taken
/// with `sigtimedwait`, so they never end backscope itself (the summary is still to come); each one is passed on to
/// the command (see [`signals::forward`]) unless it came from the terminal to the foreground process group the command
/// shares with backscope (it has it already: a second SIGINT would make llama-server quit without its orderly
/// shutdown). The third request sends SIGKILL instead, for a command that does not stop. The command starts with
/// an empty signal mask and the default action for the signals backscope handles
/// ([`crate::host::proc::run::start_clean`]: std leaves the mask as the spawning thread has it), so it sees signals as
/// it would without backscope. Returns the exit status (128 + N for a signal) and the signal that ended the command,
/// if one did.
fn run_observed(prepared: PreparedCommand, dir: &Path, args: &TraceOptions) -> Result<(i32, Option<i32>)> {
    let PreparedCommand { mut cmd, profile_file: _profile_file } = prepared;
    cmd.env(env::TRACE_DIR.name(), dir);
    crate::host::proc::run::start_clean(&mut cmd);
    let signals = signals::Blocked::termination_and_child()?;
    let mut child = cmd.spawn().with_context(|| format!("cannot run {}", args.command[0]))?;
    let pid = child.id() as i32;
    let mut requests = 0u32;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the traced command")? {
            break status;
        }
        // SIGCHLD wakes this up when the command exits; the timeout only bounds a missed wake-up.
        let Some(received) = signals.wait(Duration::from_millis(200)) else { continue };
        if received.signal == libc::SIGCHLD {
            continue;
        }
        requests += 1;
        let name = signals::name(received.signal);
        if requests >= 3 {
            let target = signals::forward(pid, libc::SIGKILL);
            messages::note(format_args!("{name} again: sent SIGKILL to {target}"));
        } else if received.from_process || !signals::shares_our_group(pid) {
            let target = signals::forward(pid, received.signal);
            messages::note(format_args!(
                "{name}: passed on to {target}; waiting for it to exit (a third request sends SIGKILL)"
            ));
        } else {
            messages::note(format_args!(
                "{name} from the terminal (the traced command has it too); waiting for it to exit"
            ));
        }
    };
    use std::os::unix::process::ExitStatusExt;
    Ok((status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)), status.signal()))
}

/// The signal plumbing of [`run_observed`], on libc alone.
mod signals {
    use std::io;
    use std::time::Duration;

    /// A signal taken by [`Blocked::wait`].
    pub struct Received {
        pub signal: libc::c_int,
        /// Sent with `kill`/`sigqueue`/`tgkill` (`si_code <= 0` on Linux) rather than generated by the kernel
        /// (a terminal's Ctrl-C, which reaches the whole foreground process group).
        pub from_process: bool,
    }

    /// SIGINT, SIGTERM and SIGCHLD blocked in the calling thread. The mask stays for the rest of the process:
    /// a request that arrives while the summary is being written is held, not acted on, so it cannot cut the
    /// summary short.
    pub struct Blocked {
        set: libc::sigset_t,
    }

    impl Blocked {
        pub fn termination_and_child() -> io::Result<Blocked> {
            // SAFETY: sigset_t is plain data, initialised by sigemptyset before any other use.
            let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: `set` is a valid sigset_t; the signal numbers are valid.
            unsafe {
                libc::sigemptyset(&mut set);
                for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGCHLD] {
                    libc::sigaddset(&mut set, signal);
                }
            }
            // SAFETY: changes this thread's mask only; `set` is valid and the old mask is not needed.
            let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(Blocked { set })
        }

        /// The next pending signal of the set, waiting at most `timeout`.
        pub fn wait(&self, timeout: Duration) -> Option<Received> {
            let timeout = libc::timespec {
                tv_sec: timeout.as_secs() as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            // SAFETY: siginfo_t is plain data that sigtimedwait fills in.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: valid set, writable info and a valid timeout; the signals are blocked in this thread.
            let signal = unsafe { libc::sigtimedwait(&self.set, &mut info, &timeout) };
            (signal > 0).then_some(Received { signal, from_process: info.si_code <= 0 })
        }
    }

    pub fn name(signal: libc::c_int) -> &'static str {
        match signal {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            libc::SIGKILL => "SIGKILL",
            _ => "signal",
        }
    }

    fn pgid(pid: libc::pid_t) -> libc::pid_t {
        // SAFETY: getpgid has no memory preconditions; it fails harmlessly for a process that is gone.
        unsafe { libc::getpgid(pid) }
    }

    /// Whether `pid` is in backscope's process group (where a terminal's signals reach it too).
    pub fn shares_our_group(pid: libc::pid_t) -> bool {
        pgid(pid) == pgid(0)
    }

    /// Sends `signal` to the traced command: to its process group if it leads one of its own, else to it and every
    /// process below it (what a terminal's Ctrl-C would reach), so that `sh -c 'long-running'` leaves nothing
    /// behind. Returns what was signalled, for the message.
    pub fn forward(child: libc::pid_t, signal: libc::c_int) -> String {
        if pgid(child) == child {
            // SAFETY: signals the process group that the traced command leads.
            unsafe { libc::kill(-child, signal) };
            return format!("process group {child}");
        }
        let below = crate::host::proc::stat::descendants(child);
        // SAFETY: signals the traced command, our own child (not yet reaped, so the pid is still its).
        unsafe { libc::kill(child, signal) };
        for &pid in &below {
            // SAFETY: a process found under the traced command a moment ago.
            unsafe { libc::kill(pid, signal) };
        }
        match below.len() {
            0 => format!("pid {child}"),
            n => format!("pid {child} and the {n} process(es) it started"),
        }
    }
}

/// What `backscope trace` prints: the summary, with `top` rows of the per-kernel table (0: all).
#[derive(Debug)]
struct TraceView<'a> {
    pub summary: &'a TraceSummary,
    pub top: usize,
}

impl Render for TraceView<'_> {
    fn write_json(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self.summary)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        document(self.summary, self.top)
    }
}

/// Why the counts are lower bounds, when they are.
fn lower_bounds_note(s: &TraceSummary) -> Option<String> {
    if !s.counts_are_lower_bounds {
        return None;
    }
    let cut = s.processes.iter().any(|p| p.cut.is_some());
    let rotated =
        s.processes.iter().any(|p| p.segments.as_ref().is_some_and(|g| g.rotated_away > 0 || !g.missing.is_empty()));
    let why = match (cut, rotated) {
        (_, false) => "a trace was cut before its process ended (see trace.cut)",
        (false, true) => "a rotating trace's earliest segments were rotated away (see trace.rotated)",
        (true, true) => {
            "a trace was cut before its process ended (see trace.cut), and a rotating trace's earliest segments were \
             rotated away (see trace.rotated)"
        }
    };
    Some(format!("Counts are lower bounds (at least): {why}"))
}

/// How a process's trace ended, and which segments of a rotating one were read.
fn trace_state(p: &ProcessSummary) -> String {
    let state = match (&p.cut, p.complete) {
        (Some(why), _) => format!("cut: {why}"),
        (None, true) => "complete".to_string(),
        (None, false) => "no exit record".to_string(),
    };
    match &p.segments {
        Some(segments) => format!("{state}; {}", segments.statement),
        None => state,
    }
}

/// The summary as a document: how the command ended, what ran (the claims), then the families, the kernels, the
/// processes.
fn document(s: &TraceSummary, top: usize) -> Document {
    let mut doc = Document::new(format!("backscope trace: {}", s.dir));
    match (s.exit_status, &s.exit_signal) {
        (Some(code), Some(signal)) => {
            doc.paragraph(format!("traced command was ended by {signal} (exit status {code}); traces in {}", s.dir))
        }
        (Some(code), None) => doc.paragraph(format!("traced command exited with status {code}; traces in {}", s.dir)),
        (None, _) => doc.paragraph(format!("traces in {}", s.dir)),
    };
    if let Some(note) = lower_bounds_note(s) {
        doc.paragraph(note);
    }
    doc.heading(2, "Claims");
    doc.claims(&s.claims);
    let mut t = Table::new(vec![
        Column::keep("family"),
        Column::number("kernels"),
        Column::number("launches"),
        Column::number("via graph replay"),
        Column::number("failed"),
    ]);
    for f in &s.families {
        t.row([
            f.family.clone(),
            f.kernels.to_string(),
            f.launches.to_string(),
            f.graph.to_string(),
            f.errors.to_string(),
        ]);
    }
    doc.heading(2, "Kernel families");
    doc.push(t);
    let mut t = Table::new(vec![
        Column::label("kernel"),
        Column::keep("family"),
        Column::keep("type"),
        Column::number("launches"),
        Column::number("graph"),
        Column::number("failed"),
        Column::text("top shape (grid / block)"),
    ]);
    let n = if top == 0 { s.kernels.len() } else { top.min(s.kernels.len()) };
    for k in &s.kernels[..n] {
        let shape = k.shapes.first().map(|(g, b, c)| format!("{g:?} / {b:?} ×{c}")).unwrap_or_default();
        let label = match &k.variant {
            Some(v) => format!("{} ({v})", short_name(&k.demangled)),
            None => short_name(&k.demangled),
        };
        t.row([
            label,
            k.family.to_string(),
            k.ggml_type.as_deref().unwrap_or("-").to_string(),
            k.launches.to_string(),
            k.graph.to_string(),
            k.errors.to_string(),
            shape,
        ]);
    }
    doc.heading(2, format!("Kernels ({} of {})", n, s.kernels.len()));
    doc.push(t);
    if !s.devices.is_empty() {
        let mut t = Table::new(vec![
            Column::label("Vulkan device"),
            Column::keep("driver"),
            Column::keep("subgroup"),
            Column::keep("int dot"),
            Column::keep("coopmat"),
            Column::keep("fp16"),
            Column::text("pids"),
        ]);
        let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
        for d in &s.devices {
            let subgroup = if d.subgroup_size_min > 0 {
                format!("{} ({}–{})", d.subgroup_size, d.subgroup_size_min, d.subgroup_size_max)
            } else {
                d.subgroup_size.to_string()
            };
            let name = match &d.impersonated {
                Some(i) => {
                    format!("{} (impersonated by {} {}: profile {})", d.name, i.real_name, i.real_driver, i.profile)
                }
                None => d.name.clone(),
            };
            t.row([
                name,
                format!("{} {}", d.driver, d.driver_info),
                subgroup,
                yes(d.integer_dot),
                yes(d.cooperative_matrix),
                d.flags.get("fp16").map_or("?".to_string(), |&b| yes(b)),
                d.pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            ]);
        }
        doc.heading(2, "Vulkan devices");
        doc.push(t);
    }
    let mut t = Table::new(vec![
        Column::number("pid"),
        Column::label("executable"),
        Column::number("kernel launches"),
        Column::number("graph launches"),
        Column::text("trace"),
        Column::label("file"),
    ]);
    let mut warnings = Vec::new();
    for p in &s.processes {
        let state = trace_state(p);
        t.row([
            p.pid.to_string(),
            p.exe.clone(),
            p.launches.to_string(),
            p.graph_launches.to_string(),
            state,
            p.file.clone(),
        ]);
        warnings.extend(p.warnings.iter().map(|w| format!("pid {}: {w}", p.pid).into()));
        for c in s.crashes.iter().filter(|c| c.pid == p.pid && c.file == p.file) {
            let inside = c.threads.first().and_then(|t| t.in_flight.as_deref()).unwrap_or("no observed call");
            warnings.push(
                format!(
                    "pid {}: {} {} in thread {} ({inside}); see the crash claim",
                    p.pid,
                    if c.fatal { "crashed with" } else { "received" },
                    c.signal,
                    c.tid
                )
                .into(),
            );
        }
    }
    doc.heading(2, "Processes");
    doc.push(t);
    if !warnings.is_empty() {
        doc.push(Block::List(warnings));
    }
    kernel_lines(&mut doc, s);
    if !s.problems.is_empty() {
        doc.heading(2, "Problems (these files are left out)");
        doc.push(Block::List(s.problems.iter().map(|p| p.to_string().into()).collect()));
    }
    doc
}

/// The kernel's GPU-driver lines kept while the command ran (`kernel-log.jsonl`), as `dmesg` prints them, each with
/// where it is stored; nothing when none was kept.
fn kernel_lines(doc: &mut Document, s: &TraceSummary) {
    let Some(log) = s.kernel_log.as_ref().filter(|l| !l.lines.is_empty()) else { return };
    const SHOWN: usize = 20;
    let mut lines: Vec<_> =
        log.lines.iter().take(SHOWN).map(|l| format!("{}:{}: {}", l.file, l.line, l.dmesg()).into()).collect();
    if log.lines.len() > SHOWN {
        lines.push(format!("and {} more in {}", log.lines.len() - SHOWN, log.file).into());
    }
    doc.heading(2, "Kernel GPU-driver lines");
    doc.push(Block::List(lines));
}
