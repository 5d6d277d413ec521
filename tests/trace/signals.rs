//! `trace -- CMD` and signals: the traced command starts with a clean signal mask, and SIGINT or SIGTERM sent to
//! backscope reaches it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::util::*;

/// The masks of a process as `/proc/PID/status` shows them (see proc(5)): `SigBlk` and `SigIgn`, hexadecimal.
fn mask(status: &str, field: &str) -> u64 {
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in {status}"));
    u64::from_str_radix(line[field.len()..].trim(), 16).unwrap()
}

#[test]
fn traced_command_starts_with_no_signal_blocked() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(backscope()
        .arg("trace")
        .arg("--observer")
        .arg(observer_library())
        .arg("--dir")
        .arg(tmp.path().join("traces"))
        .args(["--", "sh", "-c", "exec cat /proc/self/status"]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status = String::from_utf8_lossy(&out.stdout);
    assert_eq!(mask(&status, "SigBlk:"), 0, "the traced command inherited a blocked signal: {status}");
    // SIGINT (2) and SIGTERM (15) are not ignored either: bit N-1 of the mask is signal N.
    let ignored = mask(&status, "SigIgn:");
    assert_eq!(ignored & ((1 << (libc::SIGINT - 1)) | (1 << (libc::SIGTERM - 1))), 0, "SigIgn {ignored:x}");
}

/// Sends `signal` to a `backscope trace` of a shell that waits 60 s, once the shell runs: the command must end by
/// that signal at once, and backscope must say so and exit with 128 + the signal's number.
fn forwarded_signal_ends_the_command(signal: libc::c_int, name: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let started_file = tmp.path().join("started");
    let script = format!("echo $$ > '{}'; exec sleep 60", started_file.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_backscope"))
        .arg("trace")
        .arg("--observer")
        .arg(observer_library())
        .arg("--dir")
        .arg(tmp.path().join("traces"))
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::fs::read_to_string(&started_file).map_or(true, |s| !s.ends_with('\n')) {
        assert!(started.elapsed() < Duration::from_secs(20), "the traced shell never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let command_pid: libc::pid_t = std::fs::read_to_string(&started_file).unwrap().trim().parse().unwrap();
    // SAFETY: signals the backscope process this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    let sent = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if sent.elapsed() > Duration::from_secs(15) {
            // SAFETY: the traced command and backscope, both started by this test.
            unsafe {
                libc::kill(command_pid, libc::SIGKILL);
                libc::kill(child.id() as libc::pid_t, libc::SIGKILL);
            }
            let _ = child.wait();
            panic!("{name} did not end the traced command within 15 s (it stayed pending in it)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(status.code(), Some(128 + signal), "{stdout}{stderr}");
    assert!(stderr.contains(&format!("{name}: passed on to")), "{stderr}");
    assert!(stdout.contains(&format!("traced command was ended by {name} (exit status {})", 128 + signal)), "{stdout}");
    assert!(!Path::new(&format!("/proc/{command_pid}")).exists(), "the traced command survives");
}

#[test]
fn sigterm_to_backscope_reaches_the_traced_command() {
    forwarded_signal_ends_the_command(libc::SIGTERM, "SIGTERM");
}

#[test]
fn sigint_to_backscope_reaches_the_traced_command() {
    forwarded_signal_ends_the_command(libc::SIGINT, "SIGINT");
}
