//! Running the `backscope` binary as a hostile input's victim: in its own process group, under an address-space
//! limit and a deadline (SIGKILL to the group after it), with its peak RSS measured and a check that nothing of its
//! group survives it. The hostile-input tests of every command use this one runner.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;

/// Limits on one child.
pub struct Bounds {
    pub address_space: u64,
    pub deadline: Duration,
    pub env: Vec<(&'static str, String)>,
    /// The child's standard input; the default is `/dev/null`.
    pub stdin: Option<Stdio>,
    /// The child's working directory; the default is the test's.
    pub cwd: Option<PathBuf>,
    /// Variables taken out of the child's environment (`HOME`, as systemd units and cron jobs run).
    pub env_remove: Vec<&'static str>,
    /// Run the child as this uid (its gid the same number, no supplementary groups): another local user, for a
    /// test run as root. The runner's scratch directory is handed to it.
    pub uid: Option<u32>,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            address_space: 4 * GIB,
            deadline: Duration::from_secs(120),
            env: Vec::new(),
            stdin: None,
            cwd: None,
            env_remove: Vec::new(),
            uid: None,
        }
    }
}

/// What one bounded run did.
pub struct Done {
    /// Exit code, or `None` when a signal ended it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Standard output (its first 64 MiB) and standard error (its first MiB), lossily decoded.
    pub stdout: String,
    pub stderr: String,
    pub peak_rss: u64,
    pub elapsed: Duration,
    /// The deadline passed and the group was killed.
    pub killed: bool,
}

impl Done {
    /// Standard output parsed as JSON; a panic that describes the run where it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.describe()))
    }

    /// The run did not end in a panic: not Rust's panic exit status 101, no "panicked" on standard error.
    pub fn assert_no_panic(&self) {
        assert_ne!(self.code, Some(101), "a panic: {}", self.describe());
        assert!(!self.stderr.contains("panicked"), "a panic: {}", self.describe());
    }

    pub fn describe(&self) -> String {
        format!(
            "exit {:?}, signal {:?}, {:.1} s, peak RSS {} MiB{}, stderr: {}",
            self.code,
            self.signal,
            self.elapsed.as_secs_f64(),
            self.peak_rss / MIB,
            if self.killed { ", killed at the deadline" } else { "" },
            self.stderr.chars().take(2000).collect::<String>()
        )
    }

    /// Ended by itself with one of `codes` within `seconds`, below `rss` bytes of peak RSS.
    pub fn assert_bounded(&self, codes: &[i32], seconds: u64, rss: u64) -> &Self {
        assert!(!self.killed, "still running at the deadline: {}", self.describe());
        assert!(self.code.is_some_and(|c| codes.contains(&c)), "expected exit {codes:?}: {}", self.describe());
        assert!(self.elapsed < Duration::from_secs(seconds), "slower than {seconds} s: {}", self.describe());
        assert!(self.peak_rss < rss, "peak RSS above {} MiB: {}", rss / MIB, self.describe());
        self
    }
}

/// Runs a command and writes `<peak RSS in KiB> <exit code or -1> <signal or 0>` of it to a file. The peak
/// is taken from `wait4` here rather than in the test process: Linux carries a process's peak RSS across
/// `exec`, so a child forked straight from the (large, multi-threaded) test process would report the test
/// process's size; forked from this small interpreter it reports its own.
const REAPER: &str = r#"
import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execv(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
with open(sys.argv[1], "w") as f:
    f.write(f"{usage.ru_maxrss} {code} {sig}\n")
"#;

/// `backscope ARGS…` as a child in its own process group, under `setrlimit(RLIMIT_AS)` and a deadline (SIGKILL
/// to the group after it), its peak RSS measured by [`REAPER`]. Asserts that nothing of its process group
/// survives it.
pub fn run<A: Into<OsString> + Clone>(args: &[A], bounds: Bounds) -> Done {
    let scratch = tempfile::tempdir().unwrap();
    let status_file = scratch.path().join("status");
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(REAPER).arg(&status_file).arg(env!("CARGO_BIN_EXE_backscope"));
    cmd.args(args.iter().cloned().map(Into::into));
    cmd.stdin(bounds.stdin.unwrap_or_else(Stdio::null)).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.envs(bounds.env.iter().map(|(k, v)| (k, v)));
    for k in &bounds.env_remove {
        cmd.env_remove(k);
    }
    if let Some(uid) = bounds.uid {
        // The reaper writes its status file here as that user.
        std::os::unix::fs::chown(scratch.path(), Some(uid), Some(uid)).expect("chown the runner's scratch directory");
        // Set in the child before exec, supplementary groups dropped.
        cmd.uid(uid).gid(uid);
    }
    if let Some(dir) = &bounds.cwd {
        cmd.current_dir(dir);
    }
    cmd.process_group(0);
    let limit = bounds.address_space;
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let rl = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            if libc::setrlimit(libc::RLIMIT_AS, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let mut child = cmd.spawn().expect("spawn python3 with backscope");
    let pgid = child.id() as libc::pid_t;
    let reader = |pipe: Box<dyn Read + Send>, cap: u64| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let mut pipe = pipe;
            let _ = pipe.by_ref().take(cap).read_to_end(&mut s);
            // Drain the rest so the child never blocks on a full pipe.
            let _ = std::io::copy(&mut pipe, &mut std::io::sink());
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let stdout_reader = reader(Box::new(child.stdout.take().unwrap()), 64 * MIB);
    let stderr_reader = reader(Box::new(child.stderr.take().unwrap()), MIB);
    let mut killed = false;
    loop {
        if child.try_wait().expect("wait for the reaper").is_some() {
            break;
        }
        if started.elapsed() > bounds.deadline && !killed {
            // SAFETY: signals the process group we created.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = started.elapsed();
    assert_no_survivors(pgid);
    let stdout = stdout_reader.join().unwrap();
    let stderr = stderr_reader.join().unwrap();
    let status = fs::read_to_string(&status_file).unwrap_or_default();
    let fields: Vec<i64> = status.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    let (peak_kib, code, signal) = match fields[..] {
        [peak, code, signal] => (peak, code, signal),
        _ => (0, -1, libc::SIGKILL as i64),
    };
    Done {
        code: (code >= 0).then_some(code as i32),
        signal: (signal > 0).then_some(signal as i32),
        stdout,
        stderr,
        peak_rss: peak_kib as u64 * 1024,
        elapsed,
        killed,
    }
}

/// No process of the child's process group is left. A process killed at the deadline may take a moment to go;
/// it gets five seconds.
pub fn assert_no_survivors(pgid: libc::pid_t) {
    let started = Instant::now();
    loop {
        let left = group_members(pgid);
        if left.is_empty() {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "processes of the child's group survive it: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn group_members(pgid: libc::pid_t) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else { continue };
        // Fields after the parenthesised command name: state, ppid, pgrp.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        if rest.split_whitespace().nth(2).and_then(|s| s.parse::<i32>().ok()) == Some(pgid) {
            members.push(pid);
        }
    }
    members
}
