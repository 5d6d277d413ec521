//! The width terminal text is laid out for.

use std::io::IsTerminal;

/// Width when nothing says otherwise (output to a pipe or a file, no `$COLUMNS`).
pub const DEFAULT_WIDTH: usize = 100;
/// Narrower than this, tables and wrapped text stop making sense; a smaller `$COLUMNS` is raised to it.
pub const MIN_WIDTH: usize = 40;
/// A `$COLUMNS` above this is taken as "do not wrap" and capped (a table is never wider than its content anyway).
pub const MAX_WIDTH: usize = 10_000;

/// The columns of the terminal standard output is, else `$COLUMNS`, else [`DEFAULT_WIDTH`]. `to_stdout` is false
/// when the output goes to a file (`-o`): then the terminal's size is not the file's business.
pub fn width(to_stdout: bool) -> usize {
    let columns = std::env::var("COLUMNS").ok();
    pick(if to_stdout { stdout_columns() } else { None }, columns.as_deref())
}

fn pick(tty: Option<usize>, columns_var: Option<&str>) -> usize {
    let from_var = columns_var.and_then(|v| v.trim().parse::<usize>().ok()).filter(|w| *w > 0);
    tty.filter(|w| *w > 0).or(from_var).unwrap_or(DEFAULT_WIDTH).clamp(MIN_WIDTH, MAX_WIDTH)
}

/// `TIOCGWINSZ` on standard output, when it is a terminal.
fn stdout_columns() -> Option<usize> {
    let stdout = std::io::stdout();
    if !stdout.is_terminal() {
        return None;
    }
    // SAFETY: winsize is plain data; zeroed is a valid value and the ioctl only writes into it.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ on fd 1 with a pointer to a winsize we own.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    (rc == 0 && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_terminal_wins_then_columns_then_the_default() {
        assert_eq!(pick(Some(132), Some("80")), 132);
        assert_eq!(pick(None, Some("80")), 80);
        assert_eq!(pick(None, Some(" 120 ")), 120);
        assert_eq!(pick(None, Some("wide")), DEFAULT_WIDTH);
        assert_eq!(pick(None, Some("0")), DEFAULT_WIDTH);
        assert_eq!(pick(None, None), DEFAULT_WIDTH);
        assert_eq!(pick(None, Some("10")), MIN_WIDTH);
        assert_eq!(pick(Some(0), None), DEFAULT_WIDTH, "a pseudo-terminal that reports 0 columns");
    }
}
