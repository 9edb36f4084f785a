//! Stress tests against real `redis-server` processes: many tasks and many
//! leases at once. A separate test binary, so their load does not disturb
//! the timing-sensitive tests in `it`.

#[allow(dead_code)]
#[path = "../it/support.rs"]
mod support;

mod mutual_exclusion;
mod renewal;
mod tokens;
