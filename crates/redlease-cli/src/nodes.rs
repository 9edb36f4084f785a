//! Which Redis nodes to talk to: `--nodes` or `REDLEASE_NODES`
//! (comma-separated URLs), checked to parse.

use clap::Args;
use redis::Client;

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
    /// redis+unix:///path/to/socket.
    #[arg(
        long,
        env = "REDLEASE_NODES",
        value_name = "URL,...",
        default_value = DEFAULT_NODES,
        // The URLs may carry passwords: keep them out of --help.
        hide_env_values = true
    )]
    nodes: String,
}

impl NodesArg {
    /// The URLs, each checked to parse (a bad one is a usage error whose
    /// message never shows a password).
    pub fn urls(&self) -> Result<Vec<String>, Exit> {
        parse(&self.nodes).map_err(|why| Exit::with(exit::USAGE, why))
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
