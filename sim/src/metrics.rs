//! The Prometheus exposition of a simulated cluster: kube-state-metrics series with KSM's
//! names, labels and units, kube-scheduler's `kube_pod_resource_request`/`_limit`, and cAdvisor /
//! node-exporter shaped usage series from the usage model.
//!
//! ```text
//!  Snapshot (nodes, pods, deployments, replicasets, namespaces, usage settings)
//!      └──► render() ──► families in a fixed order ──► text/plain; version=0.0.4
//!                 └──► UsageCounters (integrates cpu usage into monotonic counters)
//!
//!  nodes, pods, usage settings ──► resource_usage() ──► the usage series above
//!                                                  └──► PodMetrics / NodeMetrics (server::resource_metrics)
//! ```
//!
//! Usage of a running container = its requests × the usage factor, unless its pod declares
//! `sim.nave.dev/cpu-usage` / `sim.nave.dev/memory-usage` (split over containers in proportion to
//! their requests); a node's usage is the sum over its running containers unless the admin route
//! overrides it. [`resource_usage`] computes both, for the usage series here and for the resource
//! metrics API (`metrics.k8s.io`, what `kubectl top` reads). There is no `cluster` label: the
//! scrape config names the cluster.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Namespace, Node, Pod};
use nave_resources::{Resources, container_limits, container_requests, pod_limits, pod_requests};

use crate::config::{CPU_USAGE_ANNOTATION, MEMORY_USAGE_ANNOTATION};

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a scrape reads.
#[derive(Debug)]
pub struct Snapshot<'a> {
    /// Nodes.
    pub nodes: &'a [Arc<Node>],
    /// Pods.
    pub pods: &'a [Arc<Pod>],
    /// Deployments.
    pub deployments: &'a [Arc<Deployment>],
    /// ReplicaSets.
    pub replicasets: &'a [Arc<ReplicaSet>],
    /// Namespaces.
    pub namespaces: &'a [Arc<Namespace>],
    /// Usage = requests × factor.
    pub usage_factor: f64,
    /// Per-node usage overrides `(cpu milli, memory milli)`.
    pub node_usage: &'a HashMap<String, (Option<i128>, Option<i128>)>,
    /// Simulated requests per second arriving at the ingress, by (namespace, Service).
    pub traffic: &'a BTreeMap<(String, String), f64>,
}

#[derive(Debug, Clone, Copy)]
struct Counter {
    last: Instant,
    total: f64,
}

/// State of the usage counters between scrapes.
#[derive(Debug, Default)]
pub struct UsageCounters {
    containers: HashMap<(String, String), Counter>,
    /// Per node: last update and `(idle, user)` seconds per cpu.
    nodes: HashMap<String, (Instant, Vec<(f64, f64)>)>,
}

/// Formats a sample value: integers without a fraction, others in Rust's shortest form.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A Prometheus label name from a Kubernetes key (`app.kubernetes.io/name` -> `app_kubernetes_io_name`).
pub fn sanitize(key: &str) -> String {
    let mut s: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// KSM's unit for a resource.
fn unit(resource: &str) -> &'static str {
    match resource {
        "cpu" => "core",
        "memory" | "ephemeral-storage" | "storage" => "byte",
        r if r.starts_with("hugepages-") => "byte",
        _ => "integer",
    }
}

/// kube-scheduler's unit for a resource.
fn scheduler_unit(resource: &str) -> &'static str {
    match resource {
        "cpu" => "cores",
        "memory" | "ephemeral-storage" | "storage" => "bytes",
        r if r.starts_with("hugepages-") => "bytes",
        _ => "",
    }
}

fn seconds(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<f64> {
    t.map(|t| t.0.as_second() as f64)
}

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    lines: String,
}

/// Families in declaration order, with their samples.
struct Out {
    families: Vec<Family>,
    index: HashMap<&'static str, usize>,
}

impl Out {
    fn new(decls: &[(&'static str, &'static str, &'static str)]) -> Out {
        let families: Vec<Family> = decls
            .iter()
            .map(|(name, kind, help)| Family {
                name,
                help,
                kind,
                lines: String::new(),
            })
            .collect();
        let index = families.iter().enumerate().map(|(i, f)| (f.name, i)).collect();
        Out { families, index }
    }

    fn add(&mut self, name: &'static str, labels: &[(&str, &str)], value: f64) {
        let Some(&i) = self.index.get(name) else { return };
        let lines = &mut self.families[i].lines;
        lines.push_str(name);
        if !labels.is_empty() {
            lines.push('{');
            let mut seen = HashSet::new();
            let mut first = true;
            for (k, v) in labels {
                if !seen.insert(*k) {
                    continue;
                }
                if !first {
                    lines.push(',');
                }
                first = false;
                let _ = write!(lines, "{k}=\"{}\"", escape(v));
            }
            lines.push('}');
        }
        lines.push(' ');
        lines.push_str(&format_value(value));
        lines.push('\n');
    }

    fn finish(self) -> String {
        let mut s = String::new();
        for f in self.families {
            let _ = writeln!(s, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(s, "# TYPE {} {}", f.name, f.kind);
            s.push_str(&f.lines);
        }
        s
    }
}

const G: &str = "gauge";
const C: &str = "counter";
const FAMILIES: &[(&str, &str, &str)] = &[
    ("kube_node_info", G, "[STABLE] Information about a cluster node."),
    (
        "kube_node_labels",
        G,
        "[STABLE] Kubernetes labels converted to Prometheus labels.",
    ),
    (
        "kube_node_spec_unschedulable",
        G,
        "[STABLE] Whether a node can schedule new pods.",
    ),
    ("kube_node_spec_taint", G, "[STABLE] The taint of a cluster node."),
    (
        "kube_node_status_capacity",
        G,
        "[STABLE] The capacity for different resources of a node.",
    ),
    (
        "kube_node_status_allocatable",
        G,
        "[STABLE] The allocatable for different resources of a node that are available for scheduling.",
    ),
    (
        "kube_node_status_condition",
        G,
        "[STABLE] The condition of a cluster node.",
    ),
    ("kube_node_created", G, "[STABLE] Unix creation timestamp"),
    ("kube_pod_info", G, "[STABLE] Information about pod."),
    ("kube_pod_owner", G, "[STABLE] Information about the Pod's owner."),
    (
        "kube_pod_labels",
        G,
        "[STABLE] Kubernetes labels converted to Prometheus labels.",
    ),
    ("kube_pod_status_phase", G, "[STABLE] The pods current phase."),
    (
        "kube_pod_status_ready",
        G,
        "[STABLE] Describes whether the pod is ready to serve requests.",
    ),
    (
        "kube_pod_status_scheduled",
        G,
        "[STABLE] Describes the status of the scheduling process for the pod.",
    ),
    (
        "kube_pod_status_unschedulable",
        G,
        "[STABLE] Describes the unschedulable status for the pod.",
    ),
    (
        "kube_pod_status_scheduled_time",
        G,
        "[STABLE] Unix timestamp when pod moved into scheduled status",
    ),
    (
        "kube_pod_container_info",
        G,
        "[STABLE] Information about a container in a pod.",
    ),
    (
        "kube_pod_container_status_ready",
        G,
        "[STABLE] Describes whether the containers readiness check succeeded.",
    ),
    (
        "kube_pod_container_status_running",
        G,
        "[STABLE] Describes whether the container is currently in running state.",
    ),
    (
        "kube_pod_container_status_waiting",
        G,
        "[STABLE] Describes whether the container is currently in waiting state.",
    ),
    (
        "kube_pod_container_status_terminated",
        G,
        "[STABLE] Describes whether the container is currently in terminated state.",
    ),
    (
        "kube_pod_container_status_waiting_reason",
        G,
        "[STABLE] Describes the reason the container is currently in waiting state.",
    ),
    (
        "kube_pod_container_status_restarts_total",
        C,
        "[STABLE] The number of container restarts per container.",
    ),
    (
        "kube_pod_container_resource_requests",
        G,
        "[STABLE] The number of requested request resource by a container. It is recommended to use the kube_pod_resource_requests metric exposed by kube-scheduler instead, as it is more precise.",
    ),
    (
        "kube_pod_container_resource_limits",
        G,
        "[STABLE] The number of requested limit resource by a container. It is recommended to use the kube_pod_resource_limits metric exposed by kube-scheduler instead, as it is more precise.",
    ),
    (
        "kube_pod_init_container_resource_requests",
        G,
        "The number of requested request resource by an init container.",
    ),
    (
        "kube_pod_init_container_resource_limits",
        G,
        "The number of requested limit resource by an init container.",
    ),
    ("kube_pod_created", G, "[STABLE] Unix creation timestamp"),
    ("kube_pod_deletion_timestamp", G, "Unix deletion timestamp"),
    (
        "kube_pod_resource_request",
        G,
        "Resources requested by workloads on the cluster, broken down by pod.",
    ),
    (
        "kube_pod_resource_limit",
        G,
        "Resources limit for workloads on the cluster, broken down by pod.",
    ),
    (
        "kube_deployment_spec_replicas",
        G,
        "[STABLE] Number of desired pods for a deployment.",
    ),
    (
        "kube_deployment_status_replicas",
        G,
        "[STABLE] The number of replicas per deployment.",
    ),
    (
        "kube_deployment_status_replicas_ready",
        G,
        "[STABLE] The number of ready replicas per deployment.",
    ),
    (
        "kube_deployment_status_replicas_available",
        G,
        "[STABLE] The number of available replicas per deployment.",
    ),
    (
        "kube_deployment_status_replicas_unavailable",
        G,
        "[STABLE] The number of unavailable replicas per deployment.",
    ),
    (
        "kube_deployment_status_replicas_updated",
        G,
        "[STABLE] The number of updated replicas per deployment.",
    ),
    (
        "kube_deployment_status_observed_generation",
        G,
        "[STABLE] The generation observed by the deployment controller.",
    ),
    (
        "kube_deployment_metadata_generation",
        G,
        "[STABLE] Sequence number representing a specific generation of the desired state.",
    ),
    (
        "kube_deployment_status_condition",
        G,
        "[STABLE] The current status conditions of a deployment.",
    ),
    (
        "kube_replicaset_spec_replicas",
        G,
        "[STABLE] Number of desired pods for a ReplicaSet.",
    ),
    (
        "kube_replicaset_status_replicas",
        G,
        "[STABLE] The number of replicas per ReplicaSet.",
    ),
    (
        "kube_replicaset_status_ready_replicas",
        G,
        "[STABLE] The number of ready replicas per ReplicaSet.",
    ),
    (
        "kube_replicaset_owner",
        G,
        "[STABLE] Information about the ReplicaSet's owner.",
    ),
    (
        "kube_namespace_status_phase",
        G,
        "[STABLE] kubernetes namespace status phase.",
    ),
    (
        "container_cpu_usage_seconds_total",
        C,
        "Cumulative cpu time consumed in seconds.",
    ),
    (
        "container_memory_working_set_bytes",
        G,
        "Current working set in bytes.",
    ),
    (
        "node_cpu_seconds_total",
        C,
        "Seconds the CPUs spent in each mode.",
    ),
    (
        "node_memory_MemTotal_bytes",
        G,
        "Memory information field MemTotal_bytes.",
    ),
    (
        "node_memory_MemAvailable_bytes",
        G,
        "Memory information field MemAvailable_bytes.",
    ),
    (
        "nave_sim_ingress_requests_per_second",
        G,
        "Simulated requests per second arriving at the cluster's ingress for a Service (set through the admin route PUT /traffic/{namespace}/{service}).",
    ),
];

fn bool_series(out: &mut Out, name: &'static str, base: &[(&str, &str)], label: &str, status: &str) {
    for (value, want) in [("true", "True"), ("false", "False"), ("unknown", "Unknown")] {
        let mut l = base.to_vec();
        l.push((label, value));
        out.add(name, &l, if status == want { 1.0 } else { 0.0 });
    }
}

fn resource_series(out: &mut Out, name: &'static str, base: &[(&str, &str)], resources: &Resources) {
    for (r, v) in resources.iter() {
        let res = sanitize(r);
        let mut l = base.to_vec();
        l.push(("resource", &res));
        l.push(("unit", unit(r)));
        out.add(name, &l, v as f64 / 1000.0);
    }
}

fn render_nodes(out: &mut Out, nodes: &[Arc<Node>]) {
    for n in nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let status = n.status.clone().unwrap_or_default();
        let info = status.node_info.clone().unwrap_or_default();
        let spec = n.spec.clone().unwrap_or_default();
        let ip = status
            .addresses
            .iter()
            .flatten()
            .find(|a| a.type_ == "InternalIP")
            .map(|a| a.address.clone())
            .unwrap_or_default();
        out.add(
            "kube_node_info",
            &[
                ("node", &name),
                ("kernel_version", &info.kernel_version),
                ("os_image", &info.os_image),
                ("container_runtime_version", &info.container_runtime_version),
                ("kubelet_version", &info.kubelet_version),
                ("kubeproxy_version", "deprecated"),
                ("pod_cidr", spec.pod_cidr.as_deref().unwrap_or("")),
                ("provider_id", spec.provider_id.as_deref().unwrap_or("")),
                ("system_uuid", &info.system_uuid),
                ("internal_ip", &ip),
            ],
            1.0,
        );
        let labels: Vec<(String, String)> = n
            .metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (format!("label_{}", sanitize(k)), v.clone()))
            .collect();
        let mut l: Vec<(&str, &str)> = vec![("node", &name)];
        l.extend(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        out.add("kube_node_labels", &l, 1.0);
        out.add(
            "kube_node_spec_unschedulable",
            &[("node", &name)],
            if spec.unschedulable == Some(true) {
                1.0
            } else {
                0.0
            },
        );
        for t in spec.taints.iter().flatten() {
            out.add(
                "kube_node_spec_taint",
                &[
                    ("node", &name),
                    ("key", &t.key),
                    ("value", t.value.as_deref().unwrap_or("")),
                    ("effect", &t.effect),
                ],
                1.0,
            );
        }
        resource_series(
            out,
            "kube_node_status_capacity",
            &[("node", &name)],
            &Resources::from_list(status.capacity.as_ref()),
        );
        resource_series(
            out,
            "kube_node_status_allocatable",
            &[("node", &name)],
            &Resources::from_list(status.allocatable.as_ref()),
        );
        for c in status.conditions.iter().flatten() {
            bool_series(
                out,
                "kube_node_status_condition",
                &[("node", &name), ("condition", &c.type_)],
                "status",
                &c.status,
            );
        }
        if let Some(t) = seconds(n.metadata.creation_timestamp.as_ref()) {
            out.add("kube_node_created", &[("node", &name)], t);
        }
    }
}

fn container_series(
    out: &mut Out,
    base: &[(&str, &str)],
    c: &Container,
    cs: Option<&ContainerStatus>,
    node: &str,
) {
    let mut l = base.to_vec();
    l.push(("container", &c.name));
    if let Some(cs) = cs {
        let mut info = l.clone();
        info.extend([
            ("image", cs.image.as_str()),
            ("image_spec", c.image.as_deref().unwrap_or("")),
            ("image_id", cs.image_id.as_str()),
            ("container_id", cs.container_id.as_deref().unwrap_or("")),
        ]);
        out.add("kube_pod_container_info", &info, 1.0);
        let state = cs.state.clone().unwrap_or_default();
        let b = |x: bool| if x { 1.0 } else { 0.0 };
        out.add("kube_pod_container_status_ready", &l, b(cs.ready));
        out.add(
            "kube_pod_container_status_running",
            &l,
            b(state.running.is_some()),
        );
        out.add(
            "kube_pod_container_status_waiting",
            &l,
            b(state.waiting.is_some()),
        );
        out.add(
            "kube_pod_container_status_terminated",
            &l,
            b(state.terminated.is_some()),
        );
        if let Some(reason) = state.waiting.as_ref().and_then(|w| w.reason.as_deref()) {
            let mut w = l.clone();
            w.push(("reason", reason));
            out.add("kube_pod_container_status_waiting_reason", &w, 1.0);
        }
        out.add(
            "kube_pod_container_status_restarts_total",
            &l,
            f64::from(cs.restart_count),
        );
    }
    let mut r = l.clone();
    r.push(("node", node));
    resource_series(
        out,
        "kube_pod_container_resource_requests",
        &r,
        &container_requests(c),
    );
    resource_series(
        out,
        "kube_pod_container_resource_limits",
        &r,
        &container_limits(c),
    );
}

fn render_pods(out: &mut Out, pods: &[Arc<Pod>]) {
    for p in pods {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let spec = p.spec.clone().unwrap_or_default();
        let status = p.status.clone().unwrap_or_default();
        let node = spec.node_name.clone().unwrap_or_default();
        let base = [
            ("namespace", ns.as_str()),
            ("pod", name.as_str()),
            ("uid", uid.as_str()),
        ];
        let owners = p.metadata.owner_references.clone().unwrap_or_default();
        let controller = owners.iter().find(|o| o.controller == Some(true));
        let mut info = base.to_vec();
        info.extend([
            ("host_ip", status.host_ip.as_deref().unwrap_or("")),
            ("pod_ip", status.pod_ip.as_deref().unwrap_or("")),
            ("node", node.as_str()),
            (
                "created_by_kind",
                controller.map(|o| o.kind.as_str()).unwrap_or("<none>"),
            ),
            (
                "created_by_name",
                controller.map(|o| o.name.as_str()).unwrap_or("<none>"),
            ),
            (
                "priority_class",
                spec.priority_class_name.as_deref().unwrap_or(""),
            ),
            (
                "host_network",
                if spec.host_network == Some(true) {
                    "true"
                } else {
                    "false"
                },
            ),
        ]);
        out.add("kube_pod_info", &info, 1.0);
        if owners.is_empty() {
            let mut l = base.to_vec();
            l.extend([
                ("owner_kind", "<none>"),
                ("owner_name", "<none>"),
                ("owner_is_controller", "<none>"),
            ]);
            out.add("kube_pod_owner", &l, 1.0);
        }
        for o in &owners {
            let mut l = base.to_vec();
            let is = if o.controller == Some(true) {
                "true"
            } else {
                "false"
            };
            l.extend([
                ("owner_kind", o.kind.as_str()),
                ("owner_name", o.name.as_str()),
                ("owner_is_controller", is),
            ]);
            out.add("kube_pod_owner", &l, 1.0);
        }
        let labels: Vec<(String, String)> = p
            .metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (format!("label_{}", sanitize(k)), v.clone()))
            .collect();
        let mut l = base.to_vec();
        l.extend(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        out.add("kube_pod_labels", &l, 1.0);
        let phase = status.phase.clone().unwrap_or_else(|| "Pending".into());
        for ph in ["Pending", "Succeeded", "Failed", "Unknown", "Running"] {
            let mut l = base.to_vec();
            l.push(("phase", ph));
            out.add("kube_pod_status_phase", &l, if phase == ph { 1.0 } else { 0.0 });
        }
        for c in status.conditions.iter().flatten() {
            match c.type_.as_str() {
                "Ready" => bool_series(out, "kube_pod_status_ready", &base, "condition", &c.status),
                "PodScheduled" => {
                    bool_series(out, "kube_pod_status_scheduled", &base, "condition", &c.status);
                    if c.status == "True"
                        && let Some(t) = seconds(c.last_transition_time.as_ref())
                    {
                        out.add("kube_pod_status_scheduled_time", &base, t);
                    }
                    if c.status == "False" && c.reason.as_deref() == Some("Unschedulable") {
                        out.add("kube_pod_status_unschedulable", &base, 1.0);
                    }
                }
                _ => {}
            }
        }
        let statuses = status.container_statuses.clone().unwrap_or_default();
        for c in &spec.containers {
            container_series(out, &base, c, statuses.iter().find(|s| s.name == c.name), &node);
        }
        for c in spec.init_containers.iter().flatten() {
            let mut r = base.to_vec();
            r.push(("container", &c.name));
            r.push(("node", &node));
            resource_series(
                out,
                "kube_pod_init_container_resource_requests",
                &r,
                &container_requests(c),
            );
            resource_series(
                out,
                "kube_pod_init_container_resource_limits",
                &r,
                &container_limits(c),
            );
        }
        if let Some(t) = seconds(p.metadata.creation_timestamp.as_ref()) {
            out.add("kube_pod_created", &base, t);
        }
        if let Some(t) = seconds(p.metadata.deletion_timestamp.as_ref()) {
            out.add("kube_pod_deletion_timestamp", &base, t);
        }
        if !matches!(phase.as_str(), "Succeeded" | "Failed") {
            let scheduler = spec
                .scheduler_name
                .clone()
                .unwrap_or_else(|| "default-scheduler".into());
            let priority = spec.priority.map(|p| p.to_string()).unwrap_or_default();
            for (family, res) in [
                ("kube_pod_resource_request", pod_requests(&spec)),
                ("kube_pod_resource_limit", pod_limits(&spec)),
            ] {
                for (r, v) in res {
                    let l = [
                        ("namespace", ns.as_str()),
                        ("pod", name.as_str()),
                        ("node", node.as_str()),
                        ("scheduler", scheduler.as_str()),
                        ("priority", priority.as_str()),
                        ("resource", r.as_str()),
                        ("unit", scheduler_unit(&r)),
                    ];
                    out.add(family, &l, v as f64 / 1000.0);
                }
            }
        }
    }
}

fn render_workloads(out: &mut Out, s: &Snapshot<'_>) {
    for d in s.deployments {
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        let l = [("namespace", ns.as_str()), ("deployment", name.as_str())];
        let st = d.status.clone().unwrap_or_default();
        let n = |v: Option<i32>| f64::from(v.unwrap_or(0));
        out.add(
            "kube_deployment_spec_replicas",
            &l,
            n(d.spec.replicas.or(Some(1))),
        );
        out.add("kube_deployment_status_replicas", &l, n(st.replicas));
        out.add("kube_deployment_status_replicas_ready", &l, n(st.ready_replicas));
        out.add(
            "kube_deployment_status_replicas_available",
            &l,
            n(st.available_replicas),
        );
        out.add(
            "kube_deployment_status_replicas_unavailable",
            &l,
            n(st.unavailable_replicas),
        );
        out.add(
            "kube_deployment_status_replicas_updated",
            &l,
            n(st.updated_replicas),
        );
        out.add(
            "kube_deployment_status_observed_generation",
            &l,
            st.observed_generation.unwrap_or(0) as f64,
        );
        out.add(
            "kube_deployment_metadata_generation",
            &l,
            d.metadata.generation.unwrap_or(0) as f64,
        );
        for c in st.conditions.iter().flatten() {
            let base = [
                ("namespace", ns.as_str()),
                ("deployment", name.as_str()),
                ("condition", c.type_.as_deref().unwrap_or("")),
                ("reason", c.reason.as_deref().unwrap_or("")),
            ];
            bool_series(
                out,
                "kube_deployment_status_condition",
                &base,
                "status",
                c.status.as_deref().unwrap_or(""),
            );
        }
    }
    for rs in s.replicasets {
        let ns = rs.metadata.namespace.clone().unwrap_or_default();
        let name = rs.metadata.name.clone().unwrap_or_default();
        let l = [("namespace", ns.as_str()), ("replicaset", name.as_str())];
        let st = rs.status.clone().unwrap_or_default();
        out.add(
            "kube_replicaset_spec_replicas",
            &l,
            f64::from(rs.spec.replicas.unwrap_or(1)),
        );
        out.add("kube_replicaset_status_replicas", &l, f64::from(st.replicas));
        out.add(
            "kube_replicaset_status_ready_replicas",
            &l,
            f64::from(st.ready_replicas.unwrap_or(0)),
        );
        let owners = rs.metadata.owner_references.clone().unwrap_or_default();
        if owners.is_empty() {
            let mut o = l.to_vec();
            o.extend([
                ("owner_kind", "<none>"),
                ("owner_name", "<none>"),
                ("owner_is_controller", "<none>"),
            ]);
            out.add("kube_replicaset_owner", &o, 1.0);
        }
        for owner in &owners {
            let mut o = l.to_vec();
            let is = if owner.controller == Some(true) {
                "true"
            } else {
                "false"
            };
            o.extend([
                ("owner_kind", owner.kind.as_str()),
                ("owner_name", owner.name.as_str()),
                ("owner_is_controller", is),
            ]);
            out.add("kube_replicaset_owner", &o, 1.0);
        }
    }
    for n in s.namespaces {
        let name = n.metadata.name.clone().unwrap_or_default();
        let phase = n
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Active".into());
        for ph in ["Active", "Terminating"] {
            out.add(
                "kube_namespace_status_phase",
                &[("namespace", &name), ("phase", ph)],
                if phase == ph { 1.0 } else { 0.0 },
            );
        }
    }
}

/// Per running container of a pod: `(container, cpu cores, memory bytes)` from the usage model.
pub fn container_usage(pod: &Pod, factor: f64) -> Vec<(String, f64, f64)> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let running: Vec<&Container> = spec
        .containers
        .iter()
        .filter(|c| {
            statuses
                .iter()
                .any(|s| s.name == c.name && s.state.as_ref().is_some_and(|st| st.running.is_some()))
        })
        .collect();
    if running.is_empty() {
        return Vec::new();
    }
    let ann = pod.metadata.annotations.clone().unwrap_or_default();
    let declared = |key: &str| {
        ann.get(key)
            .and_then(|v| nave_sim_core::quantity::parse_milli(v).ok())
            .map(|m| m as f64 / 1000.0)
    };
    let (cpu_decl, mem_decl) = (declared(CPU_USAGE_ANNOTATION), declared(MEMORY_USAGE_ANNOTATION));
    let reqs: Vec<Resources> = running.iter().map(|c| container_requests(c)).collect();
    let share = |resource: &str, total: f64, i: usize| {
        let sum: i128 = reqs.iter().map(|r| r.milli(resource)).sum();
        if sum > 0 {
            total * reqs[i].milli(resource) as f64 / sum as f64
        } else {
            total / reqs.len() as f64
        }
    };
    running
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let req = |r: &str| reqs[i].milli(r) as f64 / 1000.0 * factor;
            let cpu = cpu_decl.map(|t| share("cpu", t, i)).unwrap_or_else(|| req("cpu"));
            let mem = mem_decl
                .map(|t| share("memory", t, i))
                .unwrap_or_else(|| req("memory"));
            (c.name.clone(), cpu.max(0.0), mem.max(0.0))
        })
        .collect()
}

/// A pod with at least one running container, and the modelled usage of each of them.
#[derive(Debug, Clone)]
pub struct PodUsage {
    /// The pod.
    pub pod: Arc<Pod>,
    /// `(container, cpu cores, memory bytes)` per running container, as [`container_usage`] gives.
    pub containers: Vec<(String, f64, f64)>,
}

/// A node and its modelled usage.
#[derive(Debug, Clone)]
pub struct NodeUsage {
    /// The node.
    pub node: Arc<Node>,
    /// Cores in use: the sum over the node's running containers, unless overridden.
    pub cpu: f64,
    /// Bytes in use: the sum over the node's running containers, unless overridden.
    pub memory: f64,
}

/// The usage model applied to a cluster at one instant. The usage series of the exposition and
/// the resource metrics API (`metrics.k8s.io`, see `server::resource_metrics`) both report it,
/// so `kubectl top` and PromQL see the same numbers.
#[derive(Debug, Clone, Default)]
pub struct ResourceUsage {
    /// The pods with a running container, in the order they were given.
    pub pods: Vec<PodUsage>,
    /// Every node, in the order they were given.
    pub nodes: Vec<NodeUsage>,
}

/// Applies the usage model to `pods` (requests × `factor` unless annotated, see
/// [`container_usage`]) and sums it per node, where `overrides` (per node `(cpu milli, memory
/// milli)`, from `PUT /nodes/{name}/usage`) replaces the sum of the resource it names.
pub fn resource_usage(
    nodes: &[Arc<Node>],
    pods: &[Arc<Pod>],
    factor: f64,
    overrides: &HashMap<String, (Option<i128>, Option<i128>)>,
) -> ResourceUsage {
    let pods: Vec<PodUsage> = pods
        .iter()
        .filter_map(|p| {
            let containers = container_usage(p, factor);
            (!containers.is_empty()).then(|| PodUsage {
                pod: p.clone(),
                containers,
            })
        })
        .collect();
    let mut per_node: HashMap<&str, (f64, f64)> = HashMap::new();
    for p in &pods {
        let Some(node) = p.pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let sum = per_node.entry(node).or_default();
        for (_, cpu, memory) in &p.containers {
            sum.0 += cpu;
            sum.1 += memory;
        }
    }
    let nodes = nodes
        .iter()
        .map(|n| {
            let name = n.metadata.name.as_deref().unwrap_or_default();
            let (mut cpu, mut memory) = per_node.get(name).copied().unwrap_or_default();
            if let Some((cpu_milli, memory_milli)) = overrides.get(name) {
                if let Some(c) = cpu_milli {
                    cpu = *c as f64 / 1000.0;
                }
                if let Some(m) = memory_milli {
                    memory = *m as f64 / 1000.0;
                }
            }
            NodeUsage {
                node: n.clone(),
                cpu,
                memory,
            }
        })
        .collect();
    ResourceUsage { pods, nodes }
}

fn render_usage(
    out: &mut Out,
    s: &Snapshot<'_>,
    counters: &mut UsageCounters,
    now: Instant,
    wall: Timestamp,
) {
    let usage = resource_usage(s.nodes, s.pods, s.usage_factor, s.node_usage);
    let mut seen: HashSet<(String, String)> = HashSet::new();
    for PodUsage { pod: p, containers } in &usage.pods {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let started = p.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
        for (container, cpu, mem) in containers {
            let key = (uid.clone(), container.clone());
            let counter = counters.containers.entry(key.clone()).or_insert_with(|| {
                // First sight: account for the time since the pod started.
                let since = started
                    .map(|t| wall.duration_since(t).as_secs_f64().max(0.0))
                    .unwrap_or(0.0);
                Counter {
                    last: now,
                    total: cpu * since,
                }
            });
            counter.total += cpu * now.saturating_duration_since(counter.last).as_secs_f64();
            counter.last = now;
            seen.insert(key);
            let l = [
                ("namespace", ns.as_str()),
                ("pod", name.as_str()),
                ("container", container.as_str()),
                ("node", node.as_str()),
            ];
            out.add("container_cpu_usage_seconds_total", &l, counter.total);
            out.add("container_memory_working_set_bytes", &l, mem.round());
        }
    }
    counters.containers.retain(|k, _| seen.contains(k));
    let mut nodes_seen = HashSet::new();
    for NodeUsage { node: n, cpu, memory } in &usage.nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let capacity = Resources::from_list(n.status.as_ref().and_then(|s| s.capacity.as_ref()));
        let cores = capacity.milli("cpu") as f64 / 1000.0;
        let mem_total = capacity.milli("memory") as f64 / 1000.0;
        let ncpu = (cores.ceil() as usize).max(1);
        let user_rate = (cpu / ncpu as f64).clamp(0.0, 1.0);
        let created = n
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| wall.duration_since(t.0).as_secs_f64().max(0.0))
            .unwrap_or(0.0);
        let entry = counters.nodes.entry(name.clone()).or_insert_with(|| {
            (
                now,
                vec![((1.0 - user_rate) * created, user_rate * created); ncpu],
            )
        });
        let dt = now.saturating_duration_since(entry.0).as_secs_f64();
        entry.0 = now;
        entry.1.resize(ncpu, (0.0, 0.0));
        for (i, (idle, user)) in entry.1.iter_mut().enumerate() {
            *idle += (1.0 - user_rate) * dt;
            *user += user_rate * dt;
            let core = i.to_string();
            out.add(
                "node_cpu_seconds_total",
                &[("node", &name), ("cpu", &core), ("mode", "idle")],
                *idle,
            );
            out.add(
                "node_cpu_seconds_total",
                &[("node", &name), ("cpu", &core), ("mode", "user")],
                *user,
            );
        }
        out.add(
            "node_memory_MemTotal_bytes",
            &[("node", &name)],
            mem_total.round(),
        );
        out.add(
            "node_memory_MemAvailable_bytes",
            &[("node", &name)],
            (mem_total - memory).max(0.0).round(),
        );
        nodes_seen.insert(name);
    }
    counters.nodes.retain(|k, _| nodes_seen.contains(k));
}

/// Renders the exposition of a snapshot, advancing the usage counters to `now`.
pub fn render(s: &Snapshot<'_>, counters: &mut UsageCounters, now: Instant, wall: Timestamp) -> String {
    let mut out = Out::new(FAMILIES);
    let mut nodes = s.nodes.to_vec();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut pods = s.pods.to_vec();
    pods.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    render_nodes(&mut out, &nodes);
    render_pods(&mut out, &pods);
    render_workloads(&mut out, s);
    let sorted = Snapshot {
        nodes: &nodes,
        pods: &pods,
        ..*s
    };
    render_usage(&mut out, &sorted, counters, now, wall);
    for ((namespace, service), rate) in s.traffic {
        out.add(
            "nave_sim_ingress_requests_per_second",
            &[("namespace", namespace), ("service", service)],
            *rate,
        );
    }
    out.finish()
}

#[cfg(test)]
mod tests;
