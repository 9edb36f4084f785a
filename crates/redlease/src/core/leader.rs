//! Who leads an election, as the nodes tell it: each node's leader
//! record, and the leader a quorum of them agrees on. Pure: no I/O.
//!
//! An election is an exclusive lock whose holder, the leader, writes a
//! record beside the lock key: its term (the lease's fencing token), a
//! revision that each proclaim raises, and its value. A node shows the
//! record only while its lock key is held by the lease that wrote it
//! (proclaim.lua, inspect.lua), so a record outlives nobody's lead.

use std::time::SystemTime;

use crate::core::owner::Holder;

/// One node's leader record of an election
/// ([`NodeLockState::leader`](crate::NodeLockState::leader)), shown only
/// while the lease that wrote it holds the name there.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderRecord {
    /// The leader's term: its lease's fencing token.
    pub term: u64,
    /// How many times it proclaimed a value (1 for the value it won with).
    pub revision: u64,
    /// What it leads with (an address, a name: the caller's choice).
    pub value: String,
}

impl LeaderRecord {
    /// `TERM\tREV\tVALUE`, as proclaim.lua stores it after the hold's id,
    /// or `None`.
    pub(crate) fn parse(text: &str) -> Option<LeaderRecord> {
        let mut parts = text.splitn(3, '\t');
        let term = parts.next()?.parse().ok()?;
        let revision = parts.next()?.parse().ok()?;
        let value = parts.next()?.to_string();
        Some(LeaderRecord {
            term,
            revision,
            value,
        })
    }
}

/// The leader of an election: its value, its term and who it is.
///
/// ```
/// # async fn f(locker: &redlease::Locker) -> Result<(), redlease::Error> {
/// if let Some(leader) = locker.election("scheduler").leader().await? {
///     println!("{} leads in term {}", leader.value, leader.term);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader leads with, as it last proclaimed on a quorum's
    /// nodes (the highest revision any of them shows).
    pub value: String,
    /// Its term: the fencing token of its lease, higher for every new
    /// leader. Pass it to the services the leader writes to, and let them
    /// refuse a lower one.
    pub term: u64,
    /// How many times it proclaimed a value (1 for the value it won with).
    pub revision: u64,
    /// Who holds the lead (owner label and since when), when its lease
    /// names one.
    pub holder: Option<Holder>,
}

impl Leader {
    /// "10.0.0.5:8080 (term 1795, held by build-7:4121 for 12 s)".
    pub fn describe(&self, now: SystemTime) -> String {
        match &self.holder {
            Some(h) => format!(
                "{} (term {}, held by {})",
                self.value,
                self.term,
                h.describe(now)
            ),
            None => format!("{} (term {})", self.value, self.term),
        }
    }
}

/// The leader that `quorum` of the nodes' answers agree on: a term whose
/// record stands on at least `quorum` nodes, held there by a lease not in
/// its lock-delay. Of several (which cannot both hold a quorum), the
/// highest term. `answers` gives each node's record and its holder.
pub(crate) fn agreed<'a>(
    answers: impl IntoIterator<Item = (Option<&'a LeaderRecord>, Option<&'a Holder>)>,
    quorum: usize,
) -> Option<Leader> {
    let mut terms: Vec<(u64, usize, &LeaderRecord, Option<&Holder>)> = Vec::new();
    for (record, holder) in answers {
        let Some(record) = record else { continue };
        if holder.is_some_and(|h| h.in_lock_delay().is_some()) {
            // Its holder ended without a release: nobody leads.
            continue;
        }
        match terms.iter_mut().find(|t| t.0 == record.term) {
            Some(t) => {
                t.1 += 1;
                if record.revision > t.2.revision {
                    t.2 = record;
                }
            }
            None => terms.push((record.term, 1, record, holder)),
        }
    }
    terms
        .into_iter()
        .filter(|t| t.1 >= quorum.max(1))
        .max_by_key(|t| t.0)
        .map(|(term, _, record, holder)| Leader {
            value: record.value.clone(),
            term,
            revision: record.revision,
            holder: holder.map(|h| h.clone().lasting(None)),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(term: u64, revision: u64, value: &str) -> LeaderRecord {
        LeaderRecord {
            term,
            revision,
            value: value.into(),
        }
    }

    #[test]
    fn a_record_is_read_back_with_tabs_in_its_value() {
        assert_eq!(
            LeaderRecord::parse("7\t2\ta\tb"),
            Some(record(7, 2, "a\tb"))
        );
        assert_eq!(LeaderRecord::parse("7\t2\t"), Some(record(7, 2, "")));
        for bad in ["", "7", "7\t2", "x\t2\tv", "7\t-1\tv"] {
            assert_eq!(LeaderRecord::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_leader_needs_its_record_on_a_quorum() {
        let (a, b) = (record(5, 1, "old"), record(5, 2, "new"));
        // On 2 of 3: leads, with the latest value any of them shows.
        let led = agreed([(Some(&a), None), (Some(&b), None), (None, None)], 2).unwrap();
        assert_eq!((led.term, led.value.as_str(), led.revision), (5, "new", 2));
        // On 1 of 3: nobody leads (a proclaim that reached one node, a
        // leader whose hold is gone elsewhere).
        assert_eq!(
            agreed([(Some(&a), None), (None, None), (None, None)], 2),
            None
        );
        // Two terms can never both stand on a quorum; the higher wins a tie
        // of counts below it.
        let c = record(6, 1, "next");
        assert_eq!(
            agreed([(Some(&a), None), (Some(&c), None), (Some(&c), None)], 2)
                .unwrap()
                .term,
            6
        );
    }

    #[test]
    fn a_holder_in_its_lock_delay_leads_nobody() {
        let a = record(5, 1, "v");
        let dead = Holder::of_value(&format!("{}\tci:1\t5\t15000", "a".repeat(48)))
            .lasting(Some(Duration::from_secs(3)));
        let alive = dead.clone().lasting(Some(Duration::from_secs(20)));
        assert_eq!(agreed([(Some(&a), Some(&dead)); 3], 2), None);
        assert!(agreed([(Some(&a), Some(&alive)); 3], 2).is_some());
    }
}
