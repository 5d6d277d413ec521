//! The exit statuses of `backscope`, in one place.

/// Success: the command did what it was asked (a sweep: every cell recorded, all ok).
pub const OK: u8 = 0;
/// `scan`: the command ran, but some input could not be decoded (see the problems).
pub const PROBLEMS: u8 = 1;
/// `sweep`: every cell was recorded, some failed (crashes, timeouts, …: see the table).
pub const FAILED_CELLS: u8 = 1;
/// `logs`: the log was read and shows at least one crash (0: it was read and shows none).
pub const CRASH_FOUND: u8 = 1;
/// A usage error, or an I/O error of backscope itself (a command line that does not parse exits with it too).
pub const ERROR: u8 = 2;
/// `sweep` was interrupted (Ctrl-C, SIGTERM, SIGHUP): completed cells are recorded and `--resume` continues.
/// 128 + SIGINT, as a shell reports a command it interrupted.
pub const INTERRUPTED: u8 = 130;
