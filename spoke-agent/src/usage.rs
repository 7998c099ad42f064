//! What each Nave workload's pods use, read from the cluster's resource metrics API
//! (`metrics.k8s.io/v1beta1`, what metrics-server serves and `kubectl top` reads) and sent with
//! the heartbeats, so that the hub can autoscale without a Prometheus.
//!
//! ```text
//!  every heartbeat interval: list PodMetrics labelled nave.dev/workload (parsed as it arrives)
//!     └─ each pod's sample + its containers' requests (from the pod index) ─► sums per workload
//!          └─ Sampler: kept until two intervals have passed ─► Heartbeat::workload_usage
//! ```
//!
//! Only pods the metrics API has a sample of count, in the usage and in the requests alike, and
//! only their containers' requests, as the HorizontalPodAutoscaler counts them: a pod still
//! starting neither lowers the utilization nor raises it. The workload and the requests are the
//! pod's own (from the agent's pod index, the workload only in the pod's own namespace), never
//! what the metrics object says of them. A cluster without the metrics API (no metrics-server)
//! is normal: the agent says so once, reports none, and looks again every few minutes, since it
//! may be installed later; a metrics API that is there but failing (`503` while metrics-server
//! restarts) is asked again every interval.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ListParams;
use nave_api::wire::{Heartbeat, Resources, WORKLOAD_LABEL, WorkloadRef, WorkloadUsage};
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use tokio::time::Instant;
use tokio_util::compat::FuturesAsyncReadCompatExt;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, instrument, warn};

use crate::Agent;
use crate::capacity::PodSummary;
use crate::error::api_code;

#[cfg(test)]
mod tests;

/// Where PodMetrics are listed, in every namespace.
pub const POD_METRICS_PATH: &str = "/apis/metrics.k8s.io/v1beta1/pods";

/// PodMetrics per page of a list.
const PAGE: u32 = 500;

/// How long the agent waits before looking again for a metrics API the cluster does not serve
/// or does not let it read.
const ABSENT_RETRY: Duration = Duration::from_secs(300);

/// The latest per-workload sums, and until when they may be sent.
#[derive(Debug, Default)]
pub struct Sampler {
    latest: Mutex<Option<(Instant, Arc<Vec<WorkloadUsage>>)>>,
}

impl Sampler {
    /// No sample yet.
    pub fn new() -> Self {
        Sampler::default()
    }

    /// Keeps `usage` until `until`.
    fn keep(&self, usage: Vec<WorkloadUsage>, until: Instant) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some((until, Arc::new(usage)));
    }

    /// Forgets the sample (the metrics API is gone).
    fn forget(&self) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The sample to send now: none once it is older than it may be, so that a metrics API that
    /// stopped answering shows as not measured at the hub, not as the last usage forever.
    pub fn current(&self) -> Option<Vec<WorkloadUsage>> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        match &*latest {
            Some((until, usage)) if Instant::now() < *until => Some(usage.as_ref().clone()),
            _ => None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct PageMeta {
    #[serde(default, rename = "continue")]
    continue_: Option<String>,
}

/// A `PodMetrics`, with only what is read of it.
#[derive(Debug, Default, Deserialize)]
pub struct PodMetrics {
    /// Its pod's namespace and name.
    #[serde(default)]
    pub metadata: PodMetricsMeta,
    /// One sample per container.
    #[serde(default)]
    pub containers: Vec<ContainerMetrics>,
}

/// The name and namespace of a [`PodMetrics`].
#[derive(Debug, Default, Deserialize)]
pub struct PodMetricsMeta {
    /// The pod's name.
    #[serde(default)]
    pub name: String,
    /// The pod's namespace.
    #[serde(default)]
    pub namespace: String,
}

/// One container's sample.
#[derive(Debug, Default, Deserialize)]
pub struct ContainerMetrics {
    /// `cpu` and `memory`, as quantities (`"12345678n"`, `"131072Ki"`).
    #[serde(default)]
    pub usage: BTreeMap<String, Quantity>,
}

/// Per-workload sums of samples, and of the requests of the pods sampled.
#[derive(Debug, Default)]
pub struct Sums {
    per_workload: BTreeMap<WorkloadRef, (Resources, Resources)>,
    pods: usize,
}

impl Sums {
    /// Adds `sample` to its pod's workload, with its containers' requests as `pod` finds the
    /// pod (by namespace and name). A sample counts nowhere when the agent does not know its pod,
    /// the pod is done or being deleted, or belongs to no workload of its own namespace (a pod
    /// elsewhere labelled with a workload of another namespace is not that workload's).
    pub fn add(&mut self, sample: &PodMetrics, pod: impl Fn(&str, &str) -> Option<Arc<PodSummary>>) {
        self.pods += 1;
        let Some(summary) = pod(&sample.metadata.namespace, &sample.metadata.name) else {
            return;
        };
        let Some(workload) = summary
            .workload
            .clone()
            .filter(|w| !summary.terminal && !summary.deleting && w.namespace == sample.metadata.namespace)
        else {
            return;
        };
        let mut used = Resources::new(0, 0, 1);
        for container in &sample.containers {
            let amounts = nave_resources::Resources::from_list(Some(&container.usage));
            used = used.saturating_add(Resources::new(amounts.cpu_millis(), amounts.memory_bytes(), 0));
        }
        let requested = Resources::new(
            summary.container_requests.cpu_millis,
            summary.container_requests.memory_bytes,
            1,
        );
        let entry = self.per_workload.entry(workload).or_default();
        entry.0 = entry.0.saturating_add(used);
        entry.1 = entry.1.saturating_add(requested);
    }

    /// The sums, at most [`Heartbeat::MAX_WORKLOAD_USAGE`] workloads, the first by namespace
    /// and name.
    pub fn finish(self) -> Vec<WorkloadUsage> {
        self.per_workload
            .into_iter()
            .take(Heartbeat::MAX_WORKLOAD_USAGE)
            .map(|(workload, (used, requested))| WorkloadUsage {
                workload,
                used,
                requested,
            })
            .collect()
    }
}

/// Reads the PodMetrics of Nave's pods in every namespace into [`Sums`], page by page where
/// the API pages (metrics-server does not: it answers every pod at once, tens of megabytes in a
/// cluster of 20,000 pods). Each answer is parsed as it arrives and each item added as soon as
/// it is read ([`read_list`]), so the agent holds one item at a time, never the answer.
async fn read(agent: &Arc<Agent>) -> Result<Sums, kube::Error> {
    let mut sums = Sums::default();
    let mut params = ListParams::default().labels(WORKLOAD_LABEL).limit(PAGE);
    loop {
        let request = kube::core::Request::new(POD_METRICS_PATH)
            .list(&params)
            .map_err(kube::Error::BuildRequest)?;
        let body = agent.client.request_stream(request).await?;
        let reader = tokio_util::io::SyncIoBridge::new(body.compat());
        let parsing = agent.clone();
        let (parsed, token) = tokio::task::spawn_blocking(move || {
            let token = read_list(
                std::io::BufReader::with_capacity(64 * 1024, reader),
                &mut sums,
                |namespace, name| parsing.pods.get(namespace, name),
            );
            (sums, token)
        })
        .await
        .map_err(|e| kube::Error::Service(Box::new(e)))?;
        sums = parsed;
        match token.map_err(kube::Error::SerdeError)? {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(sums),
        }
    }
}

/// Parses a `PodMetricsList` from `reader`, adding each item to `sums` as soon as it is read
/// (only one is in memory at a time); returns the list's `continue` token, if it has one.
pub fn read_list(
    reader: impl std::io::Read,
    sums: &mut Sums,
    pod: impl Fn(&str, &str) -> Option<Arc<PodSummary>>,
) -> Result<Option<String>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_reader(reader);
    let token = ListSeed { sums, pod: &pod }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(token)
}

/// A `PodMetricsList` read into [`Sums`]: its `items` added one by one, its `continue` kept.
struct ListSeed<'a, F> {
    sums: &'a mut Sums,
    pod: &'a F,
}

impl<'de, F: Fn(&str, &str) -> Option<Arc<PodSummary>>> DeserializeSeed<'de> for ListSeed<'_, F> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, F: Fn(&str, &str) -> Option<Arc<PodSummary>>> Visitor<'de> for ListSeed<'_, F> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a PodMetricsList")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut token = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "metadata" => token = map.next_value::<PageMeta>()?.continue_.filter(|c| !c.is_empty()),
                "items" => map.next_value_seed(ItemsSeed {
                    sums: &mut *self.sums,
                    pod: self.pod,
                })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(token)
    }
}

/// The `items` of a `PodMetricsList`, each added to [`Sums`] as it is read.
struct ItemsSeed<'a, F> {
    sums: &'a mut Sums,
    pod: &'a F,
}

impl<'de, F: Fn(&str, &str) -> Option<Arc<PodSummary>>> DeserializeSeed<'de> for ItemsSeed<'_, F> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        // Any: a list, or null.
        deserializer.deserialize_any(self)
    }
}

impl<'de, F: Fn(&str, &str) -> Option<Arc<PodSummary>>> Visitor<'de> for ItemsSeed<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of PodMetrics")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(sample) = seq.next_element::<PodMetrics>()? {
            self.sums.add(&sample, self.pod);
        }
        Ok(())
    }

    // `"items": null`, as Go writes an empty list.
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// Reads the workloads' usage every heartbeat interval until `shutdown`, keeping each sample for
/// two intervals.
#[instrument(skip_all, fields(cluster = %agent.config.cluster_name))]
pub async fn usage_loop(agent: Arc<Agent>, shutdown: CancellationToken) -> crate::error::Result<()> {
    let mut said_absent = false;
    loop {
        let interval = agent.identity.heartbeat_interval(&shutdown).await?;
        let read = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            read = tokio::time::timeout(interval, read(&agent)) => read,
        };
        let wait = match read {
            Ok(Ok(sums)) => {
                let pods = sums.pods;
                let usage = sums.finish();
                debug!(pods, workloads = usage.len(), "read the workloads' usage");
                agent.usage.keep(usage, Instant::now() + 2 * interval);
                if said_absent {
                    info!("the cluster's resource metrics API answers again; reporting the workloads' usage");
                    said_absent = false;
                }
                interval
            }
            Ok(Err(error)) if matches!(api_code(&error), Some(403 | 404)) => {
                agent.usage.forget();
                if !said_absent {
                    info!(error = %error, retry_in_s = ABSENT_RETRY.as_secs(),
                        "the cluster serves no resource metrics API the agent may read (metrics.k8s.io: install metrics-server); the workloads' usage is not reported");
                    said_absent = true;
                }
                ABSENT_RETRY
            }
            Ok(Err(error)) => {
                warn!(error = %error, "reading the workloads' usage failed; trying again next interval");
                interval
            }
            Err(_) => {
                warn!(
                    timeout_s = interval.as_secs(),
                    "reading the workloads' usage took longer than a heartbeat interval; trying again"
                );
                interval
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
    }
}
