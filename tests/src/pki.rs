//! Certificates for TLS tests and `pg-bench --tls`: a test CA, a server certificate it signed
//! for `localhost` only (so connecting to `127.0.0.1` with host-name checks fails), a client
//! certificate it signed (for mutual TLS), and an unrelated CA (so chain checks against it
//! fail). Written as PEM files into a temporary directory that lives as long as the value.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// The files: `ca.pem`, `other-ca.pem`, `server.pem`, `server-key.pem`, `client.pem`,
/// `client-key.pem`.
pub struct TestPki {
    dir: tempfile::TempDir,
    server_cert_pem: String,
    server_key_pem: String,
}

impl TestPki {
    /// Generates fresh keys and certificates (ECDSA P-256).
    pub fn new() -> TestPki {
        let ca = |name: &str| {
            let key = KeyPair::generate().expect("a CA key");
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, name);
            let cert = params.self_signed(&key).expect("a CA certificate");
            (params, key, cert)
        };
        let (ca_params, ca_key, ca_cert) = ca("headwater test CA");
        let (_, _, other_cert) = ca("some other CA");
        let server_key = KeyPair::generate().expect("a server key");
        let mut server_params =
            CertificateParams::new(vec!["localhost".to_owned()]).expect("server params");
        server_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let server_cert = server_params
            .signed_by(&server_key, &Issuer::from_params(&ca_params, &ca_key))
            .expect("a server certificate");
        let client_key = KeyPair::generate().expect("a client key");
        let mut client_params =
            CertificateParams::new(Vec::<String>::new()).expect("client params");
        client_params
            .distinguished_name
            .push(DnType::CommonName, "headwater-test-client");
        client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client_params
            .signed_by(&client_key, &Issuer::from_params(&ca_params, &ca_key))
            .expect("a client certificate");
        let dir = tempfile::tempdir().expect("a directory for the certificates");
        let pki = TestPki {
            dir,
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
        };
        for (name, text) in [
            ("ca.pem", ca_cert.pem()),
            ("other-ca.pem", other_cert.pem()),
            ("server.pem", pki.server_cert_pem.clone()),
            ("server-key.pem", pki.server_key_pem.clone()),
            ("client.pem", client_cert.pem()),
            ("client-key.pem", client_key.serialize_pem()),
        ] {
            std::fs::write(pki.file(name), text).expect("writing a certificate file");
        }
        pki
    }

    /// The path of one of the files.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// [`Self::file`] as a string, for connector settings and URLs.
    pub fn path(&self, name: &str) -> String {
        self.file(name).to_string_lossy().into_owned()
    }

    /// The server certificate, PEM.
    pub fn server_cert_pem(&self) -> &str {
        &self.server_cert_pem
    }

    /// The server certificate's key, PEM (PKCS#8).
    pub fn server_key_pem(&self) -> &str {
        &self.server_key_pem
    }
}

impl Default for TestPki {
    fn default() -> Self {
        TestPki::new()
    }
}
