use super::*;

use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, NodeStatus, PodCondition, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// One parsed sample.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A strict little parser of the text format: HELP and TYPE before samples of a family, families
/// not interleaved, label names valid and unique, values parseable, no timestamps.
fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    let mut typed: HashMap<String, String> = HashMap::new();
    let mut finished: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let valid_name = |s: &str| {
        !s.is_empty()
            && s.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    for (n, line) in text.lines().enumerate() {
        let at = |m: &str| format!("line {}: {m}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            if let Some(c) = current.replace(name.to_owned())
                && c != name
            {
                finished.insert(c);
            }
            if finished.contains(name) {
                return Err(at("family repeated"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if !matches!(kind, "gauge" | "counter" | "untyped" | "histogram" | "summary") {
                return Err(at("bad type"));
            }
            typed.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => (&line[..i], &line[i..]),
            None => return Err(at("no value")),
        };
        if !valid_name(name) {
            return Err(at("bad metric name"));
        }
        if current.as_deref() != Some(name) || !typed.contains_key(name) {
            return Err(at("sample outside its family"));
        }
        let mut labels = BTreeMap::new();
        let mut rest = rest;
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            let end;
            loop {
                let Some(&(start, c)) = chars.peek() else {
                    return Err(at("unterminated labels"));
                };
                if c == '}' {
                    end = start + 1;
                    break;
                }
                if c == ',' {
                    chars.next();
                    continue;
                }
                let mut key = String::new();
                while let Some(&(_, c)) = chars.peek() {
                    if c == '=' {
                        break;
                    }
                    key.push(c);
                    chars.next();
                }
                chars.next();
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return Err(at("label value not quoted"));
                }
                let mut value = String::new();
                loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, c @ ('\\' | '"'))) => value.push(c),
                            _ => return Err(at("bad escape")),
                        },
                        Some((_, '"')) => break,
                        Some((_, c)) => value.push(c),
                        None => return Err(at("unterminated value")),
                    }
                }
                if !valid_name(&key) || key.starts_with("__") {
                    return Err(at("bad label name"));
                }
                if labels.insert(key, value).is_some() {
                    return Err(at("duplicate label"));
                }
            }
            rest = &body[end..];
        }
        let value_text = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("no space before value"))?;
        if value_text.contains(' ') {
            return Err(at("timestamps are not expected"));
        }
        let value = match value_text {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse::<f64>().map_err(|_| at("bad value"))?,
        };
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    Ok(samples)
}

fn ts(s: i64) -> Time {
    Time(Timestamp::from_second(s).expect("ts"))
}

fn node(name: &str, cpu: &str) -> Arc<Node> {
    let res: BTreeMap<String, Quantity> = [
        ("cpu", cpu),
        ("memory", "16Gi"),
        ("pods", "110"),
        ("nvidia.com/gpu", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
    .collect();
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.metadata.creation_timestamp = Some(ts(1000));
    n.metadata.labels = Some([("kubernetes.io/hostname".to_string(), name.to_string())].into());
    n.status = Some(NodeStatus {
        capacity: Some(res.clone()),
        allocatable: Some(res),
        ..Default::default()
    });
    Arc::new(n)
}

fn pod(name: &str, node: &str, cpu: &str, running: bool) -> Arc<Pod> {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns1".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.metadata.creation_timestamp = Some(ts(1000));
    p.metadata.labels = Some([("app.kubernetes.io/name".to_string(), "we\"b".to_string())].into());
    p.spec = Some(PodSpec {
        node_name: (!node.is_empty()).then(|| node.to_owned()),
        containers: vec![Container {
            name: "c1".into(),
            image: Some("nginx".into()),
            resources: Some(ResourceRequirements {
                requests: Some(
                    [
                        ("cpu".to_string(), Quantity(cpu.into())),
                        ("memory".to_string(), Quantity("64Mi".into())),
                    ]
                    .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    p.status = Some(PodStatus {
        phase: Some(if running { "Running" } else { "Pending" }.into()),
        start_time: running.then(|| ts(1000)),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: if running { "True" } else { "False" }.into(),
            reason: (!running).then(|| "Unschedulable".to_owned()),
            last_transition_time: Some(ts(1001)),
            ..Default::default()
        }]),
        container_statuses: running.then(|| {
            vec![ContainerStatus {
                name: "c1".into(),
                image: "nginx".into(),
                image_id: "sim://nginx".into(),
                ready: true,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(ts(1000)),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]
        }),
        ..Default::default()
    });
    Arc::new(p)
}

fn deployment() -> Arc<Deployment> {
    let mut d = Deployment::default();
    d.metadata.name = Some("depl1".into());
    d.metadata.namespace = Some("ns1".into());
    d.metadata.generation = Some(2);
    d.spec = DeploymentSpec {
        replicas: Some(2),
        ..Default::default()
    };
    d.status = Some(DeploymentStatus {
        replicas: Some(2),
        available_replicas: Some(2),
        observed_generation: Some(2),
        conditions: Some(vec![DeploymentCondition {
            type_: Some("Available".into()),
            status: Some("True".into()),
            reason: Some("MinimumReplicasAvailable".into()),
            ..Default::default()
        }]),
        ..Default::default()
    });
    Arc::new(d)
}

fn find<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

fn scrape(counters: &mut UsageCounters, at: Instant, wall: i64) -> Vec<Sample> {
    let nodes = vec![node("n1", "4")];
    let pods = vec![
        pod("p1", "n1", "100m", true),
        pod("p2", "n1", "100m", true),
        pod("big", "", "8", false),
    ];
    let deployments = vec![deployment()];
    let usage = HashMap::new();
    let traffic: BTreeMap<(String, String), f64> = [(("shop".to_owned(), "web".to_owned()), 12.5)].into();
    let s = Snapshot {
        nodes: &nodes,
        pods: &pods,
        deployments: &deployments,
        replicasets: &[],
        namespaces: &[],
        usage_factor: 0.5,
        node_usage: &usage,
        traffic: &traffic,
    };
    let text = render(&s, counters, at, Timestamp::from_second(wall).expect("ts"));
    parse(&text).unwrap_or_else(|e| panic!("exposition does not parse: {e}\n{text}"))
}

#[test]
fn ksm_series_have_upstream_names_labels_and_units() {
    let samples = scrape(&mut UsageCounters::default(), Instant::now(), 1100);
    let alloc = find(
        &samples,
        "kube_node_status_allocatable",
        &[("node", "n1"), ("resource", "cpu"), ("unit", "core")],
    );
    assert_eq!(alloc.len(), 1);
    assert_eq!(alloc[0].value, 4.0);
    let gpu = find(
        &samples,
        "kube_node_status_allocatable",
        &[("resource", "nvidia_com_gpu"), ("unit", "integer")],
    );
    assert_eq!(gpu.len(), 1, "extended resources are sanitised");
    let mem = find(
        &samples,
        "kube_node_status_capacity",
        &[("resource", "memory"), ("unit", "byte")],
    );
    assert_eq!(mem[0].value, 17_179_869_184.0);
    // Σ cpu requests on n1 = 0.2.
    let cpu: f64 = find(
        &samples,
        "kube_pod_container_resource_requests",
        &[("node", "n1"), ("resource", "cpu")],
    )
    .iter()
    .map(|s| s.value)
    .sum();
    assert!((cpu - 0.2).abs() < 1e-9, "saw {cpu}");
    let req = &find(
        &samples,
        "kube_pod_container_resource_requests",
        &[("pod", "p1"), ("resource", "cpu")],
    )[0];
    let keys: Vec<&str> = req.labels.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["container", "namespace", "node", "pod", "resource", "uid", "unit"]
    );
    let traffic = find(
        &samples,
        "nave_sim_ingress_requests_per_second",
        &[("namespace", "shop"), ("service", "web")],
    );
    assert_eq!(traffic.len(), 1, "the simulated ingress traffic is exported");
    assert_eq!(traffic[0].value, 12.5);
    let phases = find(&samples, "kube_pod_status_phase", &[("pod", "p1")]);
    assert_eq!(phases.len(), 5);
    assert_eq!(
        phases
            .iter()
            .filter(|s| s.value == 1.0)
            .map(|s| s.labels["phase"].as_str())
            .collect::<Vec<_>>(),
        ["Running"]
    );
    assert_eq!(
        find(&samples, "kube_pod_status_unschedulable", &[("pod", "big")]).len(),
        1
    );
    assert!(find(&samples, "kube_pod_status_unschedulable", &[("pod", "p1")]).is_empty());
    let cond = find(
        &samples,
        "kube_deployment_status_condition",
        &[
            ("deployment", "depl1"),
            ("condition", "Available"),
            ("reason", "MinimumReplicasAvailable"),
            ("status", "true"),
        ],
    );
    assert_eq!(cond[0].value, 1.0);
    assert_eq!(
        find(
            &samples,
            "kube_deployment_status_replicas_unavailable",
            &[("deployment", "depl1")]
        )[0]
        .value,
        0.0
    );
    let labels = find(
        &samples,
        "kube_pod_labels",
        &[("pod", "p1"), ("label_app_kubernetes_io_name", "we\"b")],
    );
    assert_eq!(
        labels.len(),
        1,
        "label values are escaped and label names sanitised"
    );
    assert!(
        samples.iter().all(|s| !s.labels.contains_key("cluster")),
        "no cluster label"
    );
    let sched = find(
        &samples,
        "kube_pod_resource_request",
        &[("pod", "p1"), ("resource", "cpu"), ("unit", "cores")],
    );
    assert_eq!(sched[0].value, 0.1);
    assert_eq!(sched[0].labels["scheduler"], "default-scheduler");
}

#[test]
fn usage_counters_integrate_over_time_and_are_monotonic() {
    let mut counters = UsageCounters::default();
    let t0 = Instant::now();
    let first = scrape(&mut counters, t0, 1100);
    let cpu0 = find(
        &first,
        "container_cpu_usage_seconds_total",
        &[("pod", "p1"), ("container", "c1")],
    )[0]
    .value;
    // 100m × 0.5 for the 100 s since start.
    assert!((cpu0 - 5.0).abs() < 1e-6, "saw {cpu0}");
    let later = scrape(&mut counters, t0 + std::time::Duration::from_secs(10), 1110);
    let cpu1 = find(&later, "container_cpu_usage_seconds_total", &[("pod", "p1")])[0].value;
    assert!(
        (cpu1 - cpu0 - 0.5).abs() < 1e-6,
        "10 s at 0.05 cores adds 0.5 s, saw {cpu0} -> {cpu1}"
    );
    let ws = find(&later, "container_memory_working_set_bytes", &[("pod", "p1")])[0].value;
    assert_eq!(ws, 33_554_432.0);
    assert!(
        find(&later, "container_cpu_usage_seconds_total", &[("pod", "big")]).is_empty(),
        "pending pods use nothing"
    );
    let user: f64 = find(
        &later,
        "node_cpu_seconds_total",
        &[("node", "n1"), ("mode", "user")],
    )
    .iter()
    .map(|s| s.value)
    .sum();
    let idle: f64 = find(
        &later,
        "node_cpu_seconds_total",
        &[("node", "n1"), ("mode", "idle")],
    )
    .iter()
    .map(|s| s.value)
    .sum();
    assert!(
        (user + idle - 4.0 * 110.0).abs() < 1e-6,
        "4 cpus × 110 s since creation, saw {user} + {idle}"
    );
    assert!(
        (user - 0.1 * 110.0).abs() < 1e-6,
        "two pods using 0.05 cores each, saw {user}"
    );
    let avail = find(&later, "node_memory_MemAvailable_bytes", &[("node", "n1")])[0].value;
    assert_eq!(avail, 17_179_869_184.0 - 2.0 * 33_554_432.0);
}

#[test]
fn declared_usage_wins_over_the_factor() {
    let mut p = (*pod("p1", "n1", "100m", true)).clone();
    p.metadata.annotations = Some(
        [
            (CPU_USAGE_ANNOTATION.to_string(), "250m".to_string()),
            (MEMORY_USAGE_ANNOTATION.to_string(), "100Mi".to_string()),
        ]
        .into(),
    );
    assert_eq!(
        container_usage(&p, 0.5),
        vec![("c1".to_string(), 0.25, 104_857_600.0)]
    );
}

#[test]
fn values_and_label_names_are_formatted_for_prometheus() {
    assert_eq!(format_value(3.0), "3");
    assert_eq!(format_value(0.1), "0.1");
    assert_eq!(format_value(1.6106127360e10), "16106127360");
    assert_eq!(format_value(f64::INFINITY), "+Inf");
    assert_eq!(sanitize("nvidia.com/gpu"), "nvidia_com_gpu");
    assert_eq!(sanitize("ephemeral-storage"), "ephemeral_storage");
    assert_eq!(sanitize("1abc"), "_1abc");
    assert!(
        parse("# HELP a x\n# TYPE a gauge\na{b=\"1\",b=\"2\"} 1\n").is_err(),
        "the parser rejects duplicates"
    );
}
