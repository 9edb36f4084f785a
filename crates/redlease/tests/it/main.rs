//! Integration tests against real `redis-server` processes started by the
//! testkit on free loopback ports (never 6379).

mod support;

#[path = "../../examples/fencing/store.rs"]
mod fenced_store;

mod acl;
mod acl_deployments;
mod admin;
mod bad_input;
mod blocking;
mod bounds;
mod cluster;
mod durability;
mod durations;
mod elections;
mod expiry;
mod faults;
mod fencing;
mod handle_checks;
mod lifecycle;
mod lock_delay;
mod many;
mod metrics_facade;
mod owners;
mod ownership;
mod plain_acquire;
mod refusals;
mod renewal;
mod restarts;
mod rw;
mod semaphore;
mod sentinel;
mod slow_nodes;
mod tls;
mod turn;
mod waiting;
mod watch;
