//! TLS for the connector's MySQL/MariaDB connections (`database.ssl.mode` and its files),
//! for the SQL connections and the binlog connection alike (both are `mysql_async` connections
//! given the same options).
//!
//! The modes, in both vocabularies (MySQL connector / MariaDB connector):
//! - `disabled` / `disable`: plain TCP;
//! - `preferred`: TLS when the server offers it, else plain TCP; the certificate is not
//!   checked;
//! - `required` / `trust`: TLS or nothing, the certificate not checked;
//! - `verify_identity` / `verify-full`: TLS; the certificate must chain to a CA of
//!   `database.ssl.truststore` (else of the Mozilla root set) and name `database.hostname`;
//! - `verify_ca` / `verify-ca`: refused: the client library cannot check the chain without
//!   the name with the rustls release in use, and checking less than asked is not an option.
//!
//! Debezium takes Java key stores for the files; this connector takes PEM:
//! `database.ssl.truststore` the CA certificates, `database.ssl.keystore` the client
//! certificate and its key in one file. A JKS or PKCS#12 store is refused with the command
//! that exports it as PEM; the `*.password` keys are accepted and not needed (a PEM key must
//! not be encrypted).
//!
//! Invariants: a mode that asks for TLS never falls back to plain TCP (only `preferred`
//! does, when the server has no TLS); a bad file is reported by validation with its key and
//! path.

use std::path::{Path, PathBuf};

use mysql_async::{ClientIdentity, SslOpts};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// `database.ssl.mode`, whichever vocabulary spelled it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disabled,
    Preferred,
    Required,
    VerifyCa,
    VerifyIdentity,
}

impl SslMode {
    /// Parses a mode of either vocabulary (case-insensitive).
    pub fn parse(s: &str) -> Option<SslMode> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "disabled" | "disable" => SslMode::Disabled,
            "preferred" | "prefer" => SslMode::Preferred,
            "required" | "require" | "trust" => SslMode::Required,
            "verify_ca" | "verify-ca" => SslMode::VerifyCa,
            "verify_identity" | "verify-full" | "verify_full" => SslMode::VerifyIdentity,
            _ => return None,
        })
    }
}

/// The TLS settings of a connector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// `database.ssl.truststore`: PEM file of the CAs to trust.
    pub truststore: Option<PathBuf>,
    /// `database.ssl.keystore`: PEM file with the client certificate (chain) and its key.
    pub keystore: Option<PathBuf>,
}

impl TlsSettings {
    /// Plain TCP.
    pub fn disabled() -> TlsSettings {
        TlsSettings {
            mode: SslMode::Disabled,
            truststore: None,
            keystore: None,
        }
    }

    /// Checks the mode and the files; the message names the key it is about first.
    pub fn check(&self) -> Result<(), String> {
        if self.mode == SslMode::VerifyCa {
            return Err("database.ssl.mode verify_ca (MariaDB: verify-ca) is not supported: the TLS library in use cannot check the certificate chain while ignoring the host name; use verify_identity (verify-full), which checks both, or required (trust)".into());
        }
        if let Some(path) = &self.truststore {
            let text = read_pem("database.ssl.truststore", path)?;
            let certs = CertificateDer::pem_slice_iter(&text)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("database.ssl.truststore {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!(
                    "database.ssl.truststore {}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
                    path.display()
                ));
            }
        }
        if let Some(path) = &self.keystore {
            let text = read_pem("database.ssl.keystore", path)?;
            if text
                .windows(b"ENCRYPTED PRIVATE KEY".len())
                .any(|w| w == b"ENCRYPTED PRIVATE KEY")
            {
                return Err(format!(
                    "database.ssl.keystore {}: the key is encrypted, which is not supported; decrypt it (openssl pkey -in KEY -out PLAIN)",
                    path.display()
                ));
            }
            let has_cert = CertificateDer::pem_slice_iter(&text).any(|c| c.is_ok());
            if !has_cert || PrivateKeyDer::from_pem_slice(&text).is_err() {
                return Err(format!(
                    "database.ssl.keystore {}: needs the client certificate and its private key, both PEM, in this one file",
                    path.display()
                ));
            }
        }
        Ok(())
    }

    /// The `mysql_async` options for these settings: `None` for plain TCP.
    pub fn ssl_opts(&self) -> Option<SslOpts> {
        let opts = match self.mode {
            SslMode::Disabled => return None,
            SslMode::Preferred | SslMode::Required => {
                SslOpts::default().with_danger_accept_invalid_certs(true)
            }
            // Refused by `check`; checked as fully as the library can if it got here.
            SslMode::VerifyCa | SslMode::VerifyIdentity => SslOpts::default(),
        };
        let opts = match &self.truststore {
            Some(path) => opts
                .with_root_certs(vec![path.clone().into()])
                .with_disable_built_in_roots(true),
            None => opts,
        };
        let opts = match &self.keystore {
            Some(path) => opts.with_client_identity(Some(ClientIdentity::new(
                path.clone().into(),
                path.clone().into(),
            ))),
            None => opts,
        };
        Some(opts)
    }
}

/// The bytes of a PEM file; a Java key store is refused with the way to export it.
fn read_pem(key: &str, path: &Path) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{key} {}: {e}", path.display()))?;
    if !bytes.trim_ascii_start().starts_with(b"-----BEGIN") {
        return Err(format!(
            "{key} {}: not a PEM file (a JKS or PKCS#12 store?); this connector takes PEM: export it with `keytool -exportcert -rfc -keystore FILE -alias ALIAS` (certificates) or `openssl pkcs12 -in FILE -nodes` (certificate and key)",
            path.display()
        ));
    }
    Ok(bytes)
}

/// Makes the aws-lc-rs provider the process's rustls default: `mysql_async` builds its TLS
/// configuration with the default provider, and with more than one provider compiled in there
/// is none until one is installed.
pub fn install_crypto_provider() {
    // An error only says a default is installed already.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}
