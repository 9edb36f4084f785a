//! What the nodes served during a slice, from their own counters (`INFO
//! stats commandstats`, one call per server process before and after):
//! the library exposes no count of its requests, so the servers count them.
//!
//! - `reads`: `total_reads_processed`, the read events the server handled
//!   on client sockets. With one worker, each connection carries one
//!   request (or one pipeline) at a time, so each is one round trip.
//! - `commands`: `total_commands_processed`, every command executed, a
//!   script's own `redis.call`s included (an `EVALSHA` whose script calls
//!   `SET` and `GET` counts 3).
//! - `calls`: the same by command name, from `INFO commandstats`.
//!
//! Each sample's own `INFO` is taken out again, so a sample right after
//! another reads nothing.

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;

use crate::client::BenchError;

/// Counters summed over the server processes at one instant, or their
/// change between two.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Served {
    pub reads: u64,
    pub commands: u64,
    /// Calls by lowercase command name (`evalsha`, `set`, `client|setinfo`).
    pub calls: BTreeMap<String, u64>,
}

impl Served {
    /// What was served between `earlier` and `self`, less the one `INFO`
    /// each sample sends to each of `processes` servers: the later
    /// sample's read (counted when its read began, before it answered) and
    /// the earlier sample's command (counted when it finished, after it
    /// answered).
    pub fn since(&self, earlier: &Served, processes: usize) -> Served {
        let own = processes as u64;
        let mut calls = BTreeMap::new();
        for (name, &now) in &self.calls {
            let mut n = now.saturating_sub(earlier.calls.get(name).copied().unwrap_or(0));
            if name == "info" {
                n = n.saturating_sub(own);
            }
            if n > 0 {
                calls.insert(name.clone(), n);
            }
        }
        Served {
            reads: self.reads.saturating_sub(earlier.reads).saturating_sub(own),
            commands: self
                .commands
                .saturating_sub(earlier.commands)
                .saturating_sub(own),
            calls,
        }
    }

    /// Adds one server's `INFO stats commandstats` reply.
    fn add_info(&mut self, info: &str) {
        for line in info.lines() {
            let line = line.trim_end();
            if let Some(n) = line.strip_prefix("total_reads_processed:") {
                self.reads += n.parse::<u64>().unwrap_or(0);
            } else if let Some(n) = line.strip_prefix("total_commands_processed:") {
                self.commands += n.parse::<u64>().unwrap_or(0);
            } else if let Some(rest) = line.strip_prefix("cmdstat_") {
                // cmdstat_evalsha:calls=12,usec=...
                let Some((name, fields)) = rest.split_once(':') else {
                    continue;
                };
                let calls = fields
                    .split(',')
                    .find_map(|f| f.strip_prefix("calls="))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                *self.calls.entry(name.to_ascii_lowercase()).or_default() += calls;
            }
        }
    }
}

/// One connection of its own to every server process (each primary of a
/// cluster), for their counters.
pub struct Counters {
    conns: Vec<MultiplexedConnection>,
}

impl Counters {
    /// Connects to every server `urls` names: plain `redis://` URLs of
    /// single processes (a cluster's nodes one by one, not its
    /// `redis+cluster://` URL).
    pub async fn connect(urls: &[String]) -> Result<Counters, BenchError> {
        let mut conns = Vec::with_capacity(urls.len());
        for url in urls {
            let client = redis::Client::open(url.as_str())?;
            conns.push(client.get_multiplexed_async_connection().await?);
        }
        Ok(Counters { conns })
    }

    /// How many server processes are counted.
    pub fn processes(&self) -> usize {
        self.conns.len()
    }

    /// Every server's counters now, summed.
    pub async fn sample(&self) -> Result<Served, BenchError> {
        let mut served = Served::default();
        for conn in &self.conns {
            let info: String = redis::cmd("INFO")
                .arg("stats")
                .arg("commandstats")
                .query_async(&mut conn.clone())
                .await?;
            served.add_info(&info);
        }
        Ok(served)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_lines_are_summed_and_the_samples_own_info_taken_out() {
        let mut before = Served::default();
        before.add_info(
            "# Stats\r\ntotal_commands_processed:10\r\ntotal_reads_processed:7\r\n\
             # Commandstats\r\ncmdstat_info:calls=2,usec=50\r\ncmdstat_set:calls=4,usec=9\r\n",
        );
        before.add_info("total_commands_processed:5\ntotal_reads_processed:5\n");
        assert_eq!((before.reads, before.commands), (12, 15));
        let mut after = Served::default();
        after.add_info(
            "total_commands_processed:19\r\ntotal_reads_processed:12\r\n\
             cmdstat_info:calls=3,usec=80\r\ncmdstat_set:calls=7,usec=20\r\n\
             cmdstat_evalsha:calls=2,usec=30\r\ncmdstat_CLIENT|SETINFO:calls=1,usec=1\r\n",
        );
        after.add_info("total_commands_processed:6\ntotal_reads_processed:6\n");
        let d = after.since(&before, 2);
        // 10 more commands and 6 more reads, less one INFO per process.
        assert_eq!((d.reads, d.commands), (4, 8));
        assert_eq!(
            d.calls,
            BTreeMap::from([
                ("client|setinfo".to_string(), 1),
                ("evalsha".to_string(), 2),
                ("set".to_string(), 3),
            ])
        );
    }

    /// The counters on a real server: nothing between two samples reads
    /// as nothing, separate commands as one read each, a script as one
    /// read and its inner calls as commands.
    #[tokio::test]
    async fn a_real_server_counts_reads_commands_and_script_calls() {
        let node = redlease_testkit::RedisNode::start();
        let counters = Counters::connect(&[node.url()]).await.unwrap();
        let mut conn = redis::Client::open(node.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let first = counters.sample().await.unwrap();
        let second = counters.sample().await.unwrap();
        assert_eq!(second.since(&first, 1), Served::default());

        for i in 0..3 {
            let _: () = redis::cmd("SET")
                .arg("k")
                .arg(i)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let _: Option<String> = redis::cmd("EVAL")
            .arg("redis.call('SET', KEYS[1], 'x'); return redis.call('GET', KEYS[1])")
            .arg(1)
            .arg("k")
            .query_async(&mut conn)
            .await
            .unwrap();
        let third = counters.sample().await.unwrap();
        let d = third.since(&second, 1);
        assert_eq!(d.reads, 4, "{d:?}");
        assert_eq!(d.commands, 6, "{d:?}");
        assert_eq!(
            d.calls,
            BTreeMap::from([
                ("eval".to_string(), 1),
                ("get".to_string(), 1),
                ("set".to_string(), 4),
            ])
        );
    }
}
