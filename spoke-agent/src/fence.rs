//! When the agent refuses to follow a work set: fencing against a hub whose store was lost,
//! replaced or rolled back.
//!
//! Revisions count within one store. A hub that lost its store (a lost volume, a move from
//! SQLite to Postgres, a restore from an old backup) answers with another store's identity, a
//! revision below the one the agent applied, or no work at all (revision 0) until it has placed
//! every workload again; following such a set would delete what runs. So the agent keeps
//! everything and reports why ([`WorkHeld`]) until the hub says its sets are complete again
//! ([`WorkSet::complete`]). A set of revision 0 is never followed while objects run: no work is
//! no opinion.
//!
//! A set from the store the agent follows, moving forward, can still be wrong: a hub upgrade
//! that renders every object under another name, a hub reading an empty or wrong management
//! cluster. So a set that would remove most of the workloads the agent runs at once
//! ([`PruneLimits`]) is held too, until an admin confirms it ([`WorkSet::prune_confirmed`]).

use std::collections::BTreeSet;

use nave_api::wire::{HeldReason, WORKLOAD_LABEL, WorkHeld, WorkSet, WorkloadRef};
use serde_json::Value;

use crate::apply::AppliedState;

/// How many of the workloads it runs an agent removes at once without an admin's confirmation.
/// A set is held when it would remove at least `min_workloads` workloads **and** more than
/// `max_percent` percent of those running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PruneLimits {
    /// Share of the running workloads, in percent; `100` never holds.
    pub max_percent: u8,
    /// Fewer removed workloads than this are never held; `0` with `max_percent` `100` disables.
    pub min_workloads: u32,
}

impl Default for PruneLimits {
    fn default() -> Self {
        PruneLimits {
            max_percent: 50,
            min_workloads: 10,
        }
    }
}

impl PruneLimits {
    /// Whether removing `removed` of `running` workloads is more than these limits allow.
    pub fn exceeded(&self, removed: usize, running: usize) -> bool {
        removed > 0
            && removed >= self.min_workloads as usize
            && removed.saturating_mul(100) > running.saturating_mul(usize::from(self.max_percent))
    }
}

/// The workloads `state` runs that `set` no longer has any object of.
fn removed_workloads(state: &AppliedState, set: &WorkSet) -> (usize, usize) {
    let running: BTreeSet<&WorkloadRef> = state.objects.values().flatten().collect();
    let wanted: BTreeSet<WorkloadRef> = set
        .objects
        .iter()
        .filter_map(|o| o.pointer("/metadata/labels").and_then(|l| l.get(WORKLOAD_LABEL)))
        .filter_map(Value::as_str)
        .filter_map(WorkloadRef::from_label_value)
        .collect();
    let removed = running.iter().filter(|w| !wanted.contains(**w)).count();
    (removed, running.len())
}

/// Why `set` must not be applied over `state`; `None` when it may. Nothing is held when nothing
/// runs: there is nothing to protect.
pub fn hold(state: &AppliedState, set: &WorkSet, limits: PruneLimits) -> Option<WorkHeld> {
    if state.objects.is_empty() {
        return None;
    }
    let kept = state.objects.len() as u64;
    let held = |reason, message: String| {
        Some(WorkHeld {
            reason,
            message,
            revision: set.revision,
            objects_kept: kept,
        })
    };
    if set.revision == 0 {
        return held(
            HeldReason::NoWork,
            format!(
                "the hub has no work for this cluster (revision 0); keeping the {kept} object(s) \
                 applied until it publishes a set"
            ),
        );
    }
    if set.complete {
        return mass_prune(state, set, limits);
    }
    let changed = match (&state.store, &set.store) {
        (Some(followed), Some(sent)) if followed != sent => held(
            HeldReason::StoreChanged,
            format!(
                "the hub's store is {sent}, not {followed} whose revision {} was applied; keeping \
                 the {kept} object(s) applied until the hub has published every workload again",
                state.revision.unwrap_or(0)
            ),
        ),
        _ if state.revision.is_some_and(|applied| set.revision < applied) => held(
            HeldReason::RevisionWentBack,
            format!(
                "the hub sent revision {} after revision {} was applied (a store restored from an \
                 older backup?); keeping the {kept} object(s) applied until the hub has published \
                 every workload again",
                set.revision,
                state.revision.unwrap_or(0)
            ),
        ),
        _ => None,
    };
    changed.or_else(|| mass_prune(state, set, limits))
}

/// Holds a set that removes more workloads than `limits` allow, unless it is confirmed.
fn mass_prune(state: &AppliedState, set: &WorkSet, limits: PruneLimits) -> Option<WorkHeld> {
    if set.prune_confirmed.is_some_and(|r| r >= set.revision) {
        return None;
    }
    let (removed, running) = removed_workloads(state, set);
    if !limits.exceeded(removed, running) {
        return None;
    }
    Some(WorkHeld {
        reason: HeldReason::MassPrune,
        message: format!(
            "revision {} would remove {removed} of the {running} workloads this agent runs (more \
             than {}% and at least {} at once); keeping them until an admin confirms it \
             (`nave-hub admin confirm-prune {}`)",
            set.revision, limits.max_percent, limits.min_workloads, set.cluster
        ),
        revision: set.revision,
        objects_kept: state.objects.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::apply::ObjectRef;

    fn running(store: Option<&str>, revision: u64, objects: usize) -> AppliedState {
        AppliedState {
            revision: Some(revision),
            store: store.map(str::to_owned),
            objects: (0..objects)
                .map(|i| {
                    let object = ObjectRef {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        namespace: Some("shop".into()),
                        name: format!("web-{i}"),
                    };
                    (object, Some(WorkloadRef::new("shop", format!("web-{i}"))))
                })
                .collect::<BTreeMap<_, _>>(),
            ..AppliedState::default()
        }
    }

    /// A set that keeps the workloads `web-0` to `web-{kept - 1}`.
    fn keeping(kept: usize, revision: u64) -> WorkSet {
        WorkSet {
            objects: (0..kept)
                .map(|i| {
                    serde_json::json!({
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {
                            "namespace": "shop",
                            "name": format!("web-{i}"),
                            "labels": {WORKLOAD_LABEL: format!("shop.web-{i}")},
                        },
                    })
                })
                .collect(),
            ..set(Some("a"), revision, true)
        }
    }

    fn set(store: Option<&str>, revision: u64, complete: bool) -> WorkSet {
        WorkSet {
            cluster: "eu-1".into(),
            revision,
            objects: Vec::new(),
            store: store.map(str::to_owned),
            complete,
            ..WorkSet::default()
        }
    }

    fn reason(state: &AppliedState, set: &WorkSet) -> Option<HeldReason> {
        hold(state, set, PruneLimits::default()).map(|held| held.reason)
    }

    #[test]
    fn a_set_removing_most_workloads_is_held_until_confirmed() {
        let state = running(Some("a"), 4, 20);
        assert_eq!(reason(&state, &keeping(20, 5)), None, "nothing removed");
        assert_eq!(
            reason(&state, &keeping(10, 5)),
            None,
            "half removed is within the limit"
        );
        let held = hold(&state, &keeping(9, 5), PruneLimits::default()).expect("11 of 20 removed");
        assert_eq!((held.reason, held.revision), (HeldReason::MassPrune, 5));
        assert!(held.message.contains("11 of the 20"), "{}", held.message);
        let confirmed = WorkSet {
            prune_confirmed: Some(5),
            ..keeping(0, 5)
        };
        assert_eq!(reason(&state, &confirmed), None, "confirmed for its revision");
        let stale = WorkSet {
            prune_confirmed: Some(4),
            ..keeping(0, 5)
        };
        assert_eq!(
            reason(&state, &stale),
            Some(HeldReason::MassPrune),
            "a confirmation of an older revision does not cover a newer set"
        );
    }

    #[test]
    fn few_workloads_are_removed_without_confirmation() {
        // Nine of nine: fewer than the ten the default holds at.
        assert_eq!(reason(&running(Some("a"), 4, 9), &keeping(0, 5)), None);
        let off = PruneLimits {
            max_percent: 100,
            min_workloads: 0,
        };
        assert!(
            hold(&running(Some("a"), 4, 50), &keeping(0, 5), off).is_none(),
            "disabled"
        );
    }

    #[test]
    fn a_changed_store_is_held_for_the_store_not_the_prune() {
        // Both apply; the store change is what the operator must hear of first.
        let state = running(Some("a"), 9, 20);
        let set = WorkSet {
            complete: false,
            ..keeping(0, 12)
        };
        let other = WorkSet {
            store: Some("b".into()),
            ..set.clone()
        };
        assert_eq!(reason(&state, &other), Some(HeldReason::StoreChanged));
        assert_eq!(reason(&state, &set), Some(HeldReason::MassPrune));
    }

    #[test]
    fn the_same_store_moving_forward_is_followed() {
        assert_eq!(reason(&running(Some("a"), 4, 3), &set(Some("a"), 5, false)), None);
        assert_eq!(reason(&running(Some("a"), 4, 3), &set(Some("a"), 4, false)), None);
    }

    #[test]
    fn another_store_is_held_until_its_sets_are_complete() {
        let state = running(Some("a"), 9, 3);
        let held = hold(&state, &set(Some("b"), 12, false), PruneLimits::default()).expect("held");
        assert_eq!(
            (held.reason, held.revision, held.objects_kept),
            (HeldReason::StoreChanged, 12, 3)
        );
        assert!(
            held.message.contains('b') && held.message.contains("revision 9"),
            "{}",
            held.message
        );
        assert_eq!(reason(&state, &set(Some("b"), 1, true)), None);
    }

    #[test]
    fn a_revision_going_back_is_held_until_complete() {
        let state = running(Some("a"), 9, 1);
        assert_eq!(
            reason(&state, &set(Some("a"), 3, false)),
            Some(HeldReason::RevisionWentBack)
        );
        assert_eq!(reason(&state, &set(Some("a"), 3, true)), None);
        // An agent of an older hub (no store identity yet) still notices the rollback.
        assert_eq!(
            reason(&running(None, 9, 1), &set(Some("a"), 3, false)),
            Some(HeldReason::RevisionWentBack)
        );
        assert_eq!(
            reason(&running(Some("a"), 9, 1), &set(None, 3, false)),
            Some(HeldReason::RevisionWentBack)
        );
    }

    #[test]
    fn no_work_is_never_followed_while_objects_run() {
        let state = running(Some("a"), 9, 2);
        assert_eq!(
            reason(&state, &set(Some("a"), 0, false)),
            Some(HeldReason::NoWork)
        );
        assert_eq!(reason(&state, &set(Some("b"), 0, true)), Some(HeldReason::NoWork));
    }

    #[test]
    fn nothing_is_held_when_nothing_runs() {
        assert_eq!(reason(&running(Some("a"), 9, 0), &set(Some("b"), 0, false)), None);
        assert_eq!(reason(&AppliedState::default(), &set(Some("b"), 2, false)), None);
    }

    #[test]
    fn the_first_store_identity_is_adopted_silently() {
        // State written by an agent before stores had identities.
        assert_eq!(reason(&running(None, 4, 2), &set(Some("a"), 5, false)), None);
    }
}
