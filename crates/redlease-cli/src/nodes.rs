//! Which Redis nodes to talk to: `--nodes` or `REDLEASE_NODES`
//! (comma-separated URLs), checked to parse, and the TLS files for its
//! `rediss://` nodes.
//!
//! A cluster's or the sentinels' URL lists its hosts with commas itself
//! (`redis+cluster://a:7000,b:7001`), so a comma starts a new URL only
//! where a scheme (`xxx://`) follows it; anywhere else it continues the URL
//! before it.

use std::path::PathBuf;

use clap::{ArgAction, Args};
use redlease::TlsConfig;

use crate::errors::chain;
use crate::exit::{self, Exit};

/// Used when neither `--nodes` nor `REDLEASE_NODES` is given.
pub const DEFAULT_NODES: &str = "redis://127.0.0.1:6379";

/// The node list, shared by `run`, `status` and `doctor`.
#[derive(Args, Debug, Clone)]
pub struct NodesArg {
    /// Redis nodes as comma-separated URLs (or --nodes given again): one
    /// for a single-instance lock, or 3 or 5 independent deployments for a
    /// Redlock quorum. A comma starts a new URL only where a scheme (xxx://)
    /// follows it; elsewhere it continues the URL, as in a cluster's or the
    /// sentinels' host list.
    /// Forms: redis://host:port/db, redis://user:password@host:port,
    /// rediss://host:port (TLS), redis+unix:///path/to/socket;
    /// redis+cluster://[user:password@]host:port,host:port,... (a Redis
    /// Cluster, one node of the quorum);
    /// redis+sentinel://[user:password@]host:port,host:port,.../SERVICE[/db]
    /// (the primary the sentinels name SERVICE; sentinels with their own
    /// password take ?sentinel_username=U&sentinel_password=P);
    /// rediss+cluster:// and rediss+sentinel:// with TLS.
    #[arg(
        long,
        env = "REDLEASE_NODES",
        value_name = "URL,...",
        default_value = DEFAULT_NODES,
        action = ArgAction::Append,
        // The URLs may carry passwords: keep them out of --help.
        hide_env_values = true
    )]
    nodes: Vec<String>,

    /// How long a server that (re)started casts no vote for a lock: a
    /// server without fsync'd persistence comes back empty and could grant
    /// a lock still held. Must cover the longest TTL any client of these
    /// servers uses; 0s turns it off (only for servers that keep their
    /// data across restarts: `appendonly yes` and `appendfsync always`, on
    /// a disk they restart from). Default: the TTL plus its drift allowance.
    #[arg(
        long,
        env = "REDLEASE_RESTART_QUARANTINE",
        value_name = "DURATION",
        value_parser = crate::duration::parse
    )]
    restart_quarantine: Option<std::time::Duration>,

    /// CA certificates (PEM) to trust for TLS nodes (rediss://,
    /// rediss+cluster://, rediss+sentinel://) instead of the system's trust
    /// store.
    #[arg(long, env = "REDLEASE_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for TLS nodes that require one (mutual
    /// TLS); needs --tls-key.
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
        parse(&self.nodes.join(",")).map_err(|why| Exit::with(exit::USAGE, why))
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

    /// The restart quarantine for locks of up to `ttl`: as given, or the
    /// library's default (the TTL plus its drift allowance, 1% + 2 ms).
    pub fn restart_quarantine(&self, ttl: std::time::Duration) -> std::time::Duration {
        self.restart_quarantine.unwrap_or(
            ttl.saturating_add(ttl / 100)
                .saturating_add(std::time::Duration::from_millis(2)),
        )
    }

    /// A Locker builder over the nodes, with the TLS settings.
    pub fn builder(&self) -> Result<(Vec<String>, redlease::LockerBuilder), Exit> {
        let urls = self.urls()?;
        let mut builder = redlease::Locker::builder(&urls);
        if let Some(quarantine) = self.restart_quarantine {
            builder = builder.advanced(|a| a.restart_quarantine(quarantine));
        }
        if let Some(tls) = self.tls()? {
            builder = builder.tls(tls);
        }
        Ok((urls, builder))
    }
}

/// Splits and checks a comma-separated URL list, by the library's rule
/// ([`redlease::NodeUrl::split_list`]): a comma followed by a scheme starts
/// a new URL; any other comma belongs to the URL.
pub fn parse(list: &str) -> Result<Vec<String>, String> {
    if list.split(',').all(|p| p.trim().is_empty()) {
        return Err("no Redis node given: pass --nodes URL,... or set REDLEASE_NODES".into());
    }
    redlease::NodeUrl::split_list(list).map_err(|e| chain(&e))
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
    fn a_comma_starts_a_new_url_only_before_a_scheme() {
        assert_eq!(
            parse(
                "redis+cluster://u:p@a:7000,b:7001, c:7002,rediss://d:1,\
                 redis+sentinel://s1,s2:26380/mymaster/2?sentinel_password=x,redis+unix:///tmp/r.sock"
            )
            .unwrap(),
            vec![
                "redis+cluster://u:p@a:7000,b:7001,c:7002",
                "rediss://d:1",
                "redis+sentinel://s1,s2:26380/mymaster/2?sentinel_password=x",
                "redis+unix:///tmp/r.sock",
            ]
        );
        // Repeated --nodes are joined with commas before the split.
        assert_eq!(
            parse(&["redis+cluster://a:1,b:2", "redis://c:3"].join(",")).unwrap(),
            vec!["redis+cluster://a:1,b:2", "redis://c:3"]
        );
        // A password with a comma stays in its URL.
        assert_eq!(
            parse("redis://u:a,b@h:1,redis://h:2").unwrap(),
            vec!["redis://u:a,b@h:1", "redis://h:2"]
        );
    }

    #[test]
    fn a_host_list_without_a_cluster_scheme_is_refused_with_the_rule() {
        let err = parse("redis://a:1,b:2").unwrap_err();
        assert!(err.contains("node 0"), "{err}");
        assert!(err.contains("redis+cluster://"), "{err}");
    }

    #[test]
    fn a_bad_url_is_named_without_its_password() {
        let err = parse("redis://a:1,http://user:hunter2@b:2").unwrap_err();
        assert!(err.contains("node 1"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let err = parse("redis+sentinel://u:hunter2@s1/m/x?sentinel_password=hunter3").unwrap_err();
        assert!(err.contains("not a number"), "{err}");
        assert!(!err.contains("hunter"), "{err}");
        let err = parse("redis+cluster://u:hunter2@a:70000").unwrap_err();
        assert!(err.contains("not a port number"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}
