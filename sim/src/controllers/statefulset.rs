//! The StatefulSet controller, after upstream `pkg/controller/statefulset`
//! (`stateful_set_control.go`, `stateful_set_utils.go`, `stateful_pod_control.go`).
//!
//! ```text
//!  StatefulSet ──► ControllerRevision per distinct template (`<sts>-<hash>`)
//!       │
//!       ├──► PVCs `<template>-<sts>-<ordinal>` (owner refs per the retention policy)
//!       └──► pods `<sts>-<ordinal>`, ordinals `start .. start+replicas-1`
//!                 OrderedReady: one at a time, each Running and Ready before the next;
//!                 scale-down and rolling update: highest ordinal first
//! ```
//!
//! What it does as upstream does: pods named `<sts>-<ordinal>` with `spec.hostname` and
//! `spec.subdomain` (the `serviceName`), labels `statefulset.kubernetes.io/pod-name`,
//! `apps.kubernetes.io/pod-index` and `controller-revision-hash`, a controller owner reference;
//! `OrderedReady` and `Parallel` pod management; failed or succeeded pods deleted and recreated;
//! PVCs from `volumeClaimTemplates` created before their pod and named in its `volumes`;
//! `persistentVolumeClaimRetentionPolicy` carried out through owner references the garbage
//! collector follows (`whenDeleted: Delete`: the StatefulSet owns the claims; `whenScaled:
//! Delete`: a pod above the range owns its claims before it is deleted); ControllerRevisions with
//! `revisionHistoryLimit`; `RollingUpdate` (with `partition`) from the highest ordinal down, one pod
//! at a time, and `OnDelete`; the status counts and revisions, `minReadySeconds` included.
//!
//! Simplified: a pod whose identity or volumes were changed by hand is not repaired (upstream
//! rewrites its labels and volumes); a PVC being deleted does not hold back its pod's creation;
//! claims get their owner references when they are created rather than in a second write;
//! `maxUnavailable` (alpha) is not read; revision names hash this emulator's JSON of the template,
//! so they differ from a real cluster's (as pod-template hashes do).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::cache::{Key, key_of, run_queue};
use super::pods::{availability, controller_of, is_ready, selector_is_empty, selector_matches};
use super::resources::is_terminal;
use super::{Ctx, MANAGER_CONTROLLERS, api_code, events};

const COMPONENT: &str = "statefulset-controller";

/// The pod's name, as a label (upstream `apps.StatefulSetPodNameLabel`).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The pod's ordinal, as a label (upstream `apps.PodIndexLabel`, on by default since 1.28).
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The name of the ControllerRevision a pod was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";
/// The hash part of a ControllerRevision's name, as a label on it.
pub const REVISION_HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// Enqueues a StatefulSet when it, one of its pods or one of its revisions changes.
pub(super) fn register(ctx: &Arc<Ctx>) {
    let q = ctx.sts_queue.clone();
    ctx.statefulsets.on_change(move |_, new| {
        if let Some(s) = new {
            q.add(key_of(s));
        }
    });
    let q = ctx.sts_queue.clone();
    let sets = ctx.statefulsets.clone();
    ctx.pods.on_change(move |old, new| {
        for pod in [old, new].into_iter().flatten() {
            match controller_of(pod.metadata.owner_references.as_ref()) {
                Some(owner) if owner.kind == "StatefulSet" => {
                    if let Some(s) = sets.get_uid(&owner.uid) {
                        q.add(key_of(s.as_ref()));
                    }
                }
                Some(_) => {}
                None => {
                    let ns = pod.metadata.namespace.clone().unwrap_or_default();
                    let labels = pod.metadata.labels.clone().unwrap_or_default();
                    let name = pod.name_any();
                    for s in sets.filter(|s| {
                        s.metadata.namespace.as_deref() == Some(ns.as_str())
                            && !selector_is_empty(&s.spec.selector)
                            && selector_matches(&s.spec.selector, &labels)
                            && ordinal_of(&s.name_any(), &name).is_some()
                    }) {
                        q.add(key_of(s.as_ref()));
                    }
                }
            }
        }
    });
    let q = ctx.sts_queue.clone();
    let sets = ctx.statefulsets.clone();
    ctx.revisions.on_change(move |old, new| {
        for r in [old, new].into_iter().flatten() {
            if let Some(owner) = controller_of(r.metadata.owner_references.as_ref())
                && owner.kind == "StatefulSet"
                && let Some(s) = sets.get_uid(&owner.uid)
            {
                q.add(key_of(s.as_ref()));
            }
        }
    });
}

/// The controller loop.
pub(super) async fn run(ctx: Arc<Ctx>) {
    ctx.statefulsets.wait_synced().await;
    ctx.pods.wait_synced().await;
    ctx.revisions.wait_synced().await;
    ctx.claims.wait_synced().await;
    let q = ctx.sts_queue.clone();
    let shutdown = ctx.shutdown.clone();
    run_queue(q, 8, shutdown, |key| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, key).await }
    })
    .await;
}

/// The ordinal of pod `pod` if it is named as a member of StatefulSet `set` (`<set>-<n>`).
pub fn ordinal_of(set: &str, pod: &str) -> Option<i32> {
    let digits = pod.strip_prefix(set)?.strip_prefix('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The first ordinal of a StatefulSet (`spec.ordinals.start`, default 0).
pub fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0)
}

fn replicas_of(set: &StatefulSet) -> i32 {
    set.spec.replicas.unwrap_or(1).max(0)
}

/// `(whenDeleted, whenScaled)`, each `Retain` or `Delete`.
fn retention(set: &StatefulSet) -> (bool, bool) {
    let p = set.spec.persistent_volume_claim_retention_policy.as_ref();
    let delete = |v: Option<&String>| v.map(String::as_str) == Some("Delete");
    (
        delete(p.and_then(|p| p.when_deleted.as_ref())),
        delete(p.and_then(|p| p.when_scaled.as_ref())),
    )
}

fn controller_ref(api_version: &str, kind: &str, name: String, uid: String) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name,
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn set_ref(set: &StatefulSet) -> OwnerReference {
    controller_ref(
        "apps/v1",
        "StatefulSet",
        set.name_any(),
        set.metadata.uid.clone().unwrap_or_default(),
    )
}

/// The name of a claim of template `template` for `ordinal`.
pub fn claim_name(template: &str, set: &str, ordinal: i32) -> String {
    format!("{template}-{set}-{ordinal}")
}

/// The PVCs of `ordinal`: each template with the pod's claim name, the template's labels plus the
/// selector's `matchLabels`, and the owner references the retention policy asks for while the pod is
/// in range (a pod above the range gets its own reference later, before its deletion).
pub fn claims_for(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let name = set.name_any();
    let (when_deleted, _) = retention(set);
    set.spec
        .volume_claim_templates
        .iter()
        .flatten()
        .map(|t| {
            let mut labels = t.metadata.labels.clone().unwrap_or_default();
            labels.extend(set.spec.selector.match_labels.clone().unwrap_or_default());
            PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name(&t.name_any(), &name, ordinal)),
                    namespace: set.metadata.namespace.clone(),
                    labels: (!labels.is_empty()).then_some(labels),
                    annotations: t.metadata.annotations.clone(),
                    owner_references: when_deleted.then(|| vec![set_ref(set)]),
                    ..Default::default()
                },
                spec: t.spec.clone(),
                status: None,
            }
        })
        .collect()
}

/// A new pod of `set` for `ordinal` from `template` (the template of revision `revision`):
/// upstream `newStatefulSetPod` + `setPodRevision`.
pub fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, ordinal: i32, revision: &str) -> Pod {
    let set_name = set.name_any();
    let name = format!("{set_name}-{ordinal}");
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(REVISION_LABEL.into(), revision.into());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.clone());
    spec.subdomain = set.spec.service_name.clone().filter(|s| !s.is_empty());
    let claims: Vec<Volume> = set
        .spec
        .volume_claim_templates
        .iter()
        .flatten()
        .map(|t| Volume {
            name: t.name_any(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(&t.name_any(), &set_name, ordinal),
                read_only: None,
            }),
            ..Default::default()
        })
        .collect();
    if !claims.is_empty() {
        let names: BTreeSet<&str> = claims.iter().map(|v| v.name.as_str()).collect();
        let others = spec
            .volumes
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|v| !names.contains(v.name.as_str()));
        let mut volumes = claims.clone();
        volumes.extend(others);
        spec.volumes = Some(volumes);
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            generate_name: Some(format!("{set_name}-")),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![set_ref(set)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// What a ControllerRevision of a StatefulSet holds: a patch that restores its template
/// (upstream `getPatch`).
pub fn revision_data(template: &PodTemplateSpec) -> Value {
    let mut t = serde_json::to_value(template).unwrap_or_else(|_| json!({}));
    if let Some(o) = t.as_object_mut() {
        o.insert("$patch".into(), json!("replace"));
    }
    json!({ "spec": { "template": t } })
}

/// The template a revision's data restores.
fn revision_template(r: &ControllerRevision) -> PodTemplateSpec {
    let mut t = r.data.0.pointer("/spec/template").cloned().unwrap_or_default();
    if let Some(o) = t.as_object_mut() {
        o.remove("$patch");
    }
    serde_json::from_value(t).unwrap_or_default()
}

/// The hash in a revision's name: FNV-32 over the data (and the collision count), its decimal
/// digits mapped onto the upstream "safe" alphabet, as upstream `HashControllerRevision`.
pub fn revision_hash(data: &Value, collision_count: i32) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h = h.wrapping_mul(0x0100_0193);
            h ^= u32::from(*b);
        }
    };
    feed(&serde_json::to_vec(data).unwrap_or_default());
    if collision_count > 0 {
        feed(collision_count.to_string().as_bytes());
    }
    let alphabet = super::rollout::ALPHABET;
    h.to_string()
        .bytes()
        .map(|b| alphabet[usize::from(b) % alphabet.len()] as char)
        .collect()
}

/// A new ControllerRevision of `set` (upstream `newRevision`).
fn new_revision(set: &StatefulSet, data: &Value, revision: i64, collision_count: i32) -> ControllerRevision {
    let hash = revision_hash(data, collision_count);
    let mut labels = set
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(REVISION_HASH_LABEL.into(), hash.clone());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{}-{hash}", set.name_any())),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: set.metadata.annotations.clone().filter(|a| !a.is_empty()),
            owner_references: Some(vec![set_ref(set)]),
            ..Default::default()
        },
        data: RawExtension(data.clone()),
        revision: Some(revision),
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && is_ready(pod)
}

fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn revision_of(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .map_or("", String::as_str)
}

/// The status counts over the member pods (upstream `computeReplicaStatus`): `(replicas, ready,
/// available, current, updated)`, and when a Ready pod becomes available.
pub fn replica_counts(
    pods: &[Arc<Pod>],
    min_ready_seconds: i64,
    current: &str,
    update: &str,
    now: jiff::Timestamp,
) -> ([i32; 5], Option<jiff::Timestamp>) {
    let mut c = [0; 5];
    let mut next: Option<jiff::Timestamp> = None;
    for p in pods {
        let created = !phase(p).is_empty();
        if created {
            c[0] += 1;
        }
        if running_and_ready(p) {
            c[1] += 1;
            match availability(p, min_ready_seconds, now) {
                Ok(true) => c[2] += 1,
                Ok(false) => {}
                Err(at) => next = Some(next.map_or(at, |n| n.min(at))),
            }
        }
        if created && !terminating(p) {
            if revision_of(p) == current {
                c[3] += 1;
            }
            if revision_of(p) == update {
                c[4] += 1;
            }
        }
    }
    (c, next)
}

/// What one sync needs besides the cache.
struct SetSync<'a> {
    ctx: &'a Arc<Ctx>,
    set: &'a StatefulSet,
    pods: Api<Pod>,
    claims: Api<PersistentVolumeClaim>,
    pp: PatchParams,
    post: PostParams,
}

impl SetSync<'_> {
    fn event(&self, type_: &str, reason: &str, message: String) {
        self.ctx
            .events
            .record(events::reference(self.set), type_, reason, message, COMPONENT);
    }

    /// Creates the claims of `ordinal` that do not exist yet.
    async fn create_claims(&self, ordinal: i32, pod_name: &str) -> Result<(), kube::Error> {
        let ns = self.set.metadata.namespace.clone().unwrap_or_default();
        for claim in claims_for(self.set, ordinal) {
            let name = claim.name_any();
            if self.ctx.claims.get(&(ns.clone(), name.clone())).is_some() {
                continue;
            }
            match self.claims.create(&self.post, &claim).await {
                Ok(c) => {
                    self.event(
                        "Normal",
                        "SuccessfulCreate",
                        format!(
                            "create Claim {name} Pod {pod_name} in StatefulSet {} success",
                            self.set.name_any()
                        ),
                    );
                    self.ctx.claims.apply(c);
                }
                Err(e) if api_code(&e) == Some(409) => {}
                Err(e) => {
                    self.event(
                        "Warning",
                        "FailedCreate",
                        format!(
                            "create Claim {name} for Pod {pod_name} in StatefulSet {} failed error: {e}",
                            self.set.name_any()
                        ),
                    );
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Makes the claims of a member pod carry the owner references the retention policy asks for
    /// (upstream `UpdatePodClaimForRetentionPolicy`): the set's while the pod is in range and
    /// `whenDeleted: Delete`; the pod's once it is above the range and `whenScaled: Delete`.
    async fn fix_claim_owners(&self, pod: &Pod, in_range: bool) -> Result<(), kube::Error> {
        let (when_deleted, when_scaled) = retention(self.set);
        let set_uid = self.set.metadata.uid.clone().unwrap_or_default();
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(ordinal) = ordinal_of(&self.set.name_any(), &pod.name_any()) else {
            return Ok(());
        };
        let ns = self.set.metadata.namespace.clone().unwrap_or_default();
        for want in claims_for(self.set, ordinal) {
            let Some(have) = self.ctx.claims.get(&(ns.clone(), want.name_any())) else {
                continue;
            };
            let refs = have.metadata.owner_references.clone().unwrap_or_default();
            // A claim controlled by something else is left alone, as upstream does.
            if refs
                .iter()
                .any(|r| r.controller == Some(true) && r.uid != set_uid && r.uid != pod_uid)
            {
                continue;
            }
            let mut desired: Vec<OwnerReference> = refs
                .iter()
                .filter(|r| r.uid != set_uid && r.uid != pod_uid)
                .cloned()
                .collect();
            if in_range && when_deleted {
                desired.push(set_ref(self.set));
            }
            if !in_range && when_scaled {
                desired.push(controller_ref("v1", "Pod", pod.name_any(), pod_uid.clone()));
            }
            if desired == refs {
                continue;
            }
            let patch = json!({"metadata": {"ownerReferences": desired}});
            let updated = self
                .claims
                .patch(&have.name_any(), &self.pp, &Patch::Merge(&patch))
                .await?;
            self.ctx.claims.apply(updated);
        }
        Ok(())
    }

    async fn create_pod(&self, pod: Pod, ordinal: i32) -> Result<(), kube::Error> {
        let name = pod.name_any();
        self.create_claims(ordinal, &name).await?;
        match self.pods.create(&self.post, &pod).await {
            Ok(p) => {
                self.event(
                    "Normal",
                    "SuccessfulCreate",
                    format!(
                        "create Pod {name} in StatefulSet {} successful",
                        self.set.name_any()
                    ),
                );
                self.ctx.pods.apply(p);
                Ok(())
            }
            // Already there: the cache is behind; the next sync sees it.
            Err(e) if api_code(&e) == Some(409) => Ok(()),
            Err(e) => {
                self.event(
                    "Warning",
                    "FailedCreate",
                    format!(
                        "create Pod {name} in StatefulSet {} failed error: {e}",
                        self.set.name_any()
                    ),
                );
                Err(e)
            }
        }
    }

    async fn delete_pod(&self, pod: &Pod) -> Result<(), kube::Error> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self.pods.delete(&pod.name_any(), &dp).await {
            Ok(either) => {
                self.event(
                    "Normal",
                    "SuccessfulDelete",
                    format!(
                        "delete Pod {} in StatefulSet {} successful",
                        pod.name_any(),
                        self.set.name_any()
                    ),
                );
                match either.left() {
                    Some(deleting) => self.ctx.pods.apply(deleting),
                    None => self
                        .ctx
                        .pods
                        .forget(&key_of(pod), pod.metadata.uid.as_deref().unwrap_or("")),
                }
                Ok(())
            }
            Err(e) if matches!(api_code(&e), Some(404 | 409)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The pods this set manages: its own that still match, plus matching orphans it adopts
/// (upstream `ClaimPods` with the `isMemberOf` filter).
async fn claim_pods(s: &SetSync<'_>) -> Vec<Arc<Pod>> {
    let set = s.set;
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let name = set.name_any();
    let empty = BTreeMap::new();
    let matches = |p: &Pod| {
        !selector_is_empty(&set.spec.selector)
            && selector_matches(&set.spec.selector, p.metadata.labels.as_ref().unwrap_or(&empty))
            && ordinal_of(&name, &p.name_any()).is_some()
    };
    let mut members = Vec::new();
    for p in s.ctx.pods.owned_by(&uid) {
        if matches(&p) {
            members.push(p);
            continue;
        }
        let refs: Vec<_> = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|r| r.uid != uid)
            .cloned()
            .collect();
        let patch = json!({"metadata": {"ownerReferences": refs}});
        if let Ok(p) = s.pods.patch(&p.name_any(), &s.pp, &Patch::Merge(&patch)).await {
            s.ctx.pods.apply(p);
        }
    }
    let orphans = s.ctx.pods.filter(|p| {
        p.metadata.namespace.as_deref() == Some(ns.as_str())
            && controller_of(p.metadata.owner_references.as_ref()).is_none()
            && !terminating(p)
            && matches(p)
    });
    for p in orphans {
        let mut refs = p.metadata.owner_references.clone().unwrap_or_default();
        refs.push(set_ref(set));
        let patch = json!({"metadata": {"ownerReferences": refs, "uid": p.metadata.uid}});
        match s.pods.patch(&p.name_any(), &s.pp, &Patch::Merge(&patch)).await {
            Ok(p) => {
                let p = Arc::new(p);
                s.ctx.pods.apply((*p).clone());
                members.push(p);
            }
            Err(e) => tracing::debug!(pod = %p.name_any(), error = %e, "adoption failed"),
        }
    }
    members
}

/// The current and update revisions, creating or renumbering one as upstream
/// `getStatefulSetRevisions` does; `None` after a name collision (the collision count was raised;
/// sync again).
async fn revisions(
    s: &SetSync<'_>,
) -> Result<Option<(Arc<ControllerRevision>, Arc<ControllerRevision>, i32)>, kube::Error> {
    let set = s.set;
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(s.ctx.client.clone(), &ns);
    let mut history = s.ctx.revisions.owned_by(&uid);
    history.sort_by_key(|r| (r.revision.unwrap_or(0), r.name_any()));
    let collision = set.status.as_ref().and_then(|st| st.collision_count).unwrap_or(0);
    let data = revision_data(&set.spec.template);
    let next = history.last().map_or(1, |r| r.revision.unwrap_or(0) + 1);
    let update = if let Some(last) = history.last().filter(|r| r.data.0 == data) {
        last.clone()
    } else if let Some(older) = history.iter().rev().find(|r| r.data.0 == data) {
        // A rollback to an older template: that revision becomes the newest.
        let patch = json!({"revision": next});
        let updated = api.patch(&older.name_any(), &s.pp, &Patch::Merge(&patch)).await?;
        s.ctx.revisions.apply(updated.clone());
        Arc::new(updated)
    } else {
        let cr = new_revision(set, &data, next, collision);
        match api.create(&s.post, &cr).await {
            Ok(created) => {
                s.ctx.revisions.apply(created.clone());
                Arc::new(created)
            }
            Err(e) if api_code(&e) == Some(409) => {
                let existing = api.get(&cr.name_any()).await?;
                let ours =
                    controller_of(existing.metadata.owner_references.as_ref()).is_some_and(|o| o.uid == uid);
                if ours && existing.data.0 == data {
                    s.ctx.revisions.apply(existing.clone());
                    Arc::new(existing)
                } else {
                    let sts: Api<StatefulSet> = Api::namespaced(s.ctx.client.clone(), &ns);
                    let patch = json!({"status": {"collisionCount": collision + 1}});
                    let updated = sts
                        .patch_status(&set.name_any(), &s.pp, &Patch::Merge(&patch))
                        .await?;
                    s.ctx.statefulsets.apply(updated);
                    return Ok(None);
                }
            }
            Err(e) => return Err(e),
        }
    };
    let current_name = set.status.as_ref().and_then(|st| st.current_revision.clone());
    let current = history
        .iter()
        .find(|r| Some(r.name_any()) == current_name)
        .cloned()
        .unwrap_or_else(|| update.clone());
    Ok(Some((current, update, collision)))
}

async fn reconcile(ctx: &Arc<Ctx>, key: Key) -> Result<Option<Duration>, kube::Error> {
    let Some(set) = ctx.statefulsets.get(&key) else {
        return Ok(None);
    };
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let ns = key.0.clone();
    let field_manager = Some(MANAGER_CONTROLLERS.to_owned());
    let s = SetSync {
        ctx,
        set: &set,
        pods: Api::namespaced(ctx.client.clone(), &ns),
        claims: Api::namespaced(ctx.client.clone(), &ns),
        pp: PatchParams {
            field_manager: field_manager.clone(),
            ..Default::default()
        },
        post: PostParams {
            field_manager,
            ..Default::default()
        },
    };
    let members = claim_pods(&s).await;
    let Some((current, update, collision)) = revisions(&s).await? else {
        return Ok(Some(Duration::from_millis(10)));
    };
    let set_name = set.name_any();
    let start = start_ordinal(&set);
    let replicas = replicas_of(&set);
    let end = start + replicas - 1;
    let min_ready = i64::from(set.spec.min_ready_seconds.unwrap_or(0));
    let monotonic = set.spec.pod_management_policy.as_deref() != Some("Parallel");
    let strategy = set.spec.update_strategy.as_ref();
    let on_delete = strategy.and_then(|u| u.type_.as_deref()) == Some("OnDelete");
    let partition = strategy
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .unwrap_or(0);
    let now = jiff::Timestamp::now();
    let available = |p: &Pod| running_and_ready(p) && availability(p, min_ready, now) == Ok(true);
    let healthy = |p: &Pod| !terminating(p) && available(p);

    let mut in_range: BTreeMap<i32, Arc<Pod>> = BTreeMap::new();
    let mut condemned: Vec<Arc<Pod>> = Vec::new();
    for p in &members {
        let Some(ord) = ordinal_of(&set_name, &p.name_any()) else {
            continue;
        };
        if (start..=end).contains(&ord) {
            in_range.insert(ord, p.clone());
        } else {
            condemned.push(p.clone());
        }
    }
    condemned.sort_by_key(|p| std::cmp::Reverse(ordinal_of(&set_name, &p.name_any())));
    let first_unhealthy: Option<String> = (start..=end)
        .find_map(|o| match in_range.get(&o) {
            Some(p) if healthy(p) => None,
            Some(p) => Some(p.name_any()),
            None => Some(format!("{set_name}-{o}")),
        })
        .or_else(|| condemned.iter().rev().find(|p| !healthy(p)).map(|p| p.name_any()));

    // Bring every ordinal in range into existence, in order; OrderedReady stops at the first one
    // that is not yet Running, Ready and available.
    let mut blocked = false;
    for ord in start..=end {
        match in_range.get(&ord) {
            None => {
                let (template, revision) = if ord < start + partition {
                    (revision_template(&current), current.name_any())
                } else {
                    (revision_template(&update), update.name_any())
                };
                s.create_pod(new_pod(&set, &template, ord, &revision), ord)
                    .await?;
                if monotonic {
                    blocked = true;
                    break;
                }
            }
            Some(p) => {
                if is_terminal(p) {
                    if !terminating(p) {
                        s.delete_pod(p).await?;
                    }
                    if monotonic {
                        blocked = true;
                        break;
                    }
                    continue;
                }
                if phase(p) == "Pending" {
                    s.create_claims(ord, &p.name_any()).await?;
                }
                if monotonic && (terminating(p) || !available(p)) {
                    blocked = true;
                    break;
                }
                s.fix_claim_owners(p, true).await?;
            }
        }
    }

    // Scale down: the highest ordinal first; OrderedReady one at a time, and only when every
    // pod below is healthy (the first unhealthy pod itself may go).
    if !blocked {
        for p in &condemned {
            s.fix_claim_owners(p, false).await?;
        }
        for p in &condemned {
            if terminating(p) {
                if monotonic {
                    blocked = true;
                    break;
                }
                continue;
            }
            if monotonic && !available(p) && first_unhealthy.as_deref() != Some(p.name_any().as_str()) {
                blocked = true;
                break;
            }
            s.delete_pod(p).await?;
            if monotonic {
                blocked = true;
                break;
            }
        }
    }

    // Rolling update: from the highest ordinal down to the partition, one pod at a time, waiting
    // for the replacement to be available before the next.
    if !blocked && !on_delete {
        let update_name = update.name_any();
        for ord in (start + partition.max(0)..=end).rev() {
            let Some(p) = in_range.get(&ord) else {
                break;
            };
            if revision_of(p) != update_name && !terminating(p) {
                s.delete_pod(p).await?;
                break;
            }
            if !healthy(p) {
                break;
            }
        }
    }

    truncate_history(&s, &current, &update).await?;
    let next = write_status(&s, &current, &update, collision).await?;
    Ok(next)
}

/// Deletes the oldest revisions no pod uses beyond `revisionHistoryLimit` (upstream
/// `truncateHistory`).
async fn truncate_history(
    s: &SetSync<'_>,
    current: &ControllerRevision,
    update: &ControllerRevision,
) -> Result<(), kube::Error> {
    let set = s.set;
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let mut live: BTreeSet<String> = [current.name_any(), update.name_any()].into();
    for p in s.ctx.pods.owned_by(&uid) {
        live.insert(revision_of(&p).to_owned());
    }
    let mut history: Vec<Arc<ControllerRevision>> = s
        .ctx
        .revisions
        .owned_by(&uid)
        .into_iter()
        .filter(|r| !live.contains(&r.name_any()))
        .collect();
    history.sort_by_key(|r| (r.revision.unwrap_or(0), r.name_any()));
    let limit = usize::try_from(set.spec.revision_history_limit.unwrap_or(10)).unwrap_or(0);
    if history.len() <= limit {
        return Ok(());
    }
    let ns = set.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(s.ctx.client.clone(), &ns);
    for r in &history[..history.len() - limit] {
        match api.delete(&r.name_any(), &DeleteParams::default()).await {
            Ok(_) => s
                .ctx
                .revisions
                .forget(&key_of(r.as_ref()), r.metadata.uid.as_deref().unwrap_or("")),
            Err(e) if api_code(&e) == Some(404) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes the status from the (write-through) cache; answers when to look again for a pod that
/// becomes available with `minReadySeconds`.
async fn write_status(
    s: &SetSync<'_>,
    current: &ControllerRevision,
    update: &ControllerRevision,
    collision: i32,
) -> Result<Option<Duration>, kube::Error> {
    let set = s.set;
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let name = set.name_any();
    let pods: Vec<Arc<Pod>> = s
        .ctx
        .pods
        .owned_by(&uid)
        .into_iter()
        .filter(|p| ordinal_of(&name, &p.name_any()).is_some())
        .collect();
    let now = jiff::Timestamp::now();
    let min_ready = i64::from(set.spec.min_ready_seconds.unwrap_or(0));
    let (mut current_name, update_name) = (current.name_any(), update.name_any());
    let ([replicas, ready, available, mut current_replicas, updated], next) =
        replica_counts(&pods, min_ready, &current_name, &update_name, now);
    // Upstream `completeRollingUpdate`.
    let desired = replicas_of(set);
    let rolling = set.spec.update_strategy.as_ref().and_then(|u| u.type_.as_deref()) != Some("OnDelete");
    if rolling && updated == desired && ready == desired && replicas == desired {
        current_replicas = updated;
        current_name = update_name.clone();
    }
    let nz = |v: i32| (v != 0).then_some(v);
    let old = set.status.clone().unwrap_or_default();
    let want = (
        set.metadata.generation,
        replicas,
        nz(ready),
        available,
        nz(current_replicas),
        nz(updated),
        Some(current_name.clone()),
        Some(update_name.clone()),
        collision,
    );
    let have = (
        old.observed_generation,
        old.replicas,
        old.ready_replicas.and_then(nz),
        old.available_replicas.unwrap_or(0),
        old.current_replicas.and_then(nz),
        old.updated_replicas.and_then(nz),
        old.current_revision.clone(),
        old.update_revision.clone(),
        old.collision_count.unwrap_or(0),
    );
    if want != have || old.collision_count.is_none() {
        let patch = json!({"status": {
            "observedGeneration": want.0,
            "replicas": replicas,
            "readyReplicas": want.2,
            "availableReplicas": available,
            "currentReplicas": want.4,
            "updatedReplicas": want.5,
            "currentRevision": current_name,
            "updateRevision": update_name,
            "collisionCount": collision,
        }});
        let api: Api<StatefulSet> = Api::namespaced(
            s.ctx.client.clone(),
            set.metadata.namespace.as_deref().unwrap_or(""),
        );
        let updated = api.patch_status(&name, &s.pp, &Patch::Merge(&patch)).await?;
        s.ctx.statefulsets.apply(updated);
    }
    Ok(next.map(|at| Duration::from_millis(at.duration_since(now).as_millis().max(0) as u64 + 50)))
}

#[cfg(test)]
mod tests;
