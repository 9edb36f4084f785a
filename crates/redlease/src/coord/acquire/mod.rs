//! Taking a lease: one [`attempt`] at a claim on every node, decided at
//! quorum; [`wait`]ing for a busy one in turn, with a [`place`] in each
//! name's queue and a [`subscription`] to the releases that wake it; and
//! the [`fence`] a grant carries. A lease exported by another Locker is
//! taken over by [`adopt`]ing it.

pub(crate) mod adopt;
pub(crate) mod attempt;
pub(crate) mod fence;
pub(crate) mod place;
pub(crate) mod subscription;
pub(crate) mod wait;
