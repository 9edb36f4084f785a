//! A model of redlease's algorithm, explored exhaustively with stateright:
//! every interleaving of a small world of servers, clients and a lossy
//! network, up to a bounded depth, checked against the properties the
//! library promises. See docs/safety.md for what it covers and what it
//! does not.
//!
//! The model decides with the library's own pure rules (`redlease::rules`,
//! behind the `model` feature): quorum sizes, validity and its drift
//! allowance, the expiry bounds a kept-alive lease is judged by, the
//! fencing token, when a renewal is due and the restart quarantine. What it
//! restates (the scripts' rules, in [`server`]) is tied to the scripts by
//! `tests/scripts.rs`, which runs the same cases on a real server.

pub mod check;
pub mod client;
pub mod model;
pub mod server;
pub mod trace;
pub mod world;
