//! `nave clusters`, `nave cordon` and `nave uncordon`: the fleet as the management cluster's
//! WorkloadClusters say it is.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, Patch, PatchParams};
use nave_api::WorkloadCluster;
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
    let mut scheduling = if c.cordoned { "Cordoned" } else { "Enabled" }.to_owned();
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

/// Sets `spec.unschedulable` of a cluster: cordoned clusters get no new replicas.
pub async fn cordon(global: &Global, cluster: &str, cordoned: bool) -> Result<String, CliError> {
    let client = kube_client(global).await?;
    let api: Api<WorkloadCluster> = Api::all(client);
    let what = format!("WorkloadCluster {cluster}");
    let before = api.get(cluster).await.map_err(|e| CliError::kube(&what, e))?;
    let changed = before.spec.unschedulable != cordoned;
    if changed {
        api.patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": cordoned}})),
        )
        .await
        .map_err(|e| CliError::kube(&what, e))?;
    }
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
