//! Per-workload sums from PodMetrics as metrics-server writes them.

use std::collections::HashMap;

use super::*;

/// A running pod summary of `workload` requesting `cpu_millis` and `memory_bytes`.
fn pod(workload: Option<&str>, cpu_millis: u64, memory_bytes: u64, terminal: bool) -> Arc<PodSummary> {
    Arc::new(PodSummary {
        node: Some("n1".to_owned()),
        // With an init container and overhead, which the utilization leaves out.
        requests: Resources::new(cpu_millis + 2000, memory_bytes + (1 << 30), 1),
        terminal,
        workload: workload.and_then(WorkloadRef::from_label_value),
        pending: None,
        waiting: None,
        container_requests: Resources::new(cpu_millis, memory_bytes, 0),
        deleting: false,
    })
}

/// [`Sums`] of `metrics`, with the pods `pod` finds.
fn per_workload<'a>(
    metrics: impl IntoIterator<Item = &'a PodMetrics>,
    pod: impl Fn(&str, &str) -> Option<Arc<PodSummary>> + Copy,
) -> Vec<WorkloadUsage> {
    let mut sums = Sums::default();
    for sample in metrics {
        sums.add(sample, pod);
    }
    sums.finish()
}

/// A PodMetrics of `namespace/name` with one sample per `(cpu, memory)` container.
fn sample(namespace: &str, name: &str, containers: &[(&str, &str)]) -> PodMetrics {
    PodMetrics {
        metadata: PodMetricsMeta {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
        },
        containers: containers
            .iter()
            .map(|(cpu, memory)| ContainerMetrics {
                usage: BTreeMap::from([
                    ("cpu".to_owned(), Quantity((*cpu).to_owned())),
                    ("memory".to_owned(), Quantity((*memory).to_owned())),
                ]),
            })
            .collect(),
    }
}

#[test]
fn usage_and_requests_are_summed_over_the_measured_pods_of_each_workload() {
    let pods: HashMap<(&str, &str), Arc<PodSummary>> = HashMap::from([
        (("shop", "web-1"), pod(Some("shop.web"), 200, 256 << 20, false)),
        (("shop", "web-2"), pod(Some("shop.web"), 200, 256 << 20, false)),
        // Starting: no sample yet, so its requests do not count either.
        (("shop", "web-3"), pod(Some("shop.web"), 200, 256 << 20, false)),
        (("shop", "db-1"), pod(Some("shop.db"), 1000, 1 << 30, false)),
    ]);
    let metrics = [
        // metrics-server's units: nanocores and kibibytes; two containers in one pod.
        sample("shop", "web-1", &[("150000000n", "131072Ki"), ("50m", "0")]),
        sample("shop", "web-2", &[("100m", "128Mi")]),
        sample("shop", "db-1", &[("1500m", "512Mi")]),
    ];
    let usage = per_workload(&metrics, |ns, name| pods.get(&(ns, name)).cloned());
    assert_eq!(
        usage,
        vec![
            WorkloadUsage {
                workload: WorkloadRef::new("shop", "db"),
                used: Resources::new(1500, 512 << 20, 1),
                requested: Resources::new(1000, 1 << 30, 1),
            },
            WorkloadUsage {
                workload: WorkloadRef::new("shop", "web"),
                used: Resources::new(300, 256 << 20, 2),
                requested: Resources::new(400, 512 << 20, 2),
            },
        ]
    );
}

#[test]
fn samples_of_unknown_finished_or_foreign_pods_count_nowhere() {
    let pods: HashMap<(&str, &str), Arc<PodSummary>> = HashMap::from([
        (("shop", "done"), pod(Some("shop.web"), 200, 0, true)),
        (("shop", "theirs"), pod(None, 200, 0, false)),
        (("shop", "web-1"), pod(Some("shop.web"), 200, 0, false)),
        // Another namespace's pod claiming shop's workload by its label.
        (("evil", "web-9"), pod(Some("shop.web"), 1, 0, false)),
        (
            ("shop", "leaving"),
            Arc::new(PodSummary {
                deleting: true,
                ..pod(Some("shop.web"), 200, 0, false).as_ref().clone()
            }),
        ),
    ]);
    let metrics = [
        sample("evil", "web-9", &[("900m", "0")]),
        sample("shop", "leaving", &[("900m", "0")]),
        sample("shop", "done", &[("900m", "0")]),
        sample("shop", "theirs", &[("900m", "0")]),
        // The metrics object names a pod the agent does not know (deleted meanwhile, or a
        // metrics API that makes things up): nothing is taken from it.
        sample("shop", "ghost", &[("900m", "0")]),
        sample("shop", "web-1", &[("100m", "0")]),
        // Units nobody writes and garbage count as nothing rather than failing the rest.
        sample("shop", "web-1", &[("not-a-quantity", "-5")]),
    ];
    let usage = per_workload(&metrics, |ns, name| pods.get(&(ns, name)).cloned());
    assert_eq!(usage.len(), 1, "only shop/web: {usage:?}");
    assert_eq!(usage[0].used.cpu_millis, 100, "{usage:?}");
    assert_eq!(
        usage[0].used.pods, 2,
        "the pod listed twice is measured twice: {usage:?}"
    );
}

#[test]
fn a_heartbeat_reports_at_most_its_limit_of_workloads() {
    let names: Vec<String> = (0..Heartbeat::MAX_WORKLOAD_USAGE + 5)
        .map(|i| format!("w{i:05}"))
        .collect();
    let pods: HashMap<String, Arc<PodSummary>> = names
        .iter()
        .map(|n| (n.clone(), pod(Some(&format!("shop.{n}")), 100, 0, false)))
        .collect();
    let metrics: Vec<PodMetrics> = names.iter().map(|n| sample("shop", n, &[("10m", "0")])).collect();
    let usage = per_workload(&metrics, |_, name| pods.get(name).cloned());
    assert_eq!(usage.len(), Heartbeat::MAX_WORKLOAD_USAGE);
    assert_eq!(usage[0].workload, WorkloadRef::new("shop", "w00000"));
}

#[test]
fn a_pod_metrics_list_is_read_as_metrics_server_sends_it_one_item_at_a_time() {
    let pods: HashMap<(&str, &str), Arc<PodSummary>> = HashMap::from([
        (("shop", "web-1"), pod(Some("shop.web"), 100, 256 << 20, false)),
        (("shop", "web-2"), pod(Some("shop.web"), 100, 256 << 20, false)),
    ]);
    let item = |name: &str| {
        serde_json::json!({
            "metadata": {"name": name, "namespace": "shop", "labels": {"nave.dev/workload": "shop.web"},
                "creationTimestamp": "2026-11-27T10:00:00Z"},
            "timestamp": "2026-11-27T10:00:00Z",
            "window": "15.012s",
            "containers": [{"name": "app", "usage": {"cpu": "12345678n", "memory": "131072Ki"}}]
        })
    };
    let body = serde_json::to_vec(&serde_json::json!({
        "kind": "PodMetricsList",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {"continue": "next"},
        "items": [item("web-1"), item("web-2")]
    }))
    .unwrap();
    let mut sums = Sums::default();
    let token = read_list(body.as_slice(), &mut sums, |ns, name| {
        pods.get(&(ns, name)).cloned()
    })
    .expect("parsed");
    assert_eq!(token.as_deref(), Some("next"));
    assert_eq!(
        sums.finish(),
        vec![WorkloadUsage {
            workload: WorkloadRef::new("shop", "web"),
            // 12.345678m rounds up to 13m, as Kubernetes' MilliValue does.
            used: Resources::new(26, 256 << 20, 2),
            requested: Resources::new(200, 512 << 20, 2),
        }]
    );

    // The last page: no token; Go writes an empty list as null.
    let mut sums = Sums::default();
    let last = br#"{"kind":"PodMetricsList","metadata":{"continue":""},"items":null}"#;
    assert_eq!(
        read_list(&last[..], &mut sums, |_, _| None).expect("parsed"),
        None
    );
    assert!(sums.finish().is_empty());

    // Not a list, or cut off: an error, never a partial sum taken for the whole.
    for broken in [&br#"{"items":[{"metadata":{"name":"web-1""#[..], b"[]", b"{} {}"] {
        let error = read_list(broken, &mut Sums::default(), |_, _| None);
        assert!(error.is_err(), "{:?} is refused", String::from_utf8_lossy(broken));
    }
}

#[test]
fn a_sample_is_sent_until_it_is_too_old() {
    let sampler = Sampler::new();
    assert_eq!(sampler.current(), None, "nothing before the first read");
    let usage = vec![WorkloadUsage {
        workload: WorkloadRef::new("shop", "web"),
        used: Resources::new(1, 1, 1),
        requested: Resources::new(2, 2, 1),
    }];
    sampler.keep(usage.clone(), Instant::now() + Duration::from_secs(60));
    assert_eq!(sampler.current(), Some(usage));
    sampler.keep(Vec::new(), Instant::now() + Duration::from_secs(60));
    assert_eq!(
        sampler.current(),
        Some(Vec::new()),
        "measured, and none of Nave's pods"
    );
    sampler.keep(Vec::new(), Instant::now());
    assert_eq!(sampler.current(), None, "an expired sample is not sent");
}
