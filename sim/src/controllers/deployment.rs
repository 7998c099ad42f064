//! The Deployment controller: runs [`super::rollout::plan`] and writes its outcome.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::cache::{Key, key_of, run_queue};
use super::pods::controller_of;
use super::rollout::{REVISION, RsState, equal_ignore_hash, normalize, plan};
use super::{Ctx, MANAGER_CONTROLLERS, api_code, events};

const COMPONENT: &str = "deployment-controller";

/// Enqueues a Deployment when it or one of its ReplicaSets changes.
pub(super) fn register(ctx: &Arc<Ctx>) {
    let q = ctx.deploy_queue.clone();
    ctx.deployments.on_change(move |_, new| {
        if let Some(d) = new {
            q.add(key_of(d));
        }
    });
    let q = ctx.deploy_queue.clone();
    let deployments = ctx.deployments.clone();
    ctx.replicasets.on_change(move |old, new| {
        for rs in [old, new].into_iter().flatten() {
            if let Some(owner) = controller_of(rs.metadata.owner_references.as_ref())
                && owner.kind == "Deployment"
                && let Some(d) = deployments.get_uid(&owner.uid)
            {
                q.add(key_of(d.as_ref()));
            }
        }
    });
}

/// The controller loop.
pub(super) async fn run(ctx: Arc<Ctx>) {
    ctx.deployments.wait_synced().await;
    ctx.replicasets.wait_synced().await;
    let q = ctx.deploy_queue.clone();
    let shutdown = ctx.shutdown.clone();
    run_queue(q, 8, shutdown, |key| {
        let ctx = ctx.clone();
        async move { reconcile(&ctx, key).await }
    })
    .await;
}

/// The status as a merge patch: absent fields become `null` so they are removed.
fn status_patch(status: &k8s_openapi::api::apps::v1::DeploymentStatus) -> serde_json::Value {
    let mut v = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        for k in [
            "observedGeneration",
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "unavailableReplicas",
            "collisionCount",
            "conditions",
        ] {
            o.entry(k).or_insert(serde_json::Value::Null);
        }
    }
    json!({ "status": v })
}

async fn reconcile(ctx: &Arc<Ctx>, key: Key) -> Result<Option<Duration>, kube::Error> {
    let Some(d) = ctx.deployments.get(&key) else {
        return Ok(None);
    };
    if d.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let owned: Vec<RsState> = ctx
        .replicasets
        .owned_by(&uid)
        .iter()
        .filter(|rs| rs.metadata.deletion_timestamp.is_none())
        .map(|rs| RsState::from_rs(rs))
        .collect();
    let p = plan(&d, &owned, jiff::Timestamp::now());
    let ns = key.0.clone();
    let rs_api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &ns);
    let d_api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let pp = PatchParams {
        field_manager: Some(MANAGER_CONTROLLERS.into()),
        ..Default::default()
    };

    if let Some(rs) = &p.create {
        let post = PostParams {
            field_manager: Some(MANAGER_CONTROLLERS.into()),
            ..Default::default()
        };
        match rs_api.create(&post, rs).await {
            Ok(created) => ctx.replicasets.apply(created),
            Err(e) if api_code(&e) == Some(409) => {
                // A ReplicaSet of that name exists: ours (a stale cache) or a hash collision.
                let name = rs.name_any();
                let existing = rs_api.get(&name).await?;
                let ours =
                    controller_of(existing.metadata.owner_references.as_ref()).is_some_and(|o| o.uid == uid);
                let same = match (existing.spec.template.as_ref(), Some(&d.spec.template)) {
                    (Some(a), Some(b)) => equal_ignore_hash(a, b),
                    _ => false,
                };
                if !(ours && same) {
                    let count = d.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0) + 1;
                    let patch = json!({"status": {"collisionCount": count}});
                    let updated = d_api.patch_status(&key.1, &pp, &Patch::Merge(&patch)).await?;
                    ctx.deployments.apply(updated);
                }
                ctx.replicasets.apply(existing);
                return Ok(Some(Duration::from_millis(10)));
            }
            Err(e) => return Err(e),
        }
    }
    for u in &p.updates {
        let patch = json!({"metadata": {"annotations": u.annotations}, "spec": {"replicas": u.replicas}});
        let updated = rs_api.patch(&u.name, &pp, &Patch::Merge(&patch)).await?;
        ctx.replicasets.apply(updated);
    }
    for (name, rs_uid) in &p.delete {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(rs_uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match rs_api.delete(name, &dp).await {
            Ok(_) => ctx.replicasets.forget(&(ns.clone(), name.clone()), rs_uid),
            Err(e) if matches!(api_code(&e), Some(404 | 409)) => {}
            Err(e) => return Err(e),
        }
    }
    for (reason, message) in &p.events {
        ctx.events.record(
            events::reference(d.as_ref()),
            "Normal",
            reason,
            message.clone(),
            COMPONENT,
        );
    }
    let mut current = ctx.deployments.get(&key).unwrap_or(d.clone());
    if let Some(rev) = &p.revision
        && current
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION))
            != Some(rev)
    {
        let patch = json!({"metadata": {"annotations": {REVISION: rev}}});
        let updated = d_api.patch(&key.1, &pp, &Patch::Merge(&patch)).await?;
        ctx.deployments.apply(updated.clone());
        current = Arc::new(updated);
    }
    let mut have = current.status.clone().unwrap_or_default();
    normalize(&mut have);
    if have != p.status {
        let updated = d_api
            .patch_status(&key.1, &pp, &Patch::Merge(&status_patch(&p.status)))
            .await?;
        ctx.deployments.apply(updated);
    }
    Ok(p.requeue_after)
}
