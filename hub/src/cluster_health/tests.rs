//! The health rules over a fake clock: seconds since an arbitrary epoch.

use super::*;

fn at(seconds: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_700_000_000 + seconds).unwrap()
}

fn rules(max_stale_percent: u8, max_per_minute: u32) -> Rules {
    Rules {
        grace: Duration::from_secs(40),
        max_stale_percent,
        max_per_minute,
    }
}

/// Observations: each cluster with the second of its last heartbeat (`None`: never).
fn fleet(clusters: &[(&str, Option<i64>)]) -> Vec<Observation> {
    clusters
        .iter()
        .map(|(name, last)| Observation {
            name: (*name).to_owned(),
            last_heartbeat: last.map(at),
        })
        .collect()
}

fn names(stale: &[(String, Option<jiff::Timestamp>, StaleState)], state: &StaleState) -> Vec<String> {
    stale
        .iter()
        .filter(|(_, _, s)| s == state)
        .map(|(n, _, _)| n.clone())
        .collect()
}

const SETTLE: Duration = Duration::from_secs(300);

#[test]
fn partition_guard_engages_above_the_share_only() {
    assert!(!partitioned(0, 0, 50), "an empty fleet is not a partition");
    assert!(!partitioned(1, 2, 50), "half is not more than half");
    assert!(partitioned(2, 2, 50));
    assert!(partitioned(2, 3, 50));
    assert!(!partitioned(3, 3, 100), "100% turns the guard off");
    assert!(partitioned(1, 10, 0), "0% holds every failover back");
}

#[test]
fn a_cluster_silent_for_the_grace_period_is_failed_over_and_returns_on_its_next_heartbeat() {
    let mut tracker = Tracker::new(rules(50, 2), SETTLE, at(0), None);
    let changes = tracker.observe(&fleet(&[("eu-1", Some(0)), ("us-1", Some(0))]), at(1));
    assert_eq!(changes, Changes::default(), "fresh clusters change nothing");

    // 39 s of silence is within the grace period.
    let changes = tracker.observe(&fleet(&[("eu-1", Some(0)), ("us-1", Some(38))]), at(39));
    assert!(
        changes.stale.is_empty(),
        "not stale before the grace period: {changes:?}"
    );

    let changes = tracker.observe(&fleet(&[("eu-1", Some(0)), ("us-1", Some(38))]), at(40));
    assert_eq!(
        changes.stale,
        vec![("eu-1".to_owned(), Some(at(0)), StaleState::FailedOver)]
    );
    let snapshot = tracker.snapshot();
    assert_eq!(snapshot.failed_over.keys().collect::<Vec<_>>(), ["eu-1"]);
    assert_eq!(snapshot.failed_over["eu-1"].since, at(40));
    assert!(!snapshot.partitioned);

    // Still silent: nothing new to say.
    let changes = tracker.observe(&fleet(&[("eu-1", Some(0)), ("us-1", Some(45))]), at(50));
    assert_eq!(changes, Changes::default());

    // It speaks again: Ready, no longer failed over, settling.
    let changes = tracker.observe(&fleet(&[("eu-1", Some(60)), ("us-1", Some(55))]), at(60));
    assert_eq!(changes.returned, ["eu-1"]);
    let snapshot = tracker.snapshot();
    assert!(snapshot.failed_over.is_empty(), "{snapshot:?}");
    assert!(!snapshot.settled("eu-1", at(60)));
    assert!(snapshot.settled("eu-1", at(360)));

    let changes = tracker.observe(&fleet(&[("eu-1", Some(355)), ("us-1", Some(355))]), at(359));
    assert!(changes.settled.is_empty(), "{changes:?}");
    let changes = tracker.observe(&fleet(&[("eu-1", Some(355)), ("us-1", Some(355))]), at(360));
    assert_eq!(changes.settled, ["eu-1"], "settled once the settle period passed");
    let changes = tracker.observe(&fleet(&[("eu-1", Some(365)), ("us-1", Some(365))]), at(370));
    assert!(changes.settled.is_empty(), "settled is said once: {changes:?}");
}

#[test]
fn a_restarted_hub_gives_every_cluster_a_full_grace_period() {
    // The store holds heartbeats from before the hub went down for ten minutes.
    let mut tracker = Tracker::new(rules(50, 2), SETTLE, at(600), Some(at(0)));
    let clusters = fleet(&[("a", Some(0)), ("b", Some(0)), ("c", Some(0))]);
    let changes = tracker.observe(&clusters, at(601));
    assert!(
        changes.stale.is_empty(),
        "judged before the grace period: {changes:?}"
    );
    // a and b reach the new hub, c does not.
    let clusters = fleet(&[("a", Some(605)), ("b", Some(630)), ("c", Some(0))]);
    let changes = tracker.observe(&clusters, at(639));
    assert!(changes.stale.is_empty(), "{changes:?}");
    let changes = tracker.observe(&clusters, at(640));
    assert_eq!(names(&changes.stale, &StaleState::FailedOver), ["c"]);
}

#[test]
fn a_hub_restarted_within_seconds_still_fails_a_dead_cluster_over_on_time() {
    // `dead` went silent at 0; the others beat until the hub was killed at 25; it is back at 27.
    // Only those 2 s are forgiven: `dead` is failed over at 42, not 40 s after every restart.
    // (The partition guard is off: two of three silent would hold the second back.)
    let mut tracker = Tracker::new(rules(100, 2), SETTLE, at(27), Some(at(25)));
    let clusters = fleet(&[("dead", Some(0)), ("a", Some(25)), ("b", Some(24))]);
    let changes = tracker.observe(&clusters, at(41));
    assert!(changes.stale.is_empty(), "{changes:?}");
    let clusters = fleet(&[("dead", Some(0)), ("a", Some(35)), ("b", Some(36))]);
    let changes = tracker.observe(&clusters, at(42));
    assert_eq!(names(&changes.stale, &StaleState::FailedOver), ["dead"]);
    // A cluster that beat just before the kill and is slow to come back gets the 2 s too.
    let clusters = fleet(&[("dead", Some(0)), ("a", Some(60)), ("b", Some(24))]);
    let changes = tracker.observe(&clusters, at(65));
    assert!(
        changes.stale.is_empty(),
        "b: 41 s silent, 2 of them the hub's: {changes:?}"
    );
    let changes = tracker.observe(&clusters, at(66));
    assert_eq!(names(&changes.stale, &StaleState::FailedOver), ["b"]);
}

#[test]
fn a_heartbeat_stamped_ahead_of_the_hub_clock_is_fresh() {
    let mut tracker = Tracker::new(rules(100, 2), SETTLE, at(0), None);
    let changes = tracker.observe(&fleet(&[("a", Some(200)), ("b", Some(100))]), at(100));
    assert_eq!(changes, Changes::default());
}

#[test]
fn clusters_without_any_heartbeat_are_not_judged() {
    let mut tracker = Tracker::new(rules(50, 2), SETTLE, at(0), None);
    let changes = tracker.observe(&fleet(&[("new", None), ("eu-1", Some(100))]), at(100));
    assert_eq!(changes, Changes::default());
    // One silent cluster of the one judged is 100%: held back, and `new` is not counted.
    let changes = tracker.observe(&fleet(&[("new", None), ("eu-1", Some(100))]), at(140));
    assert_eq!(
        changes.stale,
        vec![(
            "eu-1".to_owned(),
            Some(at(100)),
            StaleState::Held(Held::Partition)
        )]
    );
}

#[test]
fn when_most_clusters_go_silent_at_once_none_is_failed_over() {
    let mut tracker = Tracker::new(rules(50, 10), SETTLE, at(0), None);
    let all = [("a", Some(0)), ("b", Some(0)), ("c", Some(0)), ("d", Some(100))];
    let changes = tracker.observe(&fleet(&all), at(100));
    assert_eq!(
        names(&changes.stale, &StaleState::Held(Held::Partition)),
        ["a", "b", "c"],
        "3 of 4 silent: the hub assumes it is partitioned"
    );
    assert_eq!(changes.partition, Some(true));
    let snapshot = tracker.snapshot();
    assert!(snapshot.partitioned);
    assert!(snapshot.failed_over.is_empty(), "{snapshot:?}");

    // b and c reach the hub again: one of four silent, the guard releases and a fails over.
    let changes = tracker.observe(
        &fleet(&[
            ("a", Some(0)),
            ("b", Some(110)),
            ("c", Some(110)),
            ("d", Some(110)),
        ]),
        at(110),
    );
    assert_eq!(changes.partition, Some(false));
    assert_eq!(changes.returned, ["b", "c"]);
    assert_eq!(names(&changes.stale, &StaleState::FailedOver), ["a"]);
}

#[test]
fn clusters_failed_over_before_a_partition_stay_failed_over() {
    let mut tracker = Tracker::new(rules(50, 10), SETTLE, at(0), None);
    let changes = tracker.observe(
        &fleet(&[("a", Some(0)), ("b", Some(50)), ("c", Some(50)), ("d", Some(50))]),
        at(50),
    );
    assert_eq!(names(&changes.stale, &StaleState::FailedOver), ["a"]);
    let changes = tracker.observe(
        &fleet(&[("a", Some(0)), ("b", Some(50)), ("c", Some(50)), ("d", Some(100))]),
        at(100),
    );
    assert_eq!(changes.partition, Some(true));
    assert_eq!(
        names(&changes.stale, &StaleState::Held(Held::Partition)),
        ["b", "c"]
    );
    assert!(tracker.snapshot().failed_over.contains_key("a"));
}

#[test]
fn at_most_the_rate_limit_of_clusters_fails_over_per_minute_longest_silent_first() {
    let mut tracker = Tracker::new(rules(100, 1), SETTLE, at(0), None);
    let clusters = fleet(&[("a", Some(10)), ("b", Some(5)), ("c", Some(60))]);
    let changes = tracker.observe(&clusters, at(60));
    assert_eq!(
        names(&changes.stale, &StaleState::FailedOver),
        ["b"],
        "b is silent longest"
    );
    assert_eq!(names(&changes.stale, &StaleState::Held(Held::RateLimit)), ["a"]);
    let clusters = fleet(&[("a", Some(10)), ("b", Some(5)), ("c", Some(110))]);
    let changes = tracker.observe(&clusters, at(119));
    assert!(changes.stale.is_empty(), "the window has not passed: {changes:?}");
    let changes = tracker.observe(&clusters, at(120));
    assert_eq!(names(&changes.stale, &StaleState::FailedOver), ["a"]);
    assert_eq!(
        tracker.snapshot().failed_over.keys().collect::<Vec<_>>(),
        ["a", "b"]
    );
}

#[test]
fn a_rate_of_zero_fails_nothing_over() {
    let mut tracker = Tracker::new(rules(100, 0), SETTLE, at(0), None);
    let changes = tracker.observe(&fleet(&[("a", Some(0)), ("b", Some(100))]), at(100));
    assert_eq!(names(&changes.stale, &StaleState::Held(Held::RateLimit)), ["a"]);
    assert!(tracker.snapshot().failed_over.is_empty());
}

#[test]
fn clusters_gone_from_the_store_are_forgotten() {
    let mut tracker = Tracker::new(rules(50, 2), SETTLE, at(0), None);
    tracker.observe(
        &fleet(&[("a", Some(0)), ("b", Some(100)), ("c", Some(100))]),
        at(100),
    );
    assert!(tracker.snapshot().failed_over.contains_key("a"));
    tracker.observe(&fleet(&[("b", Some(100)), ("c", Some(100))]), at(101));
    let snapshot = tracker.snapshot();
    assert!(
        snapshot.failed_over.is_empty() && snapshot.stale.is_empty(),
        "{snapshot:?}"
    );
}

#[test]
fn the_ready_message_gives_the_age_of_the_last_heartbeat_and_the_failover_state() {
    let rules = rules(50, 2);
    let message = stale_message(Some(at(0)), &StaleState::FailedOver, at(45), &rules);
    assert!(
        message.starts_with("no heartbeat for 45s (last at 2023-11-14T22:13:20Z, grace 40s)"),
        "{message}"
    );
    assert!(
        message.ends_with("its replicas are placed in other clusters"),
        "{message}"
    );
    let message = stale_message(None, &StaleState::Held(Held::Partition), at(45), &rules);
    assert!(message.contains("more than 50%"), "{message}");
    let message = stale_message(None, &StaleState::Held(Held::RateLimit), at(45), &rules);
    assert!(message.contains("at most 2 clusters per minute"), "{message}");
}

#[test]
fn the_check_interval_follows_the_grace_period_within_bounds() {
    assert_eq!(check_interval(Duration::from_secs(40)), Duration::from_secs(5));
    assert_eq!(check_interval(Duration::from_secs(2)), Duration::from_millis(500));
    assert_eq!(
        check_interval(Duration::from_millis(100)),
        Duration::from_millis(100)
    );
}
