//! Throwaway certificates for TLS nodes: a test CA, a server certificate
//! for `127.0.0.1` and `localhost` signed by it (which the servers also
//! present to each other in a TLS cluster or replication), and a client
//! certificate for mutual TLS. Generated in memory (no openssl CLI needed); a TLS node
//! writes its files into its own directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A test CA with a server and a client certificate it signed.
///
/// ```no_run
/// use redlease_testkit::{tls::TestPki, ClientAuth, NodeConfig, RedisNode};
///
/// let pki = TestPki::generate();
/// let node = RedisNode::start_with(NodeConfig::new().tls(&pki, ClientAuth::Required));
/// assert!(node.url().starts_with("rediss://"));
/// let ca: &str = pki.ca_pem(); // what a client must trust
/// ```
#[derive(Clone, Debug)]
pub struct TestPki {
    ca_pem: String,
    pub(crate) server_cert_pem: String,
    pub(crate) server_key_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

impl TestPki {
    /// A fresh CA, server and client certificate. Panics if generation fails.
    pub fn generate() -> TestPki {
        Self::generate_named("redlease test CA")
    }

    /// Another, unrelated CA (for a client that trusts the wrong one).
    pub fn generate_named(ca_name: &str) -> TestPki {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, ca_name);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).expect("self-signed CA");
        let issuer = Issuer::new(ca, ca_key);

        let leaf = |name: &str, purposes: Vec<ExtendedKeyUsagePurpose>| {
            let key = KeyPair::generate().expect("leaf key");
            let mut params =
                CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                    .expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, name);
            params.use_authority_key_identifier_extension = true;
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = purposes;
            let cert = params.signed_by(&key, &issuer).expect("signed leaf");
            (cert.pem(), key.serialize_pem())
        };
        // A server is a client too, of the cluster bus and of its primary
        // (`tls-cluster`, `tls-replication`), and presents the same
        // certificate there.
        let (server_cert, server_key) = leaf(
            "redis test server",
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        );
        let (client_cert, client_key) = leaf(
            "redlease test client",
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        );

        TestPki {
            ca_pem: ca_cert.pem(),
            server_cert_pem: server_cert,
            server_key_pem: server_key,
            client_cert_pem: client_cert,
            client_key_pem: client_key,
        }
    }

    /// The CA certificate, PEM: what a client must trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The client certificate, PEM, for mutual TLS.
    pub fn client_cert_pem(&self) -> &str {
        &self.client_cert_pem
    }

    /// The client certificate's private key, PEM.
    pub fn client_key_pem(&self) -> &str {
        &self.client_key_pem
    }

    /// Writes the client's files (`ca.crt`, `client.crt`, `client.key`) to
    /// `dir`, for programs that take paths (the CLI's `--tls-*` flags).
    pub fn write_client_files(&self, dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let files = (
            dir.join("ca.crt"),
            dir.join("client.crt"),
            dir.join("client.key"),
        );
        std::fs::write(&files.0, &self.ca_pem).expect("write ca.crt");
        std::fs::write(&files.1, &self.client_cert_pem).expect("write client.crt");
        std::fs::write(&files.2, &self.client_key_pem).expect("write client.key");
        files
    }

    /// Certificates for a redis-rs client: the CA, and the client identity.
    pub(crate) fn redis_certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: self.client_cert_pem.clone().into_bytes(),
                client_key: self.client_key_pem.clone().into_bytes(),
            }),
            root_cert: Some(self.ca_pem.clone().into_bytes()),
        }
    }
}

/// Makes ring rustls's process-wide crypto provider, unless one is set
/// already (rustls cannot pick one itself when several are compiled in).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
