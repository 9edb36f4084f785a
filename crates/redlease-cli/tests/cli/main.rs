//! End-to-end tests of the `redlease` binary against real redis-server
//! processes on free loopback ports (never 6379).

mod acl;
mod demo;
mod deployments;
mod doctor;
mod elections;
mod exit_codes;
mod guardian;
mod handles;
mod logging;
mod outage;
mod permits;
mod release;
mod restarts;
mod run;
mod shared;
mod status;
mod support;
mod tls;
mod turn;
mod usage;
