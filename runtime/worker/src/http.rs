//! A minimal, blocking HTTP/1.1 client for the client subcommands (std `TcpStream`, and
//! rustls over it for `https://`).
//!
//! Why not reqwest or hyper: the client talks to one worker, one short request per
//! connection; a few hundred lines of std code need no async runtime and no HTTP stack.
//!
//! Invariants:
//! - every request is `Connection: close` and the response is read to EOF, then framed by
//!   `Transfer-Encoding: chunked` or `Content-Length` (whichever the server sent);
//! - `https://` checks the worker's certificate and host name against `--cacert` when given,
//!   else the system's trusted certificates; there is no way to skip the check;
//! - a bad URL, credential spec or CA file is a usage [`Failure`] (exit 2); failing to
//!   connect (a certificate the client does not trust among it) or a malformed response is a
//!   runtime [`Failure`] (exit 1); HTTP error statuses are returned to the caller, who turns
//!   them into the REST error message;
//! - path segments from the user (connector and topic names) are percent-encoded.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::Value;

use crate::failure::Failure;

/// How long to wait for a connection and for a response (Kafka Connect's REST request
/// timeout is 90 s; a worker answers well within that).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// Where requests go and with which credentials.
#[derive(Debug, Clone)]
pub struct Endpoint {
    host: String,
    port: u16,
    base_path: String,
    authorization: Option<String>,
    shown: String,
    /// For `https://`: the TLS configuration (trust) and the name the certificate must carry.
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
}

/// A response: status and body bytes.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as JSON (`Null` when empty).
    pub fn json(&self) -> Result<Value, Failure> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&self.body).map_err(|e| {
            Failure::runtime(format!(
                "the worker answered HTTP {} with a body that is not JSON: {e}",
                self.status
            ))
        })
    }

    /// The failure for an error status: Kafka Connect's `message`, else the body text.
    pub fn error(&self) -> Failure {
        let message = serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&self.body).trim().to_owned());
        if message.is_empty() {
            Failure::runtime(format!("HTTP {}", self.status))
        } else {
            Failure::runtime(format!("{message} (HTTP {})", self.status))
        }
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Percent-encodes one path segment (everything but RFC 3986 unreserved characters).
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Endpoint {
    /// Parses `http://[user:password@]host[:port][/prefix]`; `token` or `user`
    /// (`USER:PASSWORD`) add credentials (the token wins over Basic).
    pub fn parse(url: &str, token: Option<&str>, user: Option<&str>) -> Result<Self, Failure> {
        Self::parse_trusting(url, token, user, None)
    }

    /// [`Endpoint::parse`], trusting the CA certificates of the PEM file `cacert` (instead of
    /// the system's) for an `https://` URL.
    pub fn parse_trusting(
        url: &str,
        token: Option<&str>,
        user: Option<&str>,
        cacert: Option<&Path>,
    ) -> Result<Self, Failure> {
        let bad = |why: &str| Failure::usage(format!("invalid --url '{url}': {why}"));
        let (rest, https) = if let Some(rest) = url.strip_prefix("http://") {
            (rest, false)
        } else if let Some(rest) = url.strip_prefix("https://") {
            (rest, true)
        } else {
            return Err(bad("it must start with http:// or https://"));
        };
        let default_port = if https { 443 } else { 80 };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad("the port is not a number"))?,
                None if after.is_empty() => default_port,
                None => return Err(bad("unexpected text after ']'")),
            };
            (h.to_owned(), port)
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_owned(),
                    p.parse().map_err(|_| bad("the port is not a number"))?,
                ),
                None => (hostport.to_owned(), default_port),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let basic = |spec: &str| -> Result<String, Failure> {
            if !spec.contains(':') {
                return Err(Failure::usage(
                    "credentials must be USER:PASSWORD (--user or HEADWATER_USER)",
                ));
            }
            Ok(format!("Basic {}", BASE64.encode(spec)))
        };
        let authorization = match (token.filter(|t| !t.is_empty()), user, userinfo) {
            (Some(t), _, _) => Some(format!("Bearer {t}")),
            (None, Some(u), _) if !u.is_empty() => Some(basic(u)?),
            (None, _, Some(u)) => Some(basic(u)?),
            _ => None,
        };
        let shown = format!(
            "{}://{hostport}{path}",
            if https { "https" } else { "http" }
        );
        let tls = if https {
            let name = ServerName::try_from(host.clone())
                .map_err(|_| bad("the host is not a valid name for TLS"))?;
            Some((client_config(cacert)?, name))
        } else {
            None
        };
        Ok(Endpoint {
            host,
            port,
            base_path: path.to_owned(),
            authorization,
            shown,
            tls,
        })
    }

    /// Sends one request; `path` starts with `/` and is already encoded.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, Failure> {
        let unreachable = |e: std::io::Error| {
            Failure::runtime(format!(
                "cannot reach the worker at {}: {e} (is it running? set --url or HEADWATER_URL)",
                self.shown
            ))
        };
        let addrs: Vec<_> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(unreachable)?
            .collect();
        let mut last = None;
        let mut stream = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = match stream {
            Some(s) => s,
            None => {
                return Err(unreachable(last.unwrap_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
                })))
            }
        };
        stream.set_read_timeout(Some(READ_TIMEOUT)).ok();
        let host = if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        };
        let mut head = format!(
            "{method} {}{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: application/json\r\nUser-Agent: headwater/{}\r\n",
            self.base_path,
            env!("CARGO_PKG_VERSION")
        );
        if let Some(auth) = &self.authorization {
            head.push_str(&format!("Authorization: {auth}\r\n"));
        }
        let body = body.unwrap_or_default();
        if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        let io =
            |e: std::io::Error| Failure::runtime(format!("request to {} failed: {e}", self.shown));
        let mut raw = Vec::new();
        let mut unframed_end_is_error = false;
        match &self.tls {
            None => {
                let mut stream = stream;
                stream.write_all(head.as_bytes()).map_err(io)?;
                stream.write_all(body).map_err(io)?;
                stream.read_to_end(&mut raw).map_err(io)?;
            }
            Some((config, name)) => {
                let connection = ClientConnection::new(config.clone(), name.clone())
                    .map_err(|e| Failure::runtime(format!("TLS to {}: {e}", self.shown)))?;
                let mut stream = StreamOwned::new(connection, stream);
                let tls_io = |e: std::io::Error| {
                    let hint = if e.get_ref().is_some_and(|inner| {
                        inner
                            .downcast_ref::<rustls::Error>()
                            .is_some_and(|tls| matches!(tls, rustls::Error::InvalidCertificate(_)))
                    }) {
                        " (is the worker's CA trusted? pass it with --cacert or HEADWATER_CACERT)"
                    } else {
                        ""
                    };
                    Failure::runtime(format!("request to {} failed: {e}{hint}", self.shown))
                };
                stream.write_all(head.as_bytes()).map_err(tls_io)?;
                stream.write_all(body).map_err(tls_io)?;
                stream.flush().map_err(tls_io)?;
                if let Err(e) = stream.read_to_end(&mut raw) {
                    // A server that closes without TLS's close_notify: only a response whose
                    // own framing (Content-Length or chunks) shows it complete is taken.
                    if e.kind() != std::io::ErrorKind::UnexpectedEof {
                        return Err(tls_io(e));
                    }
                    unframed_end_is_error = true;
                }
            }
        }
        parse_response(&raw, unframed_end_is_error).map_err(|why| {
            Failure::runtime(format!(
                "malformed HTTP response from {}: {why}",
                self.shown
            ))
        })
    }
}

/// The TLS client configuration: trust the certificates of `cacert`, else the system's.
fn client_config(cacert: Option<&Path>) -> Result<Arc<ClientConfig>, Failure> {
    let mut roots = RootCertStore::empty();
    match cacert {
        Some(path) => {
            let bad = |e: &dyn std::fmt::Display| {
                Failure::usage(format!("--cacert {}: {e}", path.display()))
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(&e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(&e))?;
            if certs.is_empty() {
                return Err(bad(
                    &"no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
                ));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad(&e))?;
            }
        }
        None => {
            // Unreadable entries of the system store are skipped; with none at all, the
            // handshake's certificate error says to pass --cacert.
            let _ = roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let config = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Failure::runtime(format!("TLS set-up: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The status and body of a whole response read to its end. `needs_framing`: the end may be
/// a cut (the connection closed without TLS's close_notify), so a body that says neither its
/// length nor its chunks is an error.
fn parse_response(raw: &[u8], needs_framing: bool) -> Result<Response, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let rest = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("no status line")?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("bad status line")?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
            chunked = true;
        } else if k == "content-length" {
            length = Some(
                v.parse::<usize>()
                    .map_err(|_| format!("bad Content-Length {v:?}"))?,
            );
        }
    }
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(n) = length {
        rest.get(..n)
            .ok_or("body shorter than Content-Length")?
            .to_vec()
    } else if needs_framing && !matches!(status, 204 | 304) {
        return Err("the connection ended without TLS's close_notify and the response has no Content-Length: it may be cut short".into());
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk size")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "bad chunk size")?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(rest.get(..size).ok_or("truncated chunk")?);
        rest = rest.get(size + 2..).ok_or("truncated chunk")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let e = Endpoint::parse("http://127.0.0.1:8083", None, None).unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.base_path.as_str()),
            ("127.0.0.1", 8083, "")
        );
        assert!(e.authorization.is_none());
        let e = Endpoint::parse("http://u:p@example.com/connect/", None, None).unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.base_path.as_str()),
            ("example.com", 80, "/connect")
        );
        assert_eq!(e.authorization.as_deref(), Some("Basic dTpw"));
        let e = Endpoint::parse("http://[::1]:9/", Some("t"), Some("a:b")).unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 9));
        assert_eq!(e.authorization.as_deref(), Some("Bearer t"));
        let e = Endpoint::parse("http://h:1", None, Some("a:b")).unwrap();
        assert_eq!(e.authorization.as_deref(), Some("Basic YTpi"));
        let e = Endpoint::parse("https://worker.example/x", None, None).unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.base_path.as_str()),
            ("worker.example", 443, "/x")
        );
        assert!(e.tls.is_some());
        assert!(Endpoint::parse("http://h", None, None)
            .unwrap()
            .tls
            .is_none());
        let missing = Path::new("/nonexistent/ca.pem");
        let err = Endpoint::parse_trusting("https://h", None, None, Some(missing)).unwrap_err();
        assert_eq!(err.code(), 2);
        assert!(
            err.message().contains("--cacert /nonexistent/ca.pem"),
            "{err}"
        );
        for bad in [
            "ftp://h",
            "h:1",
            "http://h:x",
            "http://",
            "http://[::1",
            "https://",
        ] {
            let err = Endpoint::parse(bad, None, None).unwrap_err();
            assert_eq!(err.code(), 2, "{bad}");
        }
        assert_eq!(
            Endpoint::parse("http://h", None, Some("nocolon"))
                .unwrap_err()
                .code(),
            2
        );
    }

    #[test]
    fn responses_parse() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n[]", true).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"[]"[..]));
        let r = parse_response(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"me\r\n14\r\nssage\":\"gone\",\"x\":1}\r\n0\r\n\r\n",
            true,
        )
        .unwrap();
        assert_eq!(r.status, 404);
        assert_eq!(r.error().message(), "gone (HTTP 404)");
        let r = parse_response(b"HTTP/1.1 204 No Content\r\n\r\n", true).unwrap();
        assert_eq!(r.json().unwrap(), Value::Null);
        assert!(parse_response(b"garbage", false).is_err());
        // Cut short: an unframed body counts only when the end was a real one.
        let unframed = b"HTTP/1.1 200 OK\r\n\r\n[1,2";
        assert_eq!(parse_response(unframed, false).unwrap().body, b"[1,2");
        assert!(parse_response(unframed, true).is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n[1,2", true).is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n[]", false).is_err());
        assert!(parse_response(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n[1,2",
            true
        )
        .is_err());
    }

    #[test]
    fn segments_are_encoded() {
        assert_eq!(segment("a b/c%d.e_f~g-h"), "a%20b%2Fc%25d.e_f~g-h");
    }
}
