//! The simulated StatefulSet controller through a real `SimCluster` and kube-rs: ordinals, ordered
//! and parallel pod management, scale-down from the top, PVCs from `volumeClaimTemplates` and
//! their retention policy, recreation of a deleted pod, rolling updates and the status.
//!
//! Tests wait for conditions with deadlines and report what they last saw.

#[path = "support/helpers.rs"]
mod helpers;

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use nave_sim::config::{ClusterConfig, NodePool, Timing};
use nave_sim::{ServeOptions, SimCluster};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(20);

struct Running {
    sim: SimCluster,
    client: Client,
}

/// One node of 8 CPUs whose pods start after `start_millis` and are gone 50 ms after deletion.
async fn cluster(name: &str, start_millis: u64) -> Running {
    let config = ClusterConfig {
        name: name.into(),
        node_pools: vec![NodePool {
            name: "node".into(),
            count: 1,
            cpu: "8".into(),
            memory: "32Gi".into(),
            ..NodePool::default()
        }],
        timing: Timing {
            pod_start_millis: start_millis,
            pod_delete_millis: 50,
            ..Timing::default()
        },
        ..ClusterConfig::default()
    };
    let sim = SimCluster::start(config, ServeOptions::default())
        .await
        .expect("cluster starts");
    sim.control_plane().expect("control plane").wait_synced().await;
    let client = sim.in_process_client();
    Running { sim, client }
}

impl Running {
    fn sets(&self) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), "default")
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn create(&self, set: Sts) {
        let s: StatefulSet = serde_json::from_value(set.0).expect("a StatefulSet");
        self.sets()
            .create(&PostParams::default(), &s)
            .await
            .expect("statefulset created");
    }

    async fn scale(&self, name: &str, replicas: i32) {
        let patch = json!({"spec": {"replicas": replicas}});
        self.sets()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("scaled");
    }

    /// The pods of `app` by name: `(phase, ready, deleting, revision label)`.
    async fn pod_states(&self, app: &str) -> Result<Vec<PodState>, String> {
        let list = self
            .pods()
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .map_err(|e| e.to_string())?;
        let mut out: Vec<PodState> = list.items.iter().map(PodState::of).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn claim_names(&self) -> Result<BTreeSet<String>, String> {
        let list = self
            .claims()
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        Ok(list
            .items
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect())
    }

    async fn status(&self, name: &str) -> Result<Value, String> {
        let s = self.sets().get(name).await.map_err(|e| e.to_string())?;
        Ok(serde_json::to_value(&s).map_err(|e| e.to_string())?["status"].clone())
    }

    /// Waits until the set's status says `replicas` pods, all Ready and at one revision.
    async fn wait_rolled_out(&self, name: &str, replicas: i64) -> Value {
        helpers::wait_for(
            DEADLINE,
            &format!("statefulset {name} with {replicas} ready pods at one revision"),
            || async {
                let st = self.status(name).await?;
                let done = st["replicas"] == replicas
                    && st["readyReplicas"].as_i64().unwrap_or(0) == replicas
                    && st["updatedReplicas"].as_i64().unwrap_or(0) == replicas
                    && st["currentRevision"] == st["updateRevision"]
                    && st["observedGeneration"].is_i64();
                if done { Ok(st) } else { Err(st.to_string()) }
            },
        )
        .await
    }
}

#[derive(Debug, Clone, PartialEq)]
struct PodState {
    name: String,
    uid: String,
    phase: String,
    ready: bool,
    deleting: bool,
    revision: String,
}

impl PodState {
    fn of(p: &Pod) -> PodState {
        let v = serde_json::to_value(p).unwrap_or_default();
        PodState {
            name: v["metadata"]["name"].as_str().unwrap_or_default().into(),
            uid: v["metadata"]["uid"].as_str().unwrap_or_default().into(),
            phase: v["status"]["phase"].as_str().unwrap_or_default().into(),
            ready: v["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True")),
            deleting: v["metadata"]["deletionTimestamp"].is_string(),
            revision: v["metadata"]["labels"]["controller-revision-hash"]
                .as_str()
                .unwrap_or_default()
                .into(),
        }
    }
}

fn names(pods: &[PodState]) -> Vec<&str> {
    pods.iter().map(|p| p.name.as_str()).collect()
}

fn summary(pods: &[PodState]) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} {}{}{} rev={}",
                p.name,
                p.phase,
                if p.ready { " ready" } else { "" },
                if p.deleting { " deleting" } else { "" },
                p.revision
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A StatefulSet fixture: `sts("web").replicas(3).claims("data")`.
struct Sts(Value);

fn sts(name: &str) -> Sts {
    Sts(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.25",
                          "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
            }
        }
    }))
}

impl Sts {
    fn replicas(mut self, n: i32) -> Self {
        self.0["spec"]["replicas"] = json!(n);
        self
    }

    fn start_ordinal(mut self, start: i32) -> Self {
        self.0["spec"]["ordinals"] = json!({"start": start});
        self
    }

    fn parallel(mut self) -> Self {
        self.0["spec"]["podManagementPolicy"] = json!("Parallel");
        self
    }

    /// Pods take `millis` from binding to Running and Ready.
    fn start_delay(mut self, millis: u64) -> Self {
        self.0["spec"]["template"]["metadata"]["annotations"] =
            json!({"sim.nave.dev/start-delay-millis": millis.to_string()});
        self
    }

    fn claims(mut self, template: &str) -> Self {
        self.0["spec"]["volumeClaimTemplates"] = json!([{
            "metadata": {"name": template},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }]);
        self
    }

    fn retention(mut self, when_deleted: &str, when_scaled: &str) -> Self {
        self.0["spec"]["persistentVolumeClaimRetentionPolicy"] =
            json!({"whenDeleted": when_deleted, "whenScaled": when_scaled});
        self
    }
}

#[tokio::test]
async fn ordinals_start_three_with_two_replicas_gives_exactly_pods_3_and_4() {
    let r = cluster("sts-ordinals", 50).await;
    r.create(sts("db").replicas(2).start_ordinal(3)).await;
    let st = r.wait_rolled_out("db", 2).await;
    let pods = r.pod_states("db").await.expect("pods");
    assert_eq!(names(&pods), ["db-3", "db-4"], "pods: {}", summary(&pods));

    let revision = st["currentRevision"]
        .as_str()
        .expect("currentRevision")
        .to_owned();
    assert!(revision.starts_with("db-"), "currentRevision {revision}");
    assert_eq!(st["observedGeneration"], 1, "status: {st}");
    assert_eq!(st["availableReplicas"], 2, "status: {st}");
    assert_eq!(st["currentReplicas"], 2, "status: {st}");
    assert_eq!(st["collisionCount"], 0, "status: {st}");
    for p in &pods {
        assert_eq!(p.revision, revision, "pods: {}", summary(&pods));
    }

    let pod = r.pods().get("db-4").await.expect("db-4");
    let v = serde_json::to_value(&pod).expect("json");
    let labels = &v["metadata"]["labels"];
    assert_eq!(
        labels["statefulset.kubernetes.io/pod-name"], "db-4",
        "labels: {labels}"
    );
    assert_eq!(labels["apps.kubernetes.io/pod-index"], "4", "labels: {labels}");
    assert_eq!(v["spec"]["hostname"], "db-4");
    assert_eq!(v["spec"]["subdomain"], "db");
    let owner = &v["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["name"], &owner["controller"]),
        (&json!("StatefulSet"), &json!("db"), &json!(true)),
        "owner: {owner}"
    );

    let revisions: Api<ControllerRevision> = Api::namespaced(r.client.clone(), "default");
    let cr = revisions
        .get(&revision)
        .await
        .expect("the current ControllerRevision exists");
    assert_eq!(cr.revision, Some(1));

    // Deleting the set deletes its pods (garbage collection by owner reference).
    r.sets()
        .delete("db", &DeleteParams::default())
        .await
        .expect("deleted");
    helpers::wait_for(DEADLINE, "no pods of db after deleting the set", || async {
        let pods = r.pod_states("db").await?;
        if pods.is_empty() {
            Ok(())
        } else {
            Err(summary(&pods))
        }
    })
    .await;
    r.sim.shutdown().await;
}

#[tokio::test]
async fn ordered_ready_creates_each_pod_after_the_previous_is_ready() {
    let r = cluster("sts-ordered", 50).await;
    r.create(sts("web").replicas(3).start_delay(300)).await;
    let first_seen: RefCell<Vec<String>> = RefCell::default();
    helpers::wait_for(
        DEADLINE,
        "3 ready pods, each created after the previous was Ready",
        || {
            async {
                let pods = r.pod_states("web").await?;
                let mut first_seen = first_seen.borrow_mut();
                for (i, p) in pods.iter().enumerate() {
                    if !first_seen.contains(&p.name) {
                        first_seen.push(p.name.clone());
                    }
                    // The invariant: pod k exists only once pod k-1 is Running and Ready.
                    if i > 0 && !(pods[i - 1].ready && pods[i - 1].phase == "Running") {
                        panic!(
                            "{} exists while {} is not Running and Ready: {}",
                            p.name,
                            pods[i - 1].name,
                            summary(&pods)
                        );
                    }
                }
                if pods.len() == 3 && pods.iter().all(|p| p.ready) {
                    Ok(())
                } else {
                    Err(summary(&pods))
                }
            }
        },
    )
    .await;
    assert_eq!(
        first_seen.into_inner(),
        ["web-0", "web-1", "web-2"],
        "order pods appeared in"
    );
    r.sim.shutdown().await;
}

#[tokio::test]
async fn parallel_creates_every_pod_without_waiting() {
    let r = cluster("sts-parallel", 50).await;
    r.create(sts("web").replicas(3).parallel().start_delay(2_000))
        .await;
    helpers::wait_for(DEADLINE, "3 pods existing while none is Ready yet", || async {
        let pods = r.pod_states("web").await?;
        if pods.len() == 3 && pods.iter().all(|p| !p.ready) {
            Ok(())
        } else {
            Err(summary(&pods))
        }
    })
    .await;
    r.wait_rolled_out("web", 3).await;
    r.sim.shutdown().await;
}

#[tokio::test]
async fn scale_down_removes_the_highest_ordinals_first_and_keeps_the_claims() {
    let r = cluster("sts-scale", 50).await;
    r.create(sts("web").replicas(3).claims("data")).await;
    r.wait_rolled_out("web", 3).await;
    let want: BTreeSet<String> = ["data-web-0", "data-web-1", "data-web-2"]
        .map(String::from)
        .into();
    let claims = r.claim_names().await.expect("claims");
    assert_eq!(claims, want, "claims created from the template");
    let pod = serde_json::to_value(r.pods().get("web-1").await.expect("web-1")).expect("json");
    let volume = &pod["spec"]["volumes"][0];
    assert_eq!(
        (&volume["name"], &volume["persistentVolumeClaim"]["claimName"]),
        (&json!("data"), &json!("data-web-1")),
        "volumes: {}",
        pod["spec"]["volumes"]
    );

    r.scale("web", 1).await;
    helpers::wait_for(
        DEADLINE,
        "only web-0 left, web-2 removed before web-1",
        || async {
            let pods = r.pod_states("web").await?;
            let alive = |n: &str| pods.iter().any(|p| p.name == n && !p.deleting);
            if !alive("web-1") && alive("web-2") {
                panic!("web-1 went before web-2: {}", summary(&pods));
            }
            if names(&pods) == ["web-0"] {
                Ok(())
            } else {
                Err(summary(&pods))
            }
        },
    )
    .await;
    let st = r.wait_rolled_out("web", 1).await;
    assert_eq!(st["replicas"], 1, "status: {st}");
    assert_eq!(
        r.claim_names().await.expect("claims"),
        want,
        "claims retained on scale-down"
    );

    // The default policy (Retain) keeps the claims when the set goes too.
    r.sets()
        .delete("web", &DeleteParams::default())
        .await
        .expect("deleted");
    helpers::wait_for(DEADLINE, "no pods of web", || async {
        let pods = r.pod_states("web").await?;
        if pods.is_empty() {
            Ok(())
        } else {
            Err(summary(&pods))
        }
    })
    .await;
    assert_eq!(
        r.claim_names().await.expect("claims"),
        want,
        "claims retained on deletion"
    );
    r.sim.shutdown().await;
}

#[tokio::test]
async fn retention_policy_delete_removes_claims_on_scale_down_and_on_deletion() {
    let r = cluster("sts-retention", 50).await;
    r.create(sts("db").replicas(3).claims("data").retention("Delete", "Delete"))
        .await;
    r.wait_rolled_out("db", 3).await;
    r.scale("db", 1).await;
    r.wait_rolled_out("db", 1).await;
    helpers::wait_for(
        DEADLINE,
        "only the claim of db-0 left after scaling to 1",
        || async {
            let claims = r.claim_names().await?;
            if claims == BTreeSet::from(["data-db-0".to_owned()]) {
                Ok(())
            } else {
                Err(format!("{claims:?}"))
            }
        },
    )
    .await;
    r.sets()
        .delete("db", &DeleteParams::default())
        .await
        .expect("deleted");
    helpers::wait_for(DEADLINE, "no claims after deleting the set", || async {
        let claims = r.claim_names().await?;
        if claims.is_empty() {
            Ok(())
        } else {
            Err(format!("{claims:?}"))
        }
    })
    .await;
    r.sim.shutdown().await;
}

#[tokio::test]
async fn a_deleted_pod_is_recreated_under_its_name() {
    let r = cluster("sts-recreate", 50).await;
    r.create(sts("web").replicas(2)).await;
    r.wait_rolled_out("web", 2).await;
    let old = r.pods().get("web-1").await.expect("web-1");
    let old_uid = old.metadata.uid.clone().unwrap_or_default();
    r.pods()
        .delete("web-1", &DeleteParams::default())
        .await
        .expect("deleted");
    helpers::wait_for(DEADLINE, "a new web-1, Running and Ready", || async {
        let pods = r.pod_states("web").await?;
        let fresh = pods
            .iter()
            .any(|p| p.name == "web-1" && p.uid != old_uid && p.ready && !p.deleting);
        if fresh && pods.len() == 2 {
            Ok(())
        } else {
            Err(summary(&pods))
        }
    })
    .await;
    r.sim.shutdown().await;
}

#[tokio::test]
async fn a_template_change_rolls_pods_from_the_highest_ordinal_down() {
    let r = cluster("sts-rollout", 50).await;
    r.create(sts("web").replicas(3)).await;
    let before = r.wait_rolled_out("web", 3).await;
    let old_revision = before["currentRevision"].as_str().unwrap_or_default().to_owned();
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}});
    r.sets()
        .patch("web", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("template changed");

    let updated_order: RefCell<Vec<String>> = RefCell::default();
    let st = helpers::wait_for(DEADLINE, "every pod at the new revision", || async {
        let pods = r.pod_states("web").await?;
        let st = r.status("web").await?;
        let mut updated_order = updated_order.borrow_mut();
        for p in &pods {
            if !p.revision.is_empty() && p.revision != old_revision && !updated_order.contains(&p.name) {
                updated_order.push(p.name.clone());
            }
        }
        let done = st["observedGeneration"] == 2
            && st["currentRevision"] == st["updateRevision"]
            && st["currentRevision"] != json!(old_revision)
            && st["readyReplicas"] == 3
            && st["updatedReplicas"] == 3;
        if done {
            Ok(st)
        } else {
            Err(format!("{st} pods: {}", summary(&pods)))
        }
    })
    .await;
    assert_eq!(
        updated_order.into_inner(),
        ["web-2", "web-1", "web-0"],
        "order pods were replaced in"
    );
    assert_eq!(st["currentReplicas"], 3, "status: {st}");
    let pod = serde_json::to_value(r.pods().get("web-0").await.expect("web-0")).expect("json");
    assert_eq!(pod["spec"]["containers"][0]["image"], "nginx:1.27");
    let revisions: Api<ControllerRevision> = Api::namespaced(r.client.clone(), "default");
    let list = revisions.list(&ListParams::default()).await.expect("revisions");
    let mut numbers: Vec<i64> = list.items.iter().filter_map(|c| c.revision).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [1, 2], "two ControllerRevisions, numbered 1 and 2");
    r.sim.shutdown().await;
}
