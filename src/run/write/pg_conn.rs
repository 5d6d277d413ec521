//! A PostgreSQL connection that can neither hang its host nor fill its memory, whatever the server (or whatever
//! answers on its address) does.
//!
//! The `postgres` crate's blocking client bounds only the socket connect. Here `tokio-postgres` runs on a
//! current-thread runtime of this connection's own, over a socket backscope opens itself ([`Guarded`]), and every
//! wait has a deadline:
//! - **connect**: the socket connect, the TLS handshake, startup and authentication together within
//!   `connect_timeout` (default 10 s);
//! - **statement**: each statement within `statement_timeout` (default 300 s), which is also sent to the server
//!   (`-c statement_timeout=…` in the startup options) so that the server cancels first and says so; the client
//!   gives it [`GRACE`] more before abandoning the connection;
//! - **read**: while an answer is awaited, at most `read_timeout` (default 60 s) without a byte from the server;
//! - **message size**: the backend's framing (a type byte and a 4-byte length) is read as the bytes arrive, and a
//!   message declaring more than `max_message_size` (default 64 MiB) is refused before the client buffers it;
//! - **cleartext password**: a request for the password in clear text (`AuthenticationCleartextPassword`) over a TCP
//!   connection without TLS is refused before the client answers it (libpq's `require_auth` idea); on a Unix socket
//!   or inside TLS it is answered.
//!
//! With TLS the framing is inside the encrypted stream, so the guard sits on both sides of it: the socket's guard
//! watches the client's `SSLRequest` and the server's one-byte answer, then passes the TLS bytes through (deadlines
//! only), and the stream rustls decrypts is guarded again, framing and all ([`GuardedTls`]). rustls itself buffers
//! at most one TLS record (16 KiB) beyond that. Channel binding (`SCRAM-SHA-256-PLUS`) keeps working: the guarded TLS
//! stream passes on the certificate's binding data.
//!
//! A connection that missed a deadline is abandoned (its state is unknown): every later call fails at once with
//! [`PgError::Abandoned`], which counts as the server going away ([`PgError::is_connection_loss`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use anyhow::{anyhow, Context as _, Result};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row, Statement, ToStatement};

use crate::run::format::target::{PgTarget, SslMode};

/// How much longer than `statement_timeout` the client waits: the server cancels the statement at that mark and
/// its error needs a moment to arrive.
pub const GRACE: Duration = Duration::from_secs(5);

/// The frontend's `SSLRequest`: length 8, code 80877103.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// What the guards and the connection task tell the caller: when the last byte came, and why the stream failed
/// (the client itself only sees "connection closed" once its task ends).
#[derive(Debug)]
struct Shared {
    base: std::time::Instant,
    /// Nanoseconds after `base` of the last byte read from the server.
    last_read: AtomicU64,
    failure: Mutex<Option<String>>,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared { base: std::time::Instant::now(), last_read: AtomicU64::new(0), failure: Mutex::new(None) })
    }

    fn mark(&self) {
        let ns = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_read.store(ns, Ordering::Relaxed);
    }

    fn last_read(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.base + Duration::from_nanos(self.last_read.load(Ordering::Relaxed)))
    }

    fn fail(&self, why: String) {
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(why);
    }

    fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The socket to the server.
pub enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for Sock {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Sock::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Sock::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Sock {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Sock::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Sock::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Sock::Tcp(s) => Pin::new(s).poll_flush(cx),
            Sock::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Sock::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Sock::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Backend messages: the framing is checked.
    Framing,
    /// The client sent `SSLRequest`: the next byte read is the server's one-byte answer.
    AwaitSslAnswer,
    /// TLS bytes: passed through (a second guard checks the decrypted messages).
    Opaque,
}

/// The backend message framing, read as the bytes arrive: a type byte, a big-endian length that counts itself,
/// the body.
#[derive(Debug)]
struct Framing {
    max_message: u64,
    refuse_cleartext: bool,
    header: [u8; 5],
    have: usize,
    body_left: u64,
    /// The first four body bytes of an authentication request (`R`) seen so far: its code.
    auth: Option<([u8; 4], usize)>,
}

impl Framing {
    fn new(max_message: u64, refuse_cleartext: bool) -> Framing {
        Framing { max_message, refuse_cleartext, header: [0; 5], have: 0, body_left: 0, auth: None }
    }

    fn feed(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let take = (self.body_left.min(bytes.len() as u64)) as usize;
                if let Some((code, got)) = &mut self.auth {
                    let n = (4 - *got).min(take);
                    code[*got..*got + n].copy_from_slice(&bytes[..n]);
                    *got += n;
                    if *got == 4 {
                        let refused = u32::from_be_bytes(*code) == 3 && self.refuse_cleartext;
                        self.auth = None;
                        if refused {
                            return Err(io::Error::new(
                                io::ErrorKind::PermissionDenied,
                                "the server asked for the password in clear text over a TCP connection without TLS; \
                                 refused, the password was not sent (use TLS, sslmode=require, or scram-sha-256 \
                                 authentication)",
                            ));
                        }
                    }
                }
                self.body_left -= take as u64;
                if self.body_left == 0 {
                    self.auth = None;
                }
                bytes = &bytes[take..];
                continue;
            }
            self.header[self.have] = bytes[0];
            self.have += 1;
            bytes = &bytes[1..];
            if self.have == 5 {
                self.have = 0;
                let len =
                    u64::from(u32::from_be_bytes([self.header[1], self.header[2], self.header[3], self.header[4]]));
                let kind = self.header[0];
                if len < 4 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the server sent a message (type byte {kind}) with an impossible length {len}"),
                    ));
                }
                if len + 1 > self.max_message {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "the server declared a message (type byte {kind}) of {} bytes, more than the {} bytes \
                             backscope reads (--db field max_message_size); refused before reading it",
                            len + 1,
                            self.max_message
                        ),
                    ));
                }
                self.body_left = len - 4;
                self.auth = (kind == b'R' && self.body_left > 0).then_some(([0; 4], 0));
            }
        }
        Ok(())
    }
}

/// A stream whose reads are checked against [`Framing`] (in the [`Phase::Framing`] phase) and time-stamped.
pub struct Guarded<S> {
    inner: S,
    phase: Phase,
    wrote: bool,
    framing: Framing,
    shared: Arc<Shared>,
}

impl<S> Guarded<S> {
    fn new(inner: S, framing: Framing, shared: Arc<Shared>) -> Guarded<S> {
        Guarded { inner, phase: Phase::Framing, wrote: false, framing, shared }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.phase == Phase::AwaitSslAnswer {
            // Exactly one byte: whatever follows it is TLS, not framing.
            let mut one = [0u8; 1];
            let mut rb = ReadBuf::new(&mut one);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            if !rb.filled().is_empty() && buf.remaining() > 0 {
                this.phase = if one[0] == b'S' { Phase::Opaque } else { Phase::Framing };
                this.shared.mark();
                buf.put_slice(&one);
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let new = &buf.filled()[before..];
        if !new.is_empty() {
            this.shared.mark();
            if this.phase == Phase::Framing {
                if let Err(e) = this.framing.feed(new) {
                    this.shared.fail(e.to_string());
                    return Poll::Ready(Err(e));
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        if !this.wrote && n > 0 {
            this.wrote = true;
            if this.phase == Phase::Framing && buf.starts_with(&SSL_REQUEST) {
                this.phase = Phase::AwaitSslAnswer;
            }
        }
        Poll::Ready(Ok(n))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Guarded<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// A TLS connector whose decrypted stream is guarded again (the socket's guard sees only ciphertext).
pub struct GuardedTls<C> {
    inner: C,
    max_message: u64,
    shared: Arc<Shared>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<C> TlsConnect<Guarded<Sock>> for GuardedTls<C>
where
    C: TlsConnect<Guarded<Sock>> + Send + 'static,
    C::Future: Send + 'static,
    C::Stream: Unpin + Send + 'static,
{
    type Stream = Guarded<C::Stream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Stream, BoxError>> + Send>>;

    fn connect(self, stream: Guarded<Sock>) -> Self::Future {
        let (max, shared) = (self.max_message, self.shared);
        let handshake = self.inner.connect(stream);
        Box::pin(async move {
            let tls = handshake.await.map_err(Into::into)?;
            Ok(Guarded::new(tls, Framing::new(max, false), shared))
        })
    }
}

/// Why a call on the connection failed.
#[derive(Debug)]
pub enum PgError {
    /// What the server or the protocol said.
    Db(tokio_postgres::Error),
    /// The stream failed (a guard refused what the server sent, or the socket broke); the reason.
    Lost(String),
    /// No answer in time: the connection is abandoned.
    Timeout(String),
    /// The connection was abandoned earlier, for this reason.
    Abandoned(String),
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgError::Db(e) => f.write_str(&error_text(e)),
            PgError::Lost(why) => write!(f, "the connection failed: {why}"),
            PgError::Timeout(why) => f.write_str(why),
            PgError::Abandoned(why) => write!(f, "the connection was abandoned earlier ({why})"),
        }
    }
}

impl std::error::Error for PgError {}

impl PgError {
    /// The server went away or cannot be trusted to answer (not: a query was wrong). Connection exceptions
    /// (SQLSTATE class 08), operator intervention (57P: admin or crash shutdown), a closed or broken socket, a
    /// missed deadline.
    pub fn is_connection_loss(&self) -> bool {
        let e = match self {
            PgError::Db(e) => e,
            _ => return true,
        };
        if e.is_closed() {
            return true;
        }
        if let Some(code) = e.code() {
            return code.code().starts_with("08") || code.code().starts_with("57P");
        }
        std::error::Error::source(e).is_some_and(|s| s.is::<io::Error>())
    }

    /// The SQLSTATE of a database error.
    pub fn code(&self) -> Option<&str> {
        match self {
            PgError::Db(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }
}

/// A PostgreSQL error in words: the server's message and SQLSTATE for a database error (the crate's own text is
/// only "db error"), else the error and its causes.
pub fn error_text(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {} (SQLSTATE {})", db.severity(), db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

#[derive(Clone, Copy, Debug)]
struct Limits {
    statement: Duration,
    statement_timeout: Duration,
    read: Duration,
}

/// Wait for `fut` under the statement and read deadlines.
fn wait<T>(
    rt: &tokio::runtime::Runtime,
    shared: &Shared,
    limits: Limits,
    fut: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, PgError> {
    let result = rt.block_on(async {
        let deadline = tokio::time::Instant::now() + limits.statement;
        shared.mark();
        let mut fut = std::pin::pin!(fut);
        loop {
            let wake = deadline.min(shared.last_read() + limits.read);
            if let Ok(r) = tokio::time::timeout_at(wake, fut.as_mut()).await {
                return r.map_err(PgError::Db);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(PgError::Timeout(format!(
                    "no answer from the server within {} s (--db field statement_timeout {} s, plus {} s)",
                    limits.statement.as_secs(),
                    limits.statement_timeout.as_secs(),
                    GRACE.as_secs()
                )));
            }
            if shared.last_read() + limits.read <= now {
                return Err(PgError::Timeout(format!(
                    "nothing from the server for {} s while waiting for an answer (--db field read_timeout)",
                    limits.read.as_secs()
                )));
            }
        }
    });
    match result {
        Err(PgError::Db(e)) if e.is_closed() => Err(match shared.failure() {
            Some(why) => PgError::Lost(why),
            None => PgError::Db(e),
        }),
        r => r,
    }
}

/// One connection to a PostgreSQL server, used from blocking code.
pub struct PgConn {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    shared: Arc<Shared>,
    limits: Limits,
    /// Why the connection was abandoned (a missed deadline, a refused message); every later call fails with it.
    abandoned: Option<String>,
}

impl std::fmt::Debug for PgConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConn").field("limits", &self.limits).field("abandoned", &self.abandoned).finish()
    }
}

/// Run one client call under the deadlines; a failure other than the server's own answer abandons the connection.
macro_rules! guarded_call {
    ($self:ident, |$c:ident| $call:expr) => {{
        if let Some(why) = &$self.abandoned {
            return Err(PgError::Abandoned(why.clone()));
        }
        let $c = &$self.client;
        let r = wait(&$self.rt, &$self.shared, $self.limits, $call);
        if let Err(e) = &r {
            if !matches!(e, PgError::Db(_)) {
                $self.abandoned = Some(e.to_string());
            }
        }
        r
    }};
}

impl PgConn {
    pub fn execute<T: ?Sized + ToStatement + Sync>(
        &mut self,
        sql: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, PgError> {
        guarded_call!(self, |c| c.execute(sql, params))
    }

    pub fn query<T: ?Sized + ToStatement + Sync>(
        &mut self,
        sql: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, PgError> {
        guarded_call!(self, |c| c.query(sql, params))
    }

    pub fn query_opt<T: ?Sized + ToStatement + Sync>(
        &mut self,
        sql: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, PgError> {
        guarded_call!(self, |c| c.query_opt(sql, params))
    }

    pub fn query_one<T: ?Sized + ToStatement + Sync>(
        &mut self,
        sql: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, PgError> {
        guarded_call!(self, |c| c.query_one(sql, params))
    }

    pub fn batch_execute(&mut self, sql: &str) -> Result<(), PgError> {
        guarded_call!(self, |c| c.batch_execute(sql))
    }

    pub fn prepare(&mut self, sql: &str) -> Result<Statement, PgError> {
        guarded_call!(self, |c| c.prepare(sql))
    }

    /// `BEGIN`; the transaction rolls back when dropped uncommitted.
    pub fn transaction(&mut self) -> Result<PgTx<'_>, PgError> {
        self.batch_execute("BEGIN")?;
        Ok(PgTx { conn: self, open: true })
    }

    /// Each row of a query with text parameters, streamed: `f` sees one row at a time. Each row is awaited under
    /// the statement and read deadlines (the server's own `statement_timeout` bounds the whole query).
    pub fn for_each_row(&mut self, sql: &str, params: &[&str], mut f: impl FnMut(&Row) -> Result<()>) -> Result<u64> {
        use futures_util::StreamExt;
        if let Some(why) = &self.abandoned {
            return Err(PgError::Abandoned(why.clone()).into());
        }
        let (rt, shared, limits) = (&self.rt, &self.shared, self.limits);
        let streamed = (|| -> Result<u64> {
            let rows = wait(rt, shared, limits, self.client.query_raw(sql, params.iter().copied()))?;
            let mut rows = std::pin::pin!(rows);
            let mut n = 0u64;
            while let Some(row) = wait(rt, shared, limits, async { Ok::<_, tokio_postgres::Error>(rows.next().await) })?
            {
                f(&row.map_err(PgError::Db)?)?;
                n += 1;
            }
            Ok(n)
        })();
        if let Err(e) = &streamed {
            if let Some(pe) = e.downcast_ref::<PgError>().filter(|e| !matches!(e, PgError::Db(_))) {
                self.abandoned = Some(pe.to_string());
            }
        }
        streamed
    }

    pub fn is_abandoned(&self) -> bool {
        self.abandoned.is_some() || self.client.is_closed()
    }
}

/// An open transaction; derefs to the connection for its statements.
pub struct PgTx<'a> {
    conn: &'a mut PgConn,
    open: bool,
}

impl PgTx<'_> {
    pub fn commit(mut self) -> Result<(), PgError> {
        self.open = false;
        self.conn.batch_execute("COMMIT")
    }
}

impl Drop for PgTx<'_> {
    fn drop(&mut self) {
        if self.open && !self.conn.is_abandoned() {
            let _ = self.conn.batch_execute("ROLLBACK");
        }
    }
}

impl std::ops::Deref for PgTx<'_> {
    type Target = PgConn;
    fn deref(&self) -> &PgConn {
        self.conn
    }
}

impl std::ops::DerefMut for PgTx<'_> {
    fn deref_mut(&mut self) -> &mut PgConn {
        self.conn
    }
}

fn tls_connector(t: &PgTarget) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(file) = &t.sslrootcert {
        let pem = crate::host::inputs::read_limited(file, 1 << 20)
            .with_context(|| format!("--db: sslrootcert: {}", file.display()))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| anyhow!("--db: sslrootcert: {}: {e:?}", file.display()))?;
            roots.add(cert).map_err(|e| anyhow!("--db: sslrootcert: {}: {e}", file.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The socket: `DIR/.s.PGSQL.PORT` for a socket directory, else each address of the host in turn.
async fn open_socket(t: &PgTarget) -> io::Result<Sock> {
    if t.is_socket() {
        return Ok(Sock::Unix(UnixStream::connect(format!("{}/.s.PGSQL.{}", t.host, t.port)).await?));
    }
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host name resolves to no address");
    for addr in tokio::net::lookup_host((t.host.as_str(), t.port)).await? {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                s.set_nodelay(true)?;
                if t.keepalives {
                    let mut ka = socket2::TcpKeepalive::new();
                    if let Some(idle) = t.keepalives_idle_s {
                        ka = ka.with_time(Duration::from_secs(idle));
                    }
                    socket2::SockRef::from(&s).set_tcp_keepalive(&ka)?;
                }
                return Ok(Sock::Tcp(s));
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Spawn the connection's task, which reads the server's messages (notices are dropped) and notes why it ended.
fn drive<S, T>(conn: tokio_postgres::Connection<S, T>, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            shared.fail(error_text(&e));
        }
    });
}

/// Connect, start up and authenticate within `connect_timeout`.
pub fn connect(t: &PgTarget, password: Option<String>) -> Result<PgConn> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("cannot start the PostgreSQL client's runtime")?;
    let shared = Shared::new();
    let mut cfg = tokio_postgres::Config::new();
    cfg.user(&t.user).dbname(&t.dbname);
    if let Some(a) = &t.application_name {
        cfg.application_name(a);
    }
    // Ours first: the user's `options` may set its own statement_timeout for the server.
    let mut options = format!("-c statement_timeout={}", t.statement_timeout_s.saturating_mul(1000));
    if let Some(o) = &t.options {
        options = format!("{options} {o}");
    }
    cfg.options(&options);
    if let Some(p) = password {
        cfg.password(p);
    }
    let tcp_tls = !t.is_socket() && t.sslmode != SslMode::Disable;
    let make_tls = if tcp_tls { Some(tls_connector(t)?) } else { None };
    let handshake = async {
        let sock = open_socket(t).await.map_err(|e| anyhow!("{e}"))?;
        let refuse_cleartext = matches!(sock, Sock::Tcp(_));
        let raw = Guarded::new(sock, Framing::new(t.max_message_size, refuse_cleartext), Arc::clone(&shared));
        let client = match make_tls {
            Some(mut make) => {
                cfg.ssl_mode(if t.sslmode == SslMode::Require {
                    tokio_postgres::config::SslMode::Require
                } else {
                    tokio_postgres::config::SslMode::Prefer
                });
                let inner =
                    <tokio_postgres_rustls::MakeRustlsConnect as MakeTlsConnect<Guarded<Sock>>>::make_tls_connect(
                        &mut make, &t.host,
                    )
                    .map_err(|e| anyhow!("{e}"))?;
                let tls = GuardedTls { inner, max_message: t.max_message_size, shared: Arc::clone(&shared) };
                let (client, conn) = cfg.connect_raw(raw, tls).await.map_err(|e| anyhow!(error_text(&e)))?;
                drive(conn, Arc::clone(&shared));
                client
            }
            None => {
                cfg.ssl_mode(tokio_postgres::config::SslMode::Disable);
                let (client, conn) = cfg.connect_raw(raw, NoTls).await.map_err(|e| anyhow!(error_text(&e)))?;
                drive(conn, Arc::clone(&shared));
                client
            }
        };
        Ok::<_, anyhow::Error>(client)
    };
    let limit = Duration::from_secs(t.connect_timeout_s);
    let client = match rt.block_on(async { tokio::time::timeout(limit, handshake).await }) {
        Ok(client) => client?,
        Err(_) => anyhow::bail!(
            "no connection within {} s (connect, TLS, startup and authentication; --db field connect_timeout)",
            t.connect_timeout_s
        ),
    };
    let limits = Limits {
        statement: Duration::from_secs(t.statement_timeout_s) + GRACE,
        statement_timeout: Duration::from_secs(t.statement_timeout_s),
        read: Duration::from_secs(t.read_timeout_s),
    };
    let mut conn = PgConn { rt, client, shared, limits, abandoned: None };
    if t.target_session_attrs.as_deref() == Some("read-write") {
        let ro: String = conn.query_one("SHOW transaction_read_only", &[])?.get(0);
        if ro == "on" {
            anyhow::bail!("the server is read-only (target_session_attrs=read-write)");
        }
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn framing_is_followed_across_any_split_of_the_bytes() {
        let mut stream = msg(b'R', &0u32.to_be_bytes());
        stream.extend(msg(b'S', b"client_encoding\0UTF8\0"));
        stream.extend(msg(b'Z', b"I"));
        for split in 1..stream.len() {
            let mut f = Framing::new(1 << 16, true);
            for chunk in stream.chunks(split) {
                f.feed(chunk).unwrap();
            }
            assert_eq!((f.have, f.body_left), (0, 0), "split {split}");
        }
    }

    #[test]
    fn a_message_over_the_cap_is_refused_at_its_header() {
        let mut f = Framing::new(1 << 16, false);
        let e = f.feed(&[b'D', 0x80, 0, 0, 0]).unwrap_err();
        assert!(e.to_string().contains("2147483649 bytes"), "{e}");
        let mut f = Framing::new(1 << 16, false);
        assert!(f.feed(&[b'D', 0, 0, 0xff, 0xff]).is_ok(), "65535 bytes plus the type byte: exactly the cap");
        let mut f = Framing::new(1 << 16, false);
        assert!(f.feed(&[b'D', 0, 1, 0, 0]).is_err(), "one byte over the cap");
        let mut f = Framing::new(1 << 16, false);
        assert!(f.feed(&[b'D', 0, 0, 0, 3]).unwrap_err().to_string().contains("impossible length 3"));
    }

    #[test]
    fn a_cleartext_password_request_is_refused_only_where_it_would_travel_in_clear() {
        let cleartext = msg(b'R', &3u32.to_be_bytes());
        for split in 1..cleartext.len() {
            let mut f = Framing::new(1 << 16, true);
            let r: io::Result<()> = cleartext.chunks(split).try_for_each(|c| f.feed(c));
            assert!(r.unwrap_err().to_string().contains("clear text"), "split {split}");
        }
        let mut inside_tls = Framing::new(1 << 16, false);
        inside_tls.feed(&cleartext).unwrap();
        let mut md5 = Framing::new(1 << 16, true);
        md5.feed(&msg(b'R', &[0, 0, 0, 5, 1, 2, 3, 4])).unwrap();
    }
}
