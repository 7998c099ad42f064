//! The ReplicaSet controller: keeps `spec.replicas` active pods, adopting matching
//! orphans, and writes the status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::cache::{Key, key_of, run_queue};
use super::pods::{
    availability, controller_of, deletion_order, is_active, is_ready, selector_is_empty, selector_matches,
};
use super::{Ctx, MANAGER_CONTROLLERS, api_code, events};

const COMPONENT: &str = "replicaset-controller";
/// Upstream creates at most 500 pods per sync.
const BURST: usize = 500;

/// Enqueues a ReplicaSet when it or one of its pods changes.
pub(super) fn register(ctx: &Arc<Ctx>) {
    let q = ctx.rs_queue.clone();
    ctx.replicasets.on_change(move |_, new| {
        if let Some(rs) = new {
            q.add(key_of(rs));
        }
    });
    let q = ctx.rs_queue.clone();
    let rss = ctx.replicasets.clone();
    ctx.pods.on_change(move |old, new| {
        for pod in [old, new].into_iter().flatten() {
            match controller_of(pod.metadata.owner_references.as_ref()) {
                Some(owner) if owner.kind == "ReplicaSet" => {
                    if let Some(rs) = rss.get_uid(&owner.uid) {
                        q.add(key_of(rs.as_ref()));
                    }
                }
                Some(_) => {}
                None => {
                    // An orphan: the ReplicaSets that would adopt it.
                    let ns = pod.metadata.namespace.clone().unwrap_or_default();
                    let labels = pod.metadata.labels.clone().unwrap_or_default();
                    for rs in rss.filter(|rs| {
                        rs.metadata.namespace.as_deref() == Some(ns.as_str())
                            && !selector_is_empty(&rs.spec.selector)
                            && selector_matches(&rs.spec.selector, &labels)
                    }) {
                        q.add(key_of(rs.as_ref()));
                    }
                }
            }
        }
    });
}

/// The controller loop.
pub(super) async fn run(ctx: Arc<Ctx>) {
    ctx.replicasets.wait_synced().await;
    ctx.pods.wait_synced().await;
    let q = ctx.rs_queue.clone();
    let shutdown = ctx.shutdown.clone();
    run_queue(q, 16, shutdown, |key| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, key).await }
    })
    .await;
}

/// The status counts of a ReplicaSet over its pods: `(replicas, fullyLabeled, ready, available,
/// next availability check)`.
pub fn status_counts(
    rs: &ReplicaSet,
    pods: &[Arc<Pod>],
    now: jiff::Timestamp,
) -> (i32, i32, i32, i32, Option<Duration>) {
    let spec = Some(&rs.spec);
    let min_ready = i64::from(spec.and_then(|s| s.min_ready_seconds).unwrap_or(0));
    let template_labels: BTreeMap<String, String> = spec
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let (mut replicas, mut labeled, mut ready, mut available) = (0, 0, 0, 0);
    let mut next: Option<jiff::Timestamp> = None;
    for p in pods.iter().filter(|p| is_active(p)) {
        replicas += 1;
        let labels = p.metadata.labels.clone().unwrap_or_default();
        if template_labels.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            labeled += 1;
        }
        if is_ready(p) {
            ready += 1;
        }
        match availability(p, min_ready, now) {
            Ok(true) => available += 1,
            Ok(false) => {}
            Err(at) => next = Some(next.map_or(at, |n| n.min(at))),
        }
    }
    let wait = next.map(|at| Duration::from_millis(at.duration_since(now).as_millis().max(0) as u64 + 50));
    (replicas, labeled, ready, available, wait)
}

fn pod_from_template(rs: &ReplicaSet) -> Pod {
    let template = rs.spec.template.clone().unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let name = rs.name_any();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: rs.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name,
                uid: rs.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

async fn reconcile(ctx: &Arc<Ctx>, key: Key) -> Result<Option<Duration>, kube::Error> {
    let Some(rs) = ctx.replicasets.get(&key) else {
        return Ok(None);
    };
    if rs.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let spec = &rs.spec;
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let ns = key.0.clone();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PatchParams {
        field_manager: Some(MANAGER_CONTROLLERS.into()),
        ..Default::default()
    };

    // Adopt orphans that match, release owned pods that no longer match.
    if !selector_is_empty(&spec.selector) {
        let orphans = ctx.pods.filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns.as_str())
                && controller_of(p.metadata.owner_references.as_ref()).is_none()
                && is_active(p)
                && selector_matches(
                    &spec.selector,
                    p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
                )
        });
        for p in orphans {
            let mut refs = p.metadata.owner_references.clone().unwrap_or_default();
            refs.extend(
                pod_from_template(&rs)
                    .metadata
                    .owner_references
                    .unwrap_or_default(),
            );
            let patch = json!({"metadata": {"ownerReferences": refs, "uid": p.metadata.uid}});
            match api.patch(&p.name_any(), &pp, &Patch::Merge(&patch)).await {
                Ok(p) => ctx.pods.apply(p),
                Err(e) => tracing::debug!(pod = %p.name_any(), error = %e, "adoption failed"),
            }
        }
    }
    let mut owned: Vec<Arc<Pod>> = Vec::new();
    for p in ctx.pods.owned_by(&uid) {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        if selector_is_empty(&spec.selector) || !selector_matches(&spec.selector, &labels) {
            let refs: Vec<_> = p
                .metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|r| r.uid != uid)
                .cloned()
                .collect();
            let patch = json!({"metadata": {"ownerReferences": refs}});
            if let Ok(p) = api.patch(&p.name_any(), &pp, &Patch::Merge(&patch)).await {
                ctx.pods.apply(p);
            }
            continue;
        }
        owned.push(p);
    }

    let desired = usize::try_from(spec.replicas.unwrap_or(1).max(0)).unwrap_or(0);
    let mut active: Vec<Arc<Pod>> = owned.iter().filter(|p| is_active(p)).cloned().collect();
    let mut failure: Option<String> = None;
    if active.len() < desired {
        let n = (desired - active.len()).min(BURST);
        let template = pod_from_template(&rs);
        let post = PostParams {
            field_manager: Some(MANAGER_CONTROLLERS.into()),
            ..Default::default()
        };
        let results: Vec<Result<Pod, kube::Error>> = futures::stream::iter(0..n)
            .map(|_| {
                let (api, post, template) = (api.clone(), post.clone(), template.clone());
                async move { api.create(&post, &template).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        for r in results {
            match r {
                Ok(p) => {
                    ctx.events.record(
                        events::reference(rs.as_ref()),
                        "Normal",
                        "SuccessfulCreate",
                        format!("Created pod: {}", p.name_any()),
                        COMPONENT,
                    );
                    ctx.pods.apply(p);
                }
                Err(e) => {
                    ctx.events.record(
                        events::reference(rs.as_ref()),
                        "Warning",
                        "FailedCreate",
                        format!("Error creating: {e}"),
                        COMPONENT,
                    );
                    failure = Some(match &e {
                        kube::Error::Api(s) => s.message.clone(),
                        other => other.to_string(),
                    });
                }
            }
        }
    } else if active.len() > desired {
        active.sort_by(|a, b| deletion_order(a, b));
        let surplus: Vec<Arc<Pod>> = active.iter().take(active.len() - desired).cloned().collect();
        let results: Vec<_> = futures::stream::iter(surplus)
            .map(|p| {
                let api = api.clone();
                async move {
                    let dp = DeleteParams {
                        preconditions: Some(Preconditions {
                            uid: p.metadata.uid.clone(),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    (api.delete(&p.name_any(), &dp).await, p)
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        for (r, p) in results {
            match r {
                Ok(either) => {
                    ctx.events.record(
                        events::reference(rs.as_ref()),
                        "Normal",
                        "SuccessfulDelete",
                        format!("Deleted pod: {}", p.name_any()),
                        COMPONENT,
                    );
                    match either.left() {
                        Some(deleting) => ctx.pods.apply(deleting),
                        None => ctx
                            .pods
                            .forget(&key_of(p.as_ref()), p.metadata.uid.as_deref().unwrap_or("")),
                    }
                }
                Err(e) if api_code(&e) == Some(404) => {}
                Err(e) => tracing::debug!(pod = %p.name_any(), error = %e, "deleting a surplus pod failed"),
            }
        }
    }

    // Status from the (write-through) cache.
    let pods: Vec<Arc<Pod>> = ctx.pods.owned_by(&uid);
    let now = jiff::Timestamp::now();
    let (replicas, labeled, ready, available, next) = status_counts(&rs, &pods, now);
    let old = rs.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone().unwrap_or_default();
    match &failure {
        Some(msg)
            if !conditions.iter().any(|c| {
                c.type_.as_deref() == Some("ReplicaFailure") && c.message.as_deref() == Some(msg)
            }) =>
        {
            conditions.retain(|c| c.type_.as_deref() != Some("ReplicaFailure"));
            conditions.push(k8s_openapi::api::apps::v1::ReplicaSetCondition {
                type_: Some("ReplicaFailure".into()),
                status: Some("True".into()),
                reason: Some("FailedCreate".into()),
                message: Some(msg.clone()),
                last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    super::rollout::whole_seconds(now),
                )),
            });
        }
        None if active.len() >= desired || !conditions.is_empty() => {
            conditions.retain(|c| c.type_.as_deref() != Some("ReplicaFailure"));
        }
        Some(_) | None => {}
    }
    let nz = |v: i32| if v == 0 { None } else { Some(v) };
    let want = (
        replicas,
        nz(labeled),
        nz(ready),
        nz(available),
        rs.metadata.generation,
        (!conditions.is_empty()).then(|| conditions.clone()),
    );
    let have = (
        old.replicas,
        old.fully_labeled_replicas.and_then(nz),
        old.ready_replicas.and_then(nz),
        old.available_replicas.and_then(nz),
        old.observed_generation,
        old.conditions.clone().filter(|c| !c.is_empty()),
    );
    if want != have {
        let patch = json!({"status": {
            "replicas": replicas,
            "fullyLabeledReplicas": want.1,
            "readyReplicas": want.2,
            "availableReplicas": want.3,
            "observedGeneration": want.4,
            "conditions": want.5,
        }});
        let rs_api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &ns);
        let updated = rs_api.patch_status(&key.1, &pp, &Patch::Merge(&patch)).await?;
        ctx.replicasets.apply(updated);
    }
    // A pod that could not be created is tried again, as upstream's rate-limited requeue does
    // (here after a fixed second): a refusal by an admission webhook or a quota is often
    // temporary, and nothing else may change to wake this ReplicaSet.
    if failure.is_some() {
        return Ok(Some(next.map_or(CREATE_RETRY, |n| n.min(CREATE_RETRY))));
    }
    Ok(next)
}

/// How soon a ReplicaSet whose pod creation failed tries again.
const CREATE_RETRY: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::apps::v1::ReplicaSetSpec;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn status_counts_ready_available_and_labels() {
        let rs = ReplicaSet {
            spec: ReplicaSetSpec {
                min_ready_seconds: Some(10),
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some([("app".to_string(), "web".to_string())].into()),
                        ..Default::default()
                    }),
                    spec: None,
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let now = jiff::Timestamp::from_second(1000).expect("ts");
        let pod = |ready_at: Option<i64>, labelled: bool, deleting: bool| {
            let mut p = Pod::default();
            if labelled {
                p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
            }
            if deleting {
                p.metadata.deletion_timestamp = Some(Time(now));
            }
            p.status = Some(PodStatus {
                phase: Some("Running".into()),
                conditions: ready_at.map(|t| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(jiff::Timestamp::from_second(t).expect("ts"))),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            });
            Arc::new(p)
        };
        let pods = vec![
            pod(Some(900), true, false),
            pod(Some(995), false, false),
            pod(None, true, false),
            pod(Some(1), true, true),
        ];
        let (replicas, labeled, ready, available, next) = status_counts(&rs, &pods, now);
        assert_eq!((replicas, labeled, ready, available), (3, 2, 2, 1));
        assert_eq!(
            next,
            Some(Duration::from_millis(5050)),
            "re-check when the second pod becomes available"
        );
    }
}
