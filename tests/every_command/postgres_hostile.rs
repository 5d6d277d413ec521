//! A PostgreSQL `--db` can hang no command and fill no memory, and a `--db` value never leaks its password.
//!
//! Each deadline test points backscope at a loopback TCP listener of its own ([`FakePg`], 127.0.0.1 only, stopped
//! by its Drop) that speaks just enough of the protocol to misbehave: it never answers, answers the startup and
//! then floods notices or goes silent, declares a 2 GiB message, or asks for the password in clear text. The
//! protocol bytes are written here from the PostgreSQL documentation's message formats, not by backscope's code.
//! Every command runs under the bounded runner (deadline, address-space limit, peak RSS).

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::bounded::{self, Bounds, MIB};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Act {
    /// Accept and never send a byte.
    Silent,
    /// Complete the startup (AuthenticationOk, ReadyForQuery), then send NoticeResponse messages without end.
    Notices,
    /// Complete the startup, then say nothing more.
    SilentAfterStartup,
    /// Answer the startup with a message header declaring 2 GiB, then stream zeros.
    Huge,
    /// Ask for the password in clear text (AuthenticationCleartextPassword), then record what comes.
    Cleartext,
}

/// A loopback listener that plays a misbehaving server until dropped.
struct FakePg {
    port: u16,
    stop: Arc<AtomicBool>,
    /// Everything clients sent after their startup message, per connection.
    received: Arc<Mutex<Vec<Vec<u8>>>>,
    thread: Option<JoinHandle<()>>,
}

fn message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// AuthenticationOk and ReadyForQuery (idle).
fn startup_done() -> Vec<u8> {
    let mut m = message(b'R', &0u32.to_be_bytes());
    m.extend(message(b'Z', b"I"));
    m
}

fn notice() -> Vec<u8> {
    message(b'N', b"SNOTICE\0VNOTICE\0C00000\0Mstill here\0\0")
}

/// Read exactly `n` bytes, giving up when `stop` is set (the socket has a short read timeout).
fn read_n(s: &mut TcpStream, n: usize, stop: &AtomicBool) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; n];
    let mut have = 0;
    while have < n {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        match s.read(&mut buf[have..]) {
            Ok(0) => return None,
            Ok(k) => have += k,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return None,
        }
    }
    Some(buf)
}

/// The startup message, after answering an SSLRequest with `N` (no TLS here).
fn read_startup(s: &mut TcpStream, stop: &AtomicBool) -> Option<()> {
    loop {
        let len = u32::from_be_bytes(read_n(s, 4, stop)?.try_into().unwrap()) as usize;
        if !(8..=10_000).contains(&len) {
            return None;
        }
        let body = read_n(s, len - 4, stop)?;
        if body == [0x04, 0xd2, 0x16, 0x2f] {
            s.write_all(b"N").ok()?;
            continue;
        }
        return Some(());
    }
}

fn serve(mut s: TcpStream, act: Act, stop: &AtomicBool, received: &Mutex<Vec<Vec<u8>>>) {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s.set_write_timeout(Some(Duration::from_millis(200))).unwrap();
    if act == Act::Silent {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        return;
    }
    if read_startup(&mut s, stop).is_none() {
        return;
    }
    let mut got = Vec::new();
    let mut sink = [0u8; 4096];
    let mut read_some = |s: &mut TcpStream, got: &mut Vec<u8>| match s.read(&mut sink) {
        Ok(0) => false,
        Ok(k) => {
            got.extend_from_slice(&sink[..k]);
            true
        }
        Err(e) => matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    };
    let first = match act {
        Act::Huge => {
            let mut m = vec![b'N'];
            m.extend_from_slice(&0x8000_0000u32.to_be_bytes());
            m
        }
        Act::Cleartext => message(b'R', &3u32.to_be_bytes()),
        _ => startup_done(),
    };
    let _ = s.write_all(&first);
    let flood: Vec<u8> = match act {
        Act::Notices => (0..64).flat_map(|_| notice()).collect(),
        Act::Huge => vec![0u8; 64 * 1024],
        _ => Vec::new(),
    };
    while !stop.load(Ordering::Relaxed) {
        if !read_some(&mut s, &mut got) {
            break;
        }
        if !flood.is_empty() {
            match s.write(&flood) {
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
    }
    received.lock().unwrap().push(got);
}

impl FakePg {
    fn start(act: Act) -> FakePg {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (stop_t, received_t) = (Arc::clone(&stop), Arc::clone(&received));
        let thread = std::thread::spawn(move || {
            let mut conns = Vec::new();
            // Bounded: a test never runs longer than this, and Drop ends it at once.
            let until = Instant::now() + Duration::from_secs(300);
            while !stop_t.load(Ordering::Relaxed) && Instant::now() < until {
                match listener.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(false).unwrap();
                        let (stop_c, received_c) = (Arc::clone(&stop_t), Arc::clone(&received_t));
                        conns.push(std::thread::spawn(move || serve(s, act, &stop_c, &received_c)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
            stop_t.store(true, Ordering::Relaxed);
            for c in conns {
                let _ = c.join();
            }
        });
        FakePg { port, stop, received, thread: Some(thread) }
    }

    /// A `--db` value naming this listener, with short limits.
    fn db(&self, limits: &str) -> String {
        format!("host=127.0.0.1 port={} dbname=fleet user=lab {limits}", self.port)
    }

    /// Stop serving and return what each connection received after its startup message.
    fn finish(mut self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.received.lock().unwrap())
    }
}

impl Drop for FakePg {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A local SQLite store with one imported run (no server needed): what `push --from` reads.
fn local_store(dir: &Path) -> std::path::PathBuf {
    let bench = dir.join("bench.jsonl");
    std::fs::write(&bench, "{\"n_prompt\":8,\"n_gen\":0,\"avg_ns\":1000,\"avg_ts\":1.5}\n").unwrap();
    let db = dir.join("local.db");
    let out = crate::support::util::backscope()
        .args(["sweep", "import", "--db"])
        .arg(&db)
        .arg("--runs-dir")
        .arg(dir.join("runs"))
        .arg(&bench)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    db
}

/// The commands that open a `--db`: report, push, sweep (resume), bisect (resume), sweep export.
fn commands(db: &str, local: &Path) -> Vec<Vec<String>> {
    let local = local.display().to_string();
    vec![
        vec!["report".into(), db.into()],
        vec!["push".into(), "--from".into(), local, "--db".into(), db.into()],
        vec!["sweep".into(), "--resume".into(), "--db".into(), db.into()],
        vec!["bisect".into(), "--resume".into(), "--db".into(), db.into()],
        vec!["sweep".into(), "export".into(), "--jsonl".into(), "--db".into(), db.into()],
    ]
}

fn bounds(dir: &Path) -> Bounds {
    Bounds {
        deadline: Duration::from_secs(60),
        env: vec![("PGPASSWORD", "Secr3t-pw".into()), ("PGPASSFILE", "/nonexistent".into())],
        cwd: Some(dir.to_path_buf()),
        ..Bounds::default()
    }
}

/// Each command ends by itself with an error within `seconds`, saying `expected`, below 200 MiB of RSS.
fn each_command_fails_in_time(db: &str, seconds: u64, expected: &str) {
    let dir = tempfile::tempdir().unwrap();
    let local = local_store(dir.path());
    for args in commands(db, &local) {
        let done = bounded::run(&args, bounds(dir.path()));
        assert!(done.code.is_some_and(|c| c != 0), "{args:?}: {}", done.describe());
        done.assert_bounded(&[1, 2, 3, 4, 5], seconds, 200 * MIB);
        assert!(done.stderr.contains(expected), "{args:?}: expected `{expected}`: {}", done.describe());
    }
}

#[test]
fn a_server_that_never_answers_fails_every_command_at_the_connect_deadline() {
    let fake = FakePg::start(Act::Silent);
    each_command_fails_in_time(&fake.db("connect_timeout=2"), 10, "no connection within 2 s");
}

#[test]
fn endless_notices_fail_the_statement_at_its_deadline() {
    let fake = FakePg::start(Act::Notices);
    // statement_timeout 1 s plus the 5 s the client waits for the server's own cancellation.
    each_command_fails_in_time(
        &fake.db("statement_timeout=1 read_timeout=30"),
        15,
        "no answer from the server within 6 s",
    );
}

#[test]
fn a_server_gone_silent_after_startup_fails_at_the_read_deadline() {
    let fake = FakePg::start(Act::SilentAfterStartup);
    each_command_fails_in_time(&fake.db("read_timeout=1 statement_timeout=60"), 10, "nothing from the server for 1 s");
}

#[test]
fn a_declared_two_gib_message_is_refused_before_it_is_buffered() {
    let fake = FakePg::start(Act::Huge);
    // Under a 1 GiB address space: buffering the declared message whole could not even be tried.
    let dir = tempfile::tempdir().unwrap();
    let done = bounded::run(&["report", &fake.db("")], Bounds { address_space: 1 << 30, ..bounds(dir.path()) });
    done.assert_bounded(&[1, 2], 10, 100 * MIB);
    assert!(done.stderr.contains("of 2147483649 bytes, more than the 67108864 bytes"), "{}", done.describe());
}

#[test]
fn a_cleartext_password_request_over_tcp_is_refused_and_the_password_never_sent() {
    let fake = FakePg::start(Act::Cleartext);
    let dir = tempfile::tempdir().unwrap();
    let done = bounded::run(&["report", &fake.db("")], bounds(dir.path()));
    done.assert_bounded(&[1, 2], 10, 200 * MIB);
    assert!(done.stderr.contains("clear text") && done.stderr.contains("not sent"), "{}", done.describe());
    let received = fake.finish();
    assert_eq!(received.len(), 1, "one connection");
    assert!(!received[0].contains(&b'p'), "no PasswordMessage ('p'): {:?}", received[0]);
    assert!(!received[0].windows(9).any(|w| w == b"Secr3t-pw"), "the password never went out");
}

#[test]
fn every_spelling_of_a_database_target_with_a_password_is_refused_without_repeating_it() {
    for (db, secret) in [
        ("POSTGRES://u:p%2FQz7x@127.0.0.1/d", "Qz7x"),
        ("PostgreSQL://u:Qz7x@127.0.0.1/d", "Qz7x"),
        ("hostaddr=127.0.0.1 password=Qz7x", "Qz7x"),
        ("service=s password=Qz7x", "Qz7x"),
        ("postgres://u:pa/Qz7x?#@127.0.0.1/d", "Qz7x"),
        ("postgres://u:Qz7x/?#@127.0.0.1/d", "Qz7x"),
        ("host=127.0.0.1 password=ab Qz7x", "Qz7x"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let local = local_store(dir.path());
        let before: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        for args in commands(db, &local) {
            let done = bounded::run(&args, bounds(dir.path()));
            done.assert_bounded(&[1, 2], 10, 200 * MIB);
            assert!(!done.stderr.contains(secret) && !done.stdout.contains(secret), "{args:?}: {}", done.describe());
            let after: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(before, after, "{args:?}: no SQLite file or directory created");
        }
    }
}
