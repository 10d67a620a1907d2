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
//! * The certificate and key are re-read when their files change (a `tls-reload` thread looks
//!   every [`RELOAD_CHECK_INTERVAL`]), so a renewed certificate is served without a restart.
//!   A pair that does not load, or whose files change while being read, keeps the previous
//!   one serving and is tried again at every check (logged once per state of the files).
//!   Handshakes never wait on file I/O: they read the current pair from memory. The client CA
//!   is read once, at start.
//! * [`TlsListener`] never lets one client's handshake hold up another's: handshakes run in
//!   their own tasks, at most [`HANDSHAKE_TIMEOUT`] each and at most [`MAX_HANDSHAKES`] at a
//!   time, and only finished ones are handed to the HTTP server. Dropping the listener stops
//!   accepting.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the certificate files are checked for changes.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(30);
/// How many TLS handshakes an HTTPS listener runs at once (more connections wait in the
/// kernel's accept queue).
pub const MAX_HANDSHAKES: usize = 256;

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
    /// The certificate source inside `config`.
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
        // Taken before reading: a renewal landing meanwhile then shows as a change.
        let loaded_stamps = stamps(&files);
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
            current: RwLock::new(Arc::new(certified)),
            state: Mutex::new(ReloadState {
                loaded: loaded_stamps,
                reported: None,
            }),
        });
        ReloadingCert::watch(&resolver);
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

    /// When the certificate served now expires, in seconds since the Unix epoch (`None` when
    /// its validity cannot be read).
    pub fn expires_at(&self) -> Option<u64> {
        not_after(&self.resolver.current().cert[0])
    }
}

/// A certificate's `notAfter`, in seconds since the Unix epoch.
fn not_after(cert: &CertificateDer<'_>) -> Option<u64> {
    use x509_cert::der::Decode;
    let parsed = x509_cert::Certificate::from_der(cert.as_ref()).ok()?;
    Some(
        parsed
            .tbs_certificate
            .validity
            .not_after
            .to_unix_duration()
            .as_secs(),
    )
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

/// What identifies a state of the certificate and key files: modification time, size and
/// inode of each (`None` where unreadable).
type Stamps = [Option<(SystemTime, u64, u64)>; 2];

fn stamps(files: &TlsFiles) -> Stamps {
    use std::os::unix::fs::MetadataExt;
    let stamp = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len(), m.ino())))
    };
    [stamp(&files.cert), stamp(&files.key)]
}

/// The server certificate, re-read when its files change.
struct ReloadingCert {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    /// What handshakes are served with.
    current: RwLock<Arc<CertifiedKey>>,
    state: Mutex<ReloadState>,
}

struct ReloadState {
    /// The files' state when `current` was read from them.
    loaded: Stamps,
    /// The files' state last reported as not loading (so it is logged once).
    reported: Option<Stamps>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("files", &self.files)
            .finish()
    }
}

impl ReloadingCert {
    /// Starts the thread that calls [`ReloadingCert::check`] every [`RELOAD_CHECK_INTERVAL`]
    /// while `this` is in use anywhere.
    fn watch(this: &Arc<ReloadingCert>) {
        let weak: Weak<ReloadingCert> = Arc::downgrade(this);
        let spawned = std::thread::Builder::new()
            .name("tls-reload".into())
            .spawn(move || loop {
                std::thread::sleep(RELOAD_CHECK_INTERVAL);
                match weak.upgrade() {
                    Some(cert) => cert.check(),
                    None => return,
                }
            });
        if let Err(err) = spawned {
            tracing::warn!(error = %err, "cannot start the TLS certificate reload thread; renewed certificates need a restart");
        }
    }

    /// Reloads the pair if its files changed since it was read, and they stay unchanged while
    /// being read (a renewal caught half-written is tried again at the next check).
    fn check(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let before = stamps(&self.files);
        if before == state.loaded {
            return;
        }
        let loaded = load_pair(&self.files, &self.provider);
        let settled = stamps(&self.files) == before;
        match loaded {
            Ok(key) if settled => {
                tracing::info!(
                    cert = %self.files.cert.display(),
                    expires_at = not_after(&key.cert[0]).unwrap_or_default(),
                    "TLS certificate reloaded: its files changed"
                );
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
                state.loaded = before;
                state.reported = None;
            }
            // Changing under our feet: the next check sees how they end up.
            Ok(_) => {}
            Err(err) if settled && state.reported != Some(before) => {
                tracing::warn!(
                    error = %err,
                    "TLS certificate files changed but do not load; still serving the previous certificate (tried again every {}s)",
                    RELOAD_CHECK_INTERVAL.as_secs()
                );
                state.reported = Some(before);
            }
            Err(_) => {}
        }
    }

    /// The pair handshakes are served with now.
    fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
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
        let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        let accepting = tokio::spawn(async move {
            loop {
                let Ok(permit) = handshakes.clone().acquire_owned().await else {
                    return;
                };
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
                    let handshake =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await;
                    drop(permit);
                    match handshake {
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

    /// Replaces both files as renewals do (a new file renamed over the old one), so the
    /// change shows in the inode even when size and time stay.
    fn write(files: &TlsFiles, (cert, key): &(String, String)) {
        for (path, text) in [(&files.cert, cert), (&files.key, key)] {
            let fresh = path.with_extension("new");
            std::fs::write(&fresh, text).unwrap();
            std::fs::rename(&fresh, path).unwrap();
        }
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
        // rcgen's default validity ends on 4096-01-01.
        assert_eq!(tls.expires_at(), Some(67_090_118_400));

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
        write(&files, &pair("localhost"));
        let tls = ServerTls::load(files.clone()).unwrap();
        let resolver = &tls.resolver;
        let served = || resolver.current().cert[0].clone();
        let first = served();
        resolver.check();
        assert_eq!(served(), first, "unchanged files: nothing reloaded");

        // Renewed: served from the next check on.
        write(&files, &pair("localhost"));
        assert_eq!(served(), first);
        resolver.check();
        let second = served();
        assert_ne!(second, first);

        // A renewal whose key is not the certificate's: the second pair stays, at every check.
        std::fs::write(&files.key, pair("localhost").1).unwrap();
        resolver.check();
        resolver.check();
        assert_eq!(served(), second);
        // Fixed: taken up.
        let third = pair("localhost");
        write(&files, &third);
        resolver.check();
        assert_ne!(served(), second);
        assert_eq!(
            served().as_ref(),
            CertificateDer::from_pem_slice(third.0.as_bytes())
                .unwrap()
                .as_ref()
        );
    }
}
