//! What happened in the workload clusters, measured there: one watch of the scenario's pods per
//! cluster, and sums that grow between events (a pod's state is constant between two of its
//! watch events, so integrating at every event is exact, with no sampling interval to choose).
//!
//! ```text
//!   cluster-1 pods ─watch─┐
//!   ...                   ├─► State: live pods (workload, pending, ready) ─► sums over time
//!   burst pods ───watch───┘        ▲                                        (pod, pending, ...)
//!   driver: desired(name, n), gone(name) ─┘  arrival/scale-up opens a readiness event, closed
//!                                            when the ready pods of the workload reach n
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::plan::{JOB_LABEL, NAMESPACE, WORKLOAD_LABEL};

/// What the monitor measured, in real seconds (the caller scales them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measurements {
    /// Pod-seconds of the workloads' pods (not terminating).
    pub pod_seconds: f64,
    /// Pod-seconds of those pods in phase Pending (not scheduled, or not started yet).
    pub pending_seconds: f64,
    /// Pod-seconds of those pods in the burst cluster.
    pub burst_seconds: f64,
    /// Replica-seconds the workloads asked for (their total replicas over time).
    pub wanted_seconds: f64,
    /// Replica-seconds asked for but not served by a Ready pod (replicas unplaced, Pending or
    /// starting): sum over workloads of max(desired - ready, 0) over time.
    pub unserved_seconds: f64,
    /// Sum over workloads of the number of clusters holding at least one of its pods, over time.
    pub cluster_seconds: f64,
    /// Seconds workloads had at least one pod (the denominator of the mean clusters used).
    pub workload_seconds: f64,
    /// From each arrival or scale-up to the moment the workload's ready pods reached the total.
    pub ready: Vec<Duration>,
    /// Arrivals and scale-ups whose total was not reached before the workload changed again,
    /// left, or the run ended: the time from the event until then.
    pub unready: Vec<Duration>,
    /// Requests that arrived for the workloads (rate × real seconds).
    pub requests: f64,
    /// Of which served in the cluster they arrived at: for each workload and moment, the sum over
    /// clusters of the lower of the cluster's share of its traffic and its share of the ready
    /// replicas (each ready replica serving an equal part); none while no replica is ready.
    pub local_requests: f64,
    /// Pod-seconds of the batch jobs' pods (not terminating, not finished).
    pub batch_pod_seconds: f64,
    /// Of which in phase Pending.
    pub batch_pending_seconds: f64,
    /// From each job's submission until its pods had succeeded as many times as its completions.
    pub jobs_done: Vec<Duration>,
    /// Jobs not done when the run ended: from their submission until then.
    pub jobs_unfinished: Vec<Duration>,
}

/// The monitor of one run.
#[derive(Debug)]
pub struct Monitor {
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Monitor {
    /// Watches the scenario's pods in each of `clusters` (the index of the burst cluster in it,
    /// if any, is `burst`). Nothing is counted before [`Monitor::begin`].
    pub fn start(clusters: Vec<kube::Client>, burst: Option<usize>) -> Monitor {
        let state = Arc::new(Mutex::new(State {
            synced: vec![false; clusters.len()],
            burst,
            ..State::default()
        }));
        let stop = CancellationToken::new();
        let tasks = clusters
            .into_iter()
            .enumerate()
            .map(|(index, client)| {
                let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
                let config = watcher::Config::default().labels(WORKLOAD_LABEL);
                let state = state.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let events = watch(api, config).default_backoff();
                    futures::pin_mut!(events);
                    loop {
                        let event = tokio::select! {
                            () = stop.cancelled() => return,
                            event = events.next() => event,
                        };
                        match event {
                            None => return,
                            Some(Ok(event)) => lock(&state).on_event(index, event, Instant::now()),
                            // The watcher retries with backoff and relists; the relist corrects the state.
                            Some(Err(error)) => tracing::debug!(cluster = index, %error, "pod watch failed"),
                        }
                    }
                })
            })
            .collect();
        Monitor { state, stop, tasks }
    }

    /// Waits until every watch has listed its cluster.
    pub async fn wait_synced(&self, deadline: Duration) -> anyhow::Result<()> {
        let end = Instant::now() + deadline;
        loop {
            let waiting: Vec<usize> = {
                let state = lock(&self.state);
                (0..state.synced.len()).filter(|i| !state.synced[*i]).collect()
            };
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() >= end {
                anyhow::bail!("the pod watches of clusters {waiting:?} did not list within {deadline:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts counting at `now`.
    pub fn begin(&self, now: Instant) {
        lock(&self.state).window = Some(Window {
            last: now,
            ended: false,
        });
    }

    /// Workload `name` now wants `replicas` in total (arrival or scale).
    pub fn desired(&self, name: &str, replicas: u32, now: Instant) {
        lock(&self.state).desired(name, replicas, now);
    }

    /// Requests per second arriving for workload `name` now, by cluster index (as the clusters
    /// were given to [`Monitor::start`]).
    pub fn traffic(&self, name: &str, by_cluster: Vec<f64>, now: Instant) {
        let mut state = lock(&self.state);
        state.advance(now);
        state.traffic.insert(name.to_owned(), by_cluster);
    }

    /// Workload `name` was deleted: it wants nothing any more.
    pub fn gone(&self, name: &str, now: Instant) {
        lock(&self.state).gone(name, now);
    }

    /// Batch job `name`, of `completions`, was submitted now.
    pub fn job(&self, name: &str, completions: u32, now: Instant) {
        let mut state = lock(&self.state);
        state.advance(now);
        state.jobs.insert(name.to_owned(), (completions, now));
        state.settle(now);
    }

    /// The workloads that arrived and have not left, by name.
    pub fn live(&self) -> Vec<String> {
        lock(&self.state).workloads.keys().cloned().collect()
    }

    /// Stops counting at `now`, stops the watches and answers what was measured.
    pub async fn finish(mut self, now: Instant) -> Measurements {
        let measured = lock(&self.state).finish(now);
        self.stop.cancel();
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
        measured
    }
}

impl Drop for Monitor {
    /// A run that fails half-way drops its monitor: the watches stop with it.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// One live pod of a workload, or of a batch job.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodView {
    workload: String,
    pending: bool,
    ready: bool,
    /// A batch job's pod: counted apart from the workloads'.
    batch: bool,
}

/// The batch job of a pod that succeeded.
fn succeeded_job(pod: &Pod) -> Option<&str> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    (phase == Some("Succeeded") && pod.metadata.deletion_timestamp.is_none())
        .then(|| pod.metadata.labels.as_ref()?.get(JOB_LABEL).map(String::as_str))
        .flatten()
}

impl PodView {
    /// `None` for pods that no longer count: terminating, finished, or not a workload's.
    fn of(pod: &Pod) -> Option<PodView> {
        if pod.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let workload = pod.metadata.labels.as_ref()?.get(WORKLOAD_LABEL)?.clone();
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        if matches!(phase, "Succeeded" | "Failed") {
            return None;
        }
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        Some(PodView {
            workload,
            pending: phase == "Pending",
            ready,
            batch: pod
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(JOB_LABEL)),
        })
    }
}

#[derive(Debug)]
struct Window {
    last: Instant,
    ended: bool,
}

/// What a workload wants, and since when it has waited for it (an open readiness event).
#[derive(Debug, Default)]
struct Wanted {
    desired: u32,
    since: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    /// Live pods by (cluster index, uid).
    pods: HashMap<(usize, String), PodView>,
    /// A cluster's pods while its watch relists.
    relisting: HashMap<usize, HashMap<String, PodView>>,
    /// Which clusters' watches have listed once.
    synced: Vec<bool>,
    /// Index of the burst cluster.
    burst: Option<usize>,
    /// Counting, from [`Monitor::begin`] until [`Monitor::finish`].
    window: Option<Window>,
    workloads: BTreeMap<String, Wanted>,
    /// Requests per second arriving for each workload, by cluster index.
    traffic: HashMap<String, Vec<f64>>,
    /// Batch jobs submitted and not done: completions, submitted at.
    jobs: BTreeMap<String, (u32, Instant)>,
    /// Pods of each batch job that succeeded, by (cluster index, uid).
    succeeded: HashMap<String, HashSet<(usize, String)>>,
    measured: Measurements,
}

/// Per workload: ready pods and the clusters holding its pods (a bit per cluster index).
type Holdings<'a> = HashMap<&'a str, (u32, u128)>;

fn holdings(pods: &HashMap<(usize, String), PodView>) -> Holdings<'_> {
    let mut per: Holdings<'_> = HashMap::new();
    for ((cluster, _), pod) in pods.iter().filter(|(_, p)| !p.batch) {
        let entry = per.entry(pod.workload.as_str()).or_default();
        entry.0 += u32::from(pod.ready);
        entry.1 |= 1u128 << (*cluster).min(127);
    }
    per
}

impl State {
    /// Adds what the state was worth from the last moment counted until `now`.
    fn advance(&mut self, now: Instant) {
        let Some(window) = self.window.as_mut().filter(|w| !w.ended) else {
            return;
        };
        let dt = now.saturating_duration_since(window.last).as_secs_f64();
        window.last = now;
        if dt == 0.0 {
            return;
        }
        let holdings = holdings(&self.pods);
        let m = &mut self.measured;
        for ((cluster, _), pod) in &self.pods {
            if pod.batch {
                m.batch_pod_seconds += dt;
                if pod.pending {
                    m.batch_pending_seconds += dt;
                }
                continue;
            }
            m.pod_seconds += dt;
            if pod.pending {
                m.pending_seconds += dt;
            }
            if Some(*cluster) == self.burst {
                m.burst_seconds += dt;
            }
        }
        for (_, clusters) in holdings.values() {
            m.cluster_seconds += f64::from(clusters.count_ones()) * dt;
            m.workload_seconds += dt;
        }
        for (name, wanted) in &self.workloads {
            let ready = holdings.get(name.as_str()).map_or(0, |h| h.0);
            m.wanted_seconds += f64::from(wanted.desired) * dt;
            m.unserved_seconds += f64::from(wanted.desired.saturating_sub(ready)) * dt;
        }
        if self.traffic.is_empty() {
            return;
        }
        let mut ready_in: HashMap<&str, Vec<u32>> = HashMap::new();
        for ((cluster, _), pod) in self.pods.iter().filter(|(_, p)| !p.batch) {
            if pod.ready {
                let counts = ready_in.entry(pod.workload.as_str()).or_default();
                if counts.len() <= *cluster {
                    counts.resize(*cluster + 1, 0);
                }
                counts[*cluster] += 1;
            }
        }
        for (name, rates) in &self.traffic {
            if !self.workloads.contains_key(name) {
                continue;
            }
            let total: f64 = rates.iter().sum();
            m.requests += total * dt;
            let Some(counts) = ready_in.get(name.as_str()) else {
                continue;
            };
            let ready: u32 = counts.iter().sum();
            if total <= 0.0 || ready == 0 {
                continue;
            }
            let local: f64 = rates
                .iter()
                .enumerate()
                .map(|(i, rate)| {
                    let replicas = f64::from(counts.get(i).copied().unwrap_or(0)) / f64::from(ready);
                    (rate / total).min(replicas)
                })
                .sum();
            m.local_requests += local * total * dt;
        }
    }

    /// Closes the readiness events whose workload has all its replicas ready.
    fn settle(&mut self, now: Instant) {
        if self.window.is_none() {
            return;
        }
        let ready: HashMap<String, u32> = holdings(&self.pods)
            .into_iter()
            .map(|(name, (ready, _))| (name.to_owned(), ready))
            .collect();
        for (name, wanted) in &mut self.workloads {
            if let Some(since) = wanted.since
                && ready.get(name).copied().unwrap_or(0) >= wanted.desired
            {
                self.measured.ready.push(now.saturating_duration_since(since));
                wanted.since = None;
            }
        }
        let succeeded = &self.succeeded;
        let measured = &mut self.measured;
        self.jobs.retain(|name, (completions, since)| {
            let done = succeeded.get(name).map_or(0, HashSet::len);
            if done >= *completions as usize {
                measured.jobs_done.push(now.saturating_duration_since(*since));
                false
            } else {
                true
            }
        });
    }

    /// Counts a pod of a batch job that succeeded (once per pod, however often it is seen).
    fn count_succeeded(&mut self, cluster: usize, pod: &Pod) {
        if let Some(job) = succeeded_job(pod) {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            self.succeeded
                .entry(job.to_owned())
                .or_default()
                .insert((cluster, uid));
        }
    }

    fn on_event(&mut self, cluster: usize, event: Event<Pod>, now: Instant) {
        let uid = |pod: &Pod| pod.metadata.uid.clone().unwrap_or_default();
        match event {
            Event::Init => {
                self.relisting.insert(cluster, HashMap::new());
            }
            Event::InitApply(pod) => {
                self.count_succeeded(cluster, &pod);
                if let Some(view) = PodView::of(&pod) {
                    self.relisting.entry(cluster).or_default().insert(uid(&pod), view);
                }
            }
            Event::InitDone => {
                self.advance(now);
                self.pods.retain(|(c, _), _| *c != cluster);
                for (uid, view) in self.relisting.remove(&cluster).unwrap_or_default() {
                    self.pods.insert((cluster, uid), view);
                }
                if let Some(synced) = self.synced.get_mut(cluster) {
                    *synced = true;
                }
                self.settle(now);
            }
            Event::Apply(pod) => {
                self.advance(now);
                self.count_succeeded(cluster, &pod);
                let key = (cluster, uid(&pod));
                match PodView::of(&pod) {
                    Some(view) => self.pods.insert(key, view),
                    None => self.pods.remove(&key),
                };
                self.settle(now);
            }
            Event::Delete(pod) => {
                self.advance(now);
                self.pods.remove(&(cluster, uid(&pod)));
                self.settle(now);
            }
        }
    }

    fn desired(&mut self, name: &str, replicas: u32, now: Instant) {
        self.advance(now);
        let wanted = self.workloads.entry(name.to_owned()).or_default();
        if let Some(since) = wanted.since.take() {
            self.measured.unready.push(now.saturating_duration_since(since));
        }
        if replicas > wanted.desired {
            wanted.since = Some(now);
        }
        wanted.desired = replicas;
        self.settle(now);
    }

    fn gone(&mut self, name: &str, now: Instant) {
        self.advance(now);
        self.traffic.remove(name);
        if let Some(since) = self.workloads.remove(name).and_then(|w| w.since) {
            self.measured.unready.push(now.saturating_duration_since(since));
        }
    }

    fn finish(&mut self, now: Instant) -> Measurements {
        self.advance(now);
        if let Some(window) = self.window.as_mut() {
            window.ended = true;
        }
        for wanted in self.workloads.values_mut() {
            if let Some(since) = wanted.since.take() {
                self.measured.unready.push(now.saturating_duration_since(since));
            }
        }
        for (_, since) in std::mem::take(&mut self.jobs).into_values() {
            self.measured
                .jobs_unfinished
                .push(now.saturating_duration_since(since));
        }
        std::mem::take(&mut self.measured)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn pod(uid: &str, workload: &str, phase: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.to_owned()),
                labels: Some([(WORKLOAD_LABEL.to_owned(), workload.to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(phase.to_owned()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".to_owned(),
                    status: if ready { "True" } else { "False" }.to_owned(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    fn started(clusters: usize, burst: Option<usize>, t0: Instant) -> State {
        let mut state = State {
            synced: vec![true; clusters],
            burst,
            ..State::default()
        };
        state.window = Some(Window {
            last: t0,
            ended: false,
        });
        state
    }

    const S: Duration = Duration::from_secs(1);

    fn job_pod(uid: &str, job: &str, phase: &str) -> Pod {
        let mut pod = pod(uid, job, phase, phase == "Running");
        pod.metadata
            .labels
            .get_or_insert_default()
            .insert(JOB_LABEL.to_owned(), job.to_owned());
        pod
    }

    #[test]
    fn batch_pods_count_apart_and_a_job_is_done_at_its_completions_each_pod_once() {
        let t0 = Instant::now();
        let mut state = started(2, None, t0);
        state.jobs.insert("j".to_owned(), (2, t0));
        state.on_event(0, Event::Apply(job_pod("a", "j", "Pending")), t0);
        state.on_event(1, Event::Apply(job_pod("b", "j", "Running")), t0);
        state.on_event(0, Event::Apply(job_pod("a", "j", "Running")), t0 + S);
        state.on_event(1, Event::Apply(job_pod("b", "j", "Succeeded")), t0 + 2 * S);
        // The same pod seen again (a relist) is one completion, not two.
        state.on_event(1, Event::InitApply(job_pod("b", "j", "Succeeded")), t0 + 2 * S);
        assert!(state.measured.jobs_done.is_empty(), "one of two completions");
        state.on_event(0, Event::Apply(job_pod("a", "j", "Succeeded")), t0 + 3 * S);
        assert_eq!(state.measured.jobs_done, vec![3 * S]);
        let m = state.finish(t0 + 4 * S);
        assert_eq!((m.batch_pod_seconds, m.batch_pending_seconds), (5.0, 1.0));
        assert_eq!(m.pod_seconds, 0.0, "batch pods are not the workloads'");
        assert_eq!(m.workload_seconds, 0.0);
        assert!(m.jobs_unfinished.is_empty());
    }

    #[test]
    fn a_job_not_done_at_the_end_counts_until_then() {
        let t0 = Instant::now();
        let mut state = started(1, None, t0);
        state.jobs.insert("late".to_owned(), (3, t0 + S));
        let m = state.finish(t0 + 5 * S);
        assert_eq!(m.jobs_unfinished, vec![4 * S]);
    }

    #[test]
    fn requests_count_as_local_up_to_the_share_of_ready_replicas_where_they_arrive() {
        let t0 = Instant::now();
        let mut state = started(2, None, t0);
        state.desired("a", 2, t0);
        // 75 requests/s arrive at cluster 0, 25 at cluster 1.
        state.traffic.insert("a".to_owned(), vec![75.0, 25.0]);
        // 1 s with nothing ready: 100 requests, none local.
        state.on_event(0, Event::Apply(pod("p1", "a", "Running", true)), t0 + S);
        // 1 s with one ready replica in cluster 0: 75 of 100 local.
        state.on_event(1, Event::Apply(pod("p2", "a", "Running", true)), t0 + 2 * S);
        // 2 s with one in each: min(0.75, 0.5) + min(0.25, 0.5) = 0.75, 150 of 200 local.
        let m = state.finish(t0 + 4 * S);
        assert!(
            (m.requests - 400.0).abs() < 1e-9,
            "100/s for 4 s; got {}",
            m.requests
        );
        assert!(
            (m.local_requests - 225.0).abs() < 1e-9,
            "0 + 75 + 150 served where they arrive; got {}",
            m.local_requests
        );
    }

    #[test]
    fn pending_and_pod_seconds_integrate_between_events() {
        let t0 = Instant::now();
        let mut state = started(2, Some(1), t0);
        state.desired("a", 2, t0);
        state.on_event(0, Event::Apply(pod("p1", "a", "Pending", false)), t0);
        state.on_event(1, Event::Apply(pod("p2", "a", "Pending", false)), t0);
        // p1 starts after 2 s; p2 stays Pending; 4 s in all.
        state.on_event(0, Event::Apply(pod("p1", "a", "Running", true)), t0 + 2 * S);
        let m = state.finish(t0 + 4 * S);
        assert!(
            (m.pod_seconds - 8.0).abs() < 1e-9,
            "2 pods for 4 s, got {}",
            m.pod_seconds
        );
        assert!(
            (m.pending_seconds - 6.0).abs() < 1e-9,
            "2 + 4 pending, got {}",
            m.pending_seconds
        );
        assert!(
            (m.burst_seconds - 4.0).abs() < 1e-9,
            "p2 in burst 4 s, got {}",
            m.burst_seconds
        );
        assert!(
            (m.cluster_seconds - 8.0).abs() < 1e-9,
            "2 clusters for 4 s, got {}",
            m.cluster_seconds
        );
        assert!(
            (m.workload_seconds - 4.0).abs() < 1e-9,
            "got {}",
            m.workload_seconds
        );
        assert!((m.wanted_seconds - 8.0).abs() < 1e-9, "got {}", m.wanted_seconds);
        // Unserved: 2 for 2 s, then 1 for 2 s.
        assert!(
            (m.unserved_seconds - 6.0).abs() < 1e-9,
            "got {}",
            m.unserved_seconds
        );
        assert!(m.ready.is_empty(), "never all ready: {:?}", m.ready);
        assert_eq!(m.unready, [4 * S], "the open event counts until the end");
    }

    #[test]
    fn readiness_event_closes_when_ready_pods_reach_the_total_across_clusters() {
        let t0 = Instant::now();
        let mut state = started(2, None, t0);
        state.desired("a", 2, t0);
        state.on_event(0, Event::Apply(pod("p1", "a", "Running", true)), t0 + S);
        state.on_event(1, Event::Apply(pod("p2", "a", "Running", true)), t0 + 3 * S);
        // A scale-down opens nothing; a scale-up opens a new event.
        state.desired("a", 1, t0 + 4 * S);
        state.desired("a", 3, t0 + 5 * S);
        state.on_event(1, Event::Apply(pod("p3", "a", "Running", true)), t0 + 6 * S);
        let m = state.finish(t0 + 10 * S);
        assert_eq!(m.ready, [3 * S, S], "arrival ready at 3 s, scale-up 1 s after");
        assert!(m.unready.is_empty(), "{:?}", m.unready);
    }

    #[test]
    fn terminating_pods_stop_counting_and_a_change_censors_an_open_event() {
        let t0 = Instant::now();
        let mut state = started(1, None, t0);
        state.desired("a", 2, t0);
        state.on_event(0, Event::Apply(pod("p1", "a", "Running", true)), t0);
        let mut leaving = pod("p1", "a", "Running", true);
        leaving.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        state.on_event(0, Event::Apply(leaving), t0 + S);
        state.gone("a", t0 + 2 * S);
        let m = state.finish(t0 + 5 * S);
        assert!(
            (m.pod_seconds - 1.0).abs() < 1e-9,
            "counted until terminating: {}",
            m.pod_seconds
        );
        assert_eq!(m.unready, [2 * S], "censored when the workload left");
        assert!(
            (m.wanted_seconds - 4.0).abs() < 1e-9,
            "2 wanted for 2 s: {}",
            m.wanted_seconds
        );
    }

    #[test]
    fn a_relist_replaces_the_clusters_pods() {
        let t0 = Instant::now();
        let mut state = started(2, None, t0);
        state.on_event(0, Event::Apply(pod("p1", "a", "Running", true)), t0);
        state.on_event(1, Event::Apply(pod("p2", "a", "Running", true)), t0);
        state.on_event(0, Event::Init, t0 + S);
        state.on_event(0, Event::InitApply(pod("p3", "a", "Pending", false)), t0 + S);
        state.on_event(0, Event::InitDone, t0 + S);
        let keys: Vec<_> = {
            let mut k: Vec<_> = state.pods.keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys, [(0, "p3".to_owned()), (1, "p2".to_owned())]);
        let m = state.finish(t0 + 2 * S);
        assert!((m.pod_seconds - 4.0).abs() < 1e-9, "{}", m.pod_seconds);
        assert!((m.pending_seconds - 1.0).abs() < 1e-9, "{}", m.pending_seconds);
    }

    #[test]
    fn nothing_counts_before_begin() {
        let t0 = Instant::now();
        let mut state = State {
            synced: vec![false],
            ..State::default()
        };
        state.on_event(0, Event::Apply(pod("p1", "a", "Pending", false)), t0);
        state.window = Some(Window {
            last: t0 + 5 * S,
            ended: false,
        });
        let m = state.finish(t0 + 6 * S);
        assert!((m.pending_seconds - 1.0).abs() < 1e-9, "{}", m.pending_seconds);
    }
}
