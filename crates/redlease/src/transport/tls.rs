//! [`TlsConfig`]: whom a TLS node (`rediss://`, `rediss+cluster://`,
//! `rediss+sentinel://`) must prove itself to be, and who we are to it.
//! Connections use it only with the `tls-rustls` feature; without it a
//! Locker with TLS settings or TLS nodes is refused at build.
//!
//! Also what a failed first connection says about a URL whose scheme does
//! not match the port ([`scheme_mismatch`]): `redis://` to a port that
//! serves TLS only, or `rediss://` to one that serves plain text.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use redis::{ConnectionAddr, RedisError};

use crate::core::error::Error;

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
    /// The certificate must be X.509 version 3 (with extensions), the only
    /// kind rustls presents: [`build`](crate::LockerBuilder::build) refuses
    /// a version 1 certificate, naming the fix.
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
            #[cfg(feature = "tls-rustls")]
            refuse_version_1(cert)?;
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

/// Refuses a client certificate of X.509 version 1 (no extensions), which
/// rustls never presents: the connection would fail at every try, with
/// an error that names neither the certificate nor the fix. A
/// certificate this cannot read is left to the connection to judge.
#[cfg(feature = "tls-rustls")]
fn refuse_version_1(pem: &[u8]) -> Result<(), Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let Some(Ok(first)) = CertificateDer::pem_slice_iter(pem).next() else {
        return Ok(());
    };
    match x509_version(&first) {
        Some(1) => Err(Error::invalid(
            "tls_cert",
            "the client certificate is X.509 version 1 (it has no extensions), which rustls \
             does not present: issue it as version 3, with extensions (for example \
             `extendedKeyUsage=clientAuth` in an `openssl x509 -req -extfile` file)",
        )),
        _ => Ok(()),
    }
}

/// The X.509 version of a DER certificate (1, 2 or 3), if it reads as one:
/// `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] EXPLICIT
/// Version DEFAULT v1, ... } ... }`, so a certificate whose to-be-signed
/// part does not begin with `[0]` is version 1.
#[cfg(any(feature = "tls-rustls", test))]
fn x509_version(der: &[u8]) -> Option<u8> {
    /// The value of the DER element `tlv` begins with, after checking its
    /// tag is `tag`.
    fn value(tlv: &[u8], tag: u8) -> Option<&[u8]> {
        if *tlv.first()? != tag {
            return None;
        }
        let first = *tlv.get(1)?;
        let (len, header) = if first < 0x80 {
            (usize::from(first), 2)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 {
                return None;
            }
            let mut len = 0usize;
            for &b in tlv.get(2..2 + n)? {
                len = len.checked_mul(256)?.checked_add(usize::from(b))?;
            }
            (len, 2 + n)
        };
        tlv.get(header..header.checked_add(len)?)
    }
    const SEQUENCE: u8 = 0x30;
    const VERSION: u8 = 0xa0; // [0], constructed
    const INTEGER: u8 = 0x02;
    let tbs = value(value(der, SEQUENCE)?, SEQUENCE)?;
    if tbs.first() != Some(&VERSION) {
        return Some(1);
    }
    match value(value(tbs, VERSION)?, INTEGER)? {
        [v @ 0..=2] => Some(v + 1),
        _ => None,
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

/// A URL whose scheme does not match what the server speaks on its port,
/// with the scheme to use; carried inside the connection's error (as the
/// I/O error's inner error) so that it reaches every report of it.
#[derive(Debug)]
pub(crate) struct WrongScheme {
    why: String,
}

impl fmt::Display for WrongScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

impl std::error::Error for WrongScheme {}

impl WrongScheme {
    /// The text, if `e` (or an error behind it) carries one.
    pub(crate) fn find(e: &(dyn std::error::Error + 'static)) -> Option<String> {
        let mut next = Some(e);
        while let Some(e) = next {
            // An I/O error's `source()` skips its own inner error.
            let inner = io_error(e).and_then(std::io::Error::get_ref);
            if let Some(found) = inner.and_then(|i| i.downcast_ref::<WrongScheme>()) {
                return Some(found.why.clone());
            }
            next = e.source();
        }
        None
    }
}

/// What the server at a URL's address speaks, where the URL's scheme
/// says otherwise; see [`scheme_mismatch`], whose example shows it.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemeMismatch {
    /// A `redis://` URL, and the server serves only TLS on the port: use
    /// `rediss://`.
    SpeaksTls,
    /// A `rediss://` URL, and the server answers plain text on the port:
    /// use `redis://`.
    SpeaksPlain,
}

/// Whether a new connection to `addr` that failed before any reply
/// (`failure`, or `None` if no answer came in time) failed because the
/// URL's scheme does not match the port:
///
/// - a plain connection (`redis://`) that the server closed or reset
///   before it answered anything: a server that serves only TLS on the
///   port closes a connection whose first bytes are not a TLS handshake.
///   So do other things (a server restarting at that moment, a proxy), so
///   the port is asked again, with the start of a TLS handshake: a TLS
///   server answers it (with an alert), which settles it.
/// - a TLS connection (`rediss://`) whose handshake timed out, was closed,
///   or got a reply that is not TLS: a plain server reads a TLS handshake
///   as a command and keeps waiting for its end. Asked again in plain text
///   (`PING`), such a server answers, which settles it.
///
/// Each question is bounded by `timeout`. The library tells a node's
/// connection errors this way ([`NodeErrorKind::WrongScheme`]); public for
/// the `redlease` command's own connections (`doctor`), so that both tell
/// it alike.
///
/// [`NodeErrorKind::WrongScheme`]: crate::NodeErrorKind::WrongScheme
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use redis::IntoConnectionInfo;
///
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// // A plain server, addressed as a TLS one.
/// let info = format!("rediss://{}", nodes.node(0).addr()).into_connection_info()?;
/// let told = redlease::scheme_mismatch(info.addr(), None, Duration::from_secs(1)).await;
/// assert_eq!(told, Some(redlease::SchemeMismatch::SpeaksPlain));
/// # Ok(()) }
/// ```
#[doc(hidden)]
pub async fn scheme_mismatch(
    addr: &ConnectionAddr,
    failure: Option<&RedisError>,
    timeout: Duration,
) -> Option<SchemeMismatch> {
    match addr {
        ConnectionAddr::Tcp(host, port) if failure.is_some_and(closed_early) => {
            let tls = speaks_tls(host, *port, timeout).await;
            tls.then_some(SchemeMismatch::SpeaksTls)
        }
        ConnectionAddr::TcpTls { host, port, .. } if failure.is_none_or(not_tls) => {
            let plain = speaks_plain(host, *port, timeout).await;
            plain.then_some(SchemeMismatch::SpeaksPlain)
        }
        _ => None,
    }
}

/// `e`, the failure of a new connection to `addr` before any reply, with
/// the scheme to use when the URL's scheme does not match the port (see
/// [`scheme_mismatch`]). `tls` and `plain` are the schemes to suggest
/// (`rediss://` and `redis://`, or the cluster and Sentinel forms). Any
/// other failure is returned as it is.
pub(crate) async fn wrong_scheme(
    e: RedisError,
    addr: &ConnectionAddr,
    timeout: Duration,
    (tls, plain): (&str, &str),
) -> RedisError {
    let why = match scheme_mismatch(addr, Some(&e), timeout).await {
        Some(SchemeMismatch::SpeaksTls) => format!(
            "the server closed the connection before any reply ({e}): the server speaks TLS \
             on this port: use {tls}"
        ),
        Some(SchemeMismatch::SpeaksPlain) => format!(
            "no TLS handshake ({e}): the server does not speak TLS on this port, it answers \
             plain text: use {plain}"
        ),
        None => return e,
    };
    carrying(e, why)
}

/// A new connection to `client`'s server, with `config`; a failure says
/// whether the URL's scheme does not match the port (see
/// [`wrong_scheme`]). A TLS handshake still unfinished after half of
/// `timeout` is raced by a plain `PING` to the same port, so that a plain
/// server is told within the timeout even when the caller's own patience
/// ends with the connect timeout.
pub(crate) async fn connect(
    client: &redis::Client,
    config: &redis::AsyncConnectionConfig,
    timeout: Duration,
    schemes: (&str, &str),
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let addr = client.get_connection_info().addr();
    let connecting = client.get_multiplexed_async_connection_with_config(config);
    let result = match addr {
        ConnectionAddr::TcpTls { host, port, .. } => {
            let mut connecting = std::pin::pin!(connecting);
            tokio::select! {
                connected = &mut connecting => connected,
                () = tokio::time::sleep(timeout / 2) => tokio::select! {
                    connected = &mut connecting => connected,
                    true = speaks_plain(host, *port, timeout) => {
                        let why = format!(
                            "no TLS handshake within {:?}: the server does not speak TLS on \
                             this port, it answers plain text: use {}",
                            timeout / 2,
                            schemes.1
                        );
                        return Err(RedisError::from(std::io::Error::other(WrongScheme { why })));
                    }
                },
            }
        }
        _ => connecting.await,
    };
    match result {
        Ok(conn) => Ok(conn),
        Err(e) => Err(wrong_scheme(e, addr, timeout, schemes).await),
    }
}

/// `e`'s connection was closed or reset by the server (not refused).
fn closed_early(e: &RedisError) -> bool {
    io_kind(e).is_some_and(|kind| {
        matches!(
            kind,
            std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::ConnectionAborted
        )
    })
}

/// The kind of the I/O error behind `e`, if one is.
fn io_kind(e: &RedisError) -> Option<std::io::ErrorKind> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = next {
        if let Some(io) = io_error(cause) {
            return Some(io.kind());
        }
        next = cause.source();
    }
    None
}

/// `e` as an I/O error, also where redis-rs shares it (its errors hold
/// their cause in an `Arc`, which is the `source()` they give).
fn io_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    e.downcast_ref::<std::io::Error>().or_else(|| {
        e.downcast_ref::<Shared>()
            .and_then(|shared| shared.downcast_ref::<std::io::Error>())
    })
}

/// A TLS handshake that timed out, or that got something else than TLS
/// back (rustls: a corrupt message), or an early close.
fn not_tls(e: &RedisError) -> bool {
    if e.is_timeout() || closed_early(e) {
        return true;
    }
    #[cfg(feature = "tls-rustls")]
    if let Some(rustls::Error::InvalidMessage(_)) = rustls_error(e) {
        return true;
    }
    false
}

/// What the TLS library said, if `e` is a failed TLS handshake (or a TLS
/// alert the server sent right after it, such as a client certificate
/// it wanted): redis-rs reports the failure as an I/O error around the
/// TLS library's own. Told by the TLS library's error type, never by
/// words; `None` without the `tls-rustls` feature. For tools that make
/// their own connections (the CLI's doctor), as the library tells
/// [`NodeErrorKind::Tls`](crate::NodeErrorKind::Tls).
///
/// ```
/// let refused = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
/// assert_eq!(redlease::tls_handshake_failure(&refused), None);
/// ```
pub fn handshake_failure(e: &RedisError) -> Option<String> {
    #[cfg(feature = "tls-rustls")]
    return rustls_error(e).map(ToString::to_string);
    #[cfg(not(feature = "tls-rustls"))]
    {
        let _ = e;
        None
    }
}

/// The rustls error behind `e`, if one is: the innermost.
#[cfg(feature = "tls-rustls")]
fn rustls_error(e: &RedisError) -> Option<&rustls::Error> {
    let mut found = None;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(cause) = next {
        // An I/O error's `source()` skips its own inner error.
        let inner = io_error(cause)
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        found = inner.or(cause.downcast_ref::<rustls::Error>()).or(found);
        next = cause.source();
    }
    found
}

/// Whether a Redis server answers plain text at `host:port`: `PING` gets
/// `+PONG`, or an error reply such as `-NOAUTH`, within `timeout`.
async fn speaks_plain(host: &str, port: u16, timeout: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await?;
        Ok::<_, std::io::Error>(matches!(first[0], b'+' | b'-'))
    };
    matches!(tokio::time::timeout(timeout, ask).await, Ok(Ok(true)))
}

/// Whether a TLS server listens at `host:port`: the start of a TLS
/// handshake (a `ClientHello` record with an empty body) gets a TLS record
/// back (an alert, or a handshake) within `timeout`.
async fn speaks_tls(host: &str, port: u16, timeout: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Record: handshake (0x16), TLS 1.0 for compatibility, 4 bytes; the
    // message: ClientHello (0x01) of length 0.
    const EMPTY_CLIENT_HELLO: [u8; 9] = [0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x00, 0x00, 0x00];
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await?;
        stream.write_all(&EMPTY_CLIENT_HELLO).await?;
        let mut first = [0u8; 3];
        stream.read_exact(&mut first).await?;
        // An alert (0x15) or handshake (0x16) record of TLS 1.x.
        Ok::<_, std::io::Error>(matches!(first, [0x15 | 0x16, 0x03, _]))
    };
    matches!(tokio::time::timeout(timeout, ask).await, Ok(Ok(true)))
}

/// `e` with `why` in it (see [`WrongScheme`]), as an I/O error, so the
/// connection still counts as broken; of `e`'s kind, but not a timeout:
/// the cause is known.
fn carrying(e: RedisError, why: String) -> RedisError {
    let kind = io_kind(&e)
        .filter(|k| *k != std::io::ErrorKind::TimedOut)
        .unwrap_or(std::io::ErrorKind::Other);
    RedisError::from(std::io::Error::new(kind, WrongScheme { why }))
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

    /// A client certificate of X.509 version 1 (made with `openssl x509
    /// -req` and no extension file), good until 2126.
    const VERSION_1_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBIjCByQIUAcR/CwFxwvBmWIQQVGGci2o5XE0wCgYIKoZIzj0EAwIwEjEQMA4G
A1UEAwwHdGVzdCBDQTAgFw0yNjExMjkxOTM0MjdaGA8yMTI2MTEwNTE5MzQyN1ow
FDESMBAGA1UEAwwJdjEgY2xpZW50MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE
XGLeGJw8t3uGvHAwRBn4paf9an6aekYNG+rD18+pXxwTSR/MKEA8oTsjGOEmvUb8
4wwv/6zu90bw3av+xzJwEDAKBggqhkjOPQQDAgNIADBFAiEAyqQpJjCyaQWOc5+S
R7LKb5vq4DaclGM+e+rFhi1wWS8CIBQMtEmLKsqwUlzLrGfzrH0E0eGAi8IgCzqz
oYKWSNtn
-----END CERTIFICATE-----
";

    #[test]
    fn a_version_1_client_certificate_is_refused_before_any_connection() {
        let pki = redlease_testkit::tls::TestPki::generate();
        let key = pki.client_key_pem();
        let e = TlsConfig::new()
            .client_cert_pem(VERSION_1_CERT, key)
            .check()
            .unwrap_err();
        assert!(e.to_string().contains("X.509 version 1"), "{e}");
        assert!(e.to_string().contains("tls_cert"), "{e}");
        // The test PKI's certificates are version 3: taken.
        let v3 = TlsConfig::new().client_cert_pem(pki.client_cert_pem(), key);
        assert!(v3.check().is_ok());
    }

    #[test]
    fn the_x509_version_is_read_from_der_and_garbage_is_not_judged() {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let v1 = CertificateDer::from_pem_slice(VERSION_1_CERT.as_bytes()).unwrap();
        assert_eq!(x509_version(&v1), Some(1));
        let pki = redlease_testkit::tls::TestPki::generate();
        let v3 = CertificateDer::from_pem_slice(pki.client_cert_pem().as_bytes()).unwrap();
        assert_eq!(x509_version(&v3), Some(3));
        for garbage in [
            &[][..],
            &[0x30],
            &[0x30, 0x85, 1, 2, 3, 4, 5],
            &[0x30, 0x82, 0xff],
        ] {
            assert_eq!(x509_version(garbage), None, "{garbage:?}");
        }
        // Cut short anywhere: never a panic, never a version.
        for n in 0..v3.len() {
            assert_eq!(x509_version(&v3[..n]), None);
        }
    }

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
    fn a_wrong_scheme_travels_inside_the_connection_error() {
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(closed_early(&reset));
        assert_eq!(WrongScheme::find(&reset), None);
        let carried = carrying(reset, "use rediss://".to_string());
        assert_eq!(
            WrongScheme::find(&carried).as_deref(),
            Some("use rediss://")
        );
        assert!(closed_early(&carried), "still a closed connection");
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(!closed_early(&refused));
        let timed_out = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(not_tls(&timed_out));
        assert!(!carrying(timed_out, "use redis://".to_string()).is_timeout());
    }

    #[cfg(feature = "tls-rustls")]
    #[test]
    fn tls_failures_are_told_by_the_tls_librarys_error_type() {
        use std::io::{Error as IoError, ErrorKind::InvalidData};
        let bad_ca = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let shown = bad_ca.to_string();
        let e = RedisError::from(IoError::new(InvalidData, bad_ca));
        assert_eq!(handshake_failure(&e), Some(shown));
        assert!(!not_tls(&e));
        let corrupt = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        let e = RedisError::from(IoError::new(InvalidData, corrupt));
        assert!(not_tls(&e));
        assert!(handshake_failure(&e).is_some());
        // Words alone are no TLS failure.
        let words = RedisError::from(IoError::other("certificate handshake tls corrupt message"));
        assert_eq!(handshake_failure(&words), None);
        assert!(!not_tls(&words));
    }

    #[test]
    fn debug_shows_no_key() {
        let shown = format!("{:?}", TlsConfig::new().client_cert_pem("C", "SECRET"));
        assert!(!shown.contains("SECRET"), "{shown}");
    }
}
