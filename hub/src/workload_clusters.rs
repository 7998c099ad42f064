//! Writes of WorkloadCluster objects on behalf of agents: created on registration (with the
//! hub's finalizer), status from heartbeats. A heartbeat never creates one: a deleted
//! WorkloadCluster stays deleted (see [`crate::controller::removal`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use nave_api::conditions::{self, reasons, types};
use nave_api::wire::{Heartbeat, RegisterRequest, Resources};
use nave_api::{ResourceAmounts, WorkloadCluster, WorkloadClusterSpec};
use serde_json::{Value, json};

use crate::settings::HUB_NAME;

/// Writes WorkloadCluster objects in the management cluster.
#[derive(Clone)]
pub struct ClusterObjects {
    api: Api<WorkloadCluster>,
}

impl std::fmt::Debug for ClusterObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterObjects")
    }
}

impl ClusterObjects {
    /// Writer over the management cluster's client.
    pub fn new(client: kube::Client) -> Self {
        ClusterObjects {
            api: Api::all(client),
        }
    }

    /// The WorkloadCluster of a registration: the existing one, or a new one with the
    /// registration's labels and location and the hub's finalizer.
    async fn ensure(&self, request: &RegisterRequest) -> Result<WorkloadCluster, kube::Error> {
        let name = request.cluster_name.as_str();
        if let Some(existing) = self.api.get_opt(name).await? {
            return Ok(existing);
        }
        let mut object = WorkloadCluster::new(name, WorkloadClusterSpec::default());
        object.metadata = ObjectMeta {
            name: Some(name.to_owned()),
            labels: (!request.labels.is_empty()).then(|| request.labels.clone()),
            finalizers: Some(vec![nave_api::CLUSTER_FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        };
        object.spec.region = request.region.clone();
        object.spec.zone = request.zone.clone();
        object.spec.coordinates = request.coordinates;
        match self.api.create(&PostParams::default(), &object).await {
            Ok(created) => Ok(created),
            // Created meanwhile (an admin, or a concurrent request): use that one.
            Err(kube::Error::Api(s)) if s.code == 409 => self.api.get(name).await,
            Err(e) => Err(e),
        }
    }

    async fn patch_status(&self, name: &str, status: Value) -> Result<(), kube::Error> {
        let patch = json!({"apiVersion": nave_api::API_VERSION, "kind": "WorkloadCluster", "status": status});
        self.api
            .patch_status(name, &PatchParams::apply(HUB_NAME), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Sets the `Accepted` condition of an existing WorkloadCluster (nothing when it has none).
    pub async fn accepted(&self, name: &str, accepted: bool) -> Result<(), kube::Error> {
        let Some(object) = self.api.get_opt(name).await? else {
            return Ok(());
        };
        let mut conds = object.status.map(|s| s.conditions).unwrap_or_default();
        conditions::upsert(&mut conds, acceptance(accepted));
        self.patch_status(name, json!({"conditions": conds})).await
    }

    /// Marks an existing WorkloadCluster as removed by an admin: `Joined=False`, `Accepted=False`.
    /// The object stays (an admin may keep its labels for a later join) but no longer makes
    /// the hub wait for the cluster after a start.
    pub async fn removed(&self, name: &str) -> Result<(), kube::Error> {
        let Some(object) = self.api.get_opt(name).await? else {
            return Ok(());
        };
        let mut conds = object.status.map(|s| s.conditions).unwrap_or_default();
        conditions::upsert(
            &mut conds,
            condition(
                types::JOINED,
                conditions::FALSE,
                reasons::CLUSTER_REMOVED,
                "an admin removed the cluster; its agent must join again",
            ),
        );
        conditions::upsert(&mut conds, acceptance(false));
        self.patch_status(name, json!({"conditions": conds})).await
    }

    /// Whether the WorkloadCluster `name` exists and is being deleted.
    pub async fn terminating(&self, name: &str) -> Result<bool, kube::Error> {
        Ok(self
            .api
            .get_opt(name)
            .await?
            .is_some_and(|o| o.metadata.deletion_timestamp.is_some()))
    }

    /// Sets the object's finalizers to `finalizers`, if it still is at the resourceVersion it was
    /// read at (a conflict is retried by the caller with what it reads next).
    pub async fn set_finalizers(
        &self,
        object: &WorkloadCluster,
        finalizers: Vec<String>,
    ) -> Result<(), kube::Error> {
        let patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": object.metadata.resource_version,
        }});
        self.api
            .patch(
                &object.metadata.name.clone().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(())
    }

    /// Sets the `Removing` condition of an object being deleted; writes only when it differs.
    pub async fn set_removing(&self, object: &WorkloadCluster, message: &str) -> Result<(), kube::Error> {
        let mut conds = object.status.clone().map(|s| s.conditions).unwrap_or_default();
        if conditions::find(&conds, types::REMOVING).is_some_and(|c| c.message == message) {
            return Ok(());
        }
        conditions::upsert(
            &mut conds,
            condition(
                types::REMOVING,
                conditions::TRUE,
                reasons::WITHDRAWING_WORK,
                message,
            ),
        );
        self.patch_status(
            &object.metadata.name.clone().unwrap_or_default(),
            json!({"conditions": conds}),
        )
        .await
    }

    /// Creates the WorkloadCluster when missing and sets `Joined=True` and `Accepted`.
    pub async fn joined(&self, request: &RegisterRequest, accepted: bool) -> Result<(), kube::Error> {
        let object = self.ensure(request).await?;
        let mut conds = object.status.map(|s| s.conditions).unwrap_or_default();
        conditions::upsert(&mut conds, acceptance(accepted));
        conditions::upsert(
            &mut conds,
            condition(
                types::JOINED,
                conditions::TRUE,
                reasons::AGENT_REGISTERED,
                "an agent registered",
            ),
        );
        let mut status = json!({"conditions": conds, "agentVersion": request.agent_version});
        if let Some(v) = &request.kubernetes_version {
            status["kubernetesVersion"] = json!(v);
        }
        self.patch_status(&request.cluster_name, status).await
    }

    /// Writes the heartbeat's capacity summary, time and versions, and `Ready=True`, to an
    /// existing WorkloadCluster; answers whether there was one. A missing object is left
    /// missing: it was deleted, and only a registration writes it again.
    pub async fn heartbeat(
        &self,
        name: &str,
        beat: &Heartbeat,
        at: jiff::Timestamp,
    ) -> Result<bool, kube::Error> {
        let Some(object) = self.api.get_opt(name).await? else {
            return Ok(false);
        };
        let mut conds = object.status.map(|s| s.conditions).unwrap_or_default();
        conditions::upsert(
            &mut conds,
            condition(
                types::READY,
                conditions::TRUE,
                reasons::HEARTBEAT_RECEIVED,
                "heartbeats arrive",
            ),
        );
        let (held, reason, message) = match &beat.work_held {
            Some(held) => (conditions::TRUE, held.reason.as_str(), held.message.as_str()),
            None => (
                conditions::FALSE,
                reasons::FOLLOWING_WORK,
                "the agent follows the hub's work set",
            ),
        };
        conditions::upsert(
            &mut conds,
            condition(types::HUB_STORE_CHANGED, held, reason, message),
        );
        let mut status = status_summary(beat);
        if let Some(fields) = status.as_object_mut() {
            fields.remove("workHeld");
        }
        status["conditions"] = json!(conds);
        status["lastHeartbeatTime"] = json!(Time(at));
        status["agentVersion"] = json!(beat.agent_version);
        if let Some(v) = &beat.kubernetes_version {
            status["kubernetesVersion"] = json!(v);
        }
        self.patch_status(name, status).await?;
        Ok(true)
    }
}

fn acceptance(accepted: bool) -> Condition {
    if accepted {
        condition(
            types::ACCEPTED,
            conditions::TRUE,
            reasons::CLUSTER_ACCEPTED,
            "the hub places work here",
        )
    } else {
        condition(
            types::ACCEPTED,
            conditions::FALSE,
            reasons::AWAITING_ACCEPTANCE,
            "waits for an admin: POST /api/v1/clusters/<name>/acceptance {\"accepted\": true}",
        )
    }
}

impl ClusterObjects {
    /// Sets (or, with `None`, removes) `status.capacity.usage` of an existing WorkloadCluster
    /// whose agent has reported capacity; others are left alone, since usage without the
    /// capacity it is measured against reads as a cluster with no nodes. Returns whether the
    /// status now shows `usage`.
    pub async fn set_usage(&self, name: &str, usage: Option<&ResourceAmounts>) -> Result<bool, kube::Error> {
        let Some(object) = self.api.get_opt(name).await? else {
            return Ok(false);
        };
        let Some(capacity) = object.status.and_then(|s| s.capacity) else {
            return Ok(false);
        };
        if capacity.usage.as_ref() != usage {
            self.patch_status(name, json!({"capacity": {"usage": usage}}))
                .await?;
        }
        Ok(true)
    }

    /// Sets the `Ready` condition of an existing WorkloadCluster, leaving the rest of its status
    /// as it is; a missing object is left missing (an admin deleted it). Writes only when the
    /// condition differs.
    pub async fn set_ready(
        &self,
        name: &str,
        ready: bool,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let Some(object) = self.api.get_opt(name).await? else {
            return Ok(());
        };
        let status = if ready {
            conditions::TRUE
        } else {
            conditions::FALSE
        };
        let mut conds = object.status.map(|s| s.conditions).unwrap_or_default();
        if conditions::find(&conds, types::READY)
            .is_some_and(|c| c.status == status && c.reason == reason && c.message == message)
        {
            return Ok(());
        }
        conditions::upsert(&mut conds, condition(types::READY, status, reason, message));
        self.patch_status(name, json!({"conditions": conds})).await
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: Time(jiff::Timestamp::now()),
        observed_generation: None,
    }
}

fn amounts(r: Resources) -> Value {
    json!(ResourceAmounts::from_resources(r))
}

fn percent(part: u64, whole: u64) -> Option<u64> {
    (whole > 0).then(|| part.saturating_mul(100) / whole)
}

/// The capacity part of a WorkloadCluster's status from a heartbeat; what the rate limit
/// compares to decide whether a write is due early.
pub fn status_summary(beat: &Heartbeat) -> Value {
    let totals = &beat.capacity.totals;
    let mut capacity = json!({
        "nodes": totals.schedulable_nodes,
        "allocatable": amounts(totals.allocatable),
        "requested": amounts(totals.requested),
    });
    if let Some(usage) = beat.usage {
        capacity["usage"] = amounts(usage);
    }
    if let Some(p) = percent(totals.requested.cpu_millis, totals.allocatable.cpu_millis) {
        capacity["cpuRequestedPercent"] = json!(p);
    }
    if let Some(p) = percent(totals.requested.memory_bytes, totals.allocatable.memory_bytes) {
        capacity["memoryRequestedPercent"] = json!(p);
    }
    // Not a status field: compared only, so that holding or releasing a set is written at once.
    json!({"capacity": capacity, "workHeld": beat.work_held.as_ref().map(|h| h.reason.as_str())})
}
