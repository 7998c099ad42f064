//! MultiClusterHorizontalPodAutoscalers: the leader scales each one's MultiClusterDeployment
//! from the utilization of its pods in every cluster, read from Prometheus where the hub has
//! one and from what the agents report otherwise, with the HPA's rules
//! ([`nave_policies::autoscale`]).
//!
//! ```text
//!  every --autoscale-interval: list MultiClusterHorizontalPodAutoscalers
//!    └─ each: its MultiClusterDeployment (spec.replicas) ─┐
//!       usage and requests of the workload's pods         ├─► Autoscaler::step ─► patch
//!       (nave.dev/workload), summed over clusters ────────┘    spec.replicas, Event, status
//!         ├─ --prometheus-url: PromQL over cAdvisor and kube-state-metrics
//!         └─ else: each cluster's agent, from metrics.k8s.io, in its heartbeats
//! ```
//!
//! **Without Prometheus** each agent lists the PodMetrics of its cluster's resource metrics API
//! (metrics-server) every heartbeat interval and sends, per workload, what the measured pods use
//! and request ([`nave_api::wire::WorkloadUsage`]). The hub reads only the reports of the
//! clusters the workload runs in, no older than the heartbeat grace; a cluster that reports none
//! (no metrics-server, an agent that cannot read it) leaves the workload free to scale up on what
//! the others measured, never down, and the status names it.
//!
//! **With Prometheus** the pods are the agents' (labelled `nave.dev/workload:
//! <namespace>.<name>`); usage comes from cAdvisor (`container_cpu_usage_seconds_total`, `container_memory_working_set_bytes`) and
//! requests from kube-state-metrics (`kube_pod_container_resource_requests`), joined on
//! `kube_pod_labels` (kube-state-metrics must export the `nave.dev/workload` pod label:
//! `--metric-labels-allowlist=pods=[nave.dev/workload]`); every series carries the `cluster`
//! label as for usage scoring. What each MultiClusterHorizontalPodAutoscaler remembers (its
//! recent proposals and changes) is kept in memory for the term, as the HPA controller keeps it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};
use nave_api::autoscaler::{
    ExternalMetricSource, ExternalMetricStatus, ExternalTargetType, ExternalValueStatus, MetricStatus,
    MetricType, MetricValueStatus, PolicyType, ResourceMetricStatus, ResourceName, ScalingRules,
    SelectPolicy,
};
use nave_api::wire::{WORKLOAD_LABEL, WorkloadRef, WorkloadUsage};
use nave_api::{
    MultiClusterDeployment, MultiClusterHorizontalPodAutoscaler, MultiClusterHorizontalPodAutoscalerStatus,
};
use nave_policies::autoscale::{
    Autoscaler, Behavior, Change, Limit, Measurement, Rules, ScalingPolicy, Select,
};
use prometheus_http_query::response::Data;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// What the autoscaling loop needs.
pub struct Autoscaling {
    /// The management cluster.
    pub client: kube::Client,
    /// The Prometheus usage is read from; `None` without `--prometheus-url`, and utilization
    /// is read from what the agents report.
    pub prometheus: Option<prometheus_http_query::Client>,
    /// The agents' latest reports of their workloads' usage.
    pub reports: std::sync::Arc<crate::index::Index>,
    /// How old a report may be and still be read: the heartbeat grace.
    pub report_age: Duration,
    /// Time between two evaluations.
    pub interval: Duration,
    /// The CPU rate's window, a PromQL duration.
    pub rate_window: String,
    /// The admin's metrics (`--autoscale-metric`): name to PromQL.
    pub metrics: BTreeMap<String, String>,
    /// Records the Events.
    pub recorder: Recorder,
}

impl std::fmt::Debug for Autoscaling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Autoscaling")
            .field("interval", &self.interval)
            .field("rate_window", &self.rate_window)
            .finish_non_exhaustive()
    }
}

/// Field manager of the hub's writes of `spec.replicas`.
const MANAGER: &str = "nave-hub-autoscaler";

/// Evaluates every MultiClusterHorizontalPodAutoscaler each interval until `shutdown`.
pub async fn run(autoscaling: Autoscaling, shutdown: CancellationToken) {
    let origin = Instant::now();
    let mut remembered: BTreeMap<String, Autoscaler> = BTreeMap::new();
    let mut tick = tokio::time::interval(autoscaling.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = autoscaling.pass(origin, &mut remembered) => {}
        }
    }
}

impl Autoscaling {
    async fn pass(&self, origin: Instant, remembered: &mut BTreeMap<String, Autoscaler>) {
        let api: Api<MultiClusterHorizontalPodAutoscaler> = Api::all(self.client.clone());
        let list = match api.list(&Default::default()).await {
            Ok(list) => list.items,
            Err(error) => {
                warn!(error = %error, "listing MultiClusterHorizontalPodAutoscalers failed; trying again next interval");
                return;
            }
        };
        // By uid: an autoscaler deleted and created again under the same name starts afresh.
        let key = |h: &MultiClusterHorizontalPodAutoscaler| {
            h.uid()
                .unwrap_or_else(|| format!("{}/{}", h.namespace().unwrap_or_default(), h.name_any()))
        };
        let keys: std::collections::BTreeSet<String> = list.iter().map(key).collect();
        remembered.retain(|key, _| keys.contains(key));
        // Two autoscalers of one workload would take turns setting its replicas: neither acts,
        // and both say why (as the HPA's AmbiguousSelector).
        let mut per_target: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for hpa in list.iter().filter(|h| h.metadata.deletion_timestamp.is_none()) {
            per_target
                .entry((
                    hpa.namespace().unwrap_or_default(),
                    hpa.spec.scale_target_ref.name.clone(),
                ))
                .or_default()
                .push(hpa.name_any());
        }
        for hpa in &list {
            if hpa.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let namespace = hpa.namespace().unwrap_or_default();
            let target = &hpa.spec.scale_target_ref.name;
            if let Some(names) = per_target.get(&(namespace.clone(), target.clone()))
                && names.len() > 1
            {
                let mut status = hpa.status.clone().unwrap_or_default();
                status.observed_generation = hpa.metadata.generation;
                set(
                    &mut status,
                    "AbleToScale",
                    false,
                    "AmbiguousTarget",
                    format!(
                        "{target} is the target of several autoscalers ({}); none of them scales it",
                        names.join(", ")
                    ),
                );
                if let Err(error) = self.write_status(hpa, status).await {
                    warn!(autoscaler = %hpa.name_any(), namespace, error = %error, "writing an autoscaler's status failed");
                }
                continue;
            }
            let autoscaler = remembered.entry(key(hpa)).or_default();
            if let Err(error) = self.evaluate(hpa, autoscaler, origin.elapsed()).await {
                warn!(
                    autoscaler = %hpa.name_any(),
                    namespace = hpa.namespace().unwrap_or_default(),
                    error = %error,
                    "evaluating a MultiClusterHorizontalPodAutoscaler failed"
                );
            }
        }
    }

    async fn evaluate(
        &self,
        hpa: &MultiClusterHorizontalPodAutoscaler,
        autoscaler: &mut Autoscaler,
        now: Duration,
    ) -> Result<(), kube::Error> {
        let namespace = hpa.namespace().unwrap_or_default();
        let spec = &hpa.spec;
        let target = &spec.scale_target_ref.name;
        let mut status = hpa.status.clone().unwrap_or_default();
        status.observed_generation = hpa.metadata.generation;
        let mcds: Api<MultiClusterDeployment> = Api::namespaced(self.client.clone(), &namespace);
        let Some(mcd) = mcds.get_opt(target).await? else {
            status.current_metrics.clear();
            set(
                &mut status,
                "AbleToScale",
                false,
                "FailedGetScale",
                format!("MultiClusterDeployment {namespace}/{target} not found"),
            );
            set(
                &mut status,
                "ScalingActive",
                false,
                "FailedGetScale",
                "no target to scale".to_owned(),
            );
            return self.write_status(hpa, status).await;
        };
        let invalid = if mcd.spec.placement.policy == nave_api::PlacementPolicy::Everywhere {
            Some(format!(
                "{target} runs spec.replicas in every cluster (policy everywhere); an autoscaler scales a total"
            ))
        } else if mcd.spec.retain_replicas {
            Some(format!(
                "{target} leaves each cluster's replicas to that cluster (spec.retainReplicas); \
                 scale it with an autoscaler in each cluster"
            ))
        } else {
            None
        };
        if let Some(message) = invalid {
            status.current_metrics.clear();
            set(
                &mut status,
                "AbleToScale",
                false,
                "InvalidTarget",
                message.clone(),
            );
            set(&mut status, "ScalingActive", false, "InvalidTarget", message);
            return self.write_status(hpa, status).await;
        }
        let current = u32::try_from(mcd.spec.replicas.max(0)).unwrap_or(u32::MAX);
        status.current_replicas = i32::try_from(current).unwrap_or(i32::MAX);
        if current == 0 {
            status.current_metrics.clear();
            status.desired_replicas = 0;
            set(
                &mut status,
                "AbleToScale",
                true,
                "SucceededGetScale",
                format!("{target} has 0 replicas"),
            );
            set(
                &mut status,
                "ScalingActive",
                false,
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero".to_owned(),
            );
            return self.write_status(hpa, status).await;
        }

        // The metrics. As the HPA: when one cannot be read, the others may still scale up, and
        // nothing scales down.
        let mut measurements = Vec::new();
        let mut described = Vec::new();
        let mut current_metrics = Vec::new();
        let mut failure: Option<(&str, String)> = None;
        // A metric read in only some of the workload's clusters: like the HPA with pods it has
        // no metrics of, it may scale up on what was read, never down.
        let mut incomplete: Option<String> = None;
        for metric in &spec.metrics {
            if let Some(resource) = metric
                .resource
                .as_ref()
                .filter(|_| metric.type_ == MetricType::Resource)
            {
                let read = match &self.prometheus {
                    None => self.reported_utilization(&mcd, resource.name),
                    Some(client) => self
                        .utilization(client, &namespace, &mcd.name_any(), resource.name)
                        .await
                        .map(|(percent, measured)| (percent, measured, Vec::new())),
                };
                match read {
                    Ok((percent, measured, unmeasured)) => {
                        let target = f64::from(resource.target.average_utilization);
                        let side = if percent > target { "above" } else { "below" };
                        let mut description = format!(
                            "{} utilization {percent:.0}% {side} target {target:.0}%",
                            resource.name.as_str()
                        );
                        if !unmeasured.is_empty() {
                            description.push_str(&format!(" (not measured in {})", unmeasured.join(", ")));
                            incomplete.get_or_insert_with(|| {
                                format!(
                                    "{} is not measured in {}, whose agents report no usage of its pods: \
                                     it may scale up, not down",
                                    resource.name.as_str(),
                                    unmeasured.join(", ")
                                )
                            });
                        }
                        described.push(description);
                        measurements.push(Measurement {
                            current: percent,
                            target,
                            measured,
                        });
                        current_metrics.push(MetricStatus {
                            type_: MetricType::Resource,
                            resource: Some(ResourceMetricStatus {
                                name: resource.name,
                                current: MetricValueStatus {
                                    average_utilization: percent.round().clamp(0.0, f64::from(i32::MAX))
                                        as i32,
                                },
                            }),
                            external: None,
                        });
                    }
                    Err(why) => {
                        failure.get_or_insert((
                            "FailedGetResourceMetric",
                            format!("{} utilization: {why}", resource.name.as_str()),
                        ));
                    }
                }
            } else if let Some(external) = metric
                .external
                .as_ref()
                .filter(|_| metric.type_ == MetricType::External)
            {
                match self
                    .external(&namespace, &mcd.name_any(), external, current)
                    .await
                {
                    Ok(read) => {
                        described.push(read.described);
                        measurements.push(read.measurement);
                        current_metrics.push(read.status);
                    }
                    Err(why) => {
                        failure.get_or_insert((
                            "FailedGetExternalMetric",
                            format!("metric {}: {why}", external.metric.name),
                        ));
                    }
                }
            }
        }
        status.current_metrics = current_metrics;
        match &failure {
            Some((reason, why)) => set(&mut status, "ScalingActive", false, reason, why.clone()),
            None => set(
                &mut status,
                "ScalingActive",
                true,
                "ValidMetricFound",
                incomplete
                    .clone()
                    .unwrap_or_else(|| "every metric was read".to_owned()),
            ),
        }
        if (failure.is_some() || incomplete.is_some())
            && nave_policies::autoscale::propose(current, &measurements)
                .1
                .is_none_or(|p| p <= current)
        {
            // Only the bounds still apply.
            measurements.clear();
        }

        let min = u32::try_from(spec.min_replicas.unwrap_or(1).max(1)).unwrap_or(1);
        let max = u32::try_from(spec.max_replicas.max(1)).unwrap_or(1);
        let step = autoscaler.step(
            now,
            current,
            &measurements,
            min,
            max,
            &behavior(spec.behavior.as_ref()),
        );
        status.desired_replicas = i32::try_from(step.desired).unwrap_or(i32::MAX);
        let (limited, reason, message) = match step.limit {
            Some(Limit::TooFew(n)) => (
                true,
                "TooFewReplicas",
                format!("the desired count is below minReplicas={n}"),
            ),
            Some(Limit::TooMany(n)) => (
                true,
                "TooManyReplicas",
                format!("the desired count is above maxReplicas={n}"),
            ),
            Some(Limit::ScaleUpRate(n)) => (
                true,
                "ScaleUpLimit",
                format!("a scale-up policy allows {n} replicas now"),
            ),
            Some(Limit::ScaleDownRate(n)) => (
                true,
                "ScaleDownLimit",
                format!("a scale-down policy allows no fewer than {n} replicas now"),
            ),
            Some(Limit::Stabilized(_)) | None => (
                false,
                "DesiredWithinRange",
                "the desired count is within the acceptable range".to_owned(),
            ),
        };
        set(&mut status, "ScalingLimited", limited, reason, message);
        let (able_reason, able_message) = match step.limit {
            Some(Limit::Stabilized(n)) if step.proposed < current => (
                "ScaleDownStabilized",
                format!(
                    "recent recommendations were higher than current one, applying the highest recent recommendation ({n})"
                ),
            ),
            Some(Limit::Stabilized(n)) => (
                "ScaleUpStabilized",
                format!(
                    "recent recommendations were lower than current one, applying the lowest recent recommendation ({n})"
                ),
            ),
            _ => (
                "ReadyForNewScale",
                "recommended size matches current size".to_owned(),
            ),
        };
        set(&mut status, "AbleToScale", true, able_reason, able_message);
        if step.desired != current {
            let why = described.join(", ");
            mcds.patch(
                target,
                &PatchParams::apply(MANAGER),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": step.desired}})),
            )
            .await?;
            autoscaler.record(now, current, step.desired);
            status.last_scale_time = Some(Time(jiff::Timestamp::now()));
            set(
                &mut status,
                "AbleToScale",
                true,
                "SucceededRescale",
                format!("scaled {target} from {current} to {}", step.desired),
            );
            let note = if why.is_empty() {
                format!(
                    "New size: {}; reason: within minReplicas and maxReplicas",
                    step.desired
                )
            } else {
                format!("New size: {}; reason: {why}", step.desired)
            };
            info!(namespace, autoscaler = %hpa.name_any(), from = current, to = step.desired, %why, "rescaled");
            let event = Event {
                type_: EventType::Normal,
                reason: "SuccessfulRescale".to_owned(),
                note: Some(note),
                action: "Rescale".to_owned(),
                secondary: Some(mcd.object_ref(&())),
            };
            if let Err(error) = self.recorder.publish(&event, &hpa.object_ref(&())).await {
                warn!(error = %error, "publishing an event failed");
            }
        } else {
            debug!(namespace, autoscaler = %hpa.name_any(), replicas = current, "no change");
        }
        self.write_status(hpa, status).await
    }

    /// The admin's metric `source` names, for the workload `name` of `current` replicas: its
    /// value from Prometheus, as a measurement against its target (per replica for
    /// `AverageValue`, as the HPA's external metrics), its status and its description.
    async fn external(
        &self,
        namespace: &str,
        name: &str,
        source: &ExternalMetricSource,
        current: u32,
    ) -> Result<ExternalRead, String> {
        let Some(query) = self.metrics.get(&source.metric.name) else {
            let known: Vec<&str> = self.metrics.keys().map(String::as_str).collect();
            return Err(format!(
                "the hub defines no metric of that name (its --autoscale-metric list: {})",
                if known.is_empty() {
                    "empty".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        };
        let Some(client) = &self.prometheus else {
            return Err("the hub reads no Prometheus (--prometheus-url)".to_owned());
        };
        let (wanted, field) = match source.target.type_ {
            ExternalTargetType::Value => (source.target.value.as_ref(), "value"),
            ExternalTargetType::AverageValue => (source.target.average_value.as_ref(), "averageValue"),
        };
        let target = wanted
            .ok_or_else(|| format!("target.{field} is missing"))
            .and_then(|q| quantity(q).map_err(|e| format!("target.{field}: {e}")))?;
        if target <= 0.0 {
            return Err(format!("target.{field} must be more than 0"));
        }
        let value = scalar(client, &external_query(query, namespace, name))
            .await?
            .ok_or("the query returned no usable value (none, negative or not a number)")?;
        // `AverageValue` is per replica, as the HPA divides an external metric.
        let (measured, per_replica) = match source.target.type_ {
            ExternalTargetType::Value => (value, None),
            ExternalTargetType::AverageValue => {
                let per = value / f64::from(current.max(1));
                (per, Some(per))
            }
        };
        let side = if measured > target { "above" } else { "below" };
        let described = format!(
            "{} {}{} {side} target {}",
            source.metric.name,
            format_quantity(measured),
            if per_replica.is_some() { " per replica" } else { "" },
            format_quantity(target)
        );
        Ok(ExternalRead {
            measurement: Measurement {
                current: measured,
                target,
                measured: current,
            },
            status: MetricStatus {
                type_: MetricType::External,
                resource: None,
                external: Some(ExternalMetricStatus {
                    metric: source.metric.clone(),
                    current: ExternalValueStatus {
                        value: Some(format_quantity(value)),
                        average_value: per_replica.map(format_quantity),
                    },
                }),
            },
            described,
        })
    }

    /// The workload's `resource` utilization in percent of its pods' requests, over every
    /// cluster, and how many pods it is over.
    async fn utilization(
        &self,
        client: &prometheus_http_query::Client,
        namespace: &str,
        name: &str,
        resource: ResourceName,
    ) -> Result<(f64, u32), String> {
        let q = queries(namespace, name, resource, &self.rate_window);
        let pods = scalar(client, &q.pods).await?.unwrap_or(0.0);
        if pods < 1.0 {
            return Err(
                "no pod of the workload measured over the rate window yet (kube-state-metrics must export the nave.dev/workload pod label)"
                    .to_owned(),
            );
        }
        let used = scalar(client, &q.usage).await?.unwrap_or(0.0);
        let asked = scalar(client, &q.requests).await?.unwrap_or(0.0);
        if asked <= 0.0 {
            return Err("its pods request none; utilization needs requests".to_owned());
        }
        let measured = if pods >= f64::from(u32::MAX) {
            u32::MAX
        } else {
            pods as u32
        };
        Ok((100.0 * used / asked, measured))
    }

    /// The workload's `resource` utilization from what the agents of the clusters it runs in
    /// (its status's clusters) last reported (see [`reported_utilization`]).
    fn reported_utilization(
        &self,
        mcd: &MultiClusterDeployment,
        resource: ResourceName,
    ) -> Result<(f64, u32, Vec<String>), String> {
        let workload = WorkloadRef::new(mcd.namespace().unwrap_or_default(), mcd.name_any());
        // At most twice the replicas the hub knows of there (a rollout's surge), at least one.
        let clusters: Vec<(&str, u64)> = mcd
            .status
            .iter()
            .flat_map(|s| &s.clusters)
            .map(|c| {
                let known = u64::try_from(c.desired.max(c.ready).max(1)).unwrap_or(1);
                (c.name.as_str(), known.saturating_mul(2))
            })
            .collect();
        let pod = mcd
            .spec
            .template
            .deployment_spec()
            .ok()
            .and_then(|d| d.template.spec);
        let per_pod = pod.map_or(0, |pod| {
            pod.containers
                .iter()
                .map(|c| {
                    let requests = nave_resources::container_requests(c);
                    match resource {
                        ResourceName::Cpu => requests.cpu_millis(),
                        ResourceName::Memory => requests.memory_bytes(),
                    }
                })
                .fold(0u64, u64::saturating_add)
        });
        let now = jiff::Timestamp::now();
        reported_utilization(&clusters, resource, per_pod, |cluster| {
            self.reports
                .workload_usage(cluster, &workload)
                .filter(|(at, _)| {
                    // A report stamped in the future (a replica's clock ahead) is not fresher.
                    let age = now.duration_since(*at);
                    !age.is_negative() && age.unsigned_abs() <= self.report_age
                })
                .map(|(_, usage)| usage)
        })
    }

    async fn write_status(
        &self,
        hpa: &MultiClusterHorizontalPodAutoscaler,
        status: MultiClusterHorizontalPodAutoscalerStatus,
    ) -> Result<(), kube::Error> {
        if hpa.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let api: Api<MultiClusterHorizontalPodAutoscaler> =
            Api::namespaced(self.client.clone(), &hpa.namespace().unwrap_or_default());
        // A merge patch keeps what it leaves out: the metrics are written even when none are.
        let mut body = serde_json::to_value(&status).unwrap_or_default();
        body["currentMetrics"] = serde_json::to_value(&status.current_metrics).unwrap_or_default();
        api.patch_status(
            &hpa.name_any(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": body})),
        )
        .await?;
        Ok(())
    }
}

/// Most utilization one cluster's report counts for, in times its pods' requests: beyond about
/// ten, a scale-up is held by the scaling policies (at most doubling, or 4 replicas, per 15 s)
/// whatever the number, so the cap changes no real decision and bounds what one agent can claim.
pub const MAX_REPORTED_UTILIZATION: u64 = 10;

/// A workload's `resource` utilization in percent of its pods' requests over `clusters` (those
/// it runs in, each with the most pods it may report), from what `reported` gives of each
/// ([`nave_api::wire::Heartbeat::workload_usage`], fresh enough); how many pods it is over; and
/// the clusters of `clusters` that measure nothing. `per_pod` is what the template's containers
/// request of `resource`.
///
/// An agent is believed about its own cluster's share only, and within bounds: only the
/// clusters the workload runs in are read; a report of more pods than the cluster may run is
/// scaled down to that many; its requests are held within a quarter and four times what its
/// pods' template requests (an override may change a cluster's requests, not by more); its usage
/// to [`MAX_REPORTED_UTILIZATION`] times its requests.
pub fn reported_utilization(
    clusters: &[(&str, u64)],
    resource: ResourceName,
    per_pod: u64,
    reported: impl Fn(&str) -> Option<WorkloadUsage>,
) -> Result<(f64, u32, Vec<String>), String> {
    if clusters.is_empty() {
        return Err("it runs in no cluster yet".to_owned());
    }
    let (mut used, mut asked, mut pods) = (0f64, 0f64, 0u64);
    let mut unmeasured = Vec::new();
    let mut measured_anywhere = false;
    for &(cluster, most) in clusters {
        let Some(usage) = reported(cluster) else {
            unmeasured.push(cluster.to_owned());
            continue;
        };
        measured_anywhere = true;
        let (u, r) = match resource {
            ResourceName::Cpu => (usage.used.cpu_millis, usage.requested.cpu_millis),
            ResourceName::Memory => (usage.used.memory_bytes, usage.requested.memory_bytes),
        };
        let n = usage.used.pods.min(most);
        if n == 0 {
            continue;
        }
        // Of more pods than may run there: the same use, per pod, over as many as may.
        let share = n as f64 / usage.used.pods as f64;
        let mut r = r as f64 * share;
        if per_pod > 0 {
            let expected = n as f64 * per_pod as f64;
            r = r.clamp(expected / 4.0, expected * 4.0);
        }
        let u = (u as f64 * share).min(r * MAX_REPORTED_UTILIZATION as f64);
        used += u;
        asked += r;
        pods += n;
    }
    if !measured_anywhere {
        return Err(
            "no agent of the clusters it runs in reports its pods' usage (agents read it from \
             the resource metrics API, metrics.k8s.io: is metrics-server installed there?)"
                .to_owned(),
        );
    }
    if pods == 0 {
        return Err("no pod of it measured yet".to_owned());
    }
    if asked <= 0.0 {
        return Err("its pods request none; utilization needs requests".to_owned());
    }
    Ok((
        100.0 * used / asked,
        u32::try_from(pods).unwrap_or(u32::MAX),
        unmeasured,
    ))
}

/// The PromQL of a workload's pods, their usage and their requests of `resource`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queries {
    /// How many pods count.
    pub pods: String,
    /// Their usage, summed.
    pub usage: String,
    /// Their requests, summed.
    pub requests: String,
}

/// The [`Queries`] of a workload's `resource`. The pods that count are the workload's (by the
/// agents' label) that are measured now and were measured a rate window ago: a pod just started
/// has a partial rate (the HPA's CPU initialization period, in effect), and usage and requests
/// are over the same pods. Each container counts once (`max` over duplicate series, of a
/// kube-state-metrics pair say). Namespace and name are DNS labels; quotes and backslashes are
/// escaped anyway.
pub fn queries(namespace: &str, name: &str, resource: ResourceName, rate_window: &str) -> Queries {
    let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let ns = quote(namespace);
    let workload = quote(&format!("{namespace}.{name}"));
    let label = format!("label_{}", WORKLOAD_LABEL.replace(['.', '/', '-'], "_"));
    let containers = r#"container!="",container!="POD""#;
    let by_container = "cluster, namespace, pod, container";
    let by_pod = "cluster, namespace, pod";
    let (usage_now, then) = match resource {
        ResourceName::Cpu => (
            format!(
                r#"sum by ({by_pod}) (max by ({by_container}) (rate(container_cpu_usage_seconds_total{{namespace="{ns}",{containers}}}[{rate_window}])))"#
            ),
            format!(
                r#"max by ({by_pod}) (container_cpu_usage_seconds_total{{namespace="{ns}",{containers}}} offset {rate_window})"#
            ),
        ),
        ResourceName::Memory => (
            format!(
                r#"sum by ({by_pod}) (max by ({by_container}) (container_memory_working_set_bytes{{namespace="{ns}",{containers}}}))"#
            ),
            format!(
                r#"max by ({by_pod}) (container_memory_working_set_bytes{{namespace="{ns}",{containers}}})"#
            ),
        ),
    };
    let pods = format!(
        r#"(max by ({by_pod}) (kube_pod_labels{{namespace="{ns}",{label}="{workload}"}}) and on ({by_pod}) {then} and on ({by_pod}) {usage_now})"#
    );
    let requests = format!(
        r#"sum by ({by_pod}) (max by ({by_container}) (kube_pod_container_resource_requests{{namespace="{ns}",resource="{}"}}))"#,
        resource.as_str()
    );
    Queries {
        pods: format!("count({pods})"),
        usage: format!("sum({usage_now} * on ({by_pod}) group_left() {pods})"),
        requests: format!("sum({requests} * on ({by_pod}) group_left() {pods})"),
    }
}

/// An `External` metric read: the measurement, its status and its description.
struct ExternalRead {
    measurement: Measurement,
    status: MetricStatus,
    described: String,
}

/// The admin's `query` for the workload `name` in `namespace`: `$namespace` and `$workload`
/// replaced (Kubernetes names, escaped for a PromQL string anyway).
pub fn external_query(query: &str, namespace: &str, name: &str) -> String {
    let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    query
        .replace("$namespace", &quote(namespace))
        .replace("$workload", &quote(name))
}

/// A target quantity as a number: `500`, `1500m`, `2k`.
fn quantity(q: &IntOrString) -> Result<f64, String> {
    match q {
        IntOrString::Int(i) => Ok(f64::from(*i)),
        IntOrString::String(s) => nave_resources::Quantity::parse(s)
            .map(|q| q.milli_value() as f64 / 1000.0)
            .map_err(|e| format!("{s:?} is not a quantity: {e}")),
    }
}

/// A value as a quantity: whole numbers as they are, others in thousandths (`1500m`).
pub fn format_quantity(value: f64) -> String {
    let milli = (value * 1000.0).round();
    if milli % 1000.0 == 0.0 {
        format!("{}", (milli / 1000.0) as i64)
    } else {
        format!("{}m", milli as i64)
    }
}

/// The single value of an instant query summed to one series; `None` when it has none.
async fn scalar(client: &prometheus_http_query::Client, query: &str) -> Result<Option<f64>, String> {
    let answer = client
        .query(query)
        .get()
        .await
        .map_err(|e| format!("the query failed: {e}"))?;
    match answer.data() {
        Data::Vector(v) => Ok(v
            .first()
            .map(|s| s.sample().value())
            .filter(|v| v.is_finite() && *v >= 0.0)),
        Data::Scalar(s) => Ok(Some(s.value()).filter(|v| v.is_finite() && *v >= 0.0)),
        Data::Matrix(_) => Err("the query returned a range vector".to_owned()),
    }
}

/// The engine's behaviour from the spec's, each direction's default for what is unset.
pub fn behavior(spec: Option<&nave_api::autoscaler::ScalingBehavior>) -> Behavior {
    let rules = |given: Option<&ScalingRules>, default: Rules| -> Rules {
        let Some(given) = given else {
            return default;
        };
        Rules {
            stabilization: given
                .stabilization_window_seconds
                .map_or(default.stabilization, |s| {
                    Duration::from_secs(u64::try_from(s).unwrap_or(0))
                }),
            policies: given.policies.as_ref().map_or(default.policies, |policies| {
                policies
                    .iter()
                    .map(|p| ScalingPolicy {
                        change: match p.type_ {
                            PolicyType::Pods => Change::Pods(u32::try_from(p.value).unwrap_or(0)),
                            PolicyType::Percent => Change::Percent(u32::try_from(p.value).unwrap_or(0)),
                        },
                        period: Duration::from_secs(u64::try_from(p.period_seconds).unwrap_or(0)),
                    })
                    .collect()
            }),
            select: match given.select_policy {
                None => default.select,
                Some(SelectPolicy::Max) => Select::Max,
                Some(SelectPolicy::Min) => Select::Min,
                Some(SelectPolicy::Disabled) => Select::Disabled,
            },
        }
    };
    Behavior {
        up: rules(spec.and_then(|b| b.scale_up.as_ref()), Rules::default_up()),
        down: rules(spec.and_then(|b| b.scale_down.as_ref()), Rules::default_down()),
    }
}

/// Sets condition `type_` in `status`, its transition time moved only when its status changes.
fn set(
    status: &mut MultiClusterHorizontalPodAutoscalerStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: String,
) {
    let value = if value { "True" } else { "False" };
    let now = Time(jiff::Timestamp::now());
    match status.conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = now;
            }
            c.status = value.to_owned();
            c.reason = reason.to_owned();
            c.message = message;
        }
        None => status.conditions.push(Condition {
            type_: type_.to_owned(),
            status: value.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time: now,
            observed_generation: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admins_query_gets_the_workload_and_quantities_read_and_print_as_kubernetes_writes_them() {
        let query = r#"sum(rate(http_requests_total{namespace="$namespace",service="$workload"}[2m]))"#;
        assert_eq!(
            external_query(query, "shop", "web"),
            r#"sum(rate(http_requests_total{namespace="shop",service="web"}[2m]))"#
        );
        // Names never hold quotes; were one to, it could not end the string.
        assert_eq!(
            external_query(r#"{a="$workload"}"#, "x", r#"w"}"#),
            r#"{a="w\"}"}"#
        );
        assert_eq!(quantity(&IntOrString::Int(500)), Ok(500.0));
        assert_eq!(quantity(&IntOrString::String("1500m".to_owned())), Ok(1.5));
        assert_eq!(quantity(&IntOrString::String("2k".to_owned())), Ok(2000.0));
        assert!(quantity(&IntOrString::String("lots".to_owned())).is_err());
        assert_eq!(format_quantity(45.0), "45");
        assert_eq!(format_quantity(2.25), "2250m");
        assert_eq!(format_quantity(0.0), "0");
    }

    #[test]
    fn a_metric_is_named_as_a_kubernetes_name_and_carries_a_query() {
        use clap::Parser;
        let parse = |arg: &str| {
            crate::cli::Cli::try_parse_from([
                "nave-hub",
                "run",
                "--database-url=sqlite://x",
                "--bootstrap-token-file=t",
                arg,
            ])
        };
        let ok = parse("--autoscale-metric=rps=sum(x{a=\"b\"})").expect("a named metric");
        let crate::cli::Command::Run(args) = ok.command else {
            panic!("the run command")
        };
        assert_eq!(
            args.autoscale.autoscale_metric,
            vec![crate::cli::NamedMetric {
                name: "rps".to_owned(),
                query: "sum(x{a=\"b\"})".to_owned()
            }]
        );
        for bad in [
            "--autoscale-metric=sum(x)",
            "--autoscale-metric=RPS=sum(x)",
            "--autoscale-metric=rps=",
        ] {
            assert!(parse(bad).is_err(), "{bad} is refused");
        }
    }

    #[test]
    fn the_queries_join_usage_and_requests_on_the_workloads_pods() {
        let q = queries("shop", "web", ResourceName::Cpu, "1m");
        let (usage, requests) = (q.usage, q.requests);
        assert!(usage.contains(r#"rate(container_cpu_usage_seconds_total{namespace="shop",container!="",container!="POD"}[1m])"#), "{usage}");
        assert!(
            usage.contains(r#"kube_pod_labels{namespace="shop",label_nave_dev_workload="shop.web"}"#),
            "{usage}"
        );
        assert!(
            requests.contains(r#"kube_pod_container_resource_requests{namespace="shop",resource="cpu"}"#),
            "{requests}"
        );
        let memory = queries("shop", "web", ResourceName::Memory, "1m").usage;
        assert!(memory.contains("container_memory_working_set_bytes"), "{memory}");
        let odd = queries("a\"b", "c", ResourceName::Cpu, "1m").usage;
        assert!(odd.contains(r#"namespace="a\"b""#), "quotes are escaped: {odd}");
    }

    fn usage(cpu: (u64, u64), memory: (u64, u64), pods: u64) -> WorkloadUsage {
        WorkloadUsage {
            workload: WorkloadRef::new("shop", "web"),
            used: nave_api::wire::Resources::new(cpu.0, memory.0, pods),
            requested: nave_api::wire::Resources::new(cpu.1, memory.1, pods),
        }
    }

    #[test]
    fn reported_utilization_sums_the_clusters_the_workload_runs_in_and_names_those_silent() {
        let reports = BTreeMap::from([
            ("eu-1", usage((300, 200), (100, 400), 2)),
            ("eu-2", usage((100, 200), (100, 400), 2)),
            // Measured, none of its pods there yet.
            ("eu-4", usage((0, 0), (0, 0), 0)),
            // Runs nothing of it: whatever its agent says is not read.
            ("us-1", usage((1_000_000, 1), (1, 1), 1)),
        ]);
        let read = |c: &str| reports.get(c).cloned();
        let fleet = [("eu-1", 4), ("eu-2", 4), ("eu-3", 4), ("eu-4", 4)];
        let (cpu, pods, silent) =
            reported_utilization(&fleet, ResourceName::Cpu, 100, read).expect("measured");
        assert_eq!((cpu, pods, silent), (100.0, 4, vec!["eu-3".to_owned()]));
        let (memory, _, _) =
            reported_utilization(&fleet[..2], ResourceName::Memory, 200, read).expect("measured");
        assert_eq!(memory, 25.0);

        let none = reported_utilization(&[("eu-3", 4)], ResourceName::Cpu, 100, read).unwrap_err();
        assert!(none.contains("metrics.k8s.io"), "{none}");
        let starting = reported_utilization(&[("eu-4", 4)], ResourceName::Cpu, 100, read).unwrap_err();
        assert!(starting.contains("no pod of it measured yet"), "{starting}");
        let nowhere = reported_utilization(&[], ResourceName::Cpu, 100, read).unwrap_err();
        assert!(nowhere.contains("no cluster"), "{nowhere}");
        let unrequested = BTreeMap::from([("eu-1", usage((300, 0), (1, 0), 1))]);
        let err = reported_utilization(&[("eu-1", 4)], ResourceName::Cpu, 0, |c| {
            unrequested.get(c).cloned()
        })
        .unwrap_err();
        assert!(err.contains("request none"), "{err}");
    }

    #[test]
    fn one_agent_cannot_claim_more_than_its_cluster_s_share() {
        // eu-1 runs 2 honest pods at 50%; eu-2 may run 2 and its agent lies.
        let honest = usage((100, 200), (0, 0), 2);
        let fleet = [("eu-1", 2), ("eu-2", 2)];
        let with = |liar: WorkloadUsage| {
            let reports = BTreeMap::from([("eu-1", honest.clone()), ("eu-2", liar)]);
            reported_utilization(&fleet, ResourceName::Cpu, 100, |c| reports.get(c).cloned())
                .expect("measured")
        };
        // Any use at all: at most ten times its requests, (100 + 2000) of 400, not 10^17%.
        let (busy, pods, _) = with(usage((u64::MAX, 200), (0, 0), 2));
        assert_eq!((busy, pods), (525.0, 4));
        // Tiny requests to inflate the ratio: held to a quarter of what the template asks.
        let (tiny, _, _) = with(usage((200, 1), (0, 0), 2));
        assert_eq!(tiny, 120.0, "(100 + 200) of (200 + 50)");
        // Huge requests to deflate it: held to four times.
        let (idle, _, _) = with(usage((0, u64::MAX), (0, 0), 2));
        assert_eq!(idle, 10.0, "100 of (200 + 800)");
        // A million idle pods: counted as the two it may run, at their use per pod.
        let (many, pods, _) = with(usage((0, 100_000_000), (0, 0), 1_000_000));
        assert_eq!((many, pods), (25.0, 4));
    }

    #[test]
    fn the_behavior_takes_each_direction_s_default_for_what_is_unset() {
        assert_eq!(behavior(None), Behavior::default());
        let spec: nave_api::autoscaler::ScalingBehavior = serde_json::from_value(serde_json::json!({
            "scaleDown": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}
        }))
        .expect("a behavior");
        let b = behavior(Some(&spec));
        assert_eq!(b.up, Rules::default_up());
        assert_eq!(b.down.stabilization, Duration::ZERO);
        assert_eq!(
            b.down.policies,
            vec![ScalingPolicy {
                change: Change::Pods(1),
                period: Duration::from_secs(60)
            }]
        );
        assert_eq!(b.down.select, Select::Max);
    }
}
