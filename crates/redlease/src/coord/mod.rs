//! What a Locker does with its nodes: one attempt at a claim fanned out to
//! every node and decided at quorum, waiting in turn with notifications,
//! releases, renewal in batches per node, and the background tasks.

pub(crate) mod attempt;
pub(crate) mod background;
pub(crate) mod engine;
pub(crate) mod fanout;
pub(crate) mod fence;
pub(crate) mod guard;
pub(crate) mod lane;
pub(crate) mod place;
pub(crate) mod release;
pub(crate) mod renew;
pub(crate) mod subscription;
pub(crate) mod wait;
