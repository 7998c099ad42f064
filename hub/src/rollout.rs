//! Progressive rollouts across clusters, the pure part: which clusters get a MultiClusterDeployment's
//! new template now, and how far the rollout has got (`status.rollout`).
//!
//! ```text
//!  spec.rollout.waves ─► each cluster's wave (first wave naming or selecting it, else the last)
//!  status.rollout (previous) + template hash + each cluster's (template held, agent's report)
//!    ─► plan: clusters rendered from the new template; the others keep the Deployment they have
//!    ─► status.rollout: wave, phase (Progressing, Paused, Halted, Complete), message; Events
//! ```
//!
//! A wave is rolled out when every cluster of it and of the waves before runs the new template
//! with all its replicas updated and available, as its agent reports (the Deployment's
//! `nave.dev/template-hash` annotation, as applied, names the template). The next wave starts
//! `pauseBetweenWaves` later unless `paused`. A cluster of a started wave reporting its Deployment
//! failing (an apply error, `ProgressDeadlineExceeded`, pods that cannot be created), or a wave
//! not rolled out within `progressDeadline`, halts the rollout for this template: later waves keep
//! what they run until the template changes again (a fix, or `nave rollout undo`). A cluster that
//! has no Deployment of the workload yet (new to it) takes the new template at once: there is no
//! older one to keep.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nave_api::{RolloutPhase, RolloutStatus, Waves};

/// Event reasons on MultiClusterDeployments.
pub mod event_reasons {
    /// A new template started rolling out in waves.
    pub const ROLLOUT_STARTED: &str = "RolloutStarted";
    /// The next wave got the new template.
    pub const WAVE_STARTED: &str = "WaveStarted";
    /// Every cluster runs the new template.
    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    /// A wave failed or missed its deadline; later waves keep their template.
    pub const ROLLOUT_HALTED: &str = "RolloutHalted";
}

/// One cluster with replicas, as the rollout sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// Its name.
    pub name: String,
    /// Its wave (see [`Waves::wave_of`]).
    pub wave: usize,
    /// The template hash of the Deployment its work set holds; `None`: it holds none.
    pub held: Option<String>,
    /// The template its agent reports fully rolled out there (every replica updated and
    /// available, the Deployment's latest spec observed).
    pub rolled_out: Option<String>,
    /// What its agent reports failing about the Deployment, if anything, and how long after its
    /// wave started a report of it counts: a Deployment keeps a `ProgressDeadlineExceeded` of
    /// the template before until it makes progress with the new one (up to its
    /// `progressDeadlineSeconds`), and an apply error stays in the reports until the agent has
    /// applied the new set.
    pub failing: Option<(String, Duration)>,
}

/// An Event to publish on the MultiClusterDeployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Warning rather than Normal.
    pub warning: bool,
    /// One of [`event_reasons`].
    pub reason: &'static str,
    /// For people.
    pub text: String,
}

/// What to do now.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The clusters rendered from the new template; the others keep the Deployment they hold.
    pub update: BTreeSet<String>,
    /// `status.rollout` (`None` without waves).
    pub status: Option<RolloutStatus>,
    /// When to look again (a deadline, the end of a pause).
    pub next: Option<Duration>,
    /// Events to publish.
    pub notes: Vec<Note>,
}

fn elapsed(since: Option<&Time>, now: jiff::Timestamp) -> Duration {
    since.map_or(Duration::ZERO, |t| {
        now.duration_since(t.0).try_into().unwrap_or(Duration::ZERO)
    })
}

fn names<'a>(clusters: impl Iterator<Item = &'a Cluster>) -> String {
    clusters.map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// Halts the rollout in wave `wave` for the reason `why`.
fn halt(status: &mut RolloutStatus, notes: &mut Vec<Note>, wave: &str, why: &str) {
    // What an agent reported is in `why`: bounded, as every status message is.
    let why = why.char_indices().nth(512).map_or(why, |(i, _)| &why[..i]);
    let text = format!(
        "halted in wave {wave}: {why}; later waves keep their template until it changes (a fix, \
         or nave rollout undo)"
    );
    status.phase = RolloutPhase::Halted;
    status.message = Some(text.clone());
    notes.push(Note {
        warning: true,
        reason: event_reasons::ROLLOUT_HALTED,
        text,
    });
}

/// Decides which clusters get the template `hash` now and the rollout's status.
pub fn plan(
    waves: &Waves,
    hash: &str,
    previous: Option<&RolloutStatus>,
    clusters: &[Cluster],
    now: jiff::Timestamp,
) -> Plan {
    let everyone: BTreeSet<String> = clusters.iter().map(|c| c.name.clone()).collect();
    if !waves.staged() {
        return Plan {
            update: everyone,
            status: None,
            next: None,
            notes: Vec::new(),
        };
    }
    let mut notes = Vec::new();
    let last = clusters.iter().map(|c| c.wave).max().unwrap_or(0);
    let mut status = match previous.filter(|p| p.template_hash == hash) {
        Some(p) => p.clone(),
        None => {
            let started = RolloutStatus {
                template_hash: hash.to_owned(),
                wave: 0,
                wave_name: Some(waves.name(0)),
                phase: RolloutPhase::Progressing,
                wave_started_at: Some(Time(now)),
                wave_finished_at: None,
                updated_clusters: 0,
                clusters: 0,
                message: None,
            };
            // Nothing runs another template (a new workload, or every cluster has it already):
            // nothing to roll out.
            if clusters
                .iter()
                .all(|c| c.held.as_deref().is_none_or(|h| h == hash))
            {
                RolloutStatus {
                    wave: i32::try_from(last + 1).unwrap_or(i32::MAX),
                    wave_name: None,
                    phase: RolloutPhase::Complete,
                    ..started
                }
            } else {
                notes.push(Note {
                    warning: false,
                    reason: event_reasons::ROLLOUT_STARTED,
                    text: format!("template {hash} rolls out in waves, {} first", waves.name(0)),
                });
                started
            }
        }
    };
    let mut next = None;
    loop {
        let k = usize::try_from(status.wave).unwrap_or(0);
        if status.phase == RolloutPhase::Complete || k > last {
            status.phase = RolloutPhase::Complete;
            status.wave_name = None;
            status.message = Some(format!("every cluster runs template {hash}"));
            break;
        }
        if status.phase == RolloutPhase::Halted {
            break;
        }
        let started: Vec<&Cluster> = clusters.iter().filter(|c| c.wave <= k).collect();
        let age = elapsed(status.wave_started_at.as_ref(), now);
        // A failure counts once it has had its grace since the current wave started, in that
        // wave or before (a report can still show a pod the rollout is replacing).
        let failed = started.iter().find_map(|c| {
            let (why, grace) = c.failing.as_ref()?;
            (age >= *grace).then_some((c, why))
        });
        if let Some((c, why)) = failed {
            let why = format!("cluster {}: {why}", c.name);
            halt(&mut status, &mut notes, &waves.name(c.wave), &why);
            break;
        }
        let waiting: Vec<&Cluster> = started
            .iter()
            .copied()
            .filter(|c| c.rolled_out.as_deref() != Some(hash))
            .collect();
        if !waiting.is_empty() {
            let spent = elapsed(status.wave_started_at.as_ref(), now);
            if spent >= waves.deadline {
                let why = format!(
                    "not rolled out within {} s: {} not updated and available",
                    waves.deadline.as_secs(),
                    names(waiting.iter().copied())
                );
                halt(&mut status, &mut notes, &waves.name(k), &why);
            } else {
                status.phase = RolloutPhase::Progressing;
                status.message = Some(format!(
                    "wave {} rolling out: waiting for {}",
                    waves.name(k),
                    names(waiting.iter().copied())
                ));
                next = Some(waves.deadline - spent);
            }
            break;
        }
        // Wave k is rolled out.
        let Some(following) = clusters.iter().map(|c| c.wave).filter(|w| *w > k).min() else {
            status.wave = i32::try_from(last + 1).unwrap_or(i32::MAX);
            status.wave_name = None;
            status.phase = RolloutPhase::Complete;
            status.message = Some(format!("every cluster runs template {hash}"));
            notes.push(Note {
                warning: false,
                reason: event_reasons::ROLLOUT_COMPLETE,
                text: format!("every cluster runs template {hash}"),
            });
            break;
        };
        let finished = status.wave_finished_at.get_or_insert(Time(now)).clone();
        if waves.paused {
            status.phase = RolloutPhase::Paused;
            status.message = Some(format!(
                "wave {} rolled out; paused before wave {} (nave rollout resume)",
                waves.name(k),
                waves.name(following)
            ));
            break;
        }
        let rest = waves.pause.saturating_sub(elapsed(Some(&finished), now));
        if !rest.is_zero() {
            status.phase = RolloutPhase::Progressing;
            status.message = Some(format!(
                "wave {} rolled out; wave {} starts in {} s",
                waves.name(k),
                waves.name(following),
                rest.as_secs().max(1)
            ));
            next = Some(rest);
            break;
        }
        status.wave = i32::try_from(following).unwrap_or(i32::MAX);
        status.wave_name = Some(waves.name(following));
        status.wave_started_at = Some(Time(now));
        status.wave_finished_at = None;
        status.phase = RolloutPhase::Progressing;
        notes.push(Note {
            warning: false,
            reason: event_reasons::WAVE_STARTED,
            text: format!(
                "wave {} gets template {hash}: {}",
                waves.name(following),
                names(clusters.iter().filter(|c| c.wave == following))
            ),
        });
    }
    let k = usize::try_from(status.wave).unwrap_or(usize::MAX);
    // The waves before, and the clusters that have the template already (or nothing older).
    let mut update: BTreeSet<String> = clusters
        .iter()
        .filter(|c| c.wave < k || c.held.as_deref().is_none_or(|h| h == hash))
        .map(|c| c.name.clone())
        .collect();
    // The current wave's others, as many at a time as `maxConcurrency` lets replace their pods
    // (in name order); a halted wave takes no more.
    let in_flight = clusters
        .iter()
        .filter(|c| c.wave == k && c.held.as_deref() == Some(hash) && c.rolled_out.as_deref() != Some(hash))
        .count();
    let mut slots = match (status.phase, waves.max_concurrency) {
        (RolloutPhase::Halted, _) => 0,
        // Paused: no more clusters of a wave that has started.
        (_, Some(_))
            if waves.paused
                && clusters
                    .iter()
                    .any(|c| c.wave == k && c.held.as_deref() == Some(hash)) =>
        {
            0
        }
        (_, Some(max)) => max.saturating_sub(in_flight),
        (_, None) => usize::MAX,
    };
    let mut added = false;
    for c in clusters.iter().filter(|c| c.wave == k) {
        if slots == 0 {
            break;
        }
        if update.insert(c.name.clone()) {
            slots -= 1;
            added = true;
        }
    }
    // A few clusters at a time: the deadline and the grace count from the latest ones' start.
    if added && waves.max_concurrency.is_some() && status.phase == RolloutPhase::Progressing {
        status.wave_started_at = Some(Time(now));
    }
    status.updated_clusters = i32::try_from(update.len()).unwrap_or(i32::MAX);
    status.clusters = i32::try_from(clusters.len()).unwrap_or(i32::MAX);
    Plan {
        update,
        status: Some(status),
        next,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use nave_api::{RolloutStrategy, RolloutWave};

    use super::*;

    fn waves(pause: &str, paused: bool) -> Waves {
        RolloutStrategy {
            waves: vec![
                RolloutWave {
                    name: Some("canary".to_owned()),
                    clusters: vec!["c1".to_owned()],
                    cluster_selector: None,
                },
                RolloutWave {
                    clusters: vec!["c2".to_owned()],
                    ..RolloutWave::default()
                },
            ],
            pause_between_waves: Some(pause.to_owned()),
            progress_deadline: Some("60s".to_owned()),
            max_concurrency: None,
            paused,
        }
        .waves()
        .expect("valid")
    }

    fn cluster(name: &str, wave: usize, held: &str, rolled_out: &str) -> Cluster {
        Cluster {
            name: name.to_owned(),
            wave,
            held: Some(held.to_owned()),
            rolled_out: Some(rolled_out.to_owned()),
            failing: None,
        }
    }

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn update(plan: &Plan) -> Vec<&str> {
        plan.update.iter().map(String::as_str).collect()
    }

    #[test]
    fn waves_go_one_after_the_other_each_once_the_one_before_rolled_out() {
        let w = waves("0s", false);
        let mut fleet = vec![
            cluster("c1", 0, "old", "old"),
            cluster("c2", 1, "old", "old"),
            cluster("c3", 2, "old", "old"),
        ];
        let first = plan(&w, "new", None, &fleet, at(0));
        assert_eq!(update(&first), ["c1"], "the canary first");
        let status = first.status.clone().unwrap();
        assert_eq!((status.wave, status.phase), (0, RolloutPhase::Progressing));
        assert_eq!(first.notes[0].reason, event_reasons::ROLLOUT_STARTED);
        assert!(
            status
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("waiting for c1")
        );

        // c1 holds the new template but its agent has not reported it rolled out yet.
        fleet[0].held = Some("new".to_owned());
        let still = plan(&w, "new", Some(&status), &fleet, at(10));
        assert_eq!(update(&still), ["c1"]);
        assert_eq!(still.next, Some(Duration::from_secs(50)), "until the deadline");

        fleet[0].rolled_out = Some("new".to_owned());
        let second = plan(&w, "new", Some(&status), &fleet, at(20));
        assert_eq!(update(&second), ["c1", "c2"]);
        let status = second.status.clone().unwrap();
        assert_eq!((status.wave, status.wave_name.as_deref()), (1, Some("wave-2")));
        assert_eq!(second.notes[0].reason, event_reasons::WAVE_STARTED);

        for c in &mut fleet[1..] {
            c.held = Some("new".to_owned());
            c.rolled_out = Some("new".to_owned());
        }
        let done = plan(&w, "new", Some(&status), &fleet, at(30));
        assert_eq!(update(&done), ["c1", "c2", "c3"]);
        let status = done.status.unwrap();
        assert_eq!(status.phase, RolloutPhase::Complete, "{status:?}");
        assert_eq!((status.updated_clusters, status.clusters), (3, 3));
        assert!(
            done.notes
                .iter()
                .any(|n| n.reason == event_reasons::ROLLOUT_COMPLETE)
        );
    }

    #[test]
    fn a_failing_cluster_or_a_missed_deadline_halts_and_later_waves_keep_their_template() {
        let w = waves("0s", false);
        let mut fleet = vec![cluster("c1", 0, "new", "old"), cluster("c2", 1, "old", "old")];
        let started = plan(&w, "new", None, &fleet, at(0)).status.unwrap();
        fleet[0].failing = Some((
            "Deployment web: ProgressDeadlineExceeded".to_owned(),
            Duration::from_secs(3),
        ));
        let early = plan(&w, "new", Some(&started), &fleet, at(2));
        assert_eq!(
            early.status.unwrap().phase,
            RolloutPhase::Progressing,
            "a failure reported before the Deployment's deadline may be the template before's"
        );
        let halted = plan(&w, "new", Some(&started), &fleet, at(5));
        assert_eq!(update(&halted), ["c1"], "c2 keeps the old template");
        let status = halted.status.unwrap();
        assert_eq!(status.phase, RolloutPhase::Halted);
        assert!(
            status.message.as_deref().unwrap().contains("cluster c1"),
            "{status:?}"
        );
        assert!(halted.notes[0].warning);
        // It stays halted, even once c1 recovers, until the template changes.
        fleet[0].failing = None;
        fleet[0].rolled_out = Some("new".to_owned());
        let later = plan(&w, "new", Some(&status), &fleet, at(50));
        assert_eq!(update(&later), ["c1"]);
        assert_eq!(later.status.unwrap().phase, RolloutPhase::Halted);
        assert!(later.notes.is_empty(), "no second Event");

        // Undo: the old template again, which c2 holds; c1 gets it first.
        let undo = plan(&w, "old", Some(&status), &fleet, at(60));
        assert_eq!(update(&undo), ["c1", "c2"], "c2 runs it already");
        assert_eq!(undo.status.unwrap().phase, RolloutPhase::Progressing);

        // A wave that does not roll out within the deadline halts too.
        let fleet = vec![cluster("c1", 0, "new", "old"), cluster("c2", 1, "old", "old")];
        let late = plan(&w, "new", Some(&started), &fleet, at(61));
        let status = late.status.unwrap();
        assert_eq!(status.phase, RolloutPhase::Halted);
        assert!(
            status.message.unwrap().contains("not rolled out within 60 s: c1"),
            "names the cluster"
        );
    }

    #[test]
    fn a_pause_between_waves_and_a_paused_rollout_hold_the_next_wave() {
        let w = waves("30s", false);
        let fleet = vec![cluster("c1", 0, "new", "new"), cluster("c2", 1, "old", "old")];
        let started = plan(&w, "new", None, &fleet, at(0)).status.unwrap();
        let resting = plan(&w, "new", Some(&started), &fleet, at(10));
        assert_eq!(update(&resting), ["c1"]);
        assert_eq!(
            resting.next,
            Some(Duration::from_secs(20)),
            "wave 1 finished at 0 s, when it was first seen rolled out"
        );
        let status = resting.status.unwrap();
        let on = plan(&w, "new", Some(&status), &fleet, at(30));
        assert_eq!(update(&on), ["c1", "c2"], "30 s after wave 1 finished");

        let paused = plan(&waves("0s", true), "new", Some(&started), &fleet, at(10));
        assert_eq!(update(&paused), ["c1"]);
        assert_eq!(paused.status.unwrap().phase, RolloutPhase::Paused);
    }

    #[test]
    fn max_concurrency_gives_the_template_to_that_many_clusters_at_a_time() {
        let mut one_at_a_time = waves("0s", false);
        one_at_a_time.waves.clear();
        one_at_a_time.max_concurrency = Some(1);
        let mut fleet = vec![
            cluster("c1", 0, "old", "old"),
            cluster("c2", 0, "old", "old"),
            cluster("c3", 0, "old", "old"),
        ];
        let first = plan(&one_at_a_time, "new", None, &fleet, at(0));
        assert_eq!(update(&first), ["c1"]);
        let status = first.status.unwrap();
        fleet[0].held = Some("new".to_owned());
        assert_eq!(
            update(&plan(&one_at_a_time, "new", Some(&status), &fleet, at(5))),
            ["c1"],
            "c1 is replacing its pods: no other starts"
        );
        fleet[0].rolled_out = Some("new".to_owned());
        let next = plan(&one_at_a_time, "new", Some(&status), &fleet, at(10));
        assert_eq!(update(&next), ["c1", "c2"], "the next once c1 has rolled out");
        assert_eq!(next.status.unwrap().phase, RolloutPhase::Progressing);
    }

    #[test]
    fn without_waves_or_without_an_older_template_everything_updates_at_once() {
        let fleet = vec![cluster("c1", 0, "old", "old"), cluster("c2", 0, "old", "old")];
        let none = Waves {
            waves: Vec::new(),
            pause: Duration::ZERO,
            deadline: Duration::from_secs(60),
            paused: false,
            max_concurrency: None,
        };
        let all = plan(&none, "new", None, &fleet, at(0));
        assert_eq!(update(&all), ["c1", "c2"]);
        assert_eq!(all.status, None);

        let new_workload = vec![Cluster {
            held: None,
            rolled_out: None,
            ..cluster("c2", 1, "", "")
        }];
        let created = plan(&waves("0s", false), "new", None, &new_workload, at(0));
        assert_eq!(update(&created), ["c2"]);
        assert_eq!(created.status.unwrap().phase, RolloutPhase::Complete);
    }
}
