//! `nave clusters`, `nave cordon` and `nave uncordon`: the fleet as the management cluster's
//! WorkloadClusters say it is.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, PostParams};
use nave_api::{ClusterTaint, ClusterTaintEffect, DRAIN_TAINT_KEY, MultiClusterDeployment, WorkloadCluster};
use serde::Serialize;
use serde_json::json;

use crate::output::{render, table};
use crate::{CliError, Global, kube_client};

/// One cluster, as `-o json|yaml` prints it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSummary {
    name: String,
    region: Option<String>,
    /// `True`, `False` or `Unknown` (no heartbeat yet).
    ready: String,
    /// Why not ready, when it is not.
    ready_message: Option<String>,
    /// `True` when it gets work; `False` while it waits for an admin or was withdrawn.
    accepted: String,
    /// Cordoned: no new replicas.
    cordoned: bool,
    /// Drained: the `nave.dev/drain` taint moves away what does not tolerate it.
    draining: bool,
    /// Its taints, as `key=value:Effect`.
    taints: Vec<String>,
    burst_only: bool,
    nodes: Option<i32>,
    cpu_allocatable: Option<String>,
    cpu_requested_percent: Option<i32>,
    memory_allocatable: Option<String>,
    memory_requested_percent: Option<i32>,
    /// When the hub last heard from its agent (RFC 3339).
    last_heartbeat: Option<String>,
    /// Seconds since then, when this was printed.
    heartbeat_age_seconds: Option<i64>,
    agent_version: Option<String>,
}

impl ClusterSummary {
    fn of(cluster: &WorkloadCluster, now: jiff::Timestamp) -> Self {
        let status = cluster.status.clone().unwrap_or_default();
        let condition =
            |type_: &str| -> Option<&Condition> { status.conditions.iter().find(|c| c.type_ == type_) };
        let ready = condition("Ready");
        let capacity = status.capacity.as_ref();
        let heartbeat = status.last_heartbeat_time.as_ref().map(|t| t.0);
        ClusterSummary {
            name: cluster.metadata.name.clone().unwrap_or_default(),
            region: cluster.spec.region.clone(),
            ready: ready.map_or("Unknown", |c| c.status.as_str()).to_owned(),
            ready_message: ready.filter(|c| c.status != "True").map(|c| c.message.clone()),
            accepted: condition("Accepted")
                .map_or("Unknown", |c| c.status.as_str())
                .to_owned(),
            cordoned: cluster.spec.unschedulable,
            draining: cluster.spec.taints.iter().any(is_drain),
            taints: cluster
                .spec
                .taints
                .iter()
                .map(|t| match &t.value {
                    Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect.as_str()),
                    _ => format!("{}:{}", t.key, t.effect.as_str()),
                })
                .collect(),
            burst_only: cluster.spec.burst_only,
            nodes: capacity.map(|c| c.nodes),
            cpu_allocatable: capacity
                .and_then(|c| c.allocatable.cpu.as_ref())
                .map(|q| q.0.clone()),
            cpu_requested_percent: capacity.and_then(|c| c.cpu_requested_percent),
            memory_allocatable: capacity
                .and_then(|c| c.allocatable.memory.as_ref())
                .map(|q| q.0.clone()),
            memory_requested_percent: capacity.and_then(|c| c.memory_requested_percent),
            last_heartbeat: heartbeat.map(|t| t.to_string()),
            heartbeat_age_seconds: heartbeat.map(|t| now.duration_since(t).as_secs().max(0)),
            agent_version: status.agent_version.clone(),
        }
    }
}

/// The fleet, by name.
pub async fn list(global: &Global) -> Result<String, CliError> {
    let client = kube_client(global).await?;
    let api: Api<WorkloadCluster> = Api::all(client);
    let clusters = api
        .list(&ListParams::default())
        .await
        .map_err(|e| CliError::kube("listing WorkloadClusters in the management cluster", e))?;
    let now = jiff::Timestamp::now();
    let mut summaries: Vec<ClusterSummary> = clusters
        .items
        .iter()
        .map(|c| ClusterSummary::of(c, now))
        .collect();
    summaries.sort_by(|a, b| a.name.cmp(&b.name));
    render(global.output, &summaries, |summaries| {
        if summaries.is_empty() {
            return "No clusters have joined: `nave join <name>` issues a token for one.\n".to_owned();
        }
        let rows: Vec<Vec<String>> = summaries.iter().map(row).collect();
        table(
            &[
                "NAME",
                "REGION",
                "READY",
                "ACCEPTED",
                "SCHEDULING",
                "NODES",
                "CPU",
                "MEMORY",
                "HEARTBEAT",
            ],
            &rows,
        )
    })
}

fn row(c: &ClusterSummary) -> Vec<String> {
    let share = |allocatable: &Option<String>, percent: Option<i32>| match (allocatable, percent) {
        (Some(a), Some(p)) => format!("{p}% of {a}"),
        (Some(a), None) => format!("? of {a}"),
        _ => "-".to_owned(),
    };
    let mut scheduling = if c.draining {
        "Draining"
    } else if c.cordoned {
        "Cordoned"
    } else {
        "Enabled"
    }
    .to_owned();
    if !c.draining && !c.taints.is_empty() {
        scheduling.push_str(",Tainted");
    }
    if c.burst_only {
        scheduling.push_str(",BurstOnly");
    }
    vec![
        c.name.clone(),
        c.region.clone().unwrap_or_else(|| "-".to_owned()),
        c.ready.clone(),
        c.accepted.clone(),
        scheduling,
        c.nodes.map_or_else(|| "-".to_owned(), |n| n.to_string()),
        share(&c.cpu_allocatable, c.cpu_requested_percent),
        share(&c.memory_allocatable, c.memory_requested_percent),
        c.heartbeat_age_seconds.map_or_else(|| "never".to_owned(), age),
    ]
}

/// `42s`, `3m`, `5h`, `2d`: the age column of kubectl.
fn age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn is_drain(taint: &ClusterTaint) -> bool {
    taint.key == DRAIN_TAINT_KEY && taint.effect == ClusterTaintEffect::NoExecute
}

/// Changes a WorkloadCluster's spec with `edit` (which answers whether it changed anything),
/// read and written whole under its resourceVersion, again when someone else wrote in between.
async fn edit_spec(
    api: &Api<WorkloadCluster>,
    cluster: &str,
    edit: impl Fn(&mut WorkloadCluster) -> bool,
) -> Result<bool, CliError> {
    let what = format!("WorkloadCluster {cluster}");
    for _ in 0..5 {
        let mut object = api.get(cluster).await.map_err(|e| CliError::kube(&what, e))?;
        if !edit(&mut object) {
            return Ok(false);
        }
        object.status = None;
        match api.replace(cluster, &PostParams::default(), &object).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => return Err(CliError::kube(&what, e)),
        }
    }
    Err(CliError::failed(format!(
        "{what}: changed by others five times in a row; try again"
    )))
}

/// Cordons a cluster (`spec.unschedulable`: no new replicas), or uncordons it: clears that and
/// the drain taint, as `kubectl uncordon` ends a `kubectl drain`.
pub async fn cordon(global: &Global, cluster: &str, cordoned: bool) -> Result<String, CliError> {
    let client = kube_client(global).await?;
    let api: Api<WorkloadCluster> = Api::all(client);
    let changed = edit_spec(&api, cluster, |object| {
        let drained = object.spec.taints.iter().any(is_drain);
        let changed = object.spec.unschedulable != cordoned || (!cordoned && drained);
        object.spec.unschedulable = cordoned;
        if !cordoned {
            object.spec.taints.retain(|t| !is_drain(t));
        }
        changed
    })
    .await?;
    let result = json!({"cluster": cluster, "cordoned": cordoned, "changed": changed});
    render(global.output, &result, |_| match (cordoned, changed) {
        (true, true) => {
            format!("cluster {cluster} cordoned: no new replicas go there; what runs there stays\n")
        }
        (true, false) => format!("cluster {cluster} was cordoned already\n"),
        (false, true) => format!("cluster {cluster} uncordoned: it takes new replicas again\n"),
        (false, false) => format!("cluster {cluster} was not cordoned\n"),
    })
}

/// Drains a cluster: the taint `nave.dev/drain:NoExecute`, added now, moves every workload that
/// does not tolerate it to other clusters (make-before-break, as far as they have room); the
/// hub keeps doing so across its restarts until `nave uncordon`. With `wait`, follows the
/// MultiClusterDeployments' status until none runs replicas there, or fails when `wait` passes.
pub async fn drain(global: &Global, cluster: &str, wait: Option<Duration>) -> Result<String, CliError> {
    let client = kube_client(global).await?;
    let api: Api<WorkloadCluster> = Api::all(client.clone());
    let added = Time(jiff::Timestamp::now());
    let changed = edit_spec(&api, cluster, |object| {
        if object.spec.taints.iter().any(is_drain) {
            return false;
        }
        object.spec.taints.push(ClusterTaint {
            key: DRAIN_TAINT_KEY.to_owned(),
            value: None,
            effect: ClusterTaintEffect::NoExecute,
            time_added: Some(added.clone()),
        });
        true
    })
    .await?;
    let mut remaining = BTreeMap::new();
    if let Some(limit) = wait {
        let deadline = Instant::now() + limit;
        let mcds: Api<MultiClusterDeployment> = Api::all(client);
        let mut shown = None;
        loop {
            let list = mcds
                .list(&ListParams::default())
                .await
                .map_err(|e| CliError::kube("listing MultiClusterDeployments", e))?;
            remaining = running_in(&list.items, cluster);
            if remaining.is_empty() {
                break;
            }
            if shown.as_ref() != Some(&remaining) {
                if global.output == crate::Format::Table {
                    eprintln!("{}", progress(cluster, &remaining));
                }
                shown = Some(remaining.clone());
            }
            if Instant::now() >= deadline {
                return Err(CliError::failed(format!(
                    "cluster {cluster} not drained after {} s: {} (workloads that tolerate the taint stay,                      and replicas stay while no other cluster has room for them)",
                    limit.as_secs(),
                    progress(cluster, &remaining)
                )));
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
    }
    let result = json!({"cluster": cluster, "draining": true, "changed": changed, "remaining": remaining});
    render(global.output, &result, |_| {
        let mut text = if changed {
            format!(
                "cluster {cluster} draining: workloads move away unless they tolerate {DRAIN_TAINT_KEY}\n"
            )
        } else {
            format!("cluster {cluster} was draining already\n")
        };
        if wait.is_some() {
            text.push_str(&format!(
                "cluster {cluster} drained: no MultiClusterDeployment runs replicas there\n"
            ));
        }
        text.push_str(&format!("`nave uncordon {cluster}` lets workloads back\n"));
        text
    })
}

/// How often `drain --wait` looks again.
const DRAIN_POLL: Duration = Duration::from_secs(1);

/// Replicas each MultiClusterDeployment still has assigned or ready in `cluster`, by
/// `namespace/name`; those with none left out.
fn running_in(mcds: &[MultiClusterDeployment], cluster: &str) -> BTreeMap<String, i32> {
    mcds.iter()
        .filter_map(|mcd| {
            let here = mcd.status.as_ref()?.clusters.iter().find(|c| c.name == cluster)?;
            let replicas = here.desired.max(here.ready);
            (replicas > 0).then(|| {
                (
                    format!(
                        "{}/{}",
                        mcd.metadata.namespace.as_deref().unwrap_or_default(),
                        mcd.name_any()
                    ),
                    replicas,
                )
            })
        })
        .collect()
}

fn progress(cluster: &str, remaining: &BTreeMap<String, i32>) -> String {
    let list: Vec<String> = remaining.iter().map(|(w, n)| format!("{w}={n}")).collect();
    format!(
        "{} replicas of {} workloads still in {cluster}: {}",
        remaining.values().sum::<i32>(),
        remaining.len(),
        list.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        assert_eq!(age(5), "5s");
        assert_eq!(age(119), "119s");
        assert_eq!(age(600), "10m");
        assert_eq!(age(3 * 3600), "3h");
        assert_eq!(age(3 * 86_400), "3d");
    }
}
