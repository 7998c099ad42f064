//! `nave clusters`, `nave cordon` and `nave uncordon`: the fleet as the management cluster's
//! WorkloadClusters say it is.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use nave_api::{
    ClusterTaint, ClusterTaintEffect, ClusterToleration, DRAIN_TAINT_KEY, MultiClusterDeployment,
    TolerationOperator, WorkloadCluster,
};
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
    /// Being deleted (`nave unjoin`): its work moves away, then the hub forgets it.
    removing: bool,
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
            removing: cluster.metadata.deletion_timestamp.is_some(),
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
    let mut scheduling = if c.removing {
        "Removing"
    } else if c.draining {
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

/// Changes a WorkloadCluster's `spec.unschedulable` and `spec.taints` with `edit` (which answers
/// whether it changed anything): a merge patch of those two fields only, so the rest of the spec
/// and other managers' fields are left alone, under the resourceVersion read, again when someone
/// else wrote in between. Answers the object written, or `None` when nothing was to change.
async fn edit_spec(
    api: &Api<WorkloadCluster>,
    cluster: &str,
    edit: impl Fn(&mut WorkloadCluster) -> bool,
) -> Result<Option<WorkloadCluster>, CliError> {
    let what = format!("WorkloadCluster {cluster}");
    for _ in 0..5 {
        let mut object = api.get(cluster).await.map_err(|e| CliError::kube(&what, e))?;
        if !edit(&mut object) {
            return Ok(None);
        }
        let patch = json!({
            "metadata": {"resourceVersion": object.metadata.resource_version},
            "spec": {"unschedulable": object.spec.unschedulable, "taints": object.spec.taints},
        });
        match api
            .patch(cluster, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(written) => return Ok(Some(written)),
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
    .await?
    .is_some();
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
    let written = edit_spec(&api, cluster, |object| {
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
    // A management cluster with CRDs older than taints drops the field (Helm does not upgrade a
    // chart's crds/): say so rather than wait for a drain that cannot happen.
    if let Some(written) = &written
        && !written.spec.taints.iter().any(is_drain)
    {
        return Err(CliError::failed(format!(
            "WorkloadCluster {cluster} kept no taint: the management cluster's CRDs are older than \
             taints; apply the CRDs of this release (`nave-hub crds | kubectl apply -f -`)"
        )));
    }
    let changed = written.is_some();
    let mut remaining = BTreeMap::new();
    let mut tolerating = Vec::new();
    if let Some(limit) = wait {
        // Followed by a watch: the workloads' status as it changes, not a list every second.
        let deadline = tokio::time::Instant::now().checked_add(limit);
        let mcds: Api<MultiClusterDeployment> = Api::all(client);
        let (reader, writer) = reflector::store();
        let mut events = reflector(writer, watcher(mcds, watcher::Config::default()))
            .default_backoff()
            .boxed();
        let (mut listed, mut shown) = (false, None);
        loop {
            let next = crate::next_until(&mut events, deadline).await;
            let event = match next {
                None => {
                    return Err(CliError::failed(format!(
                        "cluster {cluster} not drained after {} s: {}; replicas stay while no \
                         other cluster has room for them",
                        limit.as_secs(),
                        progress(cluster, &remaining)
                    )));
                }
                Some(None) => return Err(CliError::failed("the watch of MultiClusterDeployments ended")),
                Some(Some(event)) => event,
            };
            match event {
                // A failed watch is started again (with back-off) until the deadline.
                Err(e) => eprintln!("watching MultiClusterDeployments: {e}; trying again"),
                Ok(watcher::Event::InitDone) => listed = true,
                Ok(_) => {}
            }
            if !listed {
                continue;
            }
            let items: Vec<MultiClusterDeployment> = reader.state().iter().map(|m| (**m).clone()).collect();
            tolerating = tolerating_drain(&items);
            remaining = running_in(&items, cluster, &tolerating);
            if remaining.is_empty() {
                break;
            }
            if shown.as_ref() != Some(&remaining) {
                if global.output == crate::Format::Table {
                    eprintln!("{}", progress(cluster, &remaining));
                }
                shown = Some(remaining.clone());
            }
        }
    }
    let result = json!({
        "cluster": cluster,
        "draining": true,
        "changed": changed,
        "remaining": remaining,
        "tolerating": tolerating,
    });
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
                "cluster {cluster} drained: no other MultiClusterDeployment runs replicas there\n"
            ));
            if !tolerating.is_empty() {
                text.push_str(&format!(
                    "left there, as they tolerate the drain: {}\n",
                    tolerating.join(", ")
                ));
            }
        }
        text.push_str(&format!("`nave uncordon {cluster}` lets workloads back\n"));
        text
    })
}

/// Replicas each MultiClusterDeployment still has assigned or ready in `cluster`, by
/// `namespace/name`; those with none left out.
fn running_in(
    mcds: &[MultiClusterDeployment],
    cluster: &str,
    tolerating: &[String],
) -> BTreeMap<String, i32> {
    mcds.iter()
        .filter(|mcd| !tolerating.contains(&key_of(mcd)))
        .filter_map(|mcd| {
            let here = mcd.status.as_ref()?.clusters.iter().find(|c| c.name == cluster)?;
            let replicas = here.desired.max(here.ready);
            (replicas > 0).then(|| (key_of(mcd), replicas))
        })
        .collect()
}

fn key_of(mcd: &MultiClusterDeployment) -> String {
    format!(
        "{}/{}",
        mcd.metadata.namespace.as_deref().unwrap_or_default(),
        mcd.name_any()
    )
}

/// The MultiClusterDeployments that tolerate the drain taint for good, by `namespace/name`: a
/// drain leaves them where they are (as `kubectl drain --ignore-daemonsets` does DaemonSets).
/// Read with the placement engine's own rules ([`nave_policies::taint_verdict`]).
fn tolerating_drain(mcds: &[MultiClusterDeployment]) -> Vec<String> {
    let drain = [nave_policies::ClusterTaint {
        taint: nave_policies::Taint::new(DRAIN_TAINT_KEY, "", nave_policies::TaintEffect::NoExecute),
        age: Duration::ZERO,
    }];
    mcds.iter()
        .filter(|mcd| {
            let tolerations: Vec<_> = mcd
                .spec
                .placement
                .tolerations
                .iter()
                .map(engine_toleration)
                .collect();
            nave_policies::taint_verdict(&drain, &tolerations).is_none()
        })
        .map(key_of)
        .collect()
}

/// A toleration as the placement engine reads it.
fn engine_toleration(t: &ClusterToleration) -> nave_policies::ClusterToleration {
    use nave_policies::{TaintEffect, Toleration, TolerationOperator as Operator};
    nave_policies::ClusterToleration {
        toleration: Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator: match t.operator.unwrap_or_default() {
                TolerationOperator::Equal => Operator::Equal,
                TolerationOperator::Exists => Operator::Exists,
            },
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.map(|e| match e {
                ClusterTaintEffect::NoSchedule => TaintEffect::NoSchedule,
                ClusterTaintEffect::NoExecute => TaintEffect::NoExecute,
            }),
        },
        seconds: t
            .toleration_seconds
            .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0))),
    }
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
    fn a_drain_waits_for_every_workload_but_those_tolerating_it_for_good() {
        let mcd = |name: &str, tolerations: serde_json::Value| -> MultiClusterDeployment {
            serde_json::from_value(json!({
                "apiVersion": "nave.dev/v1alpha1", "kind": "MultiClusterDeployment",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"replicas": 1, "placement": {"tolerations": tolerations},
                         "template": {"spec": {"selector": {}, "template": {}}}}
            }))
            .expect("an MCD")
        };
        let mcds = [
            mcd("plain", json!([])),
            mcd(
                "forever",
                json!([{"key": "nave.dev/drain", "operator": "Exists"}]),
            ),
            mcd("everything", json!([{"operator": "Exists"}])),
            mcd(
                "an-hour",
                json!([{"key": "nave.dev/drain", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600}]),
            ),
            mcd(
                "first-decides",
                json!([
                    {"key": "nave.dev/drain", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
                    {"operator": "Exists"}
                ]),
            ),
            mcd("other-key", json!([{"key": "dedicated", "operator": "Exists"}])),
            mcd(
                "no-schedule-only",
                json!([{"key": "nave.dev/drain", "operator": "Exists", "effect": "NoSchedule"}]),
            ),
        ];
        assert_eq!(tolerating_drain(&mcds), ["ns/forever", "ns/everything"]);
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        assert_eq!(age(5), "5s");
        assert_eq!(age(119), "119s");
        assert_eq!(age(600), "10m");
        assert_eq!(age(3 * 3600), "3h");
        assert_eq!(age(3 * 86_400), "3d");
    }
}
