use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A lead of election `name` by `worker` in `term`, value `v{term}`,
/// started at `start`, resigning from `resign`, its lease valid until
/// `resign + 400` (renewed all along), never lost.
fn lead(name: usize, worker: usize, term: u64, start: u64, resign: u64) -> Lead {
    Lead {
        worker,
        name,
        term,
        value: format!("v{term}"),
        proclaims: Vec::new(),
        start: ms(start),
        resign: Some(ms(resign)),
        lost: None,
        lost_reason: None,
        valid_until: Some(ms(resign + 400)),
        ended: Ended::Resigned,
    }
}

fn campaigned(worker: usize, name: usize, invoked: u64, returned: u64, won: bool) -> Campaigned {
    Campaigned {
        worker,
        name,
        invoked: ms(invoked),
        returned: ms(returned),
        won,
    }
}

fn told(observer: usize, name: usize, at: u64, leader: Option<(u64, u64, &str)>) -> Told {
    Told {
        observer,
        name,
        at: ms(at),
        leader: leader.map(|(term, revision, value)| Leader {
            term,
            revision,
            value: value.to_string(),
        }),
    }
}

/// Election 0: terms 3, 5 (a proclaim), 9 in turn; election 1: terms 4
/// and 6, the first lost (validity ran out early) and dropped. Observer
/// 7 is told all of it in order, vacancies between; observer 8 misses
/// some (changes told as one), and is told a value whose campaign failed.
fn clean() -> ElectionRun {
    let mut second = lead(0, 1, 5, 120, 300);
    second.proclaims = vec![
        Proclaimed {
            revision: 2,
            value: "v5-p2".into(),
            at: ms(150),
            ok: true,
        },
        Proclaimed {
            revision: 3,
            value: "v5-p3".into(),
            at: ms(200),
            ok: false,
        },
    ];
    let mut lost = lead(1, 2, 4, 10, 500);
    lost.lost = Some(ms(240));
    lost.lost_reason = Some("expired");
    lost.valid_until = Some(ms(250));
    lost.ended = Ended::Dropped;
    ElectionRun {
        names: 2,
        leads: vec![
            lead(0, 0, 3, 10, 100),
            second,
            // Starts as the lead before it begins to resign: touching.
            lead(0, 0, 9, 300, 400),
            lost,
            lead(1, 3, 6, 260, 600),
        ],
        failed: vec![(0, "w4-c9".into()), (1, "w4-c10".into())],
        campaigns: vec![
            // Worker 1 waited from before term 3 ended (100) until it led
            // term 5 (120); worker 3 waited through election 1's gap.
            campaigned(1, 0, 50, 120, true),
            campaigned(3, 1, 200, 260, true),
            // Worker 4 gave up before election 0's gap ended.
            campaigned(4, 0, 90, 110, false),
        ],
        told: vec![
            told(7, 0, 5, None),
            told(7, 0, 12, Some((3, 1, "v3"))),
            told(7, 0, 101, None),
            told(7, 0, 122, Some((5, 1, "v5"))),
            told(7, 0, 152, Some((5, 2, "v5-p2"))),
            // The failed proclaim landed on a quorum after all.
            told(7, 0, 210, Some((5, 3, "v5-p3"))),
            told(7, 0, 302, Some((9, 1, "v9"))),
            told(7, 0, 402, None),
            told(7, 1, 5, None),
            told(7, 1, 12, Some((4, 1, "v4"))),
            told(7, 1, 262, Some((6, 1, "v6"))),
            told(7, 1, 601, None),
            told(8, 0, 6, None),
            // A campaign that failed after its lead was published.
            told(8, 0, 60, Some((2, 1, "w4-c9"))),
            told(8, 0, 303, Some((9, 1, "v9"))),
        ],
        observers: vec![7, 8],
        flagged_by: None,
    }
}

#[test]
fn a_clean_run_passes_and_its_figures_add_up() {
    let v = judge(&clean());
    assert_eq!(v.total(), 0, "{v:?}");
    let f = &v.figures;
    assert_eq!(f.leads, BTreeMap::from([(0, 3), (1, 2)]));
    assert_eq!(f.handoffs, (3, 3));
    assert_eq!(f.ended["resigned"], 4);
    assert_eq!(f.ended["dropped"], 1);
    assert_eq!(f.lost, BTreeMap::from([("expired", 1)]));
    assert_eq!(f.proclaims, (2, 1));
    assert_eq!(f.failed, 2);
    // Gaps: 120 - 100, 300 - 300, 260 - 240.
    assert_eq!(f.gap, (ms(20), ms(20)));
    // Two of the three with someone waiting throughout (worker 1 for
    // term 5, worker 3 for term 6; term 9 started as term 5 ended).
    assert_eq!(f.waited_gap, (2, ms(20), ms(20)));
    let seven = &f.observers[&7];
    assert_eq!(
        (seven.leaders, seven.vacancies, seven.leads_seen),
        (7, 5, 5)
    );
    assert_eq!(seven.last_vacant, (2, 2));
    let eight = &f.observers[&8];
    assert_eq!((eight.leaders, eight.leads_seen), (2, 1));
    assert_eq!(eight.last_vacant, (0, 1));
    // Told 2 ms after each start (3 ms for observer 8's term 9).
    assert_eq!(f.told_after, (ms(2), ms(3)));
}

#[test]
fn overlapping_leads_are_flagged_once_per_pair() {
    let mut run = clean();
    // Term 11 of election 0 starts while term 9 leads (until 400).
    run.leads.push(lead(0, 4, 11, 350, 450));
    let v = judge(&run);
    assert_eq!((v.lead_overlap, v.total()), (1, 1), "{v:?}");
    let example = &v.examples["lead_overlap"][0];
    assert!(
        example.contains("election 0: term 9") && example.contains("term 11"),
        "{example}"
    );
    assert!(example.contains("for 50.0ms"), "{example}");
    // The same lead on election 1 overlaps term 6 (until 600).
    run.leads.last_mut().unwrap().name = 1;
    assert_eq!(judge(&run).lead_overlap, 1);
    // Three at once: three pairs.
    run.leads.push(lead(1, 5, 12, 360, 370));
    assert_eq!(judge(&run).lead_overlap, 3);
}

#[test]
fn a_lead_ends_when_lost_or_past_its_validity_whichever_comes_first() {
    // Term 4 of election 1 was lost at 240 (resigned only at 500): term 6
    // from 260 does not overlap it; from 230 it does.
    let mut run = clean();
    assert_eq!(judge(&run).lead_overlap, 0);
    run.leads[4].start = ms(230);
    assert_eq!(judge(&run).lead_overlap, 1);
    // Not lost by its account, but its validity ended at 250: from 245
    // it overlaps, from 255 it does not.
    let mut run = clean();
    run.leads[3].lost = None;
    run.leads[4].start = ms(255);
    assert_eq!(judge(&run).lead_overlap, 0);
    run.leads[4].start = ms(245);
    assert_eq!(judge(&run).lead_overlap, 1);
    // A leader that heeds neither (the control's) leads until it resigns.
    let mut run = clean();
    run.leads[3].lost = None;
    run.leads[3].valid_until = None;
    assert_eq!(run.leads[3].end(), ms(500));
    assert_eq!(judge(&run).lead_overlap, 1);
}

#[test]
fn an_empty_lead_overlaps_nothing_and_is_counted() {
    let mut run = clean();
    // Lost before its start was read, inside term 9's lead.
    let mut empty = lead(0, 4, 10, 350, 360);
    empty.lost = Some(ms(349));
    empty.lost_reason = Some("refused");
    run.leads.push(empty);
    let v = judge(&run);
    assert_eq!(v.lead_overlap, 0, "{v:?}");
    assert_eq!(v.figures.empty, 1);
    // A term below 9 started after it would still be out of order.
    run.leads.last_mut().unwrap().term = 8;
    assert_eq!(judge(&run).term_order, 1);
}

#[test]
fn terms_that_do_not_rise_in_start_order_are_flagged() {
    let mut run = clean();
    // Election 0's third lead gets term 5 again, then term 4.
    run.leads[2].term = 5;
    let v = judge(&run);
    assert_eq!(v.term_order, 1, "{v:?}");
    assert!(
        v.examples["term_order"][0].contains("term 5 (worker 0"),
        "{:?}",
        v.examples
    );
    run.leads[2].term = 4;
    assert_eq!(judge(&run).term_order, 1);
    // Another name's terms do not count: election 1 may have term 2.
    let mut run = clean();
    run.leads[3].term = 2;
    run.told.retain(|t| t.name != 1);
    assert_eq!(judge(&run).total(), 0);
}

#[test]
fn an_observer_told_terms_or_revisions_out_of_order_is_flagged() {
    let mut run = clean();
    // Observer 8 told term 2 again after term 9.
    run.told.push(told(8, 0, 350, Some((2, 1, "w4-c9"))));
    let v = judge(&run);
    assert_eq!((v.observer_order, v.total()), (1, 1), "{v:?}");
    let example = &v.examples["observer_order"][0];
    assert!(
        example.contains("observer 8, election 0: told term 2 revision 1")
            && example.contains("after term 9 revision 1"),
        "{example}"
    );
    // A revision back within a term.
    let mut run = clean();
    run.told.push(told(7, 0, 220, Some((5, 2, "v5-p2"))));
    assert_eq!(judge(&run).observer_order, 1);
    // The order told, not the order recorded: the same events shuffled
    // pass.
    let mut run = clean();
    run.told.reverse();
    assert_eq!(judge(&run).total(), 0);
    // Another observer's or another name's older term is no violation.
    let mut run = clean();
    run.told.push(told(9, 0, 350, Some((3, 1, "v3"))));
    run.told.push(told(7, 1, 650, Some((9, 1, "v9"))));
    let v = judge(&run);
    assert_eq!(v.observer_order, 0, "{v:?}");
    // (Term 9 of election 1 was never held there.)
    assert_eq!(v.observer_unknown, 1);
}

#[test]
fn a_leader_no_campaigner_held_is_flagged() {
    for (term, value) in [
        // A held term with a value it never proclaimed.
        (5, "v9"),
        // An unheld term with a value of a held one.
        (7, "v5"),
        // An unheld term with a value no campaign tried.
        (8, "made-up"),
        // A failed campaign's value, on the other election.
        (2, "w4-c10"),
    ] {
        let mut run = clean();
        run.told.push(told(7, 0, 450, Some((term, 1, value))));
        let v = judge(&run);
        assert_eq!(v.observer_unknown, 1, "{term} {value}: {v:?}");
        // Told after term 9: out of order as well, unless above it.
        assert_eq!(v.total(), 1 + u64::from(term < 9), "{v:?}");
        assert!(
            v.examples["observer_unknown"][0].contains(&format!("value {value:?}")),
            "{:?}",
            v.examples
        );
    }
}

#[test]
fn examples_are_capped_and_counts_are_not() {
    let mut run = clean();
    for k in 0..20 {
        run.told
            .push(told(7, 1, 700 + k, Some((100 + k, 1, "nobody"))));
    }
    let v = judge(&run);
    assert_eq!(v.observer_unknown, 20);
    assert_eq!(
        v.examples["observer_unknown"].len(),
        crate::examples::EXAMPLES
    );
}
