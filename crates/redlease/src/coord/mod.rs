//! What a Locker does with its nodes, in the order of a lease's life:
//!
//! - [`acquire`]: one attempt at a claim fanned out to every node and
//!   decided at quorum; waiting in turn (a place in each name's queue,
//!   woken by notifications); fencing tokens.
//! - [`renew`]: keeping leases alive in batches per node, and extending
//!   one on request.
//! - [`release`]: giving a lease back at quorum, or in the background when
//!   nobody waits for the answer; a downgrade, which gives back the write
//!   hold and keeps a read hold.
//!
//! Beside them, [`watch`]: what the nodes say of a name, and the same
//! again each time it changes (for watchers and elections' observers);
//! and [`elect`]: an election's leader record, written at quorum.
//!
//! Beneath them: the lease's one shared record ([`ownership`]), the guard
//! that gives it back if nobody else does ([`guard`]), one request to
//! every node decided at quorum ([`fanout`]), the Locker's nodes and books
//! ([`engine`]), and the background tasks ([`background`]).

pub(crate) mod acquire;
pub(crate) mod background;
pub(crate) mod elect;
pub(crate) mod engine;
pub(crate) mod fanout;
pub(crate) mod guard;
pub(crate) mod ownership;
pub(crate) mod release;
pub(crate) mod renew;
pub(crate) mod watch;
