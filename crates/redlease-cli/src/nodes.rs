//! Which Redis nodes to talk to: `--nodes` or `REDLEASE_NODES`
//! (comma-separated URLs), checked to parse, and the TLS files for its
//! `rediss://` nodes.

use std::path::PathBuf;

use clap::Args;
use redis::Client;
use redlease::TlsConfig;

use crate::errors::chain;
use crate::exit::{self, Exit};

/// Used when neither `--nodes` nor `REDLEASE_NODES` is given.
pub const DEFAULT_NODES: &str = "redis://127.0.0.1:6379";

/// The node list, shared by `run`, `status` and `doctor`.
#[derive(Args, Debug, Clone)]
pub struct NodesArg {
    /// Redis nodes as comma-separated URLs: one for a single-instance lock,
    /// or 3 or 5 independent servers for a Redlock quorum.
    /// Forms: redis://host:port/db, redis://user:password@host:port,
    /// rediss://host:port (TLS), redis+unix:///path/to/socket.
    #[arg(
        long,
        env = "REDLEASE_NODES",
        value_name = "URL,...",
        default_value = DEFAULT_NODES,
        // The URLs may carry passwords: keep them out of --help.
        hide_env_values = true
    )]
    nodes: String,

    /// CA certificates (PEM) to trust for rediss:// nodes instead of the
    /// system's trust store.
    #[arg(long, env = "REDLEASE_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for rediss:// nodes that require one
    /// (mutual TLS); needs --tls-key.
    #[arg(
        long,
        env = "REDLEASE_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM); needs --tls-cert.
    #[arg(
        long,
        env = "REDLEASE_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
}

/// The PEM contents of the `--tls-*` files.
struct TlsFiles {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl NodesArg {
    /// The URLs, each checked to parse (a bad one is a usage error whose
    /// message never shows a password).
    pub fn urls(&self) -> Result<Vec<String>, Exit> {
        parse(&self.nodes).map_err(|why| Exit::with(exit::USAGE, why))
    }

    /// The TLS files the flags name, read now (a missing one is a usage
    /// error); `None` without TLS flags.
    fn tls_files(&self) -> Result<Option<TlsFiles>, Exit> {
        if self.tls_ca.is_none() && self.tls_cert.is_none() {
            return Ok(None);
        }
        let read = |path: &PathBuf| {
            std::fs::read(path)
                .map_err(|e| Exit::with(exit::USAGE, format!("{}: {}", path.display(), chain(&e))))
        };
        let ca = self.tls_ca.as_ref().map(read).transpose()?;
        let client = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
            _ => None,
        };
        Ok(Some(TlsFiles { ca, client }))
    }

    /// The TLS settings for the library (whose build checks they are PEM).
    pub fn tls(&self) -> Result<Option<TlsConfig>, Exit> {
        Ok(self.tls_files()?.map(|files| {
            let mut tls = TlsConfig::new();
            if let Some(ca) = files.ca {
                tls = tls.ca_pem(ca);
            }
            if let Some((cert, key)) = files.client {
                tls = tls.client_cert_pem(cert, key);
            }
            tls
        }))
    }

    /// The same TLS settings for a direct redis-rs connection (`doctor`).
    pub fn redis_tls(&self) -> Result<Option<redis::TlsCertificates>, Exit> {
        Ok(self.tls_files()?.map(|files| redis::TlsCertificates {
            root_cert: files.ca,
            client_tls: files
                .client
                .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }),
        }))
    }

    /// A Locker builder over the nodes, with the TLS settings.
    pub fn builder(&self) -> Result<(Vec<String>, redlease::LockerBuilder), Exit> {
        let urls = self.urls()?;
        let mut builder = redlease::Locker::builder(&urls);
        if let Some(tls) = self.tls()? {
            builder = builder.tls(tls);
        }
        Ok((urls, builder))
    }
}

/// Splits and checks a comma-separated URL list.
pub fn parse(list: &str) -> Result<Vec<String>, String> {
    let urls: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .collect();
    if urls.is_empty() {
        return Err("no Redis node given: pass --nodes URL,... or set REDLEASE_NODES".into());
    }
    for (i, url) in urls.iter().enumerate() {
        if let Err(e) = Client::open(url.as_str()) {
            return Err(format!(
                "node {i} ({}) is not a Redis URL: {}",
                redlease::redact_url(url),
                chain(&e)
            ));
        }
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_trims_and_skips_empty_parts() {
        assert_eq!(
            parse(" redis://a:1 ,redis://b:2,,").unwrap(),
            vec!["redis://a:1", "redis://b:2"]
        );
        assert!(parse(" , ").unwrap_err().contains("no Redis node"));
    }

    #[test]
    fn a_bad_url_is_named_without_its_password() {
        let err = parse("redis://a:1,http://user:hunter2@b:2").unwrap_err();
        assert!(err.contains("node 1"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}
