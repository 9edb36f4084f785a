//! [`TlsConfig`]: whom a TLS node (`rediss://`, `rediss+cluster://`,
//! `rediss+sentinel://`) must prove itself to be, and who we are to it.
//! Connections use it only with the `tls-rustls` feature; without it a
//! Locker with TLS settings or TLS nodes is refused at build.

use std::fmt;
use std::path::Path;

use crate::error::Error;

/// TLS settings for a Locker's TLS nodes: the CA certificates to trust
/// instead of the system's, and a client certificate for servers that
/// require one (mutual TLS, `tls-auth-clients yes`). They apply to
/// `rediss://` servers, to every node of a `rediss+cluster://` cluster,
/// and to the sentinels and the primary of a `rediss+sentinel://` node.
/// Plain `redis://` nodes of the same Locker are not affected.
///
/// Without a CA the system's trust store is used, as for any TLS client.
/// The server's certificate must name the host in the URL (an IP address
/// too must be in the certificate). Checked by
/// [`LockerBuilder::build`](crate::LockerBuilder::build) before any I/O: a
/// file that is not PEM, a client certificate without its key, or TLS
/// settings for a Locker without a TLS node are [`Error::InvalidInput`].
///
/// ```no_run
/// use redlease::{Locker, TlsConfig};
///
/// # fn demo() -> Result<(), redlease::Error> {
/// let tls = TlsConfig::new()
///     .read_ca_file("/etc/redis/ca.crt")?
///     .read_client_cert_files("/etc/redlease/client.crt", "/etc/redlease/client.key")?;
/// let locker = Locker::builder(["rediss://redis.internal:6380"])
///     .tls(tls)
///     .build()?;
/// # let _ = locker; Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct TlsConfig {
    ca_pem: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key, and the certificates add nothing to a log line.
        f.debug_struct("TlsConfig")
            .field("ca", &self.ca_pem.as_ref().map(|_| "<custom>"))
            .field("client_cert", &self.client.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl TlsConfig {
    /// No custom CA, no client certificate: the system's trust store.
    ///
    /// ```
    /// let tls = redlease::TlsConfig::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Trust the CA certificates in `pem` (one or more `BEGIN CERTIFICATE`
    /// blocks) instead of the system's trust store.
    ///
    /// ```
    /// # let pem = String::new();
    /// let tls = redlease::TlsConfig::new().ca_pem(pem);
    /// ```
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Present this client certificate and its private key (both PEM).
    ///
    /// ```
    /// # let (cert, key) = (String::new(), String::new());
    /// let tls = redlease::TlsConfig::new().client_cert_pem(cert, key);
    /// ```
    pub fn client_cert_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.client = Some((cert.into(), key.into()));
        self
    }

    /// [`ca_pem`](Self::ca_pem) from a file.
    ///
    /// ```no_run
    /// # fn f() -> Result<(), redlease::Error> {
    /// let tls = redlease::TlsConfig::new().read_ca_file("/etc/redis/ca.crt")?;
    /// # Ok(()) }
    /// ```
    pub fn read_ca_file(self, path: impl AsRef<Path>) -> Result<Self, Error> {
        Ok(self.ca_pem(read("tls_ca", path.as_ref())?))
    }

    /// [`client_cert_pem`](Self::client_cert_pem) from two files.
    ///
    /// ```no_run
    /// # fn f() -> Result<(), redlease::Error> {
    /// let tls = redlease::TlsConfig::new()
    ///     .read_client_cert_files("/etc/redlease/client.crt", "/etc/redlease/client.key")?;
    /// # Ok(()) }
    /// ```
    pub fn read_client_cert_files(
        self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<Self, Error> {
        let cert = read("tls_cert", cert.as_ref())?;
        let key = read("tls_key", key.as_ref())?;
        Ok(self.client_cert_pem(cert, key))
    }

    /// Checks what can be checked without a server: each part is PEM of
    /// the right kind.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if let Some(ca) = &self.ca_pem {
            pem_has(ca, "tls_ca", "CERTIFICATE", "a CA certificate")?;
        }
        if let Some((cert, key)) = &self.client {
            pem_has(cert, "tls_cert", "CERTIFICATE", "a client certificate")?;
            pem_has(key, "tls_key", "PRIVATE KEY", "a private key")?;
        }
        Ok(())
    }

    /// The settings as redis-rs takes them.
    #[cfg(feature = "tls-rustls")]
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca_pem.clone(),
        }
    }
}

fn read(field: &'static str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::invalid(field, format!("{}: {e}", path.display())))
}

/// Whether `pem` holds a `-----BEGIN ... <label>-----` block.
fn pem_has(pem: &[u8], field: &'static str, label: &str, what: &str) -> Result<(), Error> {
    let text = String::from_utf8_lossy(pem);
    let found = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{label}-----")));
    if found {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("no PEM block of {what} (-----BEGIN ...{label}-----) found"),
        ))
    }
}

#[cfg(feature = "tls-rustls")]
/// rustls needs one process-wide crypto provider and cannot pick one when
/// several are compiled in: install ring's, unless the application set one.
pub(crate) fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_that_are_not_pem_of_their_kind_are_refused() {
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let key = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";
        assert!(TlsConfig::new().ca_pem(cert).check().is_ok());
        assert!(TlsConfig::new().client_cert_pem(cert, key).check().is_ok());
        let e = TlsConfig::new().ca_pem("not pem").check().unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidInput {
                    field: "tls_ca",
                    ..
                }
            ),
            "{e}"
        );
        let e = TlsConfig::new()
            .client_cert_pem(cert, cert)
            .check()
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidInput {
                    field: "tls_key",
                    ..
                }
            ),
            "{e}"
        );
        let e = TlsConfig::new()
            .read_ca_file("/nonexistent/ca.crt")
            .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.crt"), "{e}");
    }

    #[test]
    fn debug_shows_no_key() {
        let shown = format!("{:?}", TlsConfig::new().client_cert_pem("C", "SECRET"));
        assert!(!shown.contains("SECRET"), "{shown}");
    }
}
