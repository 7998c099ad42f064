//! Round trips and documented examples of the wire types.

use std::collections::BTreeMap;

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

use super::*;

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + fmt::Debug>(value: &T) -> Value {
    let json = serde_json::to_value(value).expect("serializes");
    let back: T = serde_json::from_value(json.clone()).expect("deserializes");
    assert_eq!(&back, value, "round trip through {json}");
    json
}

fn node(name: &str, cpu: u64, requested_cpu: u64) -> NodeCapacity {
    NodeCapacity {
        name: name.to_owned(),
        allocatable: Resources::new(cpu, 16 << 30, 110),
        requested: Resources::new(requested_cpu, 1 << 30, 2),
        ready: true,
        unschedulable: false,
    }
}

#[test]
fn register_request_example_parses_with_camel_case_fields() {
    let request: RegisterRequest = serde_json::from_value(json!({
        "clusterName": "eu-west-1",
        "agentVersion": "0.1.0",
        "kubernetesVersion": "v1.33.1",
        "labels": {"tier": "gold"},
        "region": "eu-west",
        "zone": "eu-west-1a",
        "coordinates": {"latitude": 50.11, "longitude": 8.68}
    }))
    .unwrap();
    assert_eq!(request.cluster_name, "eu-west-1");
    assert_eq!(request.coordinates.unwrap().longitude, 8.68);
    round_trip(&request);
}

#[test]
fn register_request_needs_only_name_and_version() {
    let request: RegisterRequest =
        serde_json::from_value(json!({"clusterName": "c1", "agentVersion": "0.1.0"})).unwrap();
    assert_eq!(
        round_trip(&request),
        json!({"clusterName": "c1", "agentVersion": "0.1.0"})
    );
}

#[test]
fn register_response_defaults_max_wait_and_hides_the_credential_in_debug() {
    let response: RegisterResponse = serde_json::from_value(json!({
        "clusterName": "c1", "credential": "s3cret", "heartbeatIntervalSeconds": 10
    }))
    .unwrap();
    assert_eq!(response.max_work_wait_seconds, MAX_WORK_WAIT_SECONDS);
    let debug = format!("{response:?}");
    assert!(!debug.contains("s3cret"), "credential leaked into {debug}");
    round_trip(&response);
}

#[test]
fn heartbeat_round_trips_with_capacity_pending_pods_and_latency() {
    let heartbeat = Heartbeat {
        cluster_name: Some("c1".into()),
        agent_version: "0.1.0".into(),
        kubernetes_version: Some("v1.33.1".into()),
        capacity: CapacityModel {
            node_groups: vec![NodeGroup {
                labels: BTreeMap::from([("tier".to_owned(), "gold".to_owned())]),
                taints: vec![Taint {
                    key: "gpu".into(),
                    value: String::new(),
                    effect: TaintEffect::NoSchedule,
                }],
                nodes: vec![node("n1", 4000, 500), node("n2", 4000, 0)],
            }],
            totals: CapacityTotals {
                nodes: 2,
                schedulable_nodes: 2,
                allocatable: Resources::new(8000, 32 << 30, 220),
                requested: Resources::new(500, 2 << 30, 4),
            },
        },
        pending_pods: vec![PendingPod {
            namespace: "shop".into(),
            name: "web-abc".into(),
            workload: Some(WorkloadRef::new("shop", "web")),
            reason: "Unschedulable".into(),
            message: "0/2 nodes are available: 2 Insufficient cpu.".into(),
            since: Some(Time(Timestamp::from_second(1_700_000_000).unwrap())),
        }],
        pending_pods_omitted: 0,
        usage: None,
        workload_usage: Some(vec![WorkloadUsage {
            workload: WorkloadRef::new("shop", "web"),
            used: Resources::new(150, 100 << 20, 1),
            requested: Resources::new(100, 64 << 20, 1),
        }]),
        latency_samples: vec![LatencySample {
            peer: LatencySample::HUB.into(),
            rtt_millis: 12.5,
        }],
        probe_url: Some("http://10.0.3.7:9090/probe".into()),
        applied_revision: Some(7),
        work_held: Some(WorkHeld {
            reason: HeldReason::StoreChanged,
            message: "the hub's store is b, not a".into(),
            revision: 1,
            objects_kept: 3,
        }),
    };
    let json = round_trip(&heartbeat);
    assert_eq!(json["workHeld"]["reason"], "StoreChanged");
    assert_eq!(json["workloadUsage"][0]["used"]["cpuMillis"], 150);
    assert_eq!(
        json["capacity"]["nodeGroups"][0]["nodes"][0]["allocatable"]["cpuMillis"],
        4000
    );
    assert_eq!(
        json["capacity"]["nodeGroups"][0]["taints"][0]["effect"],
        "NoSchedule"
    );
    assert_eq!(json["pendingPods"][0]["since"], "2023-11-14T22:13:20Z");
    assert_eq!(
        json["pendingPods"][0]["workload"],
        json!({"namespace": "shop", "name": "web"})
    );
    assert_eq!(
        json["latencySamples"][0],
        json!({"peer": "hub", "rttMillis": 12.5})
    );
    assert_eq!(json["appliedRevision"], 7);
    assert_eq!(json["probeUrl"], "http://10.0.3.7:9090/probe");
    assert!(
        json.get("pendingPodsOmitted").is_none(),
        "zero omitted is left out: {json}"
    );
}

#[test]
fn heartbeat_answer_names_peers_and_an_empty_body_means_none() {
    let answer = HeartbeatAnswer {
        peers: vec![Peer {
            cluster: "us-east".into(),
            probe_url: "http://10.1.0.4:9090/probe".into(),
        }],
        ..HeartbeatAnswer::default()
    };
    let json = round_trip(&answer);
    assert_eq!(
        json,
        json!({"peers": [{"cluster": "us-east", "probeUrl": "http://10.1.0.4:9090/probe"}]})
    );
    let empty: HeartbeatAnswer = serde_json::from_str("{}").unwrap();
    assert_eq!(empty, HeartbeatAnswer::default());
}

#[test]
fn node_free_room_never_goes_negative() {
    let mut n = node("n1", 1000, 1500);
    assert_eq!(n.free().cpu_millis, 0);
    n.requested.cpu_millis = 250;
    assert_eq!(n.free(), Resources::new(750, 15 << 30, 108));
    assert!(n.schedulable());
    n.unschedulable = true;
    assert!(!n.schedulable());
}

#[test]
fn work_set_keeps_objects_verbatim() {
    let set = WorkSet {
        cluster: "c1".into(),
        revision: 3,
        objects: vec![json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "shop", "labels": {WORKLOAD_LABEL: "shop.web"}},
            "data": {"k": "v"}
        })],
        ..WorkSet::default()
    };
    let json = round_trip(&set);
    assert_eq!(json["objects"][0]["data"]["k"], "v");
    assert_eq!(json["revision"], 3);
}

#[test]
fn work_query_serializes_to_the_documented_query_string_names() {
    let q = WorkQuery {
        after: Some(4),
        wait: Some(30),
        cluster: None,
        held: false,
        prune_confirmed: None,
        delta: false,
    };
    assert_eq!(round_trip(&q), json!({"after": 4, "wait": 30}));
    assert_eq!(
        round_trip(&WorkQuery {
            delta: true,
            ..q.clone()
        })["delta"],
        true
    );
    let held = WorkQuery {
        held: true,
        prune_confirmed: Some(4),
        ..q
    };
    assert_eq!(round_trip(&held)["held"], true);
    assert_eq!(round_trip(&held)["pruneConfirmed"], 4);
}

#[test]
fn a_work_set_from_an_older_hub_is_neither_from_a_known_store_nor_complete() {
    let set: WorkSet =
        serde_json::from_value(json!({"cluster": "c1", "revision": 2, "objects": []})).unwrap();
    assert_eq!((set.store, set.complete), (None, false));
    assert_eq!((set.since, set.removed.len()), (None, 0), "a whole set");
}

#[test]
fn work_keys_name_kind_namespace_and_name() {
    let deployment = json!({"kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}});
    assert_eq!(work_key(&deployment), "Deployment/shop/web");
    assert_eq!(
        work_key(&json!({"kind": "Namespace", "metadata": {"name": "shop"}})),
        "Namespace//shop"
    );
    assert_eq!(
        work_key(&json!({})),
        "//",
        "an object without a name still has a key"
    );
}

#[test]
fn status_report_round_trips() {
    let report = StatusReport {
        cluster_name: Some("c1".into()),
        applied_revision: Some(2),
        attempted_revision: Some(3),
        objects: vec![ObjectStatus {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
            workload: Some(WorkloadRef::new("shop", "web")),
            replicas: Some(3),
            ready_replicas: Some(2),
            available_replicas: Some(2),
            updated_replicas: Some(3),
            pending_pods: Some(1),
            conditions: vec![ConditionSummary {
                type_: "Available".into(),
                status: "False".into(),
                reason: Some("MinimumReplicasUnavailable".into()),
                message: None,
            }],
            waiting_pods: [("ImagePullBackOff".to_owned(), 1)].into(),
            all_replicas: Some(3),
            template_hash: Some("0123456789abcdef".into()),
            observed_current: Some(true),
            first_ordinal: Some(2),
            active: Some(1),
            succeeded: Some(4),
            failed: Some(0),
            completed_indexes: Some("0-3".into()),
            error: None,
        }],
        apply_errors: vec![ApplyError {
            operation: "apply".into(),
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: Some("shop".into()),
            name: "creds".into(),
            message: "forbidden".into(),
            workload: Some(WorkloadRef::new("shop", "web")),
        }],
        id: Some("5f1c2a7b9e0d4c31-7".into()),
    };
    let json = round_trip(&report);
    assert_eq!(json["objects"][0]["conditions"][0]["type"], "Available");
    assert_eq!(json["objects"][0]["readyReplicas"], 2);
    assert_eq!(json["applyErrors"][0]["operation"], "apply");
    assert_eq!(
        json["applyErrors"][0]["workload"],
        json!({"namespace": "shop", "name": "web"})
    );
}

#[test]
fn error_body_has_the_shared_shape() {
    let body = ErrorBody {
        error: error_codes::FORBIDDEN.into(),
        message: "credential of cluster a cannot read cluster b".into(),
    };
    assert_eq!(
        round_trip(&body),
        json!({"error": "forbidden", "message": "credential of cluster a cannot read cluster b"})
    );
}

#[test]
fn workload_label_value_round_trips_and_rejects_malformed_values() {
    let w = WorkloadRef::new("shop", "web.v2");
    assert_eq!(w.label_value(), "shop.web.v2");
    assert_eq!(WorkloadRef::from_label_value("shop.web.v2"), Some(w.clone()));
    assert_eq!(w.to_string(), "shop/web.v2");
    assert_eq!(WorkloadRef::from_label_value("nodot"), None);
    assert_eq!(WorkloadRef::from_label_value(".web"), None);
    assert_eq!(WorkloadRef::from_label_value("shop."), None);
}

#[test]
fn paths_live_under_the_prefix() {
    for path in [REGISTER_PATH, HEARTBEAT_PATH, WORK_PATH, STATUS_PATH] {
        assert!(path.starts_with(PREFIX), "{path} is not under {PREFIX}");
    }
}

#[test]
fn a_registration_is_refused_with_the_field_named_when_a_workload_cluster_could_not_hold_it() {
    let good = RegisterRequest {
        cluster_name: "eu-west-1.prod".into(),
        agent_version: "0.1.0".into(),
        labels: [("topology.kubernetes.io/region".to_owned(), "eu-west".to_owned())].into(),
        region: Some("eu-west".into()),
        coordinates: Some(crate::Coordinates {
            latitude: 50.1,
            longitude: 8.7,
        }),
        ..RegisterRequest::default()
    };
    assert_eq!(good.validate(), Ok(()));
    let cases: Vec<(RegisterRequest, &str)> = vec![
        (
            RegisterRequest {
                cluster_name: "a..b".into(),
                ..good.clone()
            },
            "clusterName",
        ),
        (
            RegisterRequest {
                cluster_name: "-a".into(),
                ..good.clone()
            },
            "clusterName",
        ),
        (
            RegisterRequest {
                cluster_name: "Prod".into(),
                ..good.clone()
            },
            "clusterName",
        ),
        (
            RegisterRequest {
                cluster_name: "x".repeat(254),
                ..good.clone()
            },
            "clusterName",
        ),
        (
            RegisterRequest {
                labels: [("bad key!".to_owned(), "v".to_owned())].into(),
                ..good.clone()
            },
            "labels",
        ),
        (
            RegisterRequest {
                labels: [("k".to_owned(), "v".repeat(64))].into(),
                ..good.clone()
            },
            "labels[k]",
        ),
        (
            RegisterRequest {
                region: Some("eu west".into()),
                ..good.clone()
            },
            "region",
        ),
        (
            RegisterRequest {
                coordinates: Some(crate::Coordinates {
                    latitude: 1000.0,
                    longitude: 0.0,
                }),
                ..good.clone()
            },
            "coordinates.latitude",
        ),
        (
            RegisterRequest {
                coordinates: Some(crate::Coordinates {
                    latitude: 0.0,
                    longitude: f64::NAN,
                }),
                ..good.clone()
            },
            "coordinates.longitude",
        ),
        (
            RegisterRequest {
                agent_version: "1\n2".into(),
                ..good.clone()
            },
            "agentVersion",
        ),
    ];
    for (request, field) in cases {
        let error = request.validate().expect_err(field);
        assert!(
            error.starts_with(&format!("{field}:")),
            "expected {field}, got {error}"
        );
    }
}

fn object(kind: &str, name: &str, ready: i32) -> ObjectStatus {
    ObjectStatus {
        api_version: "apps/v1".to_owned(),
        kind: kind.to_owned(),
        namespace: Some("shop".to_owned()),
        name: name.to_owned(),
        ready_replicas: Some(ready),
        ..ObjectStatus::default()
    }
}

#[test]
fn a_delta_carries_only_what_changed_and_rebuilds_the_report_it_was_made_from() {
    let base = StatusReport {
        applied_revision: Some(3),
        objects: vec![
            object("Deployment", "web", 0),
            object("Deployment", "api", 2),
            object("StatefulSet", "web", 1),
        ],
        id: Some("r-1".to_owned()),
        ..StatusReport::default()
    };
    let next = StatusReport {
        applied_revision: Some(4),
        objects: vec![
            object("Deployment", "web", 1),
            object("StatefulSet", "web", 1),
            object("Job", "batch", 0),
        ],
        apply_errors: vec![ApplyError {
            kind: "Job".to_owned(),
            name: "batch".to_owned(),
            message: "quota".to_owned(),
            ..ApplyError::default()
        }],
        id: Some("r-2".to_owned()),
        ..StatusReport::default()
    };
    let delta = next.delta_from(&base).expect("both have ids");
    assert_eq!((delta.base.as_str(), delta.id.as_str()), ("r-1", "r-2"));
    let changed: Vec<(&str, &str)> = delta
        .changed
        .iter()
        .map(|o| (o.kind.as_str(), o.name.as_str()))
        .collect();
    assert_eq!(
        changed,
        [("Deployment", "web"), ("Job", "batch")],
        "the unchanged StatefulSet of the same name is left out"
    );
    assert_eq!(delta.removed.len(), 1);
    assert_eq!(
        (delta.removed[0].kind.as_str(), delta.removed[0].name.as_str()),
        ("Deployment", "api")
    );
    round_trip(&delta);
    assert_eq!(base.with_delta(delta).expect("fits"), next);

    // Unchanged: an empty delta that makes the same report.
    let same = next.delta_from(&next).expect("ids");
    assert!(same.changed.is_empty() && same.removed.is_empty());
    assert_eq!(next.with_delta(same).expect("fits"), next);
    // A report without an id has no delta.
    assert!(next.delta_from(&StatusReport::default()).is_none());
}

#[test]
fn a_delta_naming_an_object_twice_keeps_the_last_and_cannot_grow_a_report_past_its_bound() {
    let base = StatusReport {
        id: Some("r-1".to_owned()),
        ..StatusReport::default()
    };
    let delta = StatusDelta {
        base: "r-1".to_owned(),
        id: "r-2".to_owned(),
        changed: vec![object("Deployment", "web", 1), object("Deployment", "web", 2)],
        ..StatusDelta::default()
    };
    let report = base.with_delta(delta).expect("fits");
    assert_eq!(report.objects, [object("Deployment", "web", 2)]);
    let delta = StatusDelta {
        base: "r-2".to_owned(),
        id: "r-3".to_owned(),
        changed: (0..=StatusReport::MAX_OBJECTS)
            .map(|i| object("ConfigMap", &format!("c{i}"), 0))
            .collect(),
        ..StatusDelta::default()
    };
    let refused = report.with_delta(delta).expect_err("too many");
    assert!(
        refused.starts_with("changed:") && refused.contains("50002 objects"),
        "{refused}"
    );
}
