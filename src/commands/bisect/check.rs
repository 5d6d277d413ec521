//! Testing one build: the trait the search calls ([`BuildTest`]), the external command with git-bisect-run
//! semantics ([`External`]), and the way every test runs a child — in a process group of its own, under the test
//! deadline, its output into a log file, and a Ctrl-C of backscope passed on to it as SIGINT so that it can stop
//! cleanly (a sweep marks its run interrupted) before the bisect exits as interrupted.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::builds::BuildNumber;
use crate::host::proc::run::{capture, GroupChild, Supervisee};
use crate::host::proc::ExitInfo;
use crate::run::format::bisect::{Attempt, CommandEvidence, Outcome};

/// The bisect was interrupted (Ctrl-C, SIGTERM, SIGHUP): nothing of the step in progress is recorded.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// The build under test.
#[derive(Clone, Debug)]
pub struct Target<'a> {
    pub build: BuildNumber,
    /// The step's number and the try's (from 1), for file names.
    pub seq: u32,
    pub attempt: u32,
    pub bin_dir: &'a Path,
    /// The good end's `bin/`, for tests that compare against it (speed).
    pub reference: Option<&'a Path>,
    pub is_good_end: bool,
}

/// A test of a build. An `Err` stops the whole bisect (an aborting exit, a sweep that cannot start); an
/// [`Interrupted`] error stops it as interrupted.
pub trait BuildTest {
    fn test(&mut self, target: &Target<'_>) -> Result<Attempt>;
    /// Whether the test repeats itself (speed: rounds of measurements) instead of being tried `--repeat` times.
    fn repeats_itself(&self) -> bool {
        false
    }
    /// Whether the test needs the good end's `bin/` ([`Target::reference`]).
    fn needs_reference(&self) -> bool {
        false
    }
}

/// A child that gets SIGINT (its whole group) once the bisect is asked to stop.
struct Forwarding {
    child: GroupChild,
    stop: Arc<AtomicBool>,
    forwarded: bool,
}

impl Supervisee for Forwarding {
    fn pid(&self) -> u32 {
        self.child.pid()
    }

    fn try_end(&mut self) -> Option<Option<std::process::ExitStatus>> {
        if !self.forwarded && self.stop.load(Ordering::Relaxed) {
            self.forwarded = true;
            crate::host::proc::run::signal_group(self.child.pid(), libc::SIGINT);
        }
        self.child.try_end()
    }

    fn kill(&mut self) {
        self.child.kill();
    }
}

/// How a child run by [`run_logged`] ended.
#[derive(Debug)]
pub struct Ran {
    pub exit: ExitInfo,
    pub timed_out: bool,
    pub secs: f64,
}

/// Bytes of a test's output kept at the start of its log file, and at its end. What comes between is read and
/// dropped, with a line in the log saying how much: a test that prints gigabytes neither fills the disk nor stalls
/// on a full pipe, and it still gets its exit status. So a log holds at most 16 MiB and that line.
pub const LOG_HEAD_BYTES: usize = 8 << 20;
pub const LOG_TAIL_BYTES: usize = 8 << 20;

/// How long the log copiers may still run once the child has ended (something it left behind holding the pipe
/// open, outside its process group): then they are abandoned, as `proc::run` abandons such pipes.
const COPY_LINGER: Duration = Duration::from_secs(2);

/// Copy `pipe` into `file`: its first [`LOG_HEAD_BYTES`] as they come, then only the last [`LOG_TAIL_BYTES`] (held in
/// memory), written at the end of the output after a line that says how many bytes were dropped.
fn copy_capped(mut pipe: impl Read, mut file: File) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut head_left = LOG_HEAD_BYTES;
    let mut tail: VecDeque<u8> = VecDeque::new();
    let mut dropped: u64 = 0;
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let to_head = n.min(head_left);
        file.write_all(&buf[..to_head])?;
        head_left -= to_head;
        tail.extend(&buf[to_head..n]);
        if tail.len() > LOG_TAIL_BYTES {
            let over = tail.len() - LOG_TAIL_BYTES;
            tail.drain(..over);
            dropped += over as u64;
        }
    }
    if dropped > 0 {
        writeln!(
            file,
            "\n[backscope: {dropped} bytes of output dropped here; a test log keeps its first {LOG_HEAD_BYTES} and \
             last {LOG_TAIL_BYTES} bytes]"
        )?;
    }
    let (a, b) = tail.as_slices();
    file.write_all(a)?;
    file.write_all(b)?;
    Ok(dropped)
}

/// A thread copying one output pipe into its log ([`copy_capped`]); `done` hears when it ends.
fn start_copy(pipe: std::io::PipeReader, file: File, done: &mpsc::Sender<()>) {
    let done = done.clone();
    std::thread::spawn(move || {
        let _ = copy_capped(pipe, file);
        let _ = done.send(());
    });
}

/// Run `argv` with `env` added, standard output to `stdout_log` and standard error to `stderr_log` (the same
/// file for both when they are equal), each capped ([`LOG_HEAD_BYTES`], [`LOG_TAIL_BYTES`]), in its own process
/// group, for at most `limit`. Returns [`Interrupted`] when `stop` was set while it ran (it got SIGINT and was
/// waited for).
pub fn run_logged(
    argv: &[String],
    env: &[(String, String)],
    stdout_log: &Path,
    stderr_log: &Path,
    limit: Duration,
    stop: &Arc<AtomicBool>,
) -> Result<Ran> {
    let (program, args) = argv.split_first().context("an empty command")?;
    if stop.load(Ordering::Relaxed) {
        return Err(Interrupted.into());
    }
    let out = File::create(stdout_log).with_context(|| format!("cannot create {}", stdout_log.display()))?;
    let (done, copied) = mpsc::channel();
    let (out_read, out_write) = std::io::pipe().context("cannot make a pipe for the test's output")?;
    let err_write = if stderr_log == stdout_log {
        out_write.try_clone()?
    } else {
        let err = File::create(stderr_log).with_context(|| format!("cannot create {}", stderr_log.display()))?;
        let (err_read, err_write) = std::io::pipe().context("cannot make a pipe for the test's output")?;
        start_copy(err_read, err, &done);
        err_write
    };
    start_copy(out_read, out, &done);
    drop(done);
    let spawned = Instant::now();
    let child = {
        // The command holds the pipes' write ends: it is dropped once the child has them, so that the copiers
        // see the end of the output when the child (and what it started) has closed them.
        let mut cmd = Command::new(program);
        cmd.args(args).envs(env.iter().map(|(k, v)| (k, v))).stdin(Stdio::null()).stdout(out_write).stderr(err_write);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // SIGINT is how a stop reaches it: at its default action even where this process inherited it ignored.
        crate::host::proc::run::start_clean(&mut cmd);
        cmd.spawn().with_context(|| format!("cannot run `{program}`"))?
    };
    let mut sup = Forwarding { child: GroupChild { child }, stop: Arc::clone(stop), forwarded: false };
    let captured = capture(&mut sup, None, None, spawned, limit, 0)?;
    let until = Instant::now() + COPY_LINGER;
    while copied.recv_timeout(until.saturating_duration_since(Instant::now())).is_ok() {}
    if sup.forwarded || stop.load(Ordering::Relaxed) {
        return Err(Interrupted.into());
    }
    Ok(Ran { exit: captured.exit, timed_out: captured.timed_out, secs: spawned.elapsed().as_secs_f64() })
}

/// The last `max` bytes of a file, as text (lossy), from the start of a line where one begins within them.
pub fn tail(path: &Path, max: u64) -> String {
    use std::io::{Seek, SeekFrom};
    let Ok(mut input) = crate::host::inputs::open_input(path) else { return String::new() };
    let from = input.len.saturating_sub(max);
    if input.file.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = (&mut input.file).take(max).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    match text.find('\n') {
        Some(i) if from > 0 => text[i + 1..].to_string(),
        _ => text,
    }
}

/// Bytes of an external command's output kept in the step's evidence (the whole output stays in its log file).
const TAIL_BYTES: u64 = 2000;

/// An external test command with `git bisect run` semantics: exit 0 good, 1–124 bad, 125 skip; any other status
/// (126 and 127 — the command could not be run —, 128 and above) or a signal aborts the bisect.
/// It gets `BACKSCOPE_BIN_DIR` (the build's `bin/`) and `BACKSCOPE_BUILD` (`b9700`).
pub struct External {
    pub argv: Vec<String>,
    pub limit: Duration,
    /// Where its logs go: the bisect's own directory.
    pub dir: PathBuf,
    pub stop: Arc<AtomicBool>,
}

/// An external command's exit as a bisect outcome; `Err` for a status that aborts.
pub fn external_outcome(exit: &ExitInfo, timed_out: bool) -> Result<(Outcome, String), String> {
    if timed_out {
        return Err("it ran past --test-timeout and was killed".into());
    }
    match (exit.code, exit.signal) {
        (_, Some(_)) => Err(format!("it was {}", exit.describe())),
        (Some(0), None) => Ok((Outcome::Good, "the test command exited 0".into())),
        (Some(125), None) => Ok((Outcome::Skip, "the test command exited 125 (skip)".into())),
        (Some(c @ 1..=124), None) => Ok((Outcome::Bad, format!("the test command exited {c}"))),
        (Some(c), None) => Err(format!("it exited {c}, which aborts a bisect (0 good, 1-124 bad, 125 skip)")),
        (None, None) => Err("its exit status was lost".into()),
    }
}

impl BuildTest for External {
    fn test(&mut self, t: &Target<'_>) -> Result<Attempt> {
        let log = self.dir.join(format!("step{:03}-{}-try{}.log", t.seq + 1, t.build, t.attempt));
        let env = [
            ("BACKSCOPE_BIN_DIR".to_string(), t.bin_dir.display().to_string()),
            ("BACKSCOPE_BUILD".to_string(), t.build.to_string()),
        ];
        let ran = run_logged(&self.argv, &env, &log, &log, self.limit, &self.stop)?;
        let tail = tail(&log, TAIL_BYTES);
        let (outcome, reason) = match external_outcome(&ran.exit, ran.timed_out) {
            Ok(o) => o,
            Err(why) => bail!(
                "the test command on {} {why}; the bisect stops (see {}){}",
                t.build,
                log.display(),
                if tail.is_empty() { String::new() } else { format!(":\n{}", tail.trim_end()) }
            ),
        };
        let command = CommandEvidence {
            argv: self.argv.clone(),
            exit_code: ran.exit.code,
            signal: ran.exit.signal_name(),
            log: log.display().to_string(),
            tail,
        };
        Ok(Attempt { outcome, reason, runs: vec![], command: Some(command), measured: Default::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: Option<i32>, signal: Option<i32>) -> ExitInfo {
        ExitInfo { code, signal, after_ms: 1.0 }
    }

    #[test]
    fn exit_statuses_follow_git_bisect_run() {
        // git-bisect(1), "bisect run": 0 good, 1..=127 except 125 bad, 125 skip, anything else aborts; backscope
        // also aborts on 126 and 127 (the command could not be run: every build would test "bad").
        let o = |code| external_outcome(&exit(Some(code), None), false).map(|x| x.0);
        assert_eq!(o(0), Ok(Outcome::Good));
        assert_eq!(o(1), Ok(Outcome::Bad));
        assert_eq!(o(124), Ok(Outcome::Bad));
        assert_eq!(o(125), Ok(Outcome::Skip));
        for code in [126, 127, 128, 255] {
            assert!(o(code).is_err(), "{code}");
        }
        assert!(external_outcome(&exit(None, Some(libc::SIGSEGV)), false).unwrap_err().contains("SIGSEGV"));
        assert!(external_outcome(&exit(Some(0), None), true).is_err(), "a timeout aborts");
    }

    #[test]
    fn a_log_keeps_the_head_and_tail_of_a_long_output_and_drops_the_middle() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        let total = LOG_HEAD_BYTES + LOG_TAIL_BYTES + 3_000_000;
        // 'h' fills the head, 'm' the middle that is dropped, 't' the tail; each byte's place is known.
        let mut input = vec![b'h'; LOG_HEAD_BYTES];
        input.extend(std::iter::repeat_n(b'm', total - LOG_HEAD_BYTES - LOG_TAIL_BYTES));
        input.extend(std::iter::repeat_n(b't', LOG_TAIL_BYTES));
        let dropped = copy_capped(&input[..], File::create(&log).unwrap()).unwrap();
        assert_eq!(dropped, 3_000_000);
        let kept = std::fs::read(&log).unwrap();
        assert!(kept[..LOG_HEAD_BYTES].iter().all(|b| *b == b'h'));
        assert!(kept[kept.len() - LOG_TAIL_BYTES..].iter().all(|b| *b == b't'));
        let note = String::from_utf8_lossy(&kept[LOG_HEAD_BYTES..kept.len() - LOG_TAIL_BYTES]).into_owned();
        assert!(note.contains("3000000 bytes of output dropped"), "{note}");
        let short = dir.path().join("short.log");
        assert_eq!(copy_capped(&b"all of it\n"[..], File::create(&short).unwrap()).unwrap(), 0);
        assert_eq!(std::fs::read(&short).unwrap(), b"all of it\n");
    }

    #[test]
    fn a_logged_run_keeps_its_output_and_env_and_a_stop_interrupts_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        let stop = Arc::new(AtomicBool::new(false));
        let argv: Vec<String> = ["/bin/sh", "-c", "echo out; echo err >&2; echo $V; exit 3"].map(String::from).into();
        let ran = run_logged(&argv, &[("V".into(), "v9".into())], &log, &log, Duration::from_secs(10), &stop).unwrap();
        assert_eq!((ran.exit.code, ran.timed_out), (Some(3), false));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("out\n") && text.contains("err\n") && text.contains("v9\n"), "{text}");
        let long: Vec<String> = ["/bin/sh", "-c", "sleep 30"].map(String::from).into();
        let flag = Arc::clone(&stop);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            flag.store(true, Ordering::Relaxed);
        });
        let t0 = Instant::now();
        let e = run_logged(&long, &[], &log, &log, Duration::from_secs(20), &stop).unwrap_err();
        assert!(e.is::<Interrupted>(), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10), "SIGINT ended the sleep");
        let tailed = tail(&dir.path().join("none"), 10);
        assert!(tailed.is_empty());
    }
}
