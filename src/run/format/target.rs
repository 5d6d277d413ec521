//! What a `--db` value names: an SQLite file (a path: the default, `backscope.db`) or a PostgreSQL database (a
//! `postgres://…`/`postgresql://…` URL or a libpq `key=value` string such as `host=/tmp/pg dbname=fleet user=lab`).
//!
//! The value is checked here, field by field, before anything connects or any cell runs: an unknown field, a port
//! that is no number, an sslmode this build cannot honour each get an error naming the field. A password inside the
//! value is refused — the value lands in shell history, in the run's `run.json` (its `argv`) and in report bundles;
//! the password comes from `PGPASSWORD` or `~/.pgpass` instead (`crate::run::write::pgpass`). What is shown or
//! stored of a PostgreSQL target is [`PgTarget::display`], which holds no secret.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// Fields of a `--db` value that backscope passes on: libpq's, plus backscope's own limits
/// (`statement_timeout`, `read_timeout`, `max_message_size`; libpq has no such fields). Others are refused by name.
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
    "statement_timeout",
    "read_timeout",
    "max_message_size",
];

/// Fields that carry a secret and never belong in a `--db` value.
const SECRET_FIELDS: &[&str] =
    &["password", "passfile", "sslpassword", "sslkey", "scram_client_key", "scram_server_key"];

/// Every other connection keyword libpq (17) knows. A `key=value` string starting with one of them is a database
/// target, never a file name: `hostaddr=… password=…` taken as an SQLite path would put the password into a
/// directory name, `run.json` and messages. backscope refuses these fields by name.
const OTHER_LIBPQ_FIELDS: &[&str] = &[
    "hostaddr",
    "service",
    "require_auth",
    "channel_binding",
    "client_encoding",
    "fallback_application_name",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslcertmode",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "sslkeylogfile",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "load_balance_hosts",
    "min_protocol_version",
    "max_protocol_version",
    "oauth_issuer",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_scope",
];

fn is_field_name(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [KNOWN_FIELDS, SECRET_FIELDS, OTHER_LIBPQ_FIELDS].iter().any(|l| l.contains(&k.as_str()))
}

/// The `--db` value when none is given: an SQLite file in the current directory.
pub const DEFAULT_DB: &str = "backscope.db";

/// Defaults of backscope's own limits (docs/fleet.md).
pub const DEFAULT_CONNECT_TIMEOUT_S: u64 = 10;
pub const DEFAULT_STATEMENT_TIMEOUT_S: u64 = 300;
pub const DEFAULT_READ_TIMEOUT_S: u64 = 60;
/// One server message (a row, an error) larger than this is refused before it is buffered: a record row is a few
/// KiB to a few MiB of JSON.
pub const DEFAULT_MAX_MESSAGE_SIZE: u64 = 64 << 20;

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
    /// Seconds a statement may take: sent to the server (`statement_timeout`) and enforced here too.
    pub statement_timeout_s: u64,
    /// Seconds without a byte from the server while an answer is awaited.
    pub read_timeout_s: u64,
    /// The largest server message read, in bytes.
    pub max_message_size: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    /// TLS when the server offers it (libpq's default).
    Prefer,
    Require,
}

impl DbTarget {
    /// Read a `--db` value. A value that is not a PostgreSQL URL and does not start with a libpq `key=` is a path.
    /// The one reader of such values: [`DbValue::read`] calls it once per value.
    fn parse(value: &Path) -> Result<DbTarget> {
        let Some(s) = value.to_str() else { return Ok(DbTarget::Sqlite(value.to_path_buf())) };
        if !looks_like_postgres(s) {
            return Ok(DbTarget::Sqlite(value.to_path_buf()));
        }
        let pairs = if url_rest(s).is_some() { url_pairs(s)? } else { keyword_pairs(s)? };
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

/// A database as the command line names it (`--db`, `report DB`, `gate --runs`), read once where the command line
/// becomes options: the text as given, which messages show and a retry line repeats, and the store it names.
///
/// A value that names no store keeps the reason, and the command reports it where it first needs the store
/// ([`DbValue::target`]), as it reported a bad value before the value was read up front: a `--dry-run` that opens
/// nothing does not fail on it, and an earlier mistake on the command line is still the one reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbValue {
    given: PathBuf,
    /// The store, or why the value names none (the parser's whole message: it names no secret).
    target: Result<DbTarget, String>,
}

impl DbValue {
    /// Read a value as given on the command line.
    pub fn read(given: PathBuf) -> DbValue {
        let target = DbTarget::parse(&given).map_err(|e| format!("{e:#}"));
        DbValue { given, target }
    }

    /// An SQLite file by its path, named by the caller rather than read from text (a path made absolute, a test's
    /// file): what [`DbValue::read`] makes of any path that starts with `/` or `.`.
    pub fn sqlite(path: PathBuf) -> DbValue {
        DbValue { target: Ok(DbTarget::Sqlite(path.clone())), given: path }
    }

    /// The value as given: a path, or the PostgreSQL text as typed (a value that reads without error holds no
    /// password).
    pub fn given(&self) -> &Path {
        &self.given
    }

    /// The value as given, for messages.
    pub fn display(&self) -> std::path::Display<'_> {
        self.given.display()
    }

    /// The store the value names; the error of a value that names none.
    pub fn target(&self) -> Result<&DbTarget> {
        self.target.as_ref().map_err(|why| anyhow::anyhow!("{why}"))
    }

    /// The SQLite file, when the value names one (not a PostgreSQL target, checked or not).
    pub fn sqlite_file(&self) -> Option<&Path> {
        match &self.target {
            Ok(DbTarget::Sqlite(p)) => Some(p),
            Ok(DbTarget::Postgres(_)) | Err(_) => None,
        }
    }

    /// The same store with an SQLite file's path made absolute (for a child process in another directory); a
    /// PostgreSQL value as given.
    pub fn absolute(&self) -> DbValue {
        match self.sqlite_file() {
            Some(p) => DbValue::sqlite(crate::run::format::paths::absolute(p)),
            None => self.clone(),
        }
    }
}

impl Default for DbValue {
    /// The empty path: options built with `..Default::default()` name a database only when told.
    fn default() -> Self {
        DbValue::sqlite(PathBuf::new())
    }
}

/// What follows `postgres://` or `postgresql://` (the scheme in any case, as URL schemes are).
fn url_rest(s: &str) -> Option<&str> {
    let (scheme, rest) = s.trim_start().split_once("://")?;
    (scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")).then_some(rest)
}

/// A PostgreSQL URL, or a string of `key=value` fields whose first key is a libpq field name, in any case (a file
/// called `a=b.db` stays a path unless `a` is such a name).
fn looks_like_postgres(s: &str) -> bool {
    if url_rest(s).is_some() {
        return true;
    }
    let first = s.trim_start().split(|c: char| c == '=' || c.is_whitespace()).next().unwrap_or("");
    s.contains('=') && is_field_name(first)
}

/// `s` percent-decoded. The error names the field and the byte offset, never the text: it may be part of a
/// password.
fn percent_decode(field: &str, s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(v) = hex else { bail!("--db: {field}: bad percent-escape at byte {i} (expected %XX)") };
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| anyhow::anyhow!("--db: {field}: not UTF-8 after percent-decoding"))
}

/// Whether the part of a URL before its first `@` is `user:password`: a password may hold unencoded `/ ? #`,
/// so the authority cannot be cut at the first `/` before this is asked. A `=` there means the `@` is inside a
/// query value instead.
fn url_has_password(rest: &str) -> bool {
    rest.split_once('@').is_some_and(|(before, _)| before.contains(':') && !before.contains('='))
}

/// `postgres://[user[:password]@][host][:port][/dbname][?field=value&…]` as field pairs.
fn url_pairs(s: &str) -> Result<Vec<(String, String)>> {
    const NO_PASSWORD: &str = "--db: the URL holds a password (user:password@): it would land in shell history and in the run's stored argv; put it in PGPASSWORD or ~/.pgpass";
    let rest = url_rest(s).unwrap_or("");
    if url_has_password(rest) {
        bail!(NO_PASSWORD);
    }
    let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = main.split_once('/').unwrap_or((main, ""));
    let mut pairs = Vec::new();
    let hostport = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => {
            if userinfo.contains(':') {
                bail!(NO_PASSWORD);
            }
            pairs.push(("user".to_string(), percent_decode("user", userinfo)?));
            hostport
        }
        None => authority,
    };
    let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
        // [IPv6]:port
        let (h, p) =
            h.split_once(']').ok_or_else(|| anyhow::anyhow!("--db: host: unclosed `[` (expected [IPv6]:port)"))?;
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
    for (n, kv) in query.split('&').filter(|kv| !kv.is_empty()).enumerate() {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--db: query parameter {}: expected field=value", n + 1))?;
        let k = percent_decode(&format!("query parameter {}", n + 1), k)?;
        let v = percent_decode(shown_key(&k), v)?;
        pairs.push((k, v));
    }
    Ok(pairs)
}

/// A key as errors show it: a field name as it is, anything else (which may be a piece of a password that a
/// space split off) as "an unknown field".
fn shown_key(k: &str) -> &str {
    if is_field_name(k) {
        k
    } else {
        "an unknown field"
    }
}

/// libpq's `key=value key='quoted \' value'` form as field pairs. Errors name a known key or the byte offset,
/// never a value or an unknown word (a password with a space in it leaves its second half as such a word).
fn keyword_pairs(s: &str) -> Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = s.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(at, _)) = chars.peek() else { return Ok(pairs) };
        let key: String =
            std::iter::from_fn(|| chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace())).map(|(_, c)| c).collect();
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next().map(|(_, c)| c) != Some('=') {
            bail!("--db: {} at byte {at}: expected key=value", shown_key(&key));
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next().map(|(_, c)| c) {
                    Some('\\') => value.extend(chars.next().map(|(_, c)| c)),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => bail!("--db: {} at byte {at}: unterminated quoted value", shown_key(&key)),
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next().map(|(_, c)| c));
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

/// A number field; the error does not repeat the value.
fn number<T: std::str::FromStr>(field: &str, v: &str) -> Result<T> {
    v.parse().map_err(|_| anyhow::anyhow!("--db: {field}: expected a number"))
}

/// A number of seconds, at least 1.
fn seconds(field: &str, v: &str) -> Result<u64> {
    match number::<u64>(field, v)? {
        0 => bail!("--db: {field}: expected at least 1 second"),
        s => Ok(s),
    }
}

impl PgTarget {
    fn from_pairs(pairs: &[(String, String)]) -> Result<PgTarget> {
        // Secrets first, whatever their place: the error for another field never comes before this one.
        if let Some((k, _)) = pairs.iter().find(|(k, _)| SECRET_FIELDS.contains(&k.to_ascii_lowercase().as_str())) {
            bail!("--db: field `{}` holds a secret: it would land in shell history and in the run's stored argv; put the password in PGPASSWORD or ~/.pgpass", k.to_ascii_lowercase());
        }
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let mut t = PgTarget {
            host: env("PGHOST").unwrap_or_else(|| DEFAULT_SOCKET_DIR.into()),
            port: env("PGPORT").map(|p| number("port (PGPORT)", &p)).transpose()?.unwrap_or(5432),
            dbname: String::new(),
            user: env("PGUSER").or_else(os_user).unwrap_or_default(),
            sslmode: SslMode::Prefer,
            sslrootcert: env("PGSSLROOTCERT").map(PathBuf::from),
            connect_timeout_s: DEFAULT_CONNECT_TIMEOUT_S,
            application_name: Some("backscope".into()),
            options: None,
            keepalives: true,
            keepalives_idle_s: None,
            target_session_attrs: None,
            statement_timeout_s: DEFAULT_STATEMENT_TIMEOUT_S,
            read_timeout_s: DEFAULT_READ_TIMEOUT_S,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        };
        let mut dbname = env("PGDATABASE");
        for (k, v) in pairs {
            match k.as_str() {
                "host" => t.host = v.clone(),
                "port" => t.port = number("port", v)?,
                "dbname" => dbname = Some(v.clone()),
                "user" => t.user = v.clone(),
                "sslmode" => t.sslmode = match v.as_str() {
                    "disable" => SslMode::Disable,
                    "allow" | "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    _ => bail!("--db: sslmode: expected one of disable, prefer, require (verify-ca/verify-full: certificates are always verified when TLS is used; name the CA with sslrootcert)"),
                },
                "sslrootcert" => t.sslrootcert = Some(PathBuf::from(v)),
                "connect_timeout" => t.connect_timeout_s = seconds("connect_timeout", v)?,
                "application_name" => t.application_name = Some(v.clone()),
                "options" => t.options = Some(v.clone()),
                "keepalives" => t.keepalives = number::<u8>("keepalives", v)? != 0,
                "keepalives_idle" => t.keepalives_idle_s = Some(number("keepalives_idle", v)?),
                "target_session_attrs" => t.target_session_attrs = Some(v.clone()),
                "statement_timeout" => t.statement_timeout_s = seconds("statement_timeout", v)?,
                "read_timeout" => t.read_timeout_s = seconds("read_timeout", v)?,
                "max_message_size" => {
                    t.max_message_size = number("max_message_size", v)?;
                    if t.max_message_size < 1 << 16 {
                        bail!("--db: max_message_size: expected at least 65536 bytes");
                    }
                }
                k if is_field_name(k) => bail!(
                    "--db: field `{k}` is not supported by backscope (supported: {})",
                    KNOWN_FIELDS.join(", ")
                ),
                _ => bail!("--db: an unknown field (supported: {})", KNOWN_FIELDS.join(", ")),
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
    fn a_value_keeps_its_text_and_reports_its_error_only_when_the_store_is_asked_for() {
        let bad = DbValue::read("host=h user=u colour=blue".into());
        assert_eq!(bad.display().to_string(), "host=h user=u colour=blue");
        assert!(bad.sqlite_file().is_none() && bad.absolute() == bad, "a PostgreSQL value, though unreadable");
        assert!(format!("{:#}", bad.target().unwrap_err()).contains("--db: an unknown field"));
        let pg = DbValue::read("host=/tmp/x dbname=y user=z".into());
        assert_eq!(pg.display().to_string(), "host=/tmp/x dbname=y user=z", "as given, not as the target shows");
        assert!(matches!(pg.target(), Ok(DbTarget::Postgres(_))));
        let file = DbValue::read("runs/a=b.db".into());
        assert_eq!(
            (file.sqlite_file(), file.target().unwrap()),
            (Some(Path::new("runs/a=b.db")), &DbTarget::Sqlite("runs/a=b.db".into()))
        );
        assert!(file.absolute().given().is_absolute() && file.absolute().given().ends_with("runs/a=b.db"));
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
        assert!(err("host=h port=54x2 user=u").contains("port: expected a number"));
        assert!(err("host=h user=u sslmode=verify-full").contains("sslmode"));
        assert!(err("host=h user=u colour=blue").contains("an unknown field"));
        assert!(err("host=h user=u hostaddr=1.2.3.4").contains("field `hostaddr` is not supported"));
        assert!(err("host=h user='u").contains("user at byte 7: unterminated"));
        assert!(err("host=h user").contains("user at byte 7: expected key=value"));
        assert!(err("postgres://u@h/%zz").contains("dbname: bad percent-escape at byte 0"));
        assert!(err("host=h user=u statement_timeout=0").contains("statement_timeout: expected at least 1 second"));
    }

    #[test]
    fn every_spelling_of_a_database_target_is_one_and_never_a_path() {
        for s in [
            "POSTGRES://u@h/d",
            "PostgreSQL://u@h/d",
            " postgres://u@h/d",
            "hostaddr=127.0.0.1 password=x",
            "service=s password=x",
            "password=x",
            "PASSWORD=x",
            "sslkey=/k host=h",
            "require_auth=md5 host=h",
        ] {
            assert!(looks_like_postgres(s), "{s}");
            assert!(
                DbTarget::parse(Path::new(s)).is_err()
                    || matches!(DbTarget::parse(Path::new(s)), Ok(DbTarget::Postgres(_))),
                "{s}"
            );
        }
        let u = pg("PostgreSQL://u@h:6543/d").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.dbname.as_str()), ("h", 6543, "d"));
    }

    #[test]
    fn a_value_that_fails_to_parse_never_repeats_the_password() {
        for (s, secret) in [
            ("POSTGRES://u:p%2FQz7@h/d", "Qz7"),
            ("postgres://u:pa/Qz7?#@h/d", "Qz7"),
            ("postgres://u:p=a/Qz7@h/d", "Qz7"),
            ("postgresql://u:Qz7%zz@h/d", "Qz7"),
            ("hostaddr=127.0.0.1 password=Qz7", "Qz7"),
            ("service=s password=Qz7", "Qz7"),
            ("host=h password=ab Qz7", "Qz7"),
            ("host=h password='ab Qz7", "Qz7"),
            ("host=h port=Qz7", "Qz7"),
            ("postgres://h:Qz7/d", "Qz7"),
            ("postgres://h/d?Qz7", "Qz7"),
            ("postgres://h/d?Qz7=1", "Qz7"),
        ] {
            let e = format!("{:#}", DbTarget::parse(Path::new(s)).unwrap_err());
            assert!(!e.contains(secret), "{s}: {e}");
        }
    }

    #[test]
    fn limits_are_fields_with_defaults() {
        let d = pg("host=h user=u").unwrap();
        assert_eq!((d.connect_timeout_s, d.statement_timeout_s, d.read_timeout_s), (10, 300, 60));
        assert_eq!(d.max_message_size, 64 << 20);
        let t =
            pg("postgres://u@h/d?connect_timeout=2&statement_timeout=3&read_timeout=4&max_message_size=70000").unwrap();
        assert_eq!(
            (t.connect_timeout_s, t.statement_timeout_s, t.read_timeout_s, t.max_message_size),
            (2, 3, 4, 70000)
        );
    }
}
