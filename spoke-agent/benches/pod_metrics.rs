//! What reading a cluster's PodMetrics costs the agent, as metrics-server answers: every pod in
//! one answer, whatever the `limit`. Compares parsing the answer held whole (what the agent did
//! first: the body buffered, then every item parsed into a list) with parsing it as it arrives
//! (`nave_agent::usage::read_list`: one item at a time). Prints how far each takes the process's
//! resident memory above where it stood (the kernel's high-water mark, reset before each), and
//! the time per pod.
//!
//! `cargo bench -p nave-agent --bench pod_metrics` (`NAVE_BENCH_PODS=1000,20000` to choose).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use nave_agent::capacity::PodSummary;
use nave_agent::usage::{PodMetrics, Sums, read_list};
use nave_api::wire::{Resources, WorkloadRef};

/// A line of `/proc/self/status`, in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux)");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<usize>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// Runs `f`, returning what it returned, how far the process's resident memory peaked above
/// where it stood before (the kernel's high-water mark, reset first), and how long it took.
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize, f64) {
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting the peak (/proc/self/clear_refs)");
    let base = status_bytes("VmRSS");
    let started = Instant::now();
    let out = f();
    let seconds = started.elapsed().as_secs_f64();
    (out, status_bytes("VmHWM").saturating_sub(base), seconds)
}

/// A PodMetricsList of `pods` pods of 50 workloads, as metrics-server writes it (labels copied
/// from the pods, two containers each).
fn answer(pods: usize) -> Vec<u8> {
    use std::fmt::Write;
    let mut out = String::from(
        r#"{"kind":"PodMetricsList","apiVersion":"metrics.k8s.io/v1beta1","metadata":{},"items":["#,
    );
    for i in 0..pods {
        let w = i % 50;
        if i > 0 {
            out.push(',');
        }
        write!(
            out,
            r#"{{"metadata":{{"name":"web-{w}-{i:06}","namespace":"shop","creationTimestamp":"2026-11-27T10:00:00Z","labels":{{"app":"web-{w}","nave.dev/workload":"shop.web-{w}","pod-template-hash":"5d8f7c9b4","app.kubernetes.io/part-of":"shop"}}}},"timestamp":"2026-11-27T10:00:00Z","window":"15.012s","containers":[{{"name":"app","usage":{{"cpu":"12345678n","memory":"131072Ki"}}}},{{"name":"proxy","usage":{{"cpu":"2345678n","memory":"32768Ki"}}}}]}}"#
        )
        .expect("writing to a String");
    }
    out.push_str("]}");
    out.into_bytes()
}

/// The agent's pod index for those pods.
fn index(pods: usize) -> HashMap<String, Arc<PodSummary>> {
    (0..pods)
        .map(|i| {
            let workload = WorkloadRef::new("shop", format!("web-{}", i % 50));
            let summary = PodSummary {
                node: Some("n1".to_owned()),
                requests: Resources::new(200, 256 << 20, 1),
                terminal: false,
                workload: Some(workload),
                pending: None,
                waiting: None,
                container_requests: Resources::new(200, 256 << 20, 0),
                deleting: false,
            };
            (format!("web-{}-{i:06}", i % 50), Arc::new(summary))
        })
        .collect()
}

#[derive(serde::Deserialize)]
struct Whole {
    items: Vec<PodMetrics>,
}

/// One measurement, in a process of its own so that what the allocator kept from another does
/// not hide this one's peak: prints `peak-bytes seconds` and the sums' digest.
fn child(mode: &str, pods: usize) {
    let body = answer(pods);
    let known = index(pods);
    let pod = |_: &str, name: &str| known.get(name).cloned();
    let (sums, peak, seconds) = match mode {
        // Held whole: the body buffered as it came (a copy of the bytes), then every item parsed.
        "whole" => measured(|| {
            let buffered = body.clone();
            let list: Whole = serde_json::from_slice(&buffered).expect("parses");
            let mut sums = Sums::default();
            for sample in &list.items {
                sums.add(sample, pod);
            }
            sums.finish()
        }),
        // As it arrives: read through a 64 KiB buffer, one item at a time.
        _ => measured(|| {
            let mut sums = Sums::default();
            read_list(
                std::io::BufReader::with_capacity(64 * 1024, body.as_slice()),
                &mut sums,
                pod,
            )
            .expect("parses");
            sums.finish()
        }),
    };
    let digest: u64 = sums.iter().map(|u| u.used.cpu_millis + u.used.pods).sum();
    println!("{peak} {seconds} {digest} {}", body.len());
}

fn run(mode: &str, pods: usize) -> (usize, f64, u64, usize) {
    let out = std::process::Command::new(std::env::current_exe().expect("this benchmark"))
        .env("NAVE_BENCH_CHILD", format!("{mode},{pods}"))
        .output()
        .expect("the measurement runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert!(
        fields.len() == 4,
        "a measurement's output: {text:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        fields[0].parse().expect("peak"),
        fields[1].parse().expect("seconds"),
        fields[2].parse().expect("digest"),
        fields[3].parse().expect("size"),
    )
}

fn main() {
    if let Ok(child_args) = std::env::var("NAVE_BENCH_CHILD") {
        let (mode, pods) = child_args.split_once(',').expect("mode,pods");
        child(mode, pods.parse().expect("pods"));
        return;
    }
    let sizes: Vec<usize> = std::env::var("NAVE_BENCH_PODS")
        .unwrap_or_else(|_| "1000,20000".to_owned())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    println!(
        "| pods | answer | held whole: peak | as it arrives: peak | held whole: per pod | as it arrives: per pod |"
    );
    println!("|---|---|---|---|---|---|");
    for pods in sizes {
        let (whole_peak, whole_s, whole_digest, size) = run("whole", pods);
        let (streamed_peak, streamed_s, streamed_digest, _) = run("streamed", pods);
        assert_eq!(whole_digest, streamed_digest, "both read the same sums");
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        println!(
            "| {pods} | {:.1} MiB | {:.1} MiB | {:.2} MiB | {:.2} µs | {:.2} µs |",
            mib(size),
            mib(whole_peak),
            mib(streamed_peak),
            whole_s * 1e6 / pods as f64,
            streamed_s * 1e6 / pods as f64
        );
    }
}
