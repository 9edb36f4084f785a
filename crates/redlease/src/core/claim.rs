//! [`Claim`]: what a request holds, the one description every layer
//! carries: one name or several (all or none), each with its [`Hold`]
//! (alone, shared, or some of a semaphore's permits), in the canonical
//! order. Pure: no I/O.

use std::sync::Arc;

use crate::core::keys::LockKeys;
use crate::core::mode::{Hold, LockMode};

/// A request's names, each with its hold, sorted by name and each once
/// (the canonical order, in which every taker of several names takes
/// them, so that no two wait on each other in a circle). One name, the
/// common case, is kept inline; several are shared. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) enum Claim {
    One {
        keys: LockKeys,
        hold: Hold,
    },
    Many {
        keys: Arc<[LockKeys]>,
        holds: Arc<[Hold]>,
    },
}

impl Claim {
    /// One name in `hold`.
    pub(crate) fn one(keys: LockKeys, hold: Hold) -> Claim {
        Claim::One { keys, hold }
    }

    /// Several names, each with its hold, already in the canonical order
    /// (one name is [`one`](Self::one)).
    pub(crate) fn of(keys: Vec<LockKeys>, holds: Vec<Hold>) -> Claim {
        debug_assert_eq!(keys.len(), holds.len());
        // Sorted by name, not by key ("a" before "ab", whose keys "p{a}"
        // and "p{ab}" sort the other way): distinct is what holds here.
        debug_assert!(keys
            .iter()
            .enumerate()
            .all(|(i, k)| keys[..i].iter().all(|o| o.lock != k.lock)));
        match (&keys[..], &holds[..]) {
            ([one], [hold]) => Claim::one(one.clone(), *hold),
            _ => Claim::Many {
                keys: keys.into(),
                holds: holds.into(),
            },
        }
    }

    pub(crate) fn keys(&self) -> &[LockKeys] {
        match self {
            Claim::One { keys, .. } => std::slice::from_ref(keys),
            Claim::Many { keys, .. } => keys,
        }
    }

    pub(crate) fn holds(&self) -> &[Hold] {
        match self {
            Claim::One { hold, .. } => std::slice::from_ref(hold),
            Claim::Many { holds, .. } => holds,
        }
    }

    /// The first name's lock key.
    pub(crate) fn key(&self) -> &Arc<str> {
        &self.keys()[0].lock
    }

    /// The first name's hold (the only one's, for a claim of one name).
    pub(crate) fn hold(&self) -> Hold {
        self.holds()[0]
    }

    /// How many names it claims.
    pub(crate) fn len(&self) -> usize {
        self.keys().len()
    }

    /// Several names at once.
    pub(crate) fn is_set(&self) -> bool {
        matches!(self, Claim::Many { .. })
    }

    /// The public mode of the first name's hold.
    pub(crate) fn mode(&self) -> LockMode {
        self.hold().mode()
    }

    /// The one name it holds alone, if that is all it claims: the plain
    /// lock, which may be taken with plain commands.
    pub(crate) fn alone(&self) -> Option<&LockKeys> {
        match self {
            Claim::One {
                keys,
                hold: Hold::Exclusive,
            } => Some(keys),
            _ => None,
        }
    }

    /// How many of `nodes` nodes must grant it: the largest quorum any of
    /// its holds needs (a semaphore's permit needs more than a majority).
    pub(crate) fn quorum(&self, nodes: usize) -> usize {
        self.holds()
            .iter()
            .map(|h| h.quorum(nodes))
            .max()
            .unwrap_or(nodes)
    }

    /// The same names, each held shared: what a downgrade leaves.
    pub(crate) fn shared(&self) -> Claim {
        match self {
            Claim::One { keys, .. } => Claim::one(keys.clone(), Hold::Shared),
            Claim::Many { keys, holds } => Claim::Many {
                keys: keys.clone(),
                holds: holds.iter().map(|_| Hold::Shared).collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    fn keys(name: &str) -> LockKeys {
        LockKeys::new("p:", name, 60_000)
    }

    #[test]
    fn a_claim_needs_its_largest_quorum() {
        let permit = Hold::Permit {
            permits: NonZeroU32::new(2).unwrap(),
            weight: NonZeroU32::MIN,
            majority: false,
        };
        assert_eq!(Claim::one(keys("a"), Hold::Exclusive).quorum(5), 3);
        assert_eq!(Claim::one(keys("a"), permit).quorum(5), 4);
        let set = Claim::of(
            vec![keys("a"), keys("b")],
            vec![Hold::Shared, Hold::Exclusive],
        );
        assert_eq!((set.quorum(3), set.len(), set.is_set()), (2, 2, true));
        assert_eq!(set.mode(), LockMode::Shared);
        assert!(set.alone().is_none());
        assert!(Claim::one(keys("a"), Hold::Exclusive).alone().is_some());
        assert!(set.shared().holds().iter().all(|h| *h == Hold::Shared));
    }
}
