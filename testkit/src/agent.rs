//! A fake agent: the hub's `/agent/v1` protocol spoken directly, so a test decides exactly what
//! the hub hears (capacity, pending pods, readiness) without running a workload cluster.

use std::collections::BTreeMap;

use nave_api::wire::{
    self, CapacityModel, CapacityTotals, Heartbeat, HeartbeatAnswer, NodeCapacity, NodeGroup, ObjectStatus,
    RegisterRequest, RegisterResponse, Resources, StatusReport, WorkSet, WorkloadRef,
};

use crate::{DEADLINE, wait_for};

/// The bootstrap token a test fleet registers with; the hub under test must accept it.
pub const BOOTSTRAP: &str = "fleet-bootstrap-token";

/// The agent version a fake agent announces.
const VERSION: &str = "0.1.0";

/// An agent speaking the wire protocol: registered with the bootstrap token, it keeps its
/// credential and the capacity it reports. Cheap to clone (one HTTP client, shared).
#[derive(Debug, Clone)]
pub struct FakeAgent {
    http: reqwest::Client,
    hub: String,
    cluster: String,
    credential: String,
    capacity: CapacityModel,
}

impl FakeAgent {
    /// Registers `cluster` with the hub at `hub` (its base URL), retrying until the hub answers;
    /// no heartbeat yet, and an empty capacity until [`FakeAgent::set_capacity`].
    pub async fn register(hub: &str, cluster: &str) -> FakeAgent {
        FakeAgent::register_with(
            hub,
            RegisterRequest {
                cluster_name: cluster.to_owned(),
                agent_version: VERSION.to_owned(),
                ..RegisterRequest::default()
            },
        )
        .await
    }

    /// Registers `request` once presenting `token` (a join token, a credential, the bootstrap
    /// token): the agent, or the hub's status and body.
    pub async fn try_register(
        hub: &str,
        request: RegisterRequest,
        token: &str,
    ) -> Result<FakeAgent, (u16, String)> {
        let http = reqwest::Client::new();
        let res = http
            .post(format!("{hub}{}", wire::REGISTER_PATH))
            .bearer_auth(token)
            .json(&request)
            .send()
            .await
            .map_err(|e| (0, e.to_string()))?;
        let status = res.status().as_u16();
        if status != 200 {
            return Err((status, res.text().await.unwrap_or_default()));
        }
        let response: RegisterResponse = res.json().await.map_err(|e| (status, e.to_string()))?;
        Ok(FakeAgent {
            http,
            hub: hub.to_owned(),
            cluster: request.cluster_name,
            credential: response.credential,
            capacity: CapacityModel::default(),
        })
    }

    /// Registers with `request` as sent (Kubernetes version, region, ...), retrying until the
    /// hub answers.
    pub async fn register_with(hub: &str, request: RegisterRequest) -> FakeAgent {
        let cluster = request.cluster_name.clone();
        wait_for(&format!("{cluster} to register"), DEADLINE, || async {
            FakeAgent::try_register(hub, request.clone(), BOOTSTRAP)
                .await
                .map_err(|(status, body)| format!("status {status}: {body}"))
        })
        .await
    }

    /// Registers `cluster` and sends its first heartbeat with `capacity`: a Ready cluster.
    pub async fn join(hub: &str, cluster: &str, capacity: CapacityModel) -> FakeAgent {
        let mut agent = FakeAgent::register(hub, cluster).await;
        agent.set_capacity(capacity);
        agent.heartbeat().await;
        agent
    }

    /// The cluster's name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The credential the hub issued at registration.
    pub fn credential(&self) -> &str {
        &self.credential
    }

    /// Sets the capacity the next heartbeats report.
    pub fn set_capacity(&mut self, capacity: CapacityModel) {
        self.capacity = capacity;
    }

    /// The heartbeat this agent sends: its name, version and capacity, nothing else. Start from
    /// it to send more (`Heartbeat { pending_pods, ..agent.beat() }`).
    pub fn beat(&self) -> Heartbeat {
        Heartbeat {
            cluster_name: Some(self.cluster.clone()),
            agent_version: VERSION.to_owned(),
            capacity: self.capacity.clone(),
            ..Heartbeat::default()
        }
    }

    /// Sends [`FakeAgent::beat`]; anything but `200` fails the test.
    pub async fn heartbeat(&self) -> HeartbeatAnswer {
        self.send_heartbeat(&self.beat()).await
    }

    /// Sends `beat` and returns the hub's answer; anything but `200` fails the test.
    pub async fn send_heartbeat(&self, beat: &Heartbeat) -> HeartbeatAnswer {
        let cluster = &self.cluster;
        let res = self
            .http
            .post(format!("{}{}", self.hub, wire::HEARTBEAT_PATH))
            .bearer_auth(&self.credential)
            .json(beat)
            .send()
            .await
            .unwrap_or_else(|e| panic!("heartbeat of {cluster}: {e}"));
        assert_eq!(res.status(), 200, "heartbeat of {cluster}");
        res.json()
            .await
            .unwrap_or_else(|e| panic!("heartbeat answer of {cluster}: {e}"))
    }

    /// The HTTP status of a work request with this agent's credential (`401` once revoked).
    pub async fn work_status(&self) -> u16 {
        let res = self
            .http
            .get(format!("{}{}", self.hub, wire::WORK_PATH))
            .bearer_auth(&self.credential)
            .send()
            .await
            .unwrap_or_else(|e| panic!("work of {}: {e}", self.cluster));
        res.status().as_u16()
    }

    /// The cluster's current work set (no long-poll).
    pub async fn work(&self) -> WorkSet {
        let cluster = &self.cluster;
        let res = self
            .http
            .get(format!("{}{}", self.hub, wire::WORK_PATH))
            .bearer_auth(&self.credential)
            .send()
            .await
            .unwrap_or_else(|e| panic!("work of {cluster}: {e}"));
        assert_eq!(res.status(), 200, "work of {cluster}");
        res.json().await.expect("a work set")
    }

    /// Replicas of the Deployment `name` in the current work set, if it holds one.
    pub async fn replicas(&self, name: &str) -> Option<i64> {
        self.work()
            .await
            .objects
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
            .and_then(|o| o["spec"]["replicas"].as_i64())
    }

    /// Reports every object of the current work set applied and fully ready, with the work
    /// set's revision as applied.
    pub async fn report_all_ready(&self) {
        let work = self.work().await;
        let objects = work.objects.iter().map(all_ready).collect();
        self.send_report(&StatusReport {
            cluster_name: Some(self.cluster.clone()),
            applied_revision: Some(work.revision),
            objects,
            ..StatusReport::default()
        })
        .await;
    }

    /// Reports `objects` (no applied revision).
    pub async fn report(&self, objects: Vec<ObjectStatus>) {
        self.send_report(&StatusReport {
            cluster_name: Some(self.cluster.clone()),
            objects,
            ..StatusReport::default()
        })
        .await;
    }

    /// Sends `report`; anything but `204` fails the test.
    pub async fn send_report(&self, report: &StatusReport) {
        let cluster = &self.cluster;
        let res = self
            .http
            .post(format!("{}{}", self.hub, wire::STATUS_PATH))
            .bearer_auth(&self.credential)
            .json(report)
            .send()
            .await
            .unwrap_or_else(|e| panic!("status of {cluster}: {e}"));
        assert_eq!(res.status(), 204, "status of {cluster}");
    }
}

/// The status of `object` from a work set with all its replicas ready.
pub fn all_ready(object: &serde_json::Value) -> ObjectStatus {
    let replicas = object["spec"]["replicas"].as_i64().map(|r| r as i32);
    ObjectStatus {
        api_version: object["apiVersion"].as_str().unwrap_or_default().to_owned(),
        kind: object["kind"].as_str().unwrap_or_default().to_owned(),
        namespace: object["metadata"]["namespace"].as_str().map(str::to_owned),
        name: object["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
        workload: object["metadata"]["labels"][wire::WORKLOAD_LABEL]
            .as_str()
            .and_then(WorkloadRef::from_label_value),
        replicas,
        ready_replicas: replicas,
        available_replicas: replicas,
        updated_replicas: replicas,
        all_replicas: replicas,
        template_hash: object["metadata"]["annotations"][nave_api::TEMPLATE_HASH_ANNOTATION]
            .as_str()
            .map(str::to_owned),
        observed_current: replicas.map(|_| true),
        ..ObjectStatus::default()
    }
}

/// The status of the Deployment `namespace/name` of the workload of that name, with `ready`
/// replicas, all ready, available and updated.
pub fn ready_deployment(namespace: &str, name: &str, ready: i32) -> ObjectStatus {
    ObjectStatus {
        api_version: "apps/v1".to_owned(),
        kind: "Deployment".to_owned(),
        namespace: Some(namespace.to_owned()),
        name: name.to_owned(),
        workload: Some(WorkloadRef::new(namespace, name)),
        replicas: Some(ready),
        ready_replicas: Some(ready),
        available_replicas: Some(ready),
        updated_replicas: Some(ready),
        ..ObjectStatus::default()
    }
}

/// A cluster of `nodes` identical nodes named `{prefix}-{i}`, each with `allocatable` and
/// `requested` already taken, as an agent reports it.
pub fn capacity(prefix: &str, nodes: u64, allocatable: Resources, requested: Resources) -> CapacityModel {
    let list: Vec<_> = (0..nodes)
        .map(|i| NodeCapacity {
            name: format!("{prefix}-{i}"),
            allocatable,
            requested,
            ready: true,
            unschedulable: false,
        })
        .collect();
    let times = |r: Resources| Resources::new(r.cpu_millis * nodes, r.memory_bytes * nodes, r.pods * nodes);
    CapacityModel {
        totals: CapacityTotals {
            nodes,
            schedulable_nodes: nodes,
            allocatable: times(allocatable),
            requested: times(requested),
        },
        node_groups: vec![NodeGroup {
            labels: BTreeMap::new(),
            taints: Vec::new(),
            nodes: list,
        }],
    }
}

/// [`capacity`] of `nodes` idle nodes with `cpu_millis` CPU, 16 GiB and 110 pods each.
pub fn idle_capacity(prefix: &str, nodes: u64, cpu_millis: u64) -> CapacityModel {
    capacity(
        prefix,
        nodes,
        Resources::new(cpu_millis, 16 << 30, 110),
        Resources::default(),
    )
}
