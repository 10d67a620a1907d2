//! TLS for the worker's listeners: the REST API and schema registry (HTTPS, through
//! [`TlsListener`]) and the Kafka protocol listener (which takes the [`ServerTls`] acceptor).
//!
//! Certificates and keys are PEM files, as Kafka's and Kafka Connect's `ssl.keystore.type=PEM`
//! and every reverse proxy take them: the certificate file holds the server's certificate
//! first, then any intermediates; the key file one unencrypted PKCS#8, PKCS#1 or SEC1 key.
//!
//! Invariants:
//! * A [`ServerTls`] is only built from files that parse and match: the key belongs to the
//!   first certificate, an encrypted key is refused with the command that decrypts it, and a
//!   client CA file (mutual TLS) holds at least one certificate. Errors name the setting and
//!   the path, so start-up can report them as configuration errors.
//! * Certificates are re-read when their files change (checked at most every
//!   [`RELOAD_CHECK_INTERVAL`], on the next handshake), so a renewed certificate is served
//!   without a restart; a renewed pair that does not load keeps the previous one serving and
//!   logs why, once per change.
//! * [`TlsListener`] never lets one client's handshake hold up another's: handshakes run in
//!   their own tasks, at most [`HANDSHAKE_TIMEOUT`] each, and only finished ones are handed to
//!   the HTTP server. Dropping the listener stops accepting.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often, at most, the certificate files are checked for changes.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(30);

/// Where a listener's certificate, key and (for mutual TLS) client CA come from, with the
/// names of the settings that gave them (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The setting that names the certificate (`rest_tls_cert`, say).
    pub cert_setting: &'static str,
    pub cert: PathBuf,
    /// The setting that names the key.
    pub key_setting: &'static str,
    pub key: PathBuf,
    /// The setting that names the client CA, and the file: clients must present a
    /// certificate it signed.
    pub client_ca: Option<(&'static str, PathBuf)>,
}

/// A listener's TLS: the rustls configuration, whose certificate follows its files.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
    /// The certificate source inside `config` (held for the tests, which drive its clock).
    #[cfg_attr(not(test), allow(dead_code))]
    resolver: Arc<ReloadingCert>,
    files: TlsFiles,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish()
    }
}

impl ServerTls {
    /// Loads and checks the files; the error is one line naming the setting and path.
    pub fn load(files: TlsFiles) -> Result<ServerTls, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let certified = load_pair(&files, &provider)?;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?;
        let builder = match &files.client_ca {
            None => builder.with_no_client_auth(),
            Some((setting, path)) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certificates(setting, path)? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("{setting} {}: {e}", path.display()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| format!("{setting} {}: {e}", path.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let resolver = Arc::new(ReloadingCert {
            files: files.clone(),
            provider,
            state: Mutex::new(ReloadState {
                key: Arc::new(certified),
                stamps: stamps(&files),
                checked: Instant::now(),
            }),
        });
        Ok(ServerTls {
            config: Arc::new(builder.with_cert_resolver(resolver.clone())),
            resolver,
            files,
        })
    }

    /// The acceptor for one listener's connections.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.clone())
    }

    /// The files this was loaded from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_certificates(&self) -> bool {
        self.files.client_ca.is_some()
    }
}

/// Every certificate of the PEM file `path` (at least one).
fn read_certificates(setting: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{setting} {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{setting} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{setting} {}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
            path.display()
        ));
    }
    Ok(certs)
}

/// The PEM private key at `path`.
fn read_key(setting: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{setting} {}: {e}", path.display()))?;
    if bytes
        .windows(b"-----BEGIN ENCRYPTED".len())
        .any(|w| w == b"-----BEGIN ENCRYPTED")
    {
        return Err(format!(
            "{setting} {}: the key is encrypted, which is not supported; decrypt it \
             (openssl pkey -in KEY -out PLAIN) and keep the file readable only by the worker",
            path.display()
        ));
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        format!(
            "{setting} {}: no PEM private key in it ({e})",
            path.display()
        )
    })
}

/// The certificate chain and key of `files`, checked to belong together.
fn load_pair(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let chain = read_certificates(files.cert_setting, &files.cert)?;
    let key = read_key(files.key_setting, &files.key)?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| {
        format!(
            "{} {} and {} {}: {e} (is the key the certificate's?)",
            files.cert_setting,
            files.cert.display(),
            files.key_setting,
            files.key.display()
        )
    })
}

/// The modification times of the certificate and key files (`None` where unreadable).
fn stamps(files: &TlsFiles) -> [Option<SystemTime>; 2] {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    [modified(&files.cert), modified(&files.key)]
}

/// The server certificate, re-read when its files change.
struct ReloadingCert {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    state: Mutex<ReloadState>,
}

struct ReloadState {
    key: Arc<CertifiedKey>,
    /// The files' modification times when last loaded (or last failed to load).
    stamps: [Option<SystemTime>; 2],
    checked: Instant,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("files", &self.files)
            .finish()
    }
}

impl ReloadingCert {
    /// The current key, after reloading it if the files changed since the last check.
    fn current(&self, now: Instant) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(state.checked) >= RELOAD_CHECK_INTERVAL {
            state.checked = now;
            let stamps = stamps(&self.files);
            if stamps != state.stamps {
                // Recorded either way: a pair that does not load is reported once, not at
                // every handshake, and tried again when the files change again.
                state.stamps = stamps;
                match load_pair(&self.files, &self.provider) {
                    Ok(key) => {
                        tracing::info!(
                            cert = %self.files.cert.display(),
                            "TLS certificate reloaded: its files changed"
                        );
                        state.key = Arc::new(key);
                    }
                    Err(err) => tracing::warn!(
                        error = %err,
                        "TLS certificate files changed but do not load; still serving the previous certificate"
                    ),
                }
            }
        }
        state.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current(Instant::now()))
    }
}

/// A TCP listener whose connections are handed out after their TLS handshake, for
/// `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accepting: JoinHandle<()>,
}

impl TlsListener {
    /// Starts accepting on `listener`; `what` names the listener in log lines.
    pub fn new(listener: TcpListener, tls: &ServerTls, what: &'static str) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = tls.acceptor();
        let (sender, ready) = mpsc::channel(64);
        let accepting = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of file descriptors and the like: keep serving the others.
                        tracing::warn!(error = %err, "{what} listener: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = sender.send((stream, peer)).await;
                        }
                        Ok(Err(err)) => tracing::debug!(
                            peer = %peer,
                            error = %err,
                            "{what} listener: TLS handshake failed (a client speaking plain HTTP, or not trusting the certificate?)"
                        ),
                        Err(_) => tracing::debug!(
                            peer = %peer,
                            "{what} listener: TLS handshake timed out"
                        ),
                    }
                });
            }
        });
        Ok(TlsListener {
            ready,
            local,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task holds a sender until it is aborted, which only dropping
            // this listener does.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `name` and its key, as PEM.
    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("a certificate");
        (cert.pem(), key.serialize_pem())
    }

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles {
            cert_setting: "test_cert",
            cert: dir.join("cert.pem"),
            key_setting: "test_key",
            key: dir.join("key.pem"),
            client_ca: None,
        }
    }

    fn write(files: &TlsFiles, (cert, key): &(String, String)) {
        std::fs::write(&files.cert, cert).unwrap();
        std::fs::write(&files.key, key).unwrap();
    }

    #[test]
    fn files_are_checked_and_errors_name_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let files = files(dir.path());
        let (cert, key) = pair("localhost");
        let (_, other_key) = pair("localhost");
        std::fs::write(&files.cert, &cert).unwrap();
        std::fs::write(&files.key, &other_key).unwrap();
        let err = ServerTls::load(files.clone()).unwrap_err();
        assert!(
            err.contains("test_cert") && err.contains("test_key"),
            "{err}"
        );
        std::fs::write(&files.key, "-----BEGIN ENCRYPTED PRIVATE KEY-----\n").unwrap();
        let err = ServerTls::load(files.clone()).unwrap_err();
        assert!(
            err.contains("encrypted") && err.contains("test_key"),
            "{err}"
        );
        std::fs::write(&files.key, &key).unwrap();
        std::fs::write(&files.cert, "not a certificate").unwrap();
        let err = ServerTls::load(files.clone()).unwrap_err();
        assert!(
            err.contains("test_cert") && err.contains("no PEM certificate"),
            "{err}"
        );
        std::fs::write(&files.cert, &cert).unwrap();
        let tls = ServerTls::load(files.clone()).expect("a matching pair loads");
        assert!(!tls.requires_client_certificates());

        let mut mutual = files.clone();
        mutual.client_ca = Some(("test_ca", dir.path().join("none.pem")));
        let err = ServerTls::load(mutual.clone()).unwrap_err();
        assert!(err.contains("test_ca"), "{err}");
        mutual.client_ca = Some(("test_ca", files.cert.clone()));
        assert!(ServerTls::load(mutual)
            .unwrap()
            .requires_client_certificates());
    }

    #[test]
    fn renewed_files_are_served_and_a_broken_renewal_keeps_the_old_pair() {
        let dir = tempfile::tempdir().unwrap();
        let files = files(dir.path());
        let first = pair("localhost");
        write(&files, &first);
        let tls = ServerTls::load(files.clone()).unwrap();
        let resolver = &tls.resolver;
        let start = Instant::now();
        let served = |at: Instant| resolver.current(at).cert[0].clone();
        let first_der = served(start);

        // Renewed: served from the first check after RELOAD_CHECK_INTERVAL, not before.
        let second = pair("localhost");
        write(&files, &second);
        // The files' times must differ from the first pair's even on coarse clocks.
        let later = SystemTime::now() + Duration::from_secs(5);
        for path in [&files.cert, &files.key] {
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(later)
                .unwrap();
        }
        assert_eq!(served(start + Duration::from_secs(1)), first_der);
        let at = start + RELOAD_CHECK_INTERVAL + Duration::from_secs(1);
        let second_der = served(at);
        assert_ne!(second_der, first_der);

        // A renewal whose key is not the certificate's: the second pair stays.
        std::fs::write(&files.key, pair("localhost").1).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&files.key)
            .unwrap()
            .set_modified(later + Duration::from_secs(5))
            .unwrap();
        let at = at + RELOAD_CHECK_INTERVAL + Duration::from_secs(1);
        assert_eq!(served(at), second_der);
    }
}
