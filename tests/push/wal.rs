//! `push` from a WAL database copied without its `-shm` ([`wal_only_copy`]): the run only the WAL holds is
//! uploaded, and run ids holding terminal escapes are printed escaped. The binary runs under the bounded runner.

use std::time::Duration;

use crate::support::bounded::{self, Bounds, GIB, MIB};
use crate::support::postgres::Pg;
use crate::support::sweep::heavy;
use crate::support::wal::wal_only_copy;

fn bounds() -> Bounds {
    Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(60), ..Default::default() }
}

/// `push` from a WAL database copied without its `-shm` uploads the run only the WAL holds, and prints its id —
/// ESC and CSI bytes included — escaped, as every other output is.
#[test]
fn push_reads_the_wal_and_prints_run_ids_escaped() {
    let _turn = heavy();
    let pg = Pg::start();
    let tmp = tempfile::tempdir().unwrap();
    let evil = "bs-\u{1b}[2J\u{1b}]0;owned\u{7}-\u{9b}31m-run";
    let (copy, a, b) = wal_only_copy(&tmp.path().join("orig"), &tmp.path().join("copy"), Some(evil));
    assert_eq!(b, evil);
    let done = bounded::run(
        &["push".as_ref(), "--db".as_ref(), pg.db("postgres").as_ref(), "--from".as_ref(), copy.as_os_str()],
        bounds(),
    );
    done.assert_bounded(&[0], 60, 512 * MIB);
    let out = &done.stdout;
    assert!(!out.contains('\u{1b}') && !out.contains('\u{9b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(out.contains(&format!("run {a}: 3 record(s) uploaded")), "{out:?}");
    assert!(
        out.contains("run bs-\\x1b[2J\\x1b]0;owned\\x07-\\u{9b}31m-run: 5 record(s) uploaded, 0 already stored"),
        "{out:?}"
    );
    // PostgreSQL holds the run under its real id.
    assert_eq!(pg.psql("SELECT count(*) FROM backscope.records"), "8");
    let ids = pg.psql("SELECT run_id FROM backscope.runs ORDER BY run_id");
    assert!(ids.contains(evil), "{ids:?}");
}
