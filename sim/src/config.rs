//! Configuration of simulated clusters and fleets, read from YAML.
//!
//! ```yaml
//! # one cluster (nave-sim serve --config cluster.yaml)
//! name: eu-west-1
//! region: eu-west
//! zone: eu-west-1a
//! nodePools:
//!   - name: general
//!     count: 3
//!     cpu: "4"
//!     memory: 16Gi
//!     pods: 110
//!     labels: { node.kubernetes.io/instance-type: m5.xlarge }
//!     taints: []
//! timing:
//!   podStartMillis: 500
//! ```
//!
//! A fleet file (`nave-sim fleet --config fleet.yaml`) is `{clusters: [<cluster>, ...]}`, with
//! optionally the round trips the playground's agents measure between clusters:
//!
//! ```yaml
//! network:
//!   links:
//!     - between: [eu-west-1, us-east-1]
//!       rttMillis: 80
//!     - between: [eu-west-1, hub]       # `hub`: the link to the hub
//!       rttMillis: 10
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Why a configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid YAML of the expected shape.
    #[error("parsing {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What the parser said, with the location.
        message: String,
    },
    /// The content parsed but makes no sense (duplicate names, zero-sized nodes, ...).
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, naming the field.
        message: String,
    },
}

/// One simulated cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterConfig {
    /// The cluster's name: the kubeconfig context and cluster name, and the `cluster` label in metrics.
    pub name: String,
    /// Region of every node (`topology.kubernetes.io/region`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Zone of every node (`topology.kubernetes.io/zone`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Free-form labels describing the cluster (not put on nodes); used by the playground when it
    /// registers the cluster with the hub.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Latitude/longitude of the cluster, for proximity placement in the playground.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinates: Option<Coordinates>,
    /// Declared burst-only when the playground registers it (`spec.burstOnly` of its
    /// WorkloadCluster): Nave sends it replicas only when the other clusters are full.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub burst_only: bool,
    /// The nodes, in pools of identical nodes.  Default: one pool of 3 nodes, 4 CPU / 16Gi / 110 pods.
    #[serde(default = "default_node_pools")]
    pub node_pools: Vec<NodePool>,
    /// How fast simulated things happen.
    #[serde(default)]
    pub timing: Timing,
    /// Simulated resource usage, for the usage metrics.
    #[serde(default)]
    pub usage: UsageModel,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            name: "sim".to_owned(),
            region: None,
            zone: None,
            labels: BTreeMap::new(),
            coordinates: None,
            burst_only: false,
            node_pools: default_node_pools(),
            timing: Timing::default(),
            usage: UsageModel::default(),
        }
    }
}

/// A geographical position.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Coordinates {
    /// Degrees north.
    pub latitude: f64,
    /// Degrees east.
    pub longitude: f64,
}

/// A group of identical nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePool {
    /// Node name prefix: nodes are `<cluster>-<pool>-<index>` (index from 0).
    #[serde(default = "default_pool_name")]
    pub name: String,
    /// How many nodes.
    #[serde(default = "default_count")]
    pub count: u32,
    /// CPU capacity per node, as a Kubernetes quantity.
    #[serde(default = "default_cpu")]
    pub cpu: String,
    /// Memory capacity per node, as a Kubernetes quantity.
    #[serde(default = "default_memory")]
    pub memory: String,
    /// Pod capacity per node.
    #[serde(default = "default_pods")]
    pub pods: u32,
    /// Extra node labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Node taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

impl Default for NodePool {
    fn default() -> Self {
        NodePool {
            name: default_pool_name(),
            count: default_count(),
            cpu: default_cpu(),
            memory: default_memory(),
            pods: default_pods(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
        }
    }
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value (may be empty).
    #[serde(default)]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// Delays of the simulated control plane, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Timing {
    /// From a pod being bound to a node to it Running and Ready.
    #[serde(default = "default_pod_start")]
    pub pod_start_millis: u64,
    /// From a pod's deletion to it being gone (bounded by its grace period).
    #[serde(default = "default_pod_delete")]
    pub pod_delete_millis: u64,
    /// Node heartbeat (Lease renewal and Ready condition) interval; 0 turns heartbeats off.
    #[serde(default)]
    pub node_heartbeat_millis: u64,
    /// Multiplies every `tolerationSeconds` (and the 300 s default toleration of not-ready and
    /// unreachable nodes) before NoExecute evictions, so tests can make evictions fast.
    #[serde(default = "default_toleration_scale")]
    pub toleration_scale: f64,
    /// How long the containers of a pod that runs to completion (a Job's pod) run, from Running to
    /// Succeeded or Failed; a pod's `sim.nave.dev/run-millis` annotation overrides it.
    #[serde(default = "default_pod_run")]
    pub pod_run_millis: u64,
    /// First back-off of the Job controller before it replaces a failed pod; it doubles with each
    /// further failure, up to 36 times this (upstream: 10 s doubling up to 6 min).
    #[serde(default = "default_job_backoff")]
    pub job_backoff_millis: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            pod_start_millis: default_pod_start(),
            pod_delete_millis: default_pod_delete(),
            node_heartbeat_millis: 0,
            toleration_scale: default_toleration_scale(),
            pod_run_millis: default_pod_run(),
            job_backoff_millis: default_job_backoff(),
        }
    }
}

/// How simulated pods use resources, for the usage metrics: `usage = requests × factor` unless a pod
/// declares its own use with the annotations `sim.nave.dev/cpu-usage` and `sim.nave.dev/memory-usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsageModel {
    /// Fraction of the requests a pod uses when it declares nothing.
    #[serde(default = "default_usage_factor")]
    pub factor: f64,
    /// Serve the resource metrics API (`metrics.k8s.io`, what metrics-server serves) from this
    /// model; `false` for a cluster without metrics-server.
    #[serde(default = "default_true")]
    pub metrics_api: bool,
}

impl Default for UsageModel {
    fn default() -> Self {
        UsageModel {
            factor: default_usage_factor(),
            metrics_api: true,
        }
    }
}

/// Annotation by which a pod declares its simulated CPU use (a quantity, e.g. `250m`).
pub const CPU_USAGE_ANNOTATION: &str = "sim.nave.dev/cpu-usage";
/// Annotation by which a pod declares its simulated memory use (a quantity, e.g. `100Mi`).
pub const MEMORY_USAGE_ANNOTATION: &str = "sim.nave.dev/memory-usage";

/// Many clusters served by one process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetConfig {
    /// The clusters; names must be unique.
    pub clusters: Vec<ClusterConfig>,
    /// Emulated distance between the clusters (and to the hub), for the agents' round trips.
    #[serde(default, skip_serializing_if = "NetworkConfig::is_empty")]
    pub network: NetworkConfig,
}

/// Emulated network distance. The simulated clusters all run on one machine, so their agents
/// would measure the same sub-millisecond round trip everywhere; a link adds a fixed delay
/// inside every round trip its two ends measure of each other. Pairs not listed add nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkConfig {
    /// The links.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
}

impl NetworkConfig {
    fn is_empty(&self) -> bool {
        self.links.is_empty()
    }
}

/// A link between two clusters, or a cluster and the hub ([`Link::HUB`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Link {
    /// Its two ends: cluster names, or [`Link::HUB`].
    pub between: [String; 2],
    /// Round trip added on it, in milliseconds (at most [`Link::MAX_RTT_MILLIS`]).
    pub rtt_millis: u64,
}

impl Link {
    /// The end that names the hub.
    pub const HUB: &str = "hub";
    /// Longest round trip a link may add: a minute (the hub ignores longer measurements).
    pub const MAX_RTT_MILLIS: u64 = 60_000;
}

fn default_node_pools() -> Vec<NodePool> {
    vec![NodePool::default()]
}
fn default_pool_name() -> String {
    "node".to_owned()
}
fn default_count() -> u32 {
    3
}
fn default_cpu() -> String {
    "4".to_owned()
}
fn default_memory() -> String {
    "16Gi".to_owned()
}
fn default_pods() -> u32 {
    110
}
fn default_pod_start() -> u64 {
    500
}
fn default_pod_delete() -> u64 {
    200
}
fn default_pod_run() -> u64 {
    1_000
}
fn default_job_backoff() -> u64 {
    1_000
}
fn default_toleration_scale() -> f64 {
    1.0
}
fn default_true() -> bool {
    true
}

fn default_usage_factor() -> f64 {
    0.5
}

impl ClusterConfig {
    /// Reads and checks a cluster file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let config: ClusterConfig = parse_file(path)?;
        config.check().map_err(|message| invalid(path, message))?;
        Ok(config)
    }

    /// Checks what serde cannot: names, sizes, quantities.
    pub fn check(&self) -> Result<(), String> {
        if !is_dns_label(&self.name) {
            return Err(format!(
                "name: invalid value {:?}: must be a DNS-1123 label",
                self.name
            ));
        }
        let mut pool_names = std::collections::BTreeSet::new();
        for (i, pool) in self.node_pools.iter().enumerate() {
            if !pool_names.insert(pool.name.as_str()) {
                return Err(format!("nodePools[{i}].name: duplicate value {:?}", pool.name));
            }
            if !is_dns_label(&pool.name) {
                return Err(format!(
                    "nodePools[{i}].name: invalid value {:?}: must be a DNS-1123 label",
                    pool.name
                ));
            }
            for (field, value) in [("cpu", &pool.cpu), ("memory", &pool.memory)] {
                match nave_sim_core::quantity::parse_milli(value) {
                    Ok(v) if v > 0 => {}
                    _ => {
                        return Err(format!(
                            "nodePools[{i}].{field}: invalid value {value:?}: must be a positive quantity"
                        ));
                    }
                }
            }
            for (j, taint) in pool.taints.iter().enumerate() {
                if !matches!(
                    taint.effect.as_str(),
                    "NoSchedule" | "PreferNoSchedule" | "NoExecute"
                ) {
                    return Err(format!(
                        "nodePools[{i}].taints[{j}].effect: unsupported value {:?}: supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                        taint.effect
                    ));
                }
            }
        }
        if !(self.timing.toleration_scale.is_finite() && self.timing.toleration_scale >= 0.0) {
            return Err(format!(
                "timing.tolerationScale: invalid value {}: must be >= 0",
                self.timing.toleration_scale
            ));
        }
        if !(self.usage.factor.is_finite() && self.usage.factor >= 0.0) {
            return Err(format!(
                "usage.factor: invalid value {}: must be >= 0",
                self.usage.factor
            ));
        }
        Ok(())
    }

    /// The name of node `index` of `pool`.
    pub fn node_name(&self, pool: &NodePool, index: u32) -> String {
        format!("{}-{}-{}", self.name, pool.name, index)
    }
}

impl FleetConfig {
    /// Reads and checks a fleet file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let config: FleetConfig = parse_file(path)?;
        config.check().map_err(|message| invalid(path, message))?;
        Ok(config)
    }

    /// Checks every cluster, that names are unique, and that links join known, distinct ends
    /// once each.
    pub fn check(&self) -> Result<(), String> {
        let mut names = std::collections::BTreeSet::new();
        for (i, cluster) in self.clusters.iter().enumerate() {
            cluster.check().map_err(|e| format!("clusters[{i}].{e}"))?;
            if !names.insert(cluster.name.as_str()) {
                return Err(format!("clusters[{i}].name: duplicate value {:?}", cluster.name));
            }
        }
        let mut pairs = std::collections::BTreeSet::new();
        for (i, link) in self.network.links.iter().enumerate() {
            let field = format!("network.links[{i}]");
            for end in &link.between {
                if end == Link::HUB && names.contains(Link::HUB) {
                    return Err(format!(
                        "{field}.between: {end:?} is ambiguous, a cluster has the hub's name"
                    ));
                }
                if end != Link::HUB && !names.contains(end.as_str()) {
                    return Err(format!(
                        "{field}.between: {end:?} is neither a cluster of the fleet nor {:?}",
                        Link::HUB
                    ));
                }
            }
            let [a, b] = &link.between;
            if a == b {
                return Err(format!("{field}.between: both ends are {a:?}"));
            }
            if !pairs.insert(if a < b { (a, b) } else { (b, a) }) {
                return Err(format!("{field}.between: {a:?} and {b:?} are already linked"));
            }
            if link.rtt_millis > Link::MAX_RTT_MILLIS {
                return Err(format!(
                    "{field}.rttMillis: {} is more than {}",
                    link.rtt_millis,
                    Link::MAX_RTT_MILLIS
                ));
            }
        }
        Ok(())
    }

    /// The round trip each link adds at `cluster`'s end, by the other end ([`Link::HUB`] for
    /// the hub).
    pub fn link_latency(&self, cluster: &str) -> BTreeMap<String, std::time::Duration> {
        self.network
            .links
            .iter()
            .filter_map(|link| {
                let [a, b] = &link.between;
                let other = if a == cluster {
                    b
                } else if b == cluster {
                    a
                } else {
                    return None;
                };
                Some((other.clone(), std::time::Duration::from_millis(link.rtt_millis)))
            })
            .collect()
    }
}

fn parse_file<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    serde_saphyr::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

fn invalid(path: &Path, message: String) -> ConfigError {
    ConfigError::Invalid {
        path: path.display().to_string(),
        message,
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_cluster_file_gets_three_default_nodes() {
        let c: ClusterConfig = serde_saphyr::from_str("name: a\n").expect("parses");
        assert_eq!(c.node_pools.len(), 1);
        assert_eq!(c.node_pools[0].count, 3);
        assert_eq!(c.node_pools[0].cpu, "4");
        assert_eq!(c.node_pools[0].memory, "16Gi");
        assert_eq!(c.node_pools[0].pods, 110);
    }

    #[test]
    fn unknown_fields_are_rejected_with_their_name() {
        let err = serde_saphyr::from_str::<ClusterConfig>("name: a\nnodepools: []\n").expect_err("rejects");
        assert!(
            err.to_string().contains("nodepools"),
            "error should name the field, saw: {err}"
        );
    }

    #[test]
    fn bad_taint_effect_names_the_field() {
        let c = ClusterConfig {
            node_pools: vec![NodePool {
                taints: vec![Taint {
                    key: "a".into(),
                    value: String::new(),
                    effect: "Never".into(),
                }],
                ..NodePool::default()
            }],
            ..ClusterConfig::default()
        };
        let err = c.check().expect_err("rejects");
        assert!(err.starts_with("nodePools[0].taints[0].effect"), "saw: {err}");
    }

    #[test]
    fn duplicate_cluster_names_are_rejected() {
        let f = FleetConfig {
            clusters: vec![ClusterConfig::default(), ClusterConfig::default()],
            ..FleetConfig::default()
        };
        let err = f.check().expect_err("rejects");
        assert_eq!(err, "clusters[1].name: duplicate value \"sim\"");
    }

    #[test]
    fn links_name_known_distinct_ends_once_and_give_each_end_its_latencies() {
        let cluster = |name: &str| ClusterConfig {
            name: name.to_owned(),
            ..ClusterConfig::default()
        };
        let link = |a: &str, b: &str, rtt_millis| Link {
            between: [a.to_owned(), b.to_owned()],
            rtt_millis,
        };
        let fleet = |links: Vec<Link>| FleetConfig {
            clusters: vec![cluster("a"), cluster("b"), cluster("c")],
            network: NetworkConfig { links },
        };
        let ok = fleet(vec![link("a", "b", 60), link("c", "a", 5), link("a", "hub", 12)]);
        ok.check().expect("valid links");
        let a = ok.link_latency("a");
        assert_eq!(
            a.iter()
                .map(|(k, v)| (k.as_str(), v.as_millis()))
                .collect::<Vec<_>>(),
            [("b", 60), ("c", 5), ("hub", 12)]
        );
        assert_eq!(ok.link_latency("b").len(), 1);

        for (links, expected) in [
            (
                vec![link("a", "x", 1)],
                "network.links[0].between: \"x\" is neither",
            ),
            (
                vec![link("a", "a", 1)],
                "network.links[0].between: both ends are \"a\"",
            ),
            (
                vec![link("a", "b", 1), link("b", "a", 2)],
                "network.links[1].between: \"b\" and \"a\" are already linked",
            ),
            (
                vec![link("a", "b", 60_001)],
                "network.links[0].rttMillis: 60001 is more",
            ),
        ] {
            let err = fleet(links).check().expect_err(expected);
            assert!(err.starts_with(expected), "expected {expected:?}..., saw {err:?}");
        }
    }

    #[test]
    fn shipped_examples_parse_and_check() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        ClusterConfig::from_file(&dir.join("cluster.yaml")).expect("cluster.yaml");
        FleetConfig::from_file(&dir.join("fleet.yaml")).expect("fleet.yaml");
    }
}
