//! TLS for the connector's PostgreSQL connections (`database.sslmode` and its files), for both
//! the SQL connections (tokio-postgres) and the replication connection (our own client).
//!
//! The modes mean what they mean to libpq and pgjdbc:
//! - `disable`: plain TCP;
//! - `allow`: plain TCP, retried with TLS (certificate not checked) when the server refuses the
//!   plain connection (`pg_hba.conf` has only `hostssl` for the user), as libpq does;
//! - `prefer`: TLS when the server offers it, plain TCP when it answers the SSLRequest with
//!   "no" (`ssl = off`) or the handshake fails (as libpq); the certificate is not checked;
//! - `require`: TLS or nothing; the certificate is not checked, unless `database.sslrootcert`
//!   is given, which makes it `verify-ca` (as libpq does with a root certificate);
//! - `verify-ca`: the server's certificate must chain to a CA of `database.sslrootcert`
//!   (default `~/.postgresql/root.crt`, as libpq's; a missing file is an error);
//! - `verify-full`: as `verify-ca`, and the certificate must name `database.hostname`.
//!
//! A client certificate (`database.sslcert` with `database.sslkey`, PEM, or the key as
//! PKCS#8 DER as pgjdbc takes it) is sent when the server asks for one. Encrypted keys
//! (`database.sslpassword`) are refused by the configuration.
//!
//! Invariants: with `require`/`verify-*` no byte of the startup or authentication goes over
//! plain TCP; without certificate checks the TLS handshake's signatures are still verified
//! (the server holds the key of the certificate it presents); a bad or missing file is an
//! error naming its key and path, never a silent downgrade.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use postgres_protocol::message::frontend;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::replication::{PgError, SslMode};

/// `database.sslmode` and the files that go with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// `database.sslrootcert`: PEM file of the CAs to trust.
    pub root_cert: Option<PathBuf>,
    /// `database.sslcert`: PEM file of the client certificate (chain).
    pub client_cert: Option<PathBuf>,
    /// `database.sslkey`: the client certificate's key (PEM, or PKCS#8 DER).
    pub client_key: Option<PathBuf>,
}

impl TlsSettings {
    /// Plain TCP only.
    pub fn disabled() -> TlsSettings {
        TlsSettings {
            mode: SslMode::Disable,
            root_cert: None,
            client_cert: None,
            client_key: None,
        }
    }

    /// Whether the connection asks the server for TLS at all.
    pub fn attempts_tls(&self) -> bool {
        !matches!(self.mode, SslMode::Disable | SslMode::Allow)
    }

    /// The rustls configuration these settings call for.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?;
        let check = match (self.mode, &self.root_cert) {
            (SslMode::VerifyFull, _) => Check::Full,
            (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Check::Chain,
            _ => Check::Nothing,
        };
        let builder = match check {
            Check::Nothing => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PartialCheck {
                    chain: None,
                    provider,
                })),
            Check::Chain | Check::Full => {
                let roots = self.root_store()?;
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| format!("database.sslrootcert: {e}"))?;
                if check == Check::Full {
                    builder.with_webpki_verifier(webpki)
                } else {
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(PartialCheck {
                            chain: Some(webpki),
                            provider,
                        }))
                }
            }
        };
        let config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(read_certificates("database.sslcert", cert)?, read_key(key)?)
                .map_err(|e| format!("database.sslcert / database.sslkey: {e}"))?,
            (None, None) => builder.with_no_client_auth(),
            (Some(_), None) => return Err("database.sslcert is set without database.sslkey".into()),
            (None, Some(_)) => return Err("database.sslkey is set without database.sslcert".into()),
        };
        Ok(Arc::new(config))
    }

    /// The CAs of `database.sslrootcert`, else of libpq's default file.
    fn root_store(&self) -> Result<RootCertStore, String> {
        let path = match &self.root_cert {
            Some(p) => p.clone(),
            None => {
                let default = std::env::var_os("HOME")
                    .map(|home| Path::new(&home).join(".postgresql/root.crt"))
                    .filter(|p| p.exists());
                default.ok_or_else(|| {
                    format!(
                        "database.sslmode={} checks the server's certificate: set database.sslrootcert to the CA certificate file (libpq's default ~/.postgresql/root.crt does not exist)",
                        self.mode.name()
                    )
                })?
            }
        };
        let mut roots = RootCertStore::empty();
        for cert in read_certificates("database.sslrootcert", &path)? {
            roots
                .add(cert)
                .map_err(|e| format!("database.sslrootcert {}: {e}", path.display()))?;
        }
        Ok(roots)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    Full,
}

/// Every certificate of the PEM file `path` (at least one).
fn read_certificates(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{key} {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{key} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{key} {}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
            path.display()
        ));
    }
    Ok(certs)
}

/// The private key of `database.sslkey`: PEM (PKCS#8, PKCS#1 or SEC1), or PKCS#8 DER (the
/// `.pk8` files pgjdbc uses).
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("database.sslkey {}: {e}", path.display()))?;
    if bytes.starts_with(b"-----BEGIN ENCRYPTED") {
        return Err(format!(
            "database.sslkey {}: the key is encrypted, which is not supported; decrypt it (openssl pkey -in KEY -out PLAIN)",
            path.display()
        ));
    }
    if bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
        return PrivateKeyDer::from_pem_slice(&bytes)
            .map_err(|e| format!("database.sslkey {}: {e}", path.display()));
    }
    Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(bytes)))
}

/// The certificate check of `prefer`/`require` (none: any certificate) and of `verify-ca`
/// (the chain, not the name). The handshake's signatures are checked in both, so the server
/// holds the key of the certificate it presents.
#[derive(Debug)]
struct PartialCheck {
    /// `None`: no certificate check; else the verifier whose name check is ignored.
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PartialCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // The name is checked after the chain: a name error means the chain verified.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// How the message of a failed TLS handshake starts (a [`PgError::Tls`]).
pub const HANDSHAKE: &str = "TLS handshake";

/// Why [`connect_sql`] failed.
#[derive(Debug)]
pub enum SqlConnectError {
    /// The TLS settings could not be turned into a configuration (a file, say).
    Settings(String),
    /// Connecting failed (the server's refusal, a failed handshake, I/O).
    Sql(tokio_postgres::Error),
}

/// Connects a tokio-postgres `config` with TLS as `settings` ask and spawns the task that
/// drives the connection. Under `allow`, a plain connection the server refuses
/// (SQLSTATE 28000: `pg_hba.conf` wants TLS) is retried with TLS, as libpq does.
pub async fn connect_sql(
    config: &tokio_postgres::Config,
    settings: &TlsSettings,
) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), SqlConnectError> {
    match connect_sql_once(config.clone(), settings).await {
        Err(SqlConnectError::Sql(e))
            if settings.mode == SslMode::Allow
                && e.code()
                    == Some(
                        &tokio_postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                    ) =>
        {
            let with_tls = TlsSettings {
                mode: SslMode::Require,
                ..settings.clone()
            };
            match connect_sql_once(config.clone(), &with_tls).await {
                // No TLS to be had either: the plain refusal says more (a missing role, say).
                Err(SqlConnectError::Sql(retry)) if retry.as_db_error().is_none() => {
                    Err(SqlConnectError::Sql(e))
                }
                other => other,
            }
        }
        // `prefer`: libpq connects without TLS when the TLS handshake fails.
        Err(SqlConnectError::Sql(e))
            if settings.mode == SslMode::Prefer
                && e.as_db_error().is_none()
                && e.to_string().contains("TLS handshake") =>
        {
            tracing::warn!(error = %crate::sql_error_text(&e), "the TLS handshake failed; connecting without TLS (database.sslmode=prefer)");
            let plain = TlsSettings {
                mode: SslMode::Disable,
                ..settings.clone()
            };
            connect_sql_once(config.clone(), &plain).await
        }
        other => other,
    }
}

async fn connect_sql_once(
    mut config: tokio_postgres::Config,
    settings: &TlsSettings,
) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), SqlConnectError> {
    if !settings.attempts_tls() {
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        let (client, conn) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(SqlConnectError::Sql)?;
        return Ok((client, spawn_connection(conn)));
    }
    config.ssl_mode(match settings.mode {
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    });
    let tls_config = settings
        .client_config()
        .map_err(SqlConnectError::Settings)?;
    let tls = tokio_postgres_rustls::MakeRustlsConnect::new((*tls_config).clone());
    let (client, conn) = config.connect(tls).await.map_err(SqlConnectError::Sql)?;
    Ok((client, spawn_connection(conn)))
}

/// Drives a SQL connection until it ends.
fn spawn_connection<S, T>(conn: tokio_postgres::Connection<S, T>) -> tokio::task::JoinHandle<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "SQL connection ended");
        }
    })
}

/// A replication connection's byte stream: plain TCP or TLS over it.
pub enum Transport {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Transport {
    /// Opens TLS on `tcp` as `settings` ask (SSLRequest, then the handshake), before any
    /// startup message is sent. `host` is the name the certificate must carry
    /// (`verify-full`).
    pub async fn negotiate(
        mut tcp: TcpStream,
        host: &str,
        settings: &TlsSettings,
    ) -> Result<Transport, PgError> {
        if !settings.attempts_tls() {
            return Ok(Transport::Plain(tcp));
        }
        // Build the configuration first: a bad file is reported as such, not as a refusal.
        let config = settings.client_config().map_err(PgError::Tls)?;
        let mut request = BytesMut::with_capacity(8);
        frontend::ssl_request(&mut request);
        tcp.write_all(&request).await?;
        // Exactly one byte: nothing the server sends before the handshake may be read as
        // part of the encrypted stream (CVE-2021-23222).
        let answer = tcp.read_u8().await?;
        match answer {
            b'S' => {
                let name = ServerName::try_from(host.to_owned())
                    .map_err(|e| PgError::Tls(format!("{host:?} as a TLS server name: {e}")))?;
                let tls = tokio_rustls::TlsConnector::from(config)
                    .connect(name, tcp)
                    .await
                    .map_err(|e| {
                        // rustls's refusals (certificate, protocol) come as InvalidData; any
                        // other kind is the connection failing, which a retry may cure.
                        if e.kind() == std::io::ErrorKind::InvalidData {
                            PgError::Tls(format!(
                                "{HANDSHAKE} with {host} (database.sslmode={}): {e}",
                                settings.mode.name()
                            ))
                        } else {
                            PgError::Io(e)
                        }
                    })?;
                Ok(Transport::Tls(Box::new(tls)))
            }
            b'N' if settings.mode == SslMode::Prefer => Ok(Transport::Plain(tcp)),
            b'N' => Err(PgError::Tls(format!(
                "the server at {host} does not accept TLS connections (ssl = off), and database.sslmode={} requires TLS",
                settings.mode.name()
            ))),
            other => Err(PgError::Protocol(format!(
                "unexpected answer {other:#04x} to the SSLRequest"
            ))),
        }
    }

    /// Whether TLS is in use.
    pub fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_))
    }

    /// The read and write halves (plain TCP splits without a lock).
    pub fn split(self) -> (ReadPart, WritePart) {
        match self {
            Transport::Plain(tcp) => {
                let (r, w) = tcp.into_split();
                (ReadPart::Plain(r), WritePart::Plain(w))
            }
            Transport::Tls(tls) => {
                let (r, w) = tokio::io::split(*tls);
                (ReadPart::Tls(r), WritePart::Tls(w))
            }
        }
    }
}

/// The reading half of a [`Transport`].
pub enum ReadPart {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream<TcpStream>>),
}

/// The writing half of a [`Transport`].
pub enum WritePart {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream<TcpStream>>),
}

impl AsyncRead for ReadPart {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ReadPart::Plain(r) => Pin::new(r).poll_read(cx, buf),
            ReadPart::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for WritePart {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            WritePart::Plain(w) => Pin::new(w).poll_write(cx, buf),
            WritePart::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            WritePart::Plain(w) => Pin::new(w).poll_flush(cx),
            WritePart::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            WritePart::Plain(w) => Pin::new(w).poll_shutdown(cx),
            WritePart::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(mode: SslMode) -> TlsSettings {
        TlsSettings {
            mode,
            ..TlsSettings::disabled()
        }
    }

    #[test]
    fn client_certificates_in_pem_or_pkcs8_der_and_clear_errors() {
        let pki = headwater_tests::pki::TestPki::new();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        // The test server's certificate and key serve as a client's here.
        let cert_pem = pki.file("server.pem");
        let key_pem = pki.file("server-key.pem");
        let key_der = write(
            "client.pk8",
            PrivateKeyDer::from_pem_file(&key_pem).unwrap().secret_der(),
        );
        let encrypted = write(
            "encrypted.key",
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
        );
        for key in [&key_pem, &key_der] {
            let s = TlsSettings {
                client_cert: Some(cert_pem.clone()),
                client_key: Some(key.clone()),
                ..settings(SslMode::Require)
            };
            let config = s.client_config().unwrap();
            assert!(config.client_auth_cert_resolver.has_certs(), "{key:?}");
        }
        let error = |s: TlsSettings| s.client_config().expect_err("refused");
        let e = error(TlsSettings {
            client_cert: Some(cert_pem.clone()),
            client_key: Some(encrypted),
            ..settings(SslMode::Require)
        });
        assert!(
            e.contains("encrypted") && e.contains("database.sslkey"),
            "{e}"
        );
        let e = error(TlsSettings {
            client_cert: Some(cert_pem.clone()),
            ..settings(SslMode::Require)
        });
        assert!(e.contains("without database.sslkey"), "{e}");
        // A key file given as the certificate: no certificate in it.
        let e = error(TlsSettings {
            client_cert: Some(key_pem.clone()),
            client_key: Some(key_pem.clone()),
            ..settings(SslMode::Require)
        });
        assert!(
            e.starts_with("database.sslcert") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = error(TlsSettings {
            root_cert: Some(dir.path().join("absent.crt")),
            ..settings(SslMode::VerifyCa)
        });
        assert!(
            e.starts_with("database.sslrootcert") && e.contains("absent.crt"),
            "{e}"
        );
        // Without certificate checks no root file is needed.
        assert!(settings(SslMode::Prefer).client_config().is_ok());
        assert!(settings(SslMode::Require).client_config().is_ok());
    }
}
