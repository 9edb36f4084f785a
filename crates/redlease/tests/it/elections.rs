//! Elections (`Locker::election`): one leader at a time, its value and
//! term for anyone who asks, each change told to observers in order.

use std::future::IntoFuture;
use std::time::Duration;

use redlease::{Error, Leader, Locker, Observe, RetryPolicy, MAX_LEADER_VALUE_LEN};
use redlease_testkit::cluster::RedisCluster;
use redlease_testkit::RedisNodes;

use crate::support::MS;

const TOLD_WITHIN: Duration = Duration::from_secs(5);

fn member(urls: Vec<String>, owner: &str, ttl: Duration) -> Locker {
    Locker::builder(urls)
        .advanced(|a| a.restart_quarantine(Duration::ZERO)) // brand-new test servers
        .ttl(ttl)
        .node_timeout(300 * MS)
        .owner(owner)
        .retry(RetryPolicy::within(Duration::from_secs(10)).delay(MS, 5 * MS))
        .build()
        .expect("valid test settings")
}

async fn next(observe: &mut Observe) -> Option<Leader> {
    tokio::time::timeout(TOLD_WITHIN, observe.next())
        .await
        .expect("a change is told within 5 s")
        .expect("the observer reads every node")
}

async fn one_leader_at_a_time(urls: Vec<String>) {
    let ttl = Duration::from_secs(3);
    let a = member(urls.clone(), "node-a", ttl);
    let b = member(urls.clone(), "node-b", ttl);
    let watcher = member(urls, "observer", ttl);
    let mut observe = watcher.election("scheduler").observe();
    assert_eq!(next(&mut observe).await, None, "nobody leads yet");

    let mut lead_a = a
        .election("scheduler")
        .campaign("10.0.0.1:80")
        .await
        .unwrap();
    let told = next(&mut observe).await.expect("a leads");
    assert_eq!(
        (told.value.as_str(), told.term),
        ("10.0.0.1:80", lead_a.term())
    );
    assert_eq!(told.holder.as_ref().unwrap().owner, "node-a");
    // The term is the lease's fencing token, though the Locker draws none
    // for its locks.
    assert_eq!(lead_a.lease().fencing_token(), Some(lead_a.term()));
    assert_eq!(
        watcher.election("scheduler").leader().await.unwrap(),
        Some(told.clone())
    );

    // b campaigns, and waits in turn.
    let election_b = b.election("scheduler");
    let mut campaign = std::pin::pin!(election_b.campaign("10.0.0.2:80").into_future());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut campaign)
            .await
            .is_err(),
        "b led while a did"
    );

    // A new value: told, same term, next revision.
    lead_a.proclaim("10.0.0.1:81").await.unwrap();
    let moved = next(&mut observe).await.expect("a still leads");
    assert_eq!(
        (moved.value.as_str(), moved.term, moved.revision),
        ("10.0.0.1:81", told.term, 2)
    );
    assert_eq!(lead_a.value(), "10.0.0.1:81");

    // a resigns: b leads at once, in a higher term.
    let a_term = lead_a.term();
    lead_a.resign().await.unwrap();
    let lead_b = tokio::time::timeout(TOLD_WITHIN, &mut campaign)
        .await
        .expect("b leads once a resigned")
        .unwrap();
    assert!(lead_b.term() > a_term, "{} after {a_term}", lead_b.term());
    // Told: perhaps a vacancy between, then b; never a again.
    let mut told_b = None;
    for _ in 0..3 {
        match next(&mut observe).await {
            Some(l) if l.value == "10.0.0.2:80" => {
                told_b = Some(l);
                break;
            }
            None => {}
            Some(other) => panic!("told {other:?} after a resigned"),
        }
    }
    assert_eq!(told_b.expect("b told").term, lead_b.term());
    lead_b.resign().await.unwrap();
    assert_eq!(
        next(&mut observe).await,
        None,
        "nobody leads after b resigned"
    );
}

#[tokio::test]
async fn one_leader_at_a_time_on_one_node_and_three() {
    let nodes = RedisNodes::start(1);
    one_leader_at_a_time(nodes.urls()).await;
    let nodes = RedisNodes::start(3);
    one_leader_at_a_time(nodes.urls()).await;
}

#[tokio::test]
async fn one_leader_at_a_time_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    one_leader_at_a_time(vec![crate::cluster::cluster_url(&cluster)]).await;
}

/// A leader deposed behind its back (an operator's force release) is told
/// at once by its next renewal, and nobody reads it as the leader.
#[tokio::test]
async fn a_deposed_leader_is_told_and_leads_nobody() {
    let nodes = RedisNodes::start(3);
    let ttl = Duration::from_millis(900);
    let a = member(nodes.urls(), "node-a", ttl);
    let lead = a.election("scheduler").campaign("a").await.unwrap();
    a.admin().force_release("scheduler").await.unwrap();
    assert_eq!(a.election("scheduler").leader().await.unwrap(), None);
    tokio::time::timeout(ttl, lead.lost())
        .await
        .expect("told within its TTL");
    assert!(lead.is_lost());
    assert!(matches!(lead.resign().await, Err(Error::NotHeld { .. })));
}

/// A leader whose process dies leads until its lease ends; then the next
/// campaigner leads, in a higher term, and observers are told without a
/// word from the dead one.
#[tokio::test]
async fn a_dead_leaders_lead_ends_with_its_lease() {
    let nodes = RedisNodes::start(3);
    let ttl = Duration::from_millis(800);
    let a = member(nodes.urls(), "node-a", ttl);
    let b = member(nodes.urls(), "node-b", ttl);
    let mut observe = b.election("scheduler").observe();
    assert_eq!(next(&mut observe).await, None);
    let lead = a.election("scheduler").campaign("a").await.unwrap();
    let a_term = lead.term();
    assert_eq!(next(&mut observe).await.unwrap().term, a_term);
    // "Dies": no release, no renewal.
    a.close().await;
    std::mem::forget(lead);
    let after = tokio::time::timeout(TOLD_WITHIN, next(&mut observe))
        .await
        .unwrap();
    assert_eq!(after, None, "a vacancy once its lease ended");
    let lead_b = b.election("scheduler").campaign("b").await.unwrap();
    assert!(lead_b.term() > a_term);
    assert_eq!(next(&mut observe).await.unwrap().value, "b");
    lead_b.resign().await.unwrap();
}

#[tokio::test]
async fn bad_values_and_waits_are_refused_as_such() {
    let nodes = RedisNodes::start(1);
    let a = member(nodes.urls(), "a", Duration::from_secs(5));
    let long = "x".repeat(MAX_LEADER_VALUE_LEN + 1);
    assert!(matches!(
        a.election("e").campaign(long.clone()).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        a.election("").leader().await,
        Err(Error::InvalidInput { .. })
    ));
    let mut lead = a.election("e").campaign("").await.unwrap();
    assert!(matches!(
        lead.proclaim(long).await,
        Err(Error::InvalidInput { .. })
    ));
    assert_eq!(lead.value(), "");
    // Another campaigner that will not wait long.
    let b = member(nodes.urls(), "b", Duration::from_secs(5));
    let waited = b
        .election("e")
        .campaign("b")
        .wait(Duration::from_millis(200))
        .await;
    assert!(
        matches!(waited, Err(Error::WaitTimeout { .. })),
        "{waited:?}"
    );
    lead.resign().await.unwrap();
}

/// One election's life through `locker` (its user's rights, its
/// deployment): observed and watched from the start, won, proclaimed,
/// read, resigned; each step told.
pub async fn election_cycle(locker: &Locker) {
    let election = locker.election("acl-election");
    let mut observe = election.observe();
    let mut watch = locker.watch("acl-election");
    assert_eq!(next(&mut observe).await, None);
    tokio::time::timeout(TOLD_WITHIN, watch.changed())
        .await
        .unwrap()
        .unwrap();
    let mut lead = election.campaign("here").await.expect("campaign");
    assert_eq!(next(&mut observe).await.expect("told").term, lead.term());
    // Taken, then published: told as one change or as two.
    let mut led = None;
    for _ in 0..2 {
        let told = tokio::time::timeout(TOLD_WITHIN, watch.changed())
            .await
            .unwrap()
            .unwrap();
        led = told.leader().map(|l| l.term);
        if led.is_some() {
            break;
        }
    }
    assert_eq!(led, Some(lead.term()));
    lead.proclaim("there").await.expect("proclaim");
    assert_eq!(next(&mut observe).await.expect("told").value, "there");
    assert_eq!(election.leader().await.unwrap().unwrap().value, "there");
    lead.resign().await.expect("resign");
    assert_eq!(next(&mut observe).await, None);
}

/// The blocking face: the same election from plain threads, and no wait
/// too long to be a bound panics.
#[test]
fn the_blocking_election_and_watch_work_from_plain_threads() {
    let nodes = RedisNodes::start(1);
    let build = |owner: &str| {
        redlease::blocking::Locker::builder(nodes.urls())
            .advanced(|a| a.restart_quarantine(Duration::ZERO)) // brand-new test servers
            .ttl(Duration::from_secs(5))
            .owner(owner)
            .build()
            .unwrap()
    };
    let (a, b) = (build("a"), build("b"));
    let mut observe = b.election("e").observe();
    assert_eq!(observe.next_within(Duration::MAX).unwrap(), Some(None));
    let mut watch = b.watch("e");
    assert!(watch.changed().unwrap().holders().is_empty());
    assert!(watch
        .changed_within(Duration::from_millis(50))
        .unwrap()
        .is_none());

    let mut lead = a.election("e").campaign("a-value").unwrap();
    let told = observe
        .next_within(Duration::from_secs(5))
        .unwrap()
        .expect("told")
        .expect("a leads");
    assert_eq!((told.term, told.value.as_str()), (lead.term(), "a-value"));
    assert!(watch
        .changed_within(Duration::from_secs(5))
        .unwrap()
        .is_some());
    lead.proclaim("a-moved").unwrap();
    assert_eq!(b.election("e").leader().unwrap().unwrap().value, "a-moved");
    let refused = b
        .election("e")
        .campaign_within("b", Duration::from_millis(100));
    assert!(
        matches!(refused, Err(Error::WaitTimeout { .. })),
        "{refused:?}"
    );
    // Dropped: resigned, and b may lead.
    drop(lead);
    let lead_b = b
        .election("e")
        .campaign_within("b", Duration::from_secs(5))
        .unwrap();
    assert!(!lead_b.is_lost());
    lead_b.resign().unwrap();
    a.close().unwrap();
    b.close().unwrap();
}

/// A campaign's wait beyond the clock waits without limit; a TTL beyond
/// `MAX_TTL` is refused by name before any I/O.
#[tokio::test]
async fn a_campaigns_durations_beyond_any_limit_neither_panic_nor_hang() {
    let nodes = RedisNodes::start(1);
    let a = member(nodes.urls(), "a", Duration::from_secs(5));
    let b = member(nodes.urls(), "b", Duration::from_secs(5));
    let ttl = b.election("e").campaign("b").ttl(Duration::MAX).await;
    assert!(matches!(ttl, Err(Error::InvalidInput { .. })), "{ttl:?}");
    let lead = a.election("e").campaign("a").await.unwrap();
    let election_b = b.election("e");
    let waiting = election_b.campaign("b").wait(Duration::MAX).into_future();
    let resign = async {
        tokio::time::sleep(100 * MS).await;
        lead.resign().await.unwrap();
    };
    let (won, ()) = tokio::time::timeout(TOLD_WITHIN, async { tokio::join!(waiting, resign) })
        .await
        .expect("led once a resigned");
    won.unwrap().resign().await.unwrap();
}
