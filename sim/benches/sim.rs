//! nave-sim benchmarks: request throughput over loopback, watch latency, large lists, and memory
//! per idle cluster.  Run with `cargo bench -p nave-sim --bench sim`; prints a table.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use nave_sim::{ClusterConfig, ServeOptions, SimCluster};
use serde_json::json;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

fn config(name: &str) -> ClusterConfig {
    ClusterConfig {
        name: name.to_owned(),
        ..ClusterConfig::default()
    }
}

async fn rate<F, Fut>(secs: f64, workers: usize, f: F) -> f64
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let count = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let f = f.clone();
        let count = count.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = w as u64 * 1_000_000;
            while Instant::now() < end {
                f(i).await;
                i += 1;
                count.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    count.load(Ordering::Relaxed) as f64 / secs
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(idx).copied().unwrap_or(0.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    nave_sim::install_crypto_provider();
    let mut rows: Vec<(String, String)> = Vec::new();

    // First, while the heap is small: 100 idle clusters (3 nodes each, control plane on).
    let before = rss_kib();
    let mut clusters = Vec::new();
    let t = Instant::now();
    for i in 0..100 {
        clusters.push(
            SimCluster::start(config(&format!("c{i}")), ServeOptions::default())
                .await
                .expect("cluster"),
        );
    }
    let start_secs = t.elapsed().as_secs_f64();
    // Wait until every control plane has created its nodes, then let it settle.
    for c in &clusters {
        while c.state().store.list("/nodes", None, None).0.len() < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib();
    rows.push((
        "start 100 clusters (3 nodes each)".into(),
        format!("{start_secs:.1} s"),
    ));
    rows.push((
        "RSS per idle cluster (100 clusters)".into(),
        format!("{:.2} MiB", after.saturating_sub(before) as f64 / 1024.0 / 100.0),
    ));
    for c in clusters {
        c.shutdown().await;
    }

    // Throughput over loopback (HTTP/1.1, one kube-rs client, 8 concurrent tasks).
    let sim = SimCluster::start(
        config("bench"),
        ServeOptions {
            control_plane: false,
            ..Default::default()
        },
    )
    .await
    .expect("cluster");
    let client = sim.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "x"}, "data": {"a": "1"}})).expect("cm"),
    )
    .await
    .expect("create");
    let a = cms.clone();
    let get_rps = rate(3.0, 8, move |_| {
        let a = a.clone();
        async move {
            let _ = a.get("x").await;
        }
    })
    .await;
    rows.push((
        "GET configmap (8 concurrent)".into(),
        format!("{get_rps:.0} req/s"),
    ));
    let a = cms.clone();
    let apply_rps = rate(3.0, 8, move |i| {
        let a = a.clone();
        async move {
            let name = format!("a{}", i % 64);
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": i.to_string()}});
            let _ = a.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(body)).await;
        }
    })
    .await;
    rows.push((
        "server-side apply, changing (8 concurrent)".into(),
        format!("{apply_rps:.0} req/s"),
    ));
    let a = cms.clone();
    let noop_rps = rate(3.0, 8, move |_| {
        let a = a.clone();
        async move {
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a1"}, "data": {"v": "same"}});
            let _ = a.patch("a1", &PatchParams::apply("bench2").force(), &Patch::Apply(body)).await;
        }
    })
    .await;
    rows.push((
        "server-side apply, no-op (8 concurrent)".into(),
        format!("{noop_rps:.0} req/s"),
    ));

    // Watch latency: write → event at the client.
    let rv = cms
        .list(&ListParams::default().limit(1))
        .await
        .expect("list")
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    let mut lat = Vec::new();
    for i in 0..200 {
        let start = Instant::now();
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}, "data": {"i": i.to_string()}});
        cms.patch("w", &PatchParams::apply("bench").force(), &Patch::Apply(body))
            .await
            .expect("apply");
        loop {
            match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
                Ok(Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))))
                    if o.metadata.name.as_deref() == Some("w")
                        && o.data.as_ref().and_then(|d| d.get("i")).map(String::as_str)
                            == Some(&i.to_string()) =>
                {
                    break;
                }
                Ok(Some(_)) => continue,
                _ => panic!("watch ended"),
            }
        }
        lat.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    rows.push((
        "watch latency write→event (p50 / p99)".into(),
        format!(
            "{:.2} ms / {:.2} ms",
            percentile(&mut lat, 0.5),
            percentile(&mut lat, 0.99)
        ),
    ));
    sim.shutdown().await;

    // 10,000 pods bound to nodes in one cluster (controllers off: the pods stay as created).
    let before = rss_kib();
    let sim = SimCluster::start(
        config("big"),
        ServeOptions {
            control_plane: false,
            ..Default::default()
        },
    )
    .await
    .expect("cluster");
    let client = sim.client().await.expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let p = pods.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < 10_000 {
                let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p{i}"), "labels": {"app": "bench"}},
                    "spec": {"nodeName": format!("big-node-{}", i % 3), "containers": [{"name": "c", "image": "nginx:1.25",
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}))
                .expect("pod");
                p.create(&PostParams::default(), &pod).await.expect("create pod");
                i += 8;
            }
        }));
    }
    for t in tasks {
        t.await.expect("creator");
    }
    let create_secs = start.elapsed().as_secs_f64();
    let after_create = rss_kib();
    rows.push((
        "create 10,000 pods (8 concurrent)".into(),
        format!("{create_secs:.1} s ({:.0} pods/s)", 10_000.0 / create_secs),
    ));
    let mut raw = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let req = http::Request::get("/api/v1/namespaces/default/pods")
            .body(Vec::new())
            .expect("req");
        let text = client.request_text(req).await.expect("raw list");
        assert!(text.len() > 1_000_000);
        raw.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    rows.push((
        "list 10,000 pods, raw JSON (server + transfer, median of 5)".into(),
        format!("{:.0} ms", percentile(&mut raw, 0.5)),
    ));
    let mut full = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let l = pods.list(&ListParams::default()).await.expect("list");
        assert_eq!(l.items.len(), 10_000);
        full.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    rows.push((
        "list 10,000 pods, typed kube-rs decode (median of 5)".into(),
        format!("{:.0} ms", percentile(&mut full, 0.5)),
    ));
    let mut paged = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut lp = ListParams::default().limit(500);
        let mut n = 0;
        loop {
            let l = pods.list(&lp).await.expect("page");
            n += l.items.len();
            match l.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => break,
            }
        }
        assert_eq!(n, 10_000);
        paged.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    rows.push((
        "list 10,000 pods in pages of 500 (median of 5)".into(),
        format!("{:.0} ms", percentile(&mut paged, 0.5)),
    ));
    let t = Instant::now();
    let sel = pods
        .list(
            &ListParams::default()
                .fields("spec.nodeName=big-node-0")
                .limit(500),
        )
        .await
        .expect("sel");
    rows.push((
        "field-selected page of 500 from 10,000 pods".into(),
        format!(
            "{:.1} ms ({} items)",
            t.elapsed().as_secs_f64() * 1000.0,
            sel.items.len()
        ),
    ));
    rows.push((
        "RSS growth from creating 10,000 pods (server and client)".into(),
        format!("{:.0} MiB", after_create.saturating_sub(before) as f64 / 1024.0),
    ));
    rows.push((
        "RSS growth after the lists above (peak, allocator keeps it)".into(),
        format!("{:.0} MiB", rss_kib().saturating_sub(before) as f64 / 1024.0),
    ));
    sim.shutdown().await;

    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(10);
    println!("\n| {:w$} | result |", "measurement");
    println!("|{}|--------|", "-".repeat(w + 2));
    for (k, v) in &rows {
        println!("| {k:w$} | {v} |");
    }
}
