//! Capacity model and pending pods from hand-built Nodes and Pods.

use k8s_openapi::api::core::v1::{
    Container, NodeCondition, NodeSpec, NodeStatus, PodCondition, PodSpec, PodStatus, ResourceRequirements,
    Taint as KubeTaint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;

use super::*;

/// A ready node with `cpu` and `memory` allocatable and 110 pods.
fn mk_node(name: &str, cpu: &str, memory: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".to_owned(), name.to_owned()),
                ("pool".to_owned(), "general".to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            allocatable: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity(cpu.into())),
                ("memory".to_owned(), Quantity(memory.into())),
                ("pods".to_owned(), Quantity("110".into())),
            ])),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// What the agent keeps of `pods`.
fn summaries(pods: &[Pod]) -> Vec<PodSummary> {
    pods.iter().map(PodSummary::of).collect()
}

fn container(cpu: &str, memory: &str) -> Container {
    Container {
        name: "c".into(),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity(cpu.into())),
                ("memory".to_owned(), Quantity(memory.into())),
            ])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod with one container per `(cpu, memory)`, bound to `node` when given.
fn mk_pod(name: &str, node: Option<&str>, containers: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(Into::into),
            containers: containers.iter().map(|(c, m)| container(c, m)).collect(),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some(if node.is_some() { "Running" } else { "Pending" }.into()),
            ..Default::default()
        }),
    }
}

fn node_summaries(nodes: &[Node]) -> Vec<NodeSummary> {
    nodes.iter().map(NodeSummary::of).collect()
}

#[test]
fn identical_nodes_form_one_group_with_free_room_per_node() {
    let nodes = [mk_node("n2", "4", "16Gi"), mk_node("n1", "4", "16Gi")];
    let pods = [
        mk_pod("a", Some("n1"), &[("500m", "1Gi"), ("250m", "512Mi")]),
        mk_pod("b", Some("n1"), &[("1", "1Gi")]),
    ];
    let model = capacity_model(&node_summaries(&nodes), &summaries(&pods));
    assert_eq!(
        model.node_groups.len(),
        1,
        "hostname must not split groups: {model:?}"
    );
    let group = &model.node_groups[0];
    assert_eq!(group.labels.get("pool").map(String::as_str), Some("general"));
    assert!(!group.labels.contains_key("kubernetes.io/hostname"));
    let names: Vec<_> = group.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2"]);
    let n1 = &group.nodes[0];
    assert_eq!(n1.allocatable, Resources::new(4000, 16 << 30, 110));
    assert_eq!(n1.requested, Resources::new(1750, (2 << 30) + (512 << 20), 2));
    assert_eq!(group.nodes[1].requested, Resources::default());
    assert_eq!(model.totals.nodes, 2);
    assert_eq!(model.totals.schedulable_nodes, 2);
    assert_eq!(model.totals.allocatable.cpu_millis, 8000);
    assert_eq!(model.totals.requested.cpu_millis, 1750);
}

#[test]
fn terminal_pods_hold_no_resources() {
    let nodes = [mk_node("n1", "4", "16Gi")];
    let mut done = mk_pod("done", Some("n1"), &[("2", "1Gi")]);
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let model = capacity_model(&node_summaries(&nodes), &summaries(&[done]));
    assert_eq!(model.node_groups[0].nodes[0].requested, Resources::default());
}

#[test]
fn taints_and_cordons_split_groups_and_leave_totals() {
    let mut tainted = mk_node("gpu", "8", "32Gi");
    tainted.spec.as_mut().unwrap().taints = Some(vec![KubeTaint {
        key: "gpu".into(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
        ..Default::default()
    }]);
    let mut cordoned = mk_node("old", "4", "16Gi");
    cordoned.spec.as_mut().unwrap().unschedulable = Some(true);
    let model = capacity_model(
        &node_summaries(&[mk_node("n1", "4", "16Gi"), tainted, cordoned]),
        &[],
    );
    assert_eq!(model.node_groups.len(), 2, "{model:?}");
    let tainted_group = model.node_groups.iter().find(|g| !g.taints.is_empty()).unwrap();
    assert_eq!(tainted_group.taints[0].effect, TaintEffect::NoSchedule);
    assert_eq!(model.totals.nodes, 3);
    assert_eq!(
        model.totals.schedulable_nodes, 2,
        "the cordoned node is not schedulable"
    );
    assert_eq!(model.totals.allocatable.cpu_millis, 12000);
}

#[test]
fn pod_requests_take_the_init_peak_sidecars_and_overhead() {
    let mut pod = mk_pod("p", None, &[("100m", "100Mi"), ("100m", "100Mi")]);
    let spec = pod.spec.as_mut().unwrap();
    let mut sidecar = container("50m", "10Mi");
    sidecar.restart_policy = Some("Always".into());
    spec.init_containers = Some(vec![container("1", "50Mi"), sidecar]);
    spec.overhead = Some(BTreeMap::from([("cpu".to_owned(), Quantity("10m".into()))]));
    let r = pod_requests(&pod);
    // cpu: max(200 + 50, 1000) + 10; memory: max(200Mi + 10Mi, 50Mi).
    assert_eq!(r, Resources::new(1010, 210 << 20, 1));
}

#[test]
fn a_limit_stands_in_for_a_missing_request() {
    let mut pod = mk_pod("p", None, &[]);
    pod.spec.as_mut().unwrap().containers = vec![Container {
        name: "c".into(),
        resources: Some(ResourceRequirements {
            limits: Some(BTreeMap::from([("cpu".to_owned(), Quantity("300m".into()))])),
            ..Default::default()
        }),
        ..Default::default()
    }];
    assert_eq!(pod_requests(&pod).cpu_millis, 300);
}

#[test]
fn unschedulable_pods_are_pending_with_reason_workload_and_since() {
    let mut pod = mk_pod("web-1", None, &[("8", "1Gi")]);
    pod.metadata.labels = Some(BTreeMap::from([(
        WORKLOAD_LABEL.to_owned(),
        "shop.web".to_owned(),
    )]));
    pod.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        message: Some("0/3 nodes are available: 3 Insufficient cpu.".into()),
        ..Default::default()
    }]);
    let mut foreign = pod.clone();
    foreign.metadata.name = Some("aaa".into());
    foreign.metadata.labels = None;
    let just_created = mk_pod("new", None, &[("1", "1Gi")]);
    let running = mk_pod("ok", Some("n1"), &[("1", "1Gi")]);

    let (pending, omitted) = pending_pods(&summaries(&[foreign, pod.clone(), just_created, running]));
    assert_eq!(omitted, 0);
    let names: Vec<_> = pending.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["web-1", "aaa"],
        "Nave's pods first, then others; unconsidered pods left out"
    );
    assert_eq!(pending[0].reason, "Unschedulable");
    assert_eq!(pending[0].workload, Some(WorkloadRef::new("shop", "web")));
    assert_eq!(
        pending_by_workload(&summaries(&[pod])).get(&WorkloadRef::new("shop", "web")),
        Some(&1)
    );
}
