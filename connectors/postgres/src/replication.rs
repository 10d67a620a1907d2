//! A PostgreSQL logical replication client on `postgres-protocol` and tokio: the parts of the
//! frontend/backend protocol that tokio-postgres does not offer (a `replication=database`
//! session, replication commands and the CopyBoth stream).
//!
//! Invariants:
//! - every backend frame is length-checked before use; a frame larger than
//!   [`MAX_FRAME_LEN`] or malformed content is a [`PgError::Protocol`], never a panic;
//! - TLS is negotiated before the startup message as `database.sslmode` asks ([`crate::tls`]);
//! - authentication supports trust, cleartext password, md5 and SCRAM-SHA-256 (without channel
//!   binding); other methods are refused with [`PgError::NotSupported`] naming what is missing;
//! - once `START_REPLICATION` succeeded the connection is split: a [`ReplicationReader`] that
//!   yields XLogData / keepalive messages and a cloneable [`StatusWriter`] that sends standby
//!   status updates, so feedback can be sent while nobody reads (backpressure).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::lsn::Lsn;
use crate::pgoutput::PG_EPOCH_OFFSET_MICROS;
use crate::tls::{ReadPart, TlsSettings, Transport, WritePart, HANDSHAKE};

/// The largest backend frame accepted (PostgreSQL's own limit for a field is 1 GB).
pub const MAX_FRAME_LEN: usize = 1 << 30;

/// A failure talking to PostgreSQL.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("I/O error talking to PostgreSQL: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Server(ServerError),
    #[error("PostgreSQL protocol error: {0}")]
    Protocol(String),
    #[error("authentication failed: {0}")]
    Auth(String),
    #[error("not supported yet: {0}")]
    NotSupported(String),
    /// TLS could not be set up (the message says how: a file, the server's refusal, the
    /// handshake).
    #[error("{0}")]
    Tls(String),
    #[error("timed out: {0}")]
    Timeout(String),
}

/// An ErrorResponse from the server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerError {
    pub severity: String,
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} (SQLSTATE {})",
            self.severity, self.message, self.code
        )?;
        if let Some(d) = &self.detail {
            write!(f, "; detail: {d}")?;
        }
        if let Some(h) = &self.hint {
            write!(f, "; hint: {h}")?;
        }
        Ok(())
    }
}

impl PgError {
    /// The SQLSTATE of a server error.
    pub fn code(&self) -> Option<&str> {
        match self {
            PgError::Server(e) => Some(&e.code),
            _ => None,
        }
    }
    /// True for failures that a reconnect may cure (I/O, timeouts, admin shutdown, too many
    /// connections, server starting up).
    pub fn is_transient(&self) -> bool {
        match self {
            PgError::Io(_) | PgError::Timeout(_) => true,
            PgError::Server(e) => {
                matches!(
                    e.code.as_str(),
                    "57P01" | "57P02" | "57P03" | "53300" | "08006" | "08003"
                ) || e.code.starts_with("08")
            }
            _ => false,
        }
    }
}

/// `database.sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn parse(s: &str) -> Option<SslMode> {
        Some(match s.to_ascii_lowercase().as_str() {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" | "verify_ca" => SslMode::VerifyCa,
            "verify-full" | "verify_full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
    /// The mode as `database.sslmode` spells it.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where and how to connect.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub dbname: String,
    pub application_name: String,
    pub tls: TlsSettings,
    pub connect_timeout: Duration,
}

/// Result of `IDENTIFY_SYSTEM`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemInfo {
    pub system_id: String,
    pub timeline: u32,
    pub xlogpos: Lsn,
    pub dbname: Option<String>,
}

/// What `CREATE_REPLICATION_SLOT` should do with the snapshot it builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotAction {
    /// Export it, for `SET TRANSACTION SNAPSHOT` on another connection.
    Export,
    NoExport,
}

/// Result of `CREATE_REPLICATION_SLOT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedSlot {
    pub slot_name: String,
    pub consistent_point: Lsn,
    pub snapshot_name: Option<String>,
    pub output_plugin: String,
}

/// Rows of a simple query, every value as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl QueryResult {
    fn get(&self, row: usize, column: &str) -> Option<&str> {
        let idx = self.columns.iter().position(|c| c == column)?;
        self.rows.get(row)?.get(idx)?.as_deref()
    }
}

/// One backend frame.
struct Frame {
    tag: u8,
    body: Bytes,
}

/// Buffered frame reading over any async reader.
struct FrameReader<R> {
    io: R,
    buf: BytesMut,
}

impl<R: tokio::io::AsyncRead + Unpin> FrameReader<R> {
    fn new(io: R) -> Self {
        FrameReader {
            io,
            buf: BytesMut::with_capacity(64 * 1024),
        }
    }

    /// Whether a complete frame is already buffered, so [`FrameReader::next`] returns without
    /// reading the socket.
    fn has_complete_frame(&self) -> bool {
        let buf = &self.buf[..];
        buf.len() >= 5 && buf.len() > u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize
    }

    /// Reads the next frame; `Ok(None)` at a clean end of stream between frames.
    async fn next(&mut self) -> Result<Option<Frame>, PgError> {
        loop {
            if let Some(frame) = parse_frame(&mut self.buf)? {
                return Ok(Some(frame));
            }
            if self.buf.capacity() - self.buf.len() < 8192 {
                self.buf.reserve(64 * 1024);
            }
            let n = self.io.read_buf(&mut self.buf).await?;
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(PgError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed in the middle of a message",
                )));
            }
        }
    }
}

/// Splits one complete frame off `buf`, if there is one.
fn parse_frame(buf: &mut BytesMut) -> Result<Option<Frame>, PgError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if !(4..=MAX_FRAME_LEN).contains(&len) {
        return Err(PgError::Protocol(format!(
            "invalid length {len} for a message of type {:?}",
            char::from(tag)
        )));
    }
    if buf.len() < 1 + len {
        buf.reserve(1 + len - buf.len());
        return Ok(None);
    }
    let mut frame = buf.split_to(1 + len);
    frame.advance(5);
    Ok(Some(Frame {
        tag,
        body: frame.freeze(),
    }))
}

/// Parses the fields of an ErrorResponse / NoticeResponse body.
fn parse_error_fields(body: &[u8]) -> ServerError {
    let mut e = ServerError::default();
    let mut rest = body;
    while let Some((&code, tail)) = rest.split_first() {
        if code == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        let value = String::from_utf8_lossy(&tail[..end]).into_owned();
        match code {
            b'V' => e.severity = value,
            b'S' if e.severity.is_empty() => e.severity = value,
            b'C' => e.code = value,
            b'M' => e.message = value,
            b'D' => e.detail = Some(value),
            b'H' => e.hint = Some(value),
            _ => {}
        }
        rest = tail.get(end + 1..).unwrap_or(&[]);
    }
    e
}

fn cstr(body: &[u8], pos: &mut usize) -> Result<String, PgError> {
    let rest = body.get(*pos..).unwrap_or(&[]);
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| PgError::Protocol("unterminated string".into()))?;
    let s = String::from_utf8_lossy(&rest[..end]).into_owned();
    *pos += end + 1;
    Ok(s)
}

fn be_u32(body: &[u8], pos: usize) -> Result<u32, PgError> {
    body.get(pos..pos + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| PgError::Protocol("message too short".into()))
}

fn io_err(e: std::io::Error) -> PgError {
    PgError::Io(e)
}

/// A connection in replication mode, before streaming starts.
pub struct ReplicationClient {
    reader: FrameReader<ReadPart>,
    writer: WritePart,
    tls: bool,
    out: BytesMut,
    parameters: HashMap<String, String>,
    backend_pid: Option<i32>,
}

impl ReplicationClient {
    /// Connects with `replication=database` and authenticates.
    pub async fn connect(opts: &ConnectOptions) -> Result<ReplicationClient, PgError> {
        match Self::connect_with(opts, &opts.tls).await {
            // `allow`: libpq retries with TLS when the server refuses a plain connection
            // (SQLSTATE 28000: pg_hba.conf has only hostssl lines for this user).
            Err(PgError::Server(e)) if opts.tls.mode == SslMode::Allow && e.code == "28000" => {
                let with_tls = TlsSettings {
                    mode: SslMode::Require,
                    ..opts.tls.clone()
                };
                match Self::connect_with(opts, &with_tls).await {
                    // No TLS to be had either: the plain refusal says more (a missing role,
                    // say).
                    Err(PgError::Tls(_) | PgError::Io(_)) => Err(PgError::Auth(e.to_string())),
                    other => other,
                }
            }
            // `prefer`: libpq connects without TLS when the TLS handshake fails.
            Err(PgError::Tls(m))
                if opts.tls.mode == SslMode::Prefer && m.starts_with(HANDSHAKE) =>
            {
                tracing::warn!(error = %m, "the TLS handshake failed; connecting without TLS (database.sslmode=prefer)");
                let plain = TlsSettings {
                    mode: SslMode::Disable,
                    ..opts.tls.clone()
                };
                Self::connect_with(opts, &plain).await
            }
            other => other,
        }
    }

    async fn connect_with(
        opts: &ConnectOptions,
        tls: &TlsSettings,
    ) -> Result<ReplicationClient, PgError> {
        let addr = format!("{}:{}", opts.host, opts.port);
        let stream = tokio::time::timeout(opts.connect_timeout, TcpStream::connect(&addr))
            .await
            .map_err(|_| PgError::Timeout(format!("connecting to {addr}")))??;
        stream.set_nodelay(true)?;
        let transport = tokio::time::timeout(
            opts.connect_timeout,
            Transport::negotiate(stream, &opts.host, tls),
        )
        .await
        .map_err(|_| PgError::Timeout(format!("negotiating TLS with {addr}")))??;
        let tls = transport.is_tls();
        let (r, w) = transport.split();
        let mut client = ReplicationClient {
            reader: FrameReader::new(r),
            writer: w,
            tls,
            out: BytesMut::with_capacity(1024),
            parameters: HashMap::new(),
            backend_pid: None,
        };
        let params: Vec<(&str, &str)> = vec![
            ("user", opts.user.as_str()),
            ("database", opts.dbname.as_str()),
            ("replication", "database"),
            ("application_name", opts.application_name.as_str()),
            ("client_encoding", "UTF8"),
        ];
        frontend::startup_message(params.iter().copied(), &mut client.out).map_err(io_err)?;
        client.flush().await?;
        tokio::time::timeout(opts.connect_timeout, client.authenticate(opts))
            .await
            .map_err(|_| PgError::Timeout(format!("authenticating to {addr}")))??;
        Ok(client)
    }

    /// Server parameters reported at startup (`server_version`, ...).
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters.get(name).map(String::as_str)
    }

    /// Whether the connection uses TLS.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The walsender's process id.
    pub fn backend_pid(&self) -> Option<i32> {
        self.backend_pid
    }

    /// The server's major version number (15 for 15.4), from `server_version`.
    pub fn server_major_version(&self) -> Option<u32> {
        let v = self.parameter("server_version")?;
        v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    }

    async fn flush(&mut self) -> Result<(), PgError> {
        self.writer.write_all(&self.out).await?;
        // TLS may hold the last record back until flushed; plain TCP has sent it already.
        self.writer.flush().await?;
        self.out.clear();
        Ok(())
    }

    async fn next_frame(&mut self) -> Result<Frame, PgError> {
        self.reader.next().await?.ok_or_else(|| {
            PgError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ))
        })
    }

    async fn authenticate(&mut self, opts: &ConnectOptions) -> Result<(), PgError> {
        let need_password = || {
            PgError::Auth(format!(
                "the server requires a password for user {:?}; set database.password",
                opts.user
            ))
        };
        let mut scram: Option<ScramSha256> = None;
        loop {
            let frame = self.next_frame().await?;
            match frame.tag {
                b'R' => {
                    let code = be_u32(&frame.body, 0)?;
                    match code {
                        0 => {}
                        3 => {
                            let pw = opts.password.as_deref().ok_or_else(need_password)?;
                            frontend::password_message(pw.as_bytes(), &mut self.out)
                                .map_err(io_err)?;
                            self.flush().await?;
                        }
                        5 => {
                            let pw = opts.password.as_deref().ok_or_else(need_password)?;
                            let salt: [u8; 4] = frame
                                .body
                                .get(4..8)
                                .and_then(|s| s.try_into().ok())
                                .ok_or_else(|| PgError::Protocol("md5 request without salt".into()))?;
                            let hash = postgres_protocol::authentication::md5_hash(
                                opts.user.as_bytes(),
                                pw.as_bytes(),
                                salt,
                            );
                            frontend::password_message(hash.as_bytes(), &mut self.out)
                                .map_err(io_err)?;
                            self.flush().await?;
                        }
                        10 => {
                            let pw = opts.password.as_deref().ok_or_else(need_password)?;
                            let mut pos = 4;
                            let mut mechanisms = Vec::new();
                            loop {
                                let m = cstr(&frame.body, &mut pos)?;
                                if m.is_empty() {
                                    break;
                                }
                                mechanisms.push(m);
                            }
                            if !mechanisms.iter().any(|m| m == "SCRAM-SHA-256") {
                                return Err(PgError::NotSupported(format!(
                                    "SASL mechanisms {mechanisms:?} (only SCRAM-SHA-256 without channel binding is supported)"
                                )));
                            }
                            let s = ScramSha256::new(pw.as_bytes(), ChannelBinding::unsupported());
                            frontend::sasl_initial_response("SCRAM-SHA-256", s.message(), &mut self.out)
                                .map_err(io_err)?;
                            self.flush().await?;
                            scram = Some(s);
                        }
                        11 => {
                            let s = scram
                                .as_mut()
                                .ok_or_else(|| PgError::Protocol("SASLContinue without SASL".into()))?;
                            s.update(&frame.body[4..])
                                .map_err(|e| PgError::Auth(format!("SCRAM: {e}")))?;
                            frontend::sasl_response(s.message(), &mut self.out).map_err(io_err)?;
                            self.flush().await?;
                        }
                        12 => {
                            let s = scram
                                .as_mut()
                                .ok_or_else(|| PgError::Protocol("SASLFinal without SASL".into()))?;
                            s.finish(&frame.body[4..])
                                .map_err(|e| PgError::Auth(format!("SCRAM server signature: {e}")))?;
                        }
                        other => {
                            return Err(PgError::NotSupported(format!(
                                "authentication method {other} (Kerberos/GSSAPI/SSPI); use trust, password, md5 or scram-sha-256"
                            )))
                        }
                    }
                }
                b'S' => self.parameter_status(&frame.body),
                b'K' => self.backend_pid = be_u32(&frame.body, 0).ok().map(|v| v as i32),
                b'N' => {}
                b'E' => {
                    let e = parse_error_fields(&frame.body);
                    if e.code == "28000" && !self.tls && opts.tls.mode == SslMode::Allow {
                        // Kept as the server's error: `connect` retries it with TLS.
                        return Err(PgError::Server(e));
                    }
                    if e.code == "28P01" || e.code == "28000" {
                        return Err(PgError::Auth(e.to_string()));
                    }
                    return Err(PgError::Server(e));
                }
                b'Z' => return Ok(()),
                other => {
                    return Err(PgError::Protocol(format!(
                        "unexpected message {:?} during startup",
                        char::from(other)
                    )))
                }
            }
        }
    }

    fn parameter_status(&mut self, body: &[u8]) {
        let mut pos = 0;
        if let (Ok(k), Ok(v)) = (cstr(body, &mut pos), cstr(body, &mut pos)) {
            self.parameters.insert(k, v);
        }
    }

    /// Runs one command with the simple query protocol and returns its rows as text.
    pub async fn simple_query(&mut self, sql: &str) -> Result<QueryResult, PgError> {
        frontend::query(sql, &mut self.out).map_err(io_err)?;
        self.flush().await?;
        let mut result = QueryResult::default();
        let mut error = None;
        loop {
            let frame = self.next_frame().await?;
            match frame.tag {
                b'T' => result.columns = parse_row_description(&frame.body)?,
                b'D' => result.rows.push(parse_data_row(&frame.body)?),
                b'C' | b'I' | b'N' => {}
                b'S' => self.parameter_status(&frame.body),
                b'E' => error = Some(parse_error_fields(&frame.body)),
                b'Z' => break,
                other => {
                    return Err(PgError::Protocol(format!(
                        "unexpected message {:?} in reply to {sql:?}",
                        char::from(other)
                    )))
                }
            }
        }
        match error {
            Some(e) => Err(PgError::Server(e)),
            None => Ok(result),
        }
    }

    /// `IDENTIFY_SYSTEM`.
    pub async fn identify_system(&mut self) -> Result<SystemInfo, PgError> {
        let r = self.simple_query("IDENTIFY_SYSTEM").await?;
        let field = |c: &str| {
            r.get(0, c)
                .ok_or_else(|| PgError::Protocol(format!("IDENTIFY_SYSTEM without {c}")))
        };
        Ok(SystemInfo {
            system_id: field("systemid")?.to_owned(),
            timeline: field("timeline")?
                .parse()
                .map_err(|_| PgError::Protocol("bad timeline".into()))?,
            xlogpos: field("xlogpos")?
                .parse()
                .map_err(|e| PgError::Protocol(format!("{e}")))?,
            dbname: r.get(0, "dbname").map(str::to_owned),
        })
    }

    /// `CREATE_REPLICATION_SLOT <name> [TEMPORARY] LOGICAL pgoutput ...`. `name` must already be
    /// a valid slot name (lower-case letters, digits, `_`).
    pub async fn create_slot(
        &mut self,
        name: &str,
        temporary: bool,
        snapshot: SnapshotAction,
    ) -> Result<CreatedSlot, PgError> {
        let temp = if temporary { " TEMPORARY" } else { "" };
        let new_syntax = self.server_major_version().unwrap_or(15) >= 15;
        let sql = match (new_syntax, snapshot) {
            (true, SnapshotAction::Export) => {
                format!("CREATE_REPLICATION_SLOT {name}{temp} LOGICAL pgoutput (SNAPSHOT 'export')")
            }
            (true, SnapshotAction::NoExport) => {
                format!(
                    "CREATE_REPLICATION_SLOT {name}{temp} LOGICAL pgoutput (SNAPSHOT 'nothing')"
                )
            }
            (false, SnapshotAction::Export) => {
                format!("CREATE_REPLICATION_SLOT {name}{temp} LOGICAL pgoutput EXPORT_SNAPSHOT")
            }
            (false, SnapshotAction::NoExport) => {
                format!("CREATE_REPLICATION_SLOT {name}{temp} LOGICAL pgoutput NOEXPORT_SNAPSHOT")
            }
        };
        let r = self.simple_query(&sql).await?;
        Ok(CreatedSlot {
            slot_name: r.get(0, "slot_name").unwrap_or(name).to_owned(),
            consistent_point: r
                .get(0, "consistent_point")
                .ok_or_else(|| PgError::Protocol("slot created without consistent_point".into()))?
                .parse()
                .map_err(|e| PgError::Protocol(format!("{e}")))?,
            snapshot_name: r.get(0, "snapshot_name").map(str::to_owned),
            output_plugin: r.get(0, "output_plugin").unwrap_or("pgoutput").to_owned(),
        })
    }

    /// `START_REPLICATION SLOT <slot> LOGICAL <lsn> (<options>)`; on success the connection is
    /// in CopyBoth mode and is split into a reader and a status writer.
    pub async fn start_replication(
        mut self,
        slot: &str,
        start: Lsn,
        options: &[(&str, String)],
    ) -> Result<(ReplicationReader, StatusWriter), PgError> {
        let opts: Vec<String> = options
            .iter()
            .map(|(k, v)| format!("\"{k}\" '{}'", v.replace('\'', "''")))
            .collect();
        let sql = format!(
            "START_REPLICATION SLOT {slot} LOGICAL {start} ({})",
            opts.join(", ")
        );
        frontend::query(&sql, &mut self.out).map_err(io_err)?;
        self.flush().await?;
        loop {
            let frame = self.next_frame().await?;
            match frame.tag {
                b'W' => break,
                b'N' | b'S' => {}
                b'E' => {
                    let e = parse_error_fields(&frame.body);
                    // Drain to ReadyForQuery is pointless: the caller drops the connection.
                    return Err(PgError::Server(e));
                }
                other => {
                    return Err(PgError::Protocol(format!(
                        "unexpected message {:?} in reply to START_REPLICATION",
                        char::from(other)
                    )))
                }
            }
        }
        let writer = StatusWriter {
            inner: Arc::new(Mutex::new(self.writer)),
        };
        Ok((
            ReplicationReader {
                reader: self.reader,
            },
            writer,
        ))
    }

    /// Closes the connection politely.
    pub async fn close(mut self) {
        frontend::terminate(&mut self.out);
        let _ = self.flush().await;
    }
}

fn parse_row_description(body: &[u8]) -> Result<Vec<String>, PgError> {
    let n = body
        .get(0..2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
        .ok_or_else(|| PgError::Protocol("short RowDescription".into()))?;
    let mut pos = 2;
    let mut names = Vec::with_capacity(n.min(body.len()));
    for _ in 0..n {
        names.push(cstr(body, &mut pos)?);
        pos += 18;
    }
    Ok(names)
}

fn parse_data_row(body: &[u8]) -> Result<Vec<Option<String>>, PgError> {
    let short = || PgError::Protocol("short DataRow".into());
    let n = body
        .get(0..2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
        .ok_or_else(short)?;
    let mut pos = 2;
    let mut values = Vec::with_capacity(n.min(body.len()));
    for _ in 0..n {
        let len = be_u32(body, pos)? as i32;
        pos += 4;
        if len < 0 {
            values.push(None);
        } else {
            let len = len as usize;
            let v = body.get(pos..pos + len).ok_or_else(short)?;
            values.push(Some(String::from_utf8_lossy(v).into_owned()));
            pos += len;
        }
    }
    Ok(values)
}

/// A message of the replication stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicationMessage {
    /// 'w': WAL data (one pgoutput message).
    XLogData {
        wal_start: Lsn,
        wal_end: Lsn,
        send_time: i64,
        data: Bytes,
    },
    /// 'k': the server's keepalive.
    Keepalive {
        wal_end: Lsn,
        send_time: i64,
        reply_requested: bool,
    },
}

/// Parses the payload of one CopyData message of the replication stream.
pub fn parse_replication_message(mut body: Bytes) -> Result<ReplicationMessage, PgError> {
    let short = |what: &str| PgError::Protocol(format!("short {what} message"));
    match body.first() {
        Some(b'w') => {
            if body.len() < 25 {
                return Err(short("XLogData"));
            }
            body.advance(1);
            let wal_start = Lsn(body.get_u64());
            let wal_end = Lsn(body.get_u64());
            let send_time = body.get_i64();
            Ok(ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                send_time,
                data: body,
            })
        }
        Some(b'k') => {
            if body.len() < 18 {
                return Err(short("keepalive"));
            }
            body.advance(1);
            let wal_end = Lsn(body.get_u64());
            let send_time = body.get_i64();
            let reply_requested = body.get_u8() != 0;
            Ok(ReplicationMessage::Keepalive {
                wal_end,
                send_time,
                reply_requested,
            })
        }
        Some(&other) => Err(PgError::Protocol(format!(
            "unknown replication message {:?}",
            char::from(other)
        ))),
        None => Err(short("empty")),
    }
}

/// The reading side of a started replication stream.
pub struct ReplicationReader {
    reader: FrameReader<ReadPart>,
}

impl ReplicationReader {
    /// Whether the next message (or the server's next frame) is already buffered, so
    /// [`ReplicationReader::next`] can return it without reading the socket.
    pub fn has_buffered(&self) -> bool {
        self.reader.has_complete_frame()
    }

    /// The next message; `Ok(None)` when the server ended the stream (CopyDone or close).
    pub async fn next(&mut self) -> Result<Option<ReplicationMessage>, PgError> {
        loop {
            let Some(frame) = self.reader.next().await? else {
                return Ok(None);
            };
            match frame.tag {
                b'd' => return parse_replication_message(frame.body).map(Some),
                b'c' => return Ok(None),
                b'N' | b'S' => continue,
                b'E' => return Err(PgError::Server(parse_error_fields(&frame.body))),
                b'C' | b'Z' => continue,
                other => {
                    return Err(PgError::Protocol(format!(
                        "unexpected message {:?} in the replication stream",
                        char::from(other)
                    )))
                }
            }
        }
    }
}

/// Microseconds since 2000-01-01, the replication protocol's clock.
pub fn pg_now_micros() -> i64 {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    unix - PG_EPOCH_OFFSET_MICROS
}

/// Encodes a standby status update ('r') inside a CopyData frame.
pub fn encode_status_update(write: Lsn, flush: Lsn, apply: Lsn, reply: bool, out: &mut BytesMut) {
    out.put_u8(b'd');
    out.put_u32(4 + 1 + 8 * 4 + 1);
    out.put_u8(b'r');
    out.put_u64(write.0);
    out.put_u64(flush.0);
    out.put_u64(apply.0);
    out.put_i64(pg_now_micros());
    out.put_u8(u8::from(reply));
}

/// Sends standby status updates; cloneable, usable while another task reads.
#[derive(Clone)]
pub struct StatusWriter {
    inner: Arc<Mutex<WritePart>>,
}

impl StatusWriter {
    /// Reports `write`/`flush`/`apply` positions (the slot's confirmed_flush_lsn follows `flush`).
    pub async fn send_status(&self, write: Lsn, flush: Lsn, apply: Lsn) -> Result<(), PgError> {
        let mut buf = BytesMut::with_capacity(40);
        encode_status_update(write, flush, apply, false, &mut buf);
        let mut w = self.inner.lock().await;
        w.write_all(&buf).await?;
        w.flush().await?;
        Ok(())
    }

    /// Ends the copy stream (CopyDone) and closes the writing side.
    pub async fn close(&self) {
        let mut buf = BytesMut::new();
        frontend::copy_done(&mut buf);
        frontend::terminate(&mut buf);
        let mut w = self.inner.lock().await;
        let _ = w.write_all(&buf).await;
        let _ = w.flush().await;
        let _ = w.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_stream_messages_parse_or_fail_cleanly() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(b"Z\0\0\0\x05I");
        buf.extend_from_slice(b"d\0\0");
        let f = parse_frame(&mut buf).unwrap().unwrap();
        assert_eq!((f.tag, &f.body[..]), (b'Z', &b"I"[..]));
        assert!(parse_frame(&mut buf).unwrap().is_none());
        let mut bad = BytesMut::from(&b"d\0\0\0\x02"[..]);
        assert!(parse_frame(&mut bad).is_err());

        let mut k = vec![b'k'];
        k.extend_from_slice(&42u64.to_be_bytes());
        k.extend_from_slice(&7i64.to_be_bytes());
        k.push(1);
        assert_eq!(
            parse_replication_message(Bytes::from(k.clone())).unwrap(),
            ReplicationMessage::Keepalive {
                wal_end: Lsn(42),
                send_time: 7,
                reply_requested: true
            }
        );
        for cut in 0..k.len() {
            assert!(parse_replication_message(Bytes::from(k[..cut].to_vec())).is_err());
        }
        let mut w = vec![b'w'];
        w.extend_from_slice(&1u64.to_be_bytes());
        w.extend_from_slice(&2u64.to_be_bytes());
        w.extend_from_slice(&3i64.to_be_bytes());
        w.extend_from_slice(b"B");
        match parse_replication_message(Bytes::from(w)).unwrap() {
            ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                data,
                ..
            } => {
                assert_eq!((wal_start, wal_end, &data[..]), (Lsn(1), Lsn(2), &b"B"[..]));
            }
            other => panic!("{other:?}"),
        }
        let mut out = BytesMut::new();
        encode_status_update(Lsn(1), Lsn(2), Lsn(3), true, &mut out);
        assert_eq!(out.len(), 1 + 4 + 34);
        assert_eq!(&out[..6], b"d\0\0\0\x26r");
        assert_eq!(out[out.len() - 1], 1);
    }

    #[test]
    fn error_fields() {
        let body =
            b"SERROR\0VERROR\0C42704\0Mreplication slot \"x\" does not exist\0Hcreate it\0\0";
        let e = parse_error_fields(body);
        assert_eq!(e.code, "42704");
        assert_eq!(e.severity, "ERROR");
        assert_eq!(e.hint.as_deref(), Some("create it"));
        assert!(e.to_string().contains("does not exist"));
        assert_eq!(
            parse_error_fields(b"Mtrunc"),
            ServerError {
                message: "trunc".into(),
                ..Default::default()
            }
        );
    }
}
