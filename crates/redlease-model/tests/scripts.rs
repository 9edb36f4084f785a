//! The scripts' rules, as the model restates them (`server.rs`), against
//! the scripts themselves: each case runs one sequence of requests on a
//! real server through the library (one node, so the node's answer is the
//! outcome) and on the model's server, and every answer must agree: taken
//! or refused, released or not ours, extended or not ours, and the
//! fencing tokens' steps. A rule changed in a script and not in the model
//! (or the other way round) fails here.

use std::time::Duration;

use redlease::rules::ModelHold;
use redlease::{Lease, Locker, RetryPolicy};
use redlease_model::server::{Env, Reply, Request, Server, Token};
use redlease_testkit::RedisNodes;

/// The real servers' TTL; waiting it out lets every hold expire.
const TTL: Duration = Duration::from_millis(300);

#[derive(Clone, Copy, Debug)]
enum Step {
    /// Client `c` tries to take the name in a hold (not in line).
    Take(usize, ModelHold),
    Release(usize),
    Extend(usize),
    /// Every hold expires.
    WaitOut,
}

#[derive(Debug, PartialEq, Eq)]
enum Said {
    /// Taken, with the fencing token's distance from the first token
    /// drawn in the case.
    Taken(i64),
    Refused,
    Done,
    NotOurs,
}

const W: ModelHold = ModelHold::Exclusive;
const R: ModelHold = ModelHold::Shared;
const P: ModelHold = ModelHold::Permit {
    permits: 2,
    majority: false,
};

/// The model's server through a case.
struct ModelSide {
    server: Server,
    now: u8,
    tokens: Vec<Option<(Token, ModelHold)>>,
    attempts: u8,
    first_fence: Option<u64>,
}

impl ModelSide {
    fn new() -> ModelSide {
        ModelSide {
            server: Server::new(None, 0),
            now: 0,
            tokens: vec![None; 3],
            attempts: 0,
            first_fence: None,
        }
    }

    fn env(&self, listening: u32) -> Env {
        Env {
            now: self.now,
            ttl: 5,
            window: 2,
            listening,
            unchecked_release: false,
            always_cut: false,
        }
    }

    fn apply(&mut self, c: usize, request: Request, listening: u32) -> Reply {
        let env = self.env(listening);
        let mut woken = 0;
        self.server
            .apply(&env, c as u8, request, &[W, W, W], &mut woken)
    }

    fn step(&mut self, step: Step) -> Said {
        match step {
            Step::Take(c, hold) => {
                self.attempts += 1;
                let token = Token {
                    client: c as u8,
                    attempt: self.attempts,
                };
                let request = Request::Acquire {
                    token,
                    hold,
                    ticket: None,
                };
                match self.apply(c, request, 0) {
                    Reply::Granted { fence, .. } => {
                        self.tokens[c] = Some((token, hold));
                        let first = *self.first_fence.get_or_insert(fence);
                        Said::Taken(fence as i64 - first as i64)
                    }
                    _ => Said::Refused,
                }
            }
            Step::Release(c) => {
                let (token, hold) = self.tokens[c].expect("a client releases what it took");
                said(self.apply(c, Request::Release { token, hold }, 0))
            }
            Step::Extend(c) => {
                let (token, _) = self.tokens[c].expect("a client extends what it took");
                said(self.apply(c, Request::Extend { token }, 0))
            }
            Step::WaitOut => {
                self.now += 6;
                Said::Done
            }
        }
    }
}

fn said(reply: Reply) -> Said {
    match reply {
        Reply::Done => Said::Done,
        Reply::NotOurs => Said::NotOurs,
        Reply::Granted { .. } => Said::Done,
        Reply::Refused { .. } => Said::Refused,
    }
}

/// The real server through a case.
struct RealSide {
    locker: Locker,
    leases: Vec<Option<Lease>>,
    first_fence: Option<u64>,
}

impl RealSide {
    async fn step(&mut self, name: &str, step: Step) -> Said {
        match step {
            Step::Take(c, hold) => {
                let taken = match hold {
                    ModelHold::Exclusive => self.locker.try_lock(name).await,
                    ModelHold::Shared => self.locker.try_read_lock(name).await,
                    ModelHold::Permit { permits, .. } => {
                        self.locker.semaphore(name, permits).try_acquire().await
                    }
                };
                match taken {
                    Ok(lease) => {
                        let fence = lease.fencing_token().expect("fencing is on");
                        self.leases[c] = Some(lease);
                        let first = *self.first_fence.get_or_insert(fence);
                        Said::Taken(fence as i64 - first as i64)
                    }
                    Err(_) => Said::Refused,
                }
            }
            Step::Release(c) => {
                let lease = self.leases[c]
                    .take()
                    .expect("a client releases what it took");
                match lease.release().await {
                    Ok(()) => Said::Done,
                    Err(_) => Said::NotOurs,
                }
            }
            Step::Extend(c) => {
                let lease = self.leases[c]
                    .as_mut()
                    .expect("a client extends what it took");
                match lease.extend(TTL).await {
                    Ok(()) => Said::Done,
                    Err(_) => Said::NotOurs,
                }
            }
            Step::WaitOut => {
                tokio::time::sleep(TTL + Duration::from_millis(100)).await;
                Said::Done
            }
        }
    }
}

fn locker(nodes: &RedisNodes) -> Locker {
    locker_retrying(nodes, RetryPolicy::attempts(std::num::NonZeroU32::MIN))
}

fn locker_retrying(nodes: &RedisNodes, retry: RetryPolicy) -> Locker {
    Locker::builder(nodes.urls())
        .ttl(TTL)
        .fencing(true)
        .retry(retry)
        // Brand-new test servers: no restart to wait out.
        .advanced(|a| a.restart_quarantine(Duration::ZERO))
        .build()
        .expect("a valid Locker")
}

/// The cases: each a sequence of steps on one fresh name.
fn cases() -> Vec<(&'static str, Vec<Step>)> {
    use Step::*;
    vec![
        (
            "alone: taken once, refused to anyone else, fences rise by one",
            vec![
                Take(0, W),
                Take(1, W),
                Take(1, R),
                Release(0),
                Take(1, W),
                Release(1),
                Take(0, W),
            ],
        ),
        (
            "readers share, a writer waits for the last, readers keep the writer's fence",
            vec![
                Take(0, W),
                Release(0),
                Take(1, R),
                Take(2, R),
                Take(0, W),
                Release(1),
                Take(0, W),
                Release(2),
                Take(0, W),
            ],
        ),
        (
            "two permits: a third holder is refused until one gives back",
            vec![
                Take(0, P),
                Take(1, P),
                Take(2, P),
                Release(0),
                Take(2, P),
                Take(0, P),
                Release(1),
                Release(2),
            ],
        ),
        (
            "release and extend check the token: a lease that expired and was taken is not ours",
            vec![
                Take(0, W),
                Extend(0),
                WaitOut,
                Take(1, W),
                Release(0),
                Extend(1),
                Release(1),
                Take(0, W),
            ],
        ),
        (
            "a reader that expired is not ours; an empty name restarts nothing",
            vec![
                Take(0, R),
                WaitOut,
                Take(1, W),
                Extend(1),
                Release(1),
                Take(2, R),
                Release(2),
            ],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_s_server_answers_as_the_scripts_do() {
    let nodes = RedisNodes::start(1);
    for (i, (case, steps)) in cases().into_iter().enumerate() {
        let name = format!("case-{i}");
        let mut model = ModelSide::new();
        let mut real = RealSide {
            locker: locker(&nodes),
            leases: (0..3).map(|_| None).collect(),
            first_fence: None,
        };
        for (n, step) in steps.iter().enumerate() {
            let expected = model.step(*step);
            let got = real.step(&name, *step).await;
            assert_eq!(
                got, expected,
                "case {case:?}, step {n} ({step:?}): the script said {got:?}, the model {expected:?}"
            );
        }
    }
}

/// A waiter in line is served first: a release reserves the name for it,
/// so that a taker not in line is refused, and the waiter's next attempt
/// takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_reserves_the_name_for_the_waiter_in_line() {
    let nodes = RedisNodes::start(1);
    let (a, c) = (locker(&nodes), locker(&nodes));
    let b = locker_retrying(&nodes, RetryPolicy::within(Duration::from_secs(10)));
    let held = a.lock("queued").await.expect("a free name");
    let waiter = tokio::spawn(async move {
        let lease = b.lock("queued").await;
        (b, lease)
    });
    // The model: A holds, B waits in line (it listens), A releases.
    let mut model = Server::new(None, 0);
    let env = |listening| Env {
        now: 0,
        ttl: 5,
        window: 2,
        listening,
        unchecked_release: false,
        always_cut: false,
    };
    let (ta, tb, tc) = (
        Token {
            client: 0,
            attempt: 1,
        },
        Token {
            client: 1,
            attempt: 1,
        },
        Token {
            client: 2,
            attempt: 1,
        },
    );
    let holds = [W, W, W];
    let mut woken = 0;
    let take = |token, ticket| Request::Acquire {
        token,
        hold: W,
        ticket,
    };
    assert!(matches!(
        model.apply(&env(0b010), 0, take(ta, None), &holds, &mut woken),
        Reply::Granted { .. }
    ));
    assert!(matches!(
        model.apply(&env(0b010), 1, take(tb, Some(1)), &holds, &mut woken),
        Reply::Refused { .. }
    ));
    // The real waiter is in line once the name shows it (bounded: 200
    // looks, 10 ms apart).
    let admin = a.admin();
    let mut queued = false;
    for _ in 0..200 {
        queued = admin.inspect("queued").await.is_ok_and(|s| s.queued() > 0);
        if queued {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(queued, "the waiter never joined the queue");
    held.release().await.expect("A's lease");
    assert_eq!(
        model.apply(
            &env(0b010),
            0,
            Request::Release { token: ta, hold: W },
            &holds,
            &mut woken
        ),
        Reply::Done
    );
    assert_eq!(woken, 0b010, "the model woke the waiter");
    // A taker not in line: refused by both, the name is B's turn.
    let model_c = model.apply(&env(0b010), 2, take(tc, None), &holds, &mut woken);
    let real_c = c.try_lock("queued").await;
    assert!(matches!(model_c, Reply::Refused { .. }), "{model_c:?}");
    assert!(
        real_c.is_err(),
        "the script let a taker overtake the waiter"
    );
    // The waiter's next attempt takes it.
    let model_b = model.apply(&env(0b010), 1, take(tb, Some(1)), &holds, &mut woken);
    assert!(matches!(model_b, Reply::Granted { .. }), "{model_b:?}");
    let (_b, lease) = waiter.await.expect("the waiter's task");
    lease
        .expect("the waiter is served")
        .release()
        .await
        .expect("B's lease");
}
