//! A first look at redlease: take a lock, watch a second taker be refused,
//! extend, release, then let a few workers share one lock.
//!
//! Nodes come from REDLEASE_NODES (comma-separated URLs, split as the
//! `redlease` command splits `--nodes`: a comma starts a new node only
//! before a scheme, so a cluster's hosts stay together), by default
//! redis://127.0.0.1:6379. It writes only keys that expire on their own
//! (`redlease-quickstart:*`, the locks, by their TTL: fencing is off, so
//! no fencing counters are kept). Run it with:
//!
//! ```text
//! cargo run --example quickstart
//! REDLEASE_NODES=redis://127.0.0.1:7000,redis://127.0.0.1:7001,redis://127.0.0.1:7002 \
//!     cargo run --example quickstart
//! REDLEASE_NODES=redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 \
//!     cargo run --example quickstart
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{Error, Locker};

#[tokio::main]
async fn main() -> ExitCode {
    let list = std::env::var("REDLEASE_NODES").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let urls = match redlease::NodeUrl::split_list(&list) {
        Ok(urls) => urls,
        Err(e) => {
            eprintln!("error: REDLEASE_NODES: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&urls).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(Why::NoNode(unreached)) => {
            eprintln!("error: no Redis node answered:");
            for e in unreached {
                eprintln!("  {e}");
            }
            eprintln!(
                "Start one with `redis-server --port 6379` (Debian/Ubuntu: \
                 `apt-get install -y redis-server`), or point REDLEASE_NODES at yours, \
                 e.g. REDLEASE_NODES=redis://127.0.0.1:6379"
            );
            ExitCode::from(2)
        }
        Err(Why::Lock(e)) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why the quickstart stopped: no node answered at all, or a lock call
/// failed.
enum Why {
    NoNode(Vec<redlease::NodeError>),
    Lock(Error),
}

impl From<Error> for Why {
    fn from(e: Error) -> Self {
        Why::Lock(e)
    }
}

async fn run(urls: &[String]) -> Result<(), Why> {
    let locker = Locker::builder(urls)
        .ttl(Duration::from_secs(5))
        .key_prefix("redlease-quickstart:")
        .build()?;
    // Before waiting for a lock: is anyone there at all?
    let unreached = locker.admin().check_servers().await?;
    if unreached.len() == urls.len() {
        return Err(Why::NoNode(unreached));
    }
    println!(
        "{} node(s), {} must agree: {}",
        urls.len(),
        locker.admin().quorum(),
        locker
            .admin()
            .nodes()
            .map(|n| n.addr().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );

    // 1. Take it, waiting up to 15 s: a server that started in the last
    // TTL (5 s here) casts no vote yet, since after a crash it would have
    // forgotten the locks it granted (the restart quarantine).
    let started = Instant::now();
    let mut lease = locker.lock("report").wait(Duration::from_secs(15)).await?;
    println!(
        "acquired {:?} in {:?}; valid for {:?}",
        lease.resource(),
        started.elapsed(),
        lease.remaining()
    );

    // 2. A second taker (another Locker, as another process would have)
    // is refused, and told who holds it.
    let other = Locker::builder(urls)
        .ttl(Duration::from_secs(5))
        .key_prefix("redlease-quickstart:")
        .build()?;
    match other.try_lock("report").await {
        Err(e @ Error::Taken { .. }) => println!("second try_lock refused: {e}"),
        Ok(_) => println!("unexpected: the lock was granted twice"),
        Err(e) => return Err(e.into()),
    }

    // 3. Extend (up to the TTL the restart quarantine covers), then release.
    lease.extend(Duration::from_secs(5)).await?;
    println!("extended; now valid for {:?}", lease.remaining());
    lease.release().await?;
    println!("released");

    // 4. Four workers, one lock, 25 critical sections each.
    let in_section = Arc::new(AtomicU32::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..4 {
        let (locker, in_section) = (locker.clone(), in_section.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..25 {
                let lease = locker.lock("shared-counter").await?;
                // Nobody else may be inside while we are.
                assert_eq!(in_section.fetch_add(1, Ordering::SeqCst), 0);
                tokio::time::sleep(Duration::from_millis(1)).await;
                in_section.fetch_sub(1, Ordering::SeqCst);
                lease.release().await?;
            }
            Ok::<u32, Error>(worker)
        }));
    }
    for worker in workers {
        worker.await.expect("worker panicked")?;
    }
    println!(
        "4 workers x 25 critical sections, never two at once, in {:?}",
        started.elapsed()
    );
    Ok(())
}
