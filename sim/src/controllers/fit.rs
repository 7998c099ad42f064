//! The scheduler's decision, as plain functions over node snapshots: kube-scheduler's filters in
//! upstream order with upstream reason strings, least-allocated scoring with a name tie-break, and
//! the `0/<N> nodes are available: ...` message.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration};

use nave_resources::Resources;

use super::resources::node_allocatable;

/// Taint added to cordoned nodes.
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// Taint added to nodes whose Ready condition is False.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Taint added to nodes whose Ready condition is Unknown.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// Requests the scoring assumes for a container that declares none (upstream `schedutil`).
const DEFAULT_MILLI_CPU: i128 = 100;
const DEFAULT_MEMORY_MILLI: i128 = 200 * 1024 * 1024 * 1000;

/// What the scheduler knows about one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSnapshot {
    /// Node name.
    pub name: String,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `status.allocatable` in milli-units.
    pub allocatable: Resources,
    /// Σ requests of the non-terminal pods bound to the node, in milli-units.
    pub requested: Resources,
    /// Σ requests with the scoring defaults for cpu and memory, in milli-units.
    pub non_zero_requested: (i128, i128),
    /// Number of non-terminal pods bound to the node.
    pub pods: i64,
}

impl NodeSnapshot {
    /// A snapshot of an empty node.
    pub fn from_node(node: &Node) -> NodeSnapshot {
        let spec = node.spec.as_ref();
        NodeSnapshot {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            allocatable: node_allocatable(node),
            requested: Resources::new(),
            non_zero_requested: (0, 0),
            pods: 0,
        }
    }

    /// Accounts for a pod placed on this node.
    pub fn add_pod(&mut self, requests: &Resources) {
        self.requested.add(requests);
        let (cpu, mem) = non_zero(requests);
        self.non_zero_requested.0 += cpu;
        self.non_zero_requested.1 += mem;
        self.pods += 1;
    }
}

fn non_zero(requests: &Resources) -> (i128, i128) {
    let cpu = requests
        .get("cpu")
        .filter(|v| *v > 0)
        .unwrap_or(DEFAULT_MILLI_CPU);
    let mem = requests
        .get("memory")
        .filter(|v| *v > 0)
        .unwrap_or(DEFAULT_MEMORY_MILLI);
    (cpu, mem)
}

/// Whether `toleration` tolerates `taint` (upstream `Toleration.ToleratesTaint`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    if let Some(key) = toleration.key.as_deref().filter(|k| !k.is_empty())
        && key != taint.key
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

/// Whether any of `tolerations` tolerates `taint`.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

fn requirement_matches(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value.and_then(|v| v.parse::<i64>().ok()), values) else {
                return false;
            };
            let Ok(bound) = bound.parse::<i64>() else {
                return false;
            };
            if req.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

fn term_matches(term: &NodeSelectorTerm, node: &NodeSnapshot) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    // An empty term matches no node (upstream `nodeaffinity`).
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, node.labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            let value = (r.key == "metadata.name").then_some(node.name.as_str());
            r.key == "metadata.name" && requirement_matches(r, value)
        })
}

fn affinity_matches(pod: &Pod, node: &NodeSnapshot) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    if let Some(selector) = &spec.node_selector
        && !selector.iter().all(|(k, v)| node.labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    match required {
        Some(sel) => sel.node_selector_terms.iter().any(|t| term_matches(t, node)),
        None => true,
    }
}

/// Runs the filters in upstream order; `Err` carries the reasons of the first failing filter
/// (NodeResourcesFit may give several).
pub fn filter(pod: &Pod, requests: &Resources, node: &NodeSnapshot) -> Result<(), Vec<String>> {
    let spec = pod.spec.as_ref();
    let tolerations = spec.and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    if node.unschedulable {
        let taint = Taint {
            key: TAINT_UNSCHEDULABLE.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !tolerated(tolerations, &taint) {
            return Err(vec!["node(s) were unschedulable".into()]);
        }
    }
    if let Some(name) = spec
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
        && name != node.name
    {
        return Err(vec!["node(s) didn't match the requested node name".into()]);
    }
    for taint in &node.taints {
        if matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute") && !tolerated(tolerations, taint) {
            return Err(vec![format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint.key,
                taint.value.as_deref().unwrap_or("")
            )]);
        }
    }
    if !affinity_matches(pod, node) {
        return Err(vec!["node(s) didn't match Pod's node affinity/selector".into()]);
    }
    let reasons = fit_reasons(requests, node);
    if reasons.is_empty() { Ok(()) } else { Err(reasons) }
}

/// NodeResourcesFit: pod count first, then cpu, memory, ephemeral-storage, then other resources
/// by name.
fn fit_reasons(requests: &Resources, node: &NodeSnapshot) -> Vec<String> {
    let mut reasons = Vec::new();
    let allowed_pods = node.allocatable.milli("pods") / 1000;
    if i128::from(node.pods) + 1 > allowed_pods {
        reasons.push("Too many pods".to_owned());
    }
    let free = |name: &str| node.allocatable.milli(name) - node.requested.milli(name);
    let mut names: Vec<&str> = vec!["cpu", "memory", "ephemeral-storage"];
    names.extend(
        requests
            .names()
            .filter(|k| !matches!(*k, "cpu" | "memory" | "ephemeral-storage" | "pods")),
    );
    for name in names {
        let want = requests.milli(name);
        if want > 0 && want > free(name) {
            reasons.push(format!("Insufficient {name}"));
        }
    }
    reasons
}

/// Least-allocated score in 0..=100 (upstream integer arithmetic, cpu and memory weighted equally).
pub fn score(requests: &Resources, node: &NodeSnapshot) -> i128 {
    let (cpu, mem) = non_zero(requests);
    let one = |alloc: i128, used: i128| {
        if alloc <= 0 || used > alloc {
            0
        } else {
            (alloc - used) * 100 / alloc
        }
    };
    let cpu_score = one(node.allocatable.milli("cpu"), node.non_zero_requested.0 + cpu);
    let mem_score = one(node.allocatable.milli("memory"), node.non_zero_requested.1 + mem);
    (cpu_score + mem_score) / 2
}

/// Chooses a node for `pod`: the index into `nodes` of the feasible node with the best score
/// (ties to the smallest name), or the unschedulable message.
pub fn schedule(pod: &Pod, requests: &Resources, nodes: &[NodeSnapshot]) -> Result<usize, String> {
    let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
    let mut best: Option<(i128, usize)> = None;
    for (i, node) in nodes.iter().enumerate() {
        match filter(pod, requests, node) {
            Ok(()) => {
                let s = score(requests, node);
                let better = match best {
                    None => true,
                    Some((bs, bi)) => s > bs || (s == bs && node.name < nodes[bi].name),
                };
                if better {
                    best = Some((s, i));
                }
            }
            Err(reasons) => {
                for r in reasons {
                    *histogram.entry(r).or_insert(0) += 1;
                }
            }
        }
    }
    best.map(|(_, i)| i)
        .ok_or_else(|| unschedulable_message(nodes.len(), &histogram))
}

/// The upstream FitError text: `0/<N> nodes are available: <count> <reason>, .... preemption: ...`.
pub fn unschedulable_message(nodes: usize, histogram: &BTreeMap<String, usize>) -> String {
    if nodes == 0 {
        return "no nodes available to schedule pods".to_owned();
    }
    let mut parts: Vec<String> = histogram
        .iter()
        .map(|(reason, n)| format!("{n} {reason}"))
        .collect();
    // Upstream sorts the formatted "<count> <reason>" strings.
    parts.sort();
    let mut msg = format!("0/{nodes} nodes are available:");
    if !parts.is_empty() {
        msg.push(' ');
        msg.push_str(&parts.join(", "));
    }
    msg.push('.');
    msg.push_str(&format!(
        " preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
    ));
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::{
        Affinity, Container, NodeAffinity, NodeSelector, PodSpec, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use nave_resources::pod_requests;

    fn node(name: &str, cpu: &str, memory: &str) -> NodeSnapshot {
        NodeSnapshot {
            name: name.into(),
            labels: [("kubernetes.io/hostname".to_string(), name.to_string())].into(),
            unschedulable: false,
            taints: vec![],
            allocatable: [
                (
                    "cpu".to_string(),
                    nave_sim_core::quantity::parse_milli(cpu).expect("cpu"),
                ),
                (
                    "memory".to_string(),
                    nave_sim_core::quantity::parse_milli(memory).expect("memory"),
                ),
                ("pods".to_string(), 110_000),
            ]
            .into_iter()
            .collect(),
            requested: Resources::new(),
            non_zero_requested: (0, 0),
            pods: 0,
        }
    }

    fn pod(cpu: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn place(p: &Pod, nodes: &mut [NodeSnapshot]) -> Result<String, String> {
        let req = pod_requests(p.spec.as_ref().expect("spec"));
        let i = schedule(p, &req, nodes)?;
        nodes[i].add_pod(&req);
        Ok(nodes[i].name.clone())
    }

    #[test]
    fn third_400m_pod_on_a_one_cpu_node_is_insufficient_cpu() {
        let mut nodes = vec![node("n1", "1", "4Gi")];
        let p = pod("400m");
        assert_eq!(place(&p, &mut nodes), Ok("n1".into()));
        assert_eq!(place(&p, &mut nodes), Ok("n1".into()));
        assert_eq!(
            place(&p, &mut nodes),
            Err(
                "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 \
                 Preemption is not helpful for scheduling."
                    .into()
            )
        );
    }

    #[test]
    fn least_allocated_spreads_and_ties_go_to_the_smallest_name() {
        let mut nodes = vec![node("b", "4", "8Gi"), node("a", "4", "8Gi")];
        let p = pod("1");
        assert_eq!(place(&p, &mut nodes), Ok("a".into()));
        assert_eq!(place(&p, &mut nodes), Ok("b".into()));
        assert_eq!(place(&p, &mut nodes), Ok("a".into()));
    }

    #[test]
    fn histogram_is_sorted_and_counts_every_node() {
        let mut tainted = node("t", "4", "8Gi");
        tainted.taints = vec![Taint {
            key: TAINT_NOT_READY.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        let mut cordoned = node("c", "4", "8Gi");
        cordoned.unschedulable = true;
        let mut other = node("o", "4", "8Gi");
        other.labels.insert("disk".into(), "hdd".into());
        let small = node("s", "100m", "8Gi");
        let mut p = pod("1");
        p.spec.as_mut().expect("spec").node_selector = Some([("disk".to_string(), "hdd".to_string())].into());
        let nodes = vec![tainted, cordoned, node("x", "4", "8Gi"), small];
        let req = pod_requests(p.spec.as_ref().expect("spec"));
        let msg = schedule(&p, &req, &nodes).expect_err("unschedulable");
        assert_eq!(
            msg,
            "0/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, \
             1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector. preemption: \
             0/4 nodes are available: 4 Preemption is not helpful for scheduling."
        );
        let mut with_other = nodes.clone();
        with_other.push(other);
        assert_eq!(schedule(&p, &req, &with_other), Ok(4));
    }

    #[test]
    fn toleration_semantics() {
        let taint = Taint {
            key: "k".into(),
            value: Some("v".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let t = |key: Option<&str>, op: Option<&str>, value: Option<&str>, effect: Option<&str>| Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        };
        assert!(tolerates(&t(Some("k"), None, Some("v"), None), &taint));
        assert!(!tolerates(&t(Some("k"), None, Some("w"), None), &taint));
        assert!(tolerates(
            &t(Some("k"), Some("Exists"), None, Some("NoSchedule")),
            &taint
        ));
        assert!(!tolerates(
            &t(Some("k"), Some("Exists"), None, Some("NoExecute")),
            &taint
        ));
        assert!(tolerates(&t(None, Some("Exists"), None, None), &taint));
    }

    #[test]
    fn required_node_affinity_with_gt_and_match_fields() {
        let mut n = node("n1", "4", "8Gi");
        n.labels.insert("gen".into(), "5".into());
        let req = |key: &str, op: &str, values: &[&str]| NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        let mut p = pod("1");
        let set = |p: &mut Pod, term: NodeSelectorTerm| {
            p.spec.as_mut().expect("spec").affinity = Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![term],
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            });
        };
        set(
            &mut p,
            NodeSelectorTerm {
                match_expressions: Some(vec![req("gen", "Gt", &["4"])]),
                match_fields: None,
            },
        );
        assert!(affinity_matches(&p, &n));
        set(
            &mut p,
            NodeSelectorTerm {
                match_expressions: Some(vec![req("gen", "Lt", &["4"])]),
                match_fields: None,
            },
        );
        assert!(!affinity_matches(&p, &n));
        set(
            &mut p,
            NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![req("metadata.name", "In", &["n1"])]),
            },
        );
        assert!(affinity_matches(&p, &n));
        set(&mut p, NodeSelectorTerm::default());
        assert!(!affinity_matches(&p, &n));
    }

    #[test]
    fn too_many_pods_and_extended_resources() {
        let mut n = node("n1", "4", "8Gi");
        n.allocatable.set("pods", 1000);
        n.pods = 1;
        let mut req = Resources::new();
        req.set("nvidia.com/gpu", 1000);
        assert_eq!(
            fit_reasons(&req, &n),
            vec![
                "Too many pods".to_string(),
                "Insufficient nvidia.com/gpu".to_string()
            ]
        );
    }

    #[test]
    fn no_nodes_message() {
        assert_eq!(
            unschedulable_message(0, &BTreeMap::new()),
            "no nodes available to schedule pods"
        );
    }
}
