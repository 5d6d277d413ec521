//! The password for a PostgreSQL target: `PGPASSWORD`, else the first matching line of the password file
//! (`PGPASSFILE`, default `~/.pgpass`), read the way libpq reads it — `host:port:database:user:password`, `*`
//! matching anything, `\:` and `\\` escaping, `#` starting a comment, and the file ignored (with a note) when group
//! or others may read it. The postgres crate reads neither, so backscope does. The file is read bounded.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::run::format::target::{PgTarget, DEFAULT_SOCKET_DIR};

/// More than any password file holds; a bigger one is refused rather than read whole.
const PGPASS_LIMIT: u64 = 1 << 20;

/// The password for `t`, if one is configured. Problems with the password file are notes, not errors: a server
/// that needs no password (trust, peer) still connects.
pub fn password_for(t: &PgTarget) -> Option<String> {
    if let Some(p) = std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()) {
        return Some(p);
    }
    let file = pgpass_path()?;
    match read_pgpass(&file) {
        Ok(Some(text)) => lookup(&text, &pgpass_host(t), &t.port.to_string(), &t.dbname, &t.user),
        Ok(None) => None,
        Err(e) => {
            crate::output::messages::note(format_args!("{}: {e}; not used", file.display()));
            None
        }
    }
}

fn pgpass_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PGPASSFILE").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".pgpass"))
}

/// The file's text; `None` when it does not exist. Opened through the floor's door for untrusted paths
/// (`inputs::open_input`: a FIFO, a device or a directory is refused as what it is, without blocking), then the
/// permissions of what was opened are checked, then at most [`PGPASS_LIMIT`] bytes are read.
fn read_pgpass(file: &Path) -> Result<Option<String>, String> {
    use std::io::Read;
    let input = match crate::host::inputs::open_input(file) {
        Ok(i) => i,
        Err(crate::host::inputs::InputError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e.to_string()),
    };
    let meta = input.file.metadata().map_err(|e| e.to_string())?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err("group or others may read it (libpq ignores such a file too: chmod 0600)".into());
    }
    if input.len > PGPASS_LIMIT {
        return Err(format!("{} bytes, more than the {PGPASS_LIMIT} bytes a password file may hold", input.len));
    }
    let mut bytes = Vec::new();
    input.file.take(PGPASS_LIMIT + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > PGPASS_LIMIT {
        return Err(format!("grew past the {PGPASS_LIMIT} bytes a password file may hold while being read"));
    }
    String::from_utf8(bytes).map(Some).map_err(|e| format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

/// The host as libpq matches it: the default socket directory counts as `localhost`, another socket directory is
/// matched by its path.
fn pgpass_host(t: &PgTarget) -> String {
    if t.host == DEFAULT_SOCKET_DIR {
        "localhost".into()
    } else {
        t.host.clone()
    }
}

/// The password of the first line that matches; `None` when none does.
pub fn lookup(text: &str, host: &str, port: &str, dbname: &str, user: &str) -> Option<String> {
    let want = [host, port, dbname, user];
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let fields = split_fields(line);
        if fields.len() < 5 {
            continue;
        }
        if fields[..4].iter().zip(want).all(|(f, w)| f == "*" || f == w) {
            return Some(fields[4..].join(":"));
        }
    }
    None
}

/// A line split at unescaped `:`, with `\x` read as `x`.
fn split_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().unwrap().extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            _ => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_match_like_libpq() {
        let text = "# comment\n\
                    db.lab:5432:other:lab:nope\n\
                    db.lab:*:fleet:lab:s3cr\\:et\n\
                    *:*:*:*:fallback\n";
        assert_eq!(lookup(text, "db.lab", "5432", "fleet", "lab").as_deref(), Some("s3cr:et"));
        assert_eq!(lookup(text, "db.lab", "5432", "other", "lab").as_deref(), Some("nope"));
        assert_eq!(lookup(text, "else", "1", "x", "y").as_deref(), Some("fallback"));
        assert_eq!(lookup("h:1:d:u\nshort", "h", "1", "d", "u"), None, "a line of four fields is skipped");
        assert_eq!(lookup("/tmp/s:5432:d:u:pw\\\\x", "/tmp/s", "5432", "d", "u").as_deref(), Some("pw\\x"));
        // A password holding an unescaped colon keeps it (the fifth field runs to the end of the line).
        assert_eq!(lookup("h:1:d:u:a:b", "h", "1", "d", "u").as_deref(), Some("a:b"));
    }

    #[test]
    fn a_file_others_can_read_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pgpass");
        std::fs::write(&f, "*:*:*:*:pw\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_pgpass(&f).unwrap_err().contains("chmod 0600"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_pgpass(&f).unwrap().as_deref(), Some("*:*:*:*:pw\n"));
        assert_eq!(read_pgpass(&dir.path().join("none")).unwrap(), None);
    }

    #[test]
    fn a_device_a_fifo_or_a_huge_file_is_refused_as_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_pgpass(&zero).unwrap_err();
        assert!(e.contains("a character device") && !e.contains("chmod"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a path in our own temp dir.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_pgpass(&fifo).unwrap_err();
        assert!(e.contains("a FIFO"), "{e}");
        let big = dir.path().join("big");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(PGPASS_LIMIT + 1).unwrap();
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = read_pgpass(&big).unwrap_err();
        assert!(e.contains(&format!("{} bytes, more than", PGPASS_LIMIT + 1)), "{e}");
    }
}
