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

use nave_api::wire::{HeldReason, WorkHeld, WorkSet};

use crate::apply::AppliedState;

/// Why `set` must not be applied over `state`; `None` when it may. Nothing is held when nothing
/// runs: there is nothing to protect.
pub fn hold(state: &AppliedState, set: &WorkSet) -> Option<WorkHeld> {
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
        return None;
    }
    match (&state.store, &set.store) {
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
    }
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
                    (object, None)
                })
                .collect::<BTreeMap<_, _>>(),
        }
    }

    fn set(store: Option<&str>, revision: u64, complete: bool) -> WorkSet {
        WorkSet {
            cluster: "eu-1".into(),
            revision,
            objects: Vec::new(),
            store: store.map(str::to_owned),
            complete,
        }
    }

    fn reason(state: &AppliedState, set: &WorkSet) -> Option<HeldReason> {
        hold(state, set).map(|held| held.reason)
    }

    #[test]
    fn the_same_store_moving_forward_is_followed() {
        assert_eq!(reason(&running(Some("a"), 4, 3), &set(Some("a"), 5, false)), None);
        assert_eq!(reason(&running(Some("a"), 4, 3), &set(Some("a"), 4, false)), None);
    }

    #[test]
    fn another_store_is_held_until_its_sets_are_complete() {
        let state = running(Some("a"), 9, 3);
        let held = hold(&state, &set(Some("b"), 12, false)).expect("held");
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
