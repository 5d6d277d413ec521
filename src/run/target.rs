//! What a `--db` value names: an SQLite file (a path: the default, `backscope.db`) or a PostgreSQL database (a
//! `postgres://…`/`postgresql://…` URL or a libpq `key=value` string such as `host=/tmp/pg dbname=fleet user=lab`).
//!
//! The value is checked here, field by field, before anything connects or any cell runs: an unknown field, a port
//! that is no number, an sslmode this build cannot honour each get an error naming the field. A password inside the
//! value is refused — the value lands in shell history, in the run's `run.json` (its `argv`) and in report bundles;
//! the password comes from `PGPASSWORD` or `~/.pgpass` instead (`pgpass`). What is shown or stored of a PostgreSQL
//! target is [`PgTarget::display`], which holds no secret.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// Fields of a libpq connection string that backscope passes on. Others (`sslcert`, `service`, …) are refused by
/// name rather than silently ignored.
const KNOWN_FIELDS: &[&str] = &[
    "host",
    "port",
    "dbname",
    "user",
    "sslmode",
    "sslrootcert",
    "connect_timeout",
    "application_name",
    "options",
    "keepalives",
    "keepalives_idle",
    "target_session_attrs",
];

/// Fields that carry a secret and never belong in a `--db` value.
const SECRET_FIELDS: &[&str] = &["password", "passfile", "sslpassword", "sslkey"];

/// Debian's (and most distributions') socket directory: where libpq looks when no host is given.
pub const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DbTarget {
    Sqlite(PathBuf),
    Postgres(PgTarget),
}

/// A checked PostgreSQL connection target, without a password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgTarget {
    /// Host name or, starting with `/`, a Unix socket directory.
    pub host: String,
    pub port: u16,
    pub dbname: String,
    pub user: String,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    pub connect_timeout_s: u64,
    pub application_name: Option<String>,
    pub options: Option<String>,
    pub keepalives: bool,
    pub keepalives_idle_s: Option<u64>,
    pub target_session_attrs: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    /// TLS when the server offers it (libpq's default).
    Prefer,
    Require,
}

impl DbTarget {
    /// Read a `--db` value. A value that is not a PostgreSQL URL and has no `key=value` field is a path.
    pub fn parse(value: &Path) -> Result<DbTarget> {
        let Some(s) = value.to_str() else { return Ok(DbTarget::Sqlite(value.to_path_buf())) };
        if !looks_like_postgres(s) {
            return Ok(DbTarget::Sqlite(value.to_path_buf()));
        }
        let pairs = if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            url_pairs(s)?
        } else {
            keyword_pairs(s)?
        };
        Ok(DbTarget::Postgres(PgTarget::from_pairs(&pairs)?))
    }

    /// The value as shown in messages and stored in run metadata: the path, or the PostgreSQL target without secrets.
    pub fn display(&self) -> String {
        match self {
            DbTarget::Sqlite(p) => p.display().to_string(),
            DbTarget::Postgres(t) => t.display(),
        }
    }
}

/// Whether a `--db` value names a PostgreSQL database (checked or not).
pub fn is_postgres(value: &Path) -> bool {
    value.to_str().is_some_and(looks_like_postgres)
}

/// A PostgreSQL URL, or a string of `key=value` fields whose first key is a libpq field name (a file called
/// `a=b.db` stays a path unless `a` is such a name).
pub fn looks_like_postgres(s: &str) -> bool {
    if s.starts_with("postgres://") || s.starts_with("postgresql://") {
        return true;
    }
    let first = s.trim_start().split([' ', '=']).next().unwrap_or("");
    s.contains('=') && (KNOWN_FIELDS.contains(&first) || SECRET_FIELDS.contains(&first))
}

fn percent_decode(field: &str, s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(v) = hex else { bail!("--db: {field}: bad percent-escape at byte {i} of `{s}`") };
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| anyhow::anyhow!("--db: {field}: not UTF-8 after percent-decoding"))
}

/// `postgres://[user[:password]@][host][:port][/dbname][?field=value&…]` as field pairs.
fn url_pairs(s: &str) -> Result<Vec<(String, String)>> {
    let rest = s.split_once("://").map(|(_, r)| r).unwrap_or("");
    let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = main.split_once('/').unwrap_or((main, ""));
    let mut pairs = Vec::new();
    let hostport = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => {
            if userinfo.contains(':') {
                bail!("--db: the URL holds a password (user:password@): it would land in shell history and in the run's stored argv; put it in PGPASSWORD or ~/.pgpass");
            }
            pairs.push(("user".to_string(), percent_decode("user", userinfo)?));
            hostport
        }
        None => authority,
    };
    let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
        // [IPv6]:port
        let (h, p) = h.split_once(']').ok_or_else(|| anyhow::anyhow!("--db: host: unclosed `[` in `{hostport}`"))?;
        (h.to_string(), p.strip_prefix(':').unwrap_or("").to_string())
    } else {
        let (h, p) = hostport.split_once(':').unwrap_or((hostport, ""));
        (percent_decode("host", h)?, p.to_string())
    };
    if !host.is_empty() {
        pairs.push(("host".into(), host));
    }
    if !port.is_empty() {
        pairs.push(("port".into(), port));
    }
    if !path.is_empty() {
        pairs.push(("dbname".into(), percent_decode("dbname", path)?));
    }
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').ok_or_else(|| anyhow::anyhow!("--db: `{kv}`: expected field=value"))?;
        let k = percent_decode(k, k)?;
        let v = percent_decode(&k, v)?;
        pairs.push((k, v));
    }
    Ok(pairs)
}

/// libpq's `key=value key='quoted \' value'` form as field pairs.
fn keyword_pairs(s: &str) -> Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=' && !c.is_whitespace())).collect();
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            bail!("--db: `{key}`: expected `{key}=value`");
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => bail!("--db: {key}: unterminated quoted value"),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

fn number<T: std::str::FromStr>(field: &str, v: &str) -> Result<T> {
    v.parse().map_err(|_| anyhow::anyhow!("--db: {field}: expected a number, got `{v}`"))
}

impl PgTarget {
    fn from_pairs(pairs: &[(String, String)]) -> Result<PgTarget> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let mut t = PgTarget {
            host: env("PGHOST").unwrap_or_else(|| DEFAULT_SOCKET_DIR.into()),
            port: env("PGPORT").map(|p| number("port (PGPORT)", &p)).transpose()?.unwrap_or(5432),
            dbname: String::new(),
            user: env("PGUSER").or_else(os_user).unwrap_or_default(),
            sslmode: SslMode::Prefer,
            sslrootcert: env("PGSSLROOTCERT").map(PathBuf::from),
            connect_timeout_s: 10,
            application_name: Some("backscope".into()),
            options: None,
            keepalives: true,
            keepalives_idle_s: None,
            target_session_attrs: None,
        };
        let mut dbname = env("PGDATABASE");
        for (k, v) in pairs {
            if SECRET_FIELDS.contains(&k.as_str()) {
                bail!("--db: field `{k}` holds a secret: it would land in shell history and in the run's stored argv; put the password in PGPASSWORD or ~/.pgpass");
            }
            match k.as_str() {
                "host" => t.host = v.clone(),
                "port" => t.port = number("port", v)?,
                "dbname" => dbname = Some(v.clone()),
                "user" => t.user = v.clone(),
                "sslmode" => t.sslmode = match v.as_str() {
                    "disable" => SslMode::Disable,
                    "allow" | "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    _ => bail!("--db: sslmode: `{v}` is not one of disable, prefer, require (verify-ca/verify-full: certificates are always verified when TLS is used; name the CA with sslrootcert)"),
                },
                "sslrootcert" => t.sslrootcert = Some(PathBuf::from(v)),
                "connect_timeout" => t.connect_timeout_s = number("connect_timeout", v)?,
                "application_name" => t.application_name = Some(v.clone()),
                "options" => t.options = Some(v.clone()),
                "keepalives" => t.keepalives = number::<u8>("keepalives", v)? != 0,
                "keepalives_idle" => t.keepalives_idle_s = Some(number("keepalives_idle", v)?),
                "target_session_attrs" => t.target_session_attrs = Some(v.clone()),
                _ => bail!("--db: unknown field `{k}` (known: {})", KNOWN_FIELDS.join(", ")),
            }
        }
        if t.host.is_empty() {
            bail!("--db: host: empty");
        }
        if t.user.is_empty() {
            bail!("--db: user: not given and no PGUSER or login name to default to");
        }
        t.dbname = dbname.unwrap_or_else(|| t.user.clone());
        Ok(t)
    }

    pub fn is_socket(&self) -> bool {
        self.host.starts_with('/')
    }

    /// `postgresql://user@host:port/dbname` (a socket directory as `?host=`), no secret.
    pub fn display(&self) -> String {
        if self.is_socket() {
            format!("postgresql://{}@/{}?host={}&port={}", self.user, self.dbname, self.host, self.port)
        } else {
            format!("postgresql://{}@{}:{}/{}", self.user, self.host, self.port, self.dbname)
        }
    }
}

/// The login name, libpq's default user.
fn os_user() -> Option<String> {
    std::env::var("USER").ok().filter(|u| !u.is_empty()).or_else(|| {
        // SAFETY: getpwuid returns a pointer into static storage or null; the name is copied out at once.
        unsafe {
            let pw = libc::getpwuid(libc::geteuid());
            if pw.is_null() || (*pw).pw_name.is_null() {
                return None;
            }
            Some(std::ffi::CStr::from_ptr((*pw).pw_name).to_string_lossy().into_owned())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(s: &str) -> Result<PgTarget> {
        match DbTarget::parse(Path::new(s))? {
            DbTarget::Postgres(t) => Ok(t),
            DbTarget::Sqlite(p) => panic!("{} read as a path", p.display()),
        }
    }

    #[test]
    fn paths_stay_sqlite_files() {
        for p in ["backscope.db", "/tmp/x.db", "runs/a=b.db", "./postgres.db"] {
            assert_eq!(DbTarget::parse(Path::new(p)).unwrap(), DbTarget::Sqlite(p.into()), "{p}");
        }
    }

    #[test]
    fn urls_and_keyword_strings_name_the_same_target() {
        let a = pg("postgres://lab@db.example:5433/fleet?sslmode=require&application_name=x").unwrap();
        let b = pg("host=db.example port=5433 dbname=fleet user=lab sslmode=require application_name='x'").unwrap();
        assert_eq!(a, b);
        assert_eq!((a.host.as_str(), a.port, a.dbname.as_str(), a.user.as_str()), ("db.example", 5433, "fleet", "lab"));
        assert_eq!(a.sslmode, SslMode::Require);
        assert_eq!(a.display(), "postgresql://lab@db.example:5433/fleet");
        let s = pg("host=/tmp/x dbname=y user=z").unwrap();
        assert!(s.is_socket());
        assert_eq!(s.display(), "postgresql://z@/y?host=/tmp/x&port=5432");
        let q = pg(r"host='/tmp/a b' user=o\'k dbname=d").unwrap();
        assert_eq!((q.host.as_str(), q.user.as_str()), ("/tmp/a b", "o'k"));
        let u = pg("postgresql://%2Ftmp%2Fs/db?user=me").unwrap();
        assert_eq!((u.host.as_str(), u.dbname.as_str(), u.user.as_str()), ("/tmp/s", "db", "me"));
    }

    #[test]
    fn secrets_and_bad_fields_are_refused_by_name() {
        let err = |s: &str| format!("{:#}", pg(s).unwrap_err());
        assert!(err("postgres://lab:hunter2@h/db").contains("holds a password"));
        assert!(!err("postgres://lab:hunter2@h/db").contains("hunter2"), "the error does not repeat the secret");
        assert!(err("host=h user=u password=hunter2").contains("field `password` holds a secret"));
        assert!(err("postgres://u@h/db?password=x").contains("`password`"));
        assert!(err("host=h port=54x2 user=u").contains("port: expected a number, got `54x2`"));
        assert!(err("host=h user=u sslmode=verify-full").contains("sslmode"));
        assert!(err("host=h user=u colour=blue").contains("unknown field `colour`"));
        assert!(err("host=h user='u").contains("user: unterminated"));
        assert!(err("host=h user").contains("expected `user=value`"));
        assert!(err("postgres://u@h/%zz").contains("dbname: bad percent-escape"));
    }
}
