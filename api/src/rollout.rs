//! How a change of a MultiClusterDeployment's template reaches its clusters: `spec.rollout`,
//! and how far it got: `status.rollout`.
//!
//! Without waves a new template goes to every cluster at once (each cluster's Deployment then
//! rolls its pods by its own strategy). With waves the clusters of the first wave get it first;
//! the next wave starts once every cluster of the wave before runs the new template with all its
//! replicas updated and available (and `pauseBetweenWaves` has passed); a wave that does not get
//! there within `progressDeadline`, or one of whose clusters reports the Deployment failing,
//! halts the rollout: the clusters of later waves keep the template they run.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::core::{Selector, SelectorExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::placement::{DURATION_PATTERN, parse_duration};

/// Default of `spec.rollout.progressDeadline`.
pub const DEFAULT_PROGRESS_DEADLINE: &str = "10m";

/// How a new template reaches the clusters.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// Clusters in order: a cluster belongs to the first wave that names or selects it, and the
    /// clusters no wave takes form one more wave at the end. Empty: every cluster at once.
    /// Example: `[{name: canary, clusters: [eu-canary-1]}, {name: europe, clusterSelector:
    /// {matchLabels: {topology.kubernetes.io/region: eu-west}}}]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub waves: Vec<RolloutWave>,

    /// How long to wait after a wave has rolled out before the next starts, as a duration
    /// such as `30s` or `10m`. Default `0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub pause_between_waves: Option<String>,

    /// How long a wave may take to roll out (every replica of its clusters updated and
    /// available) before the rollout halts. Default `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub progress_deadline: Option<String>,

    /// At most this many clusters replace their pods at the same time, across the fleet (OCM's
    /// `maxConcurrency`): a wave's clusters get the new template a few at a time, the next as
    /// one has rolled out. Each cluster's Deployment bounds its own unavailable pods (its
    /// `strategy.rollingUpdate.maxUnavailable`), so the fleet never has more than this many
    /// clusters short of replicas because of a rollout. Default: a whole wave at once. Without
    /// waves, the fleet is one wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrency: Option<i32>,

    /// `true`: no new wave starts (the clusters already given the new template carry on);
    /// `nave rollout pause` and `resume` set it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
}

/// The clusters of one wave.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.clusters) && size(self.clusters) > 0) || has(self.clusterSelector)",
        "message": "set clusters or clusterSelector to say which clusters this wave takes",
        "reason": "FieldValueRequired"
    }
]))]
pub struct RolloutWave {
    /// A name for status and Events. Default: `wave-<n>` (from 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub name: Option<String>,

    /// Names of the WorkloadClusters of this wave.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,

    /// The wave also takes the clusters whose WorkloadCluster labels match this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
}

/// `spec.rollout` with its durations parsed and selectors checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Waves {
    /// Each wave's name and selection; the last, implicit wave is not listed.
    pub waves: Vec<(String, Vec<String>, Option<Selector>)>,
    /// `pauseBetweenWaves`.
    pub pause: Duration,
    /// `progressDeadline`.
    pub deadline: Duration,
    /// `paused`.
    pub paused: bool,
    /// `maxConcurrency`.
    pub max_concurrency: Option<usize>,
}

impl RolloutStrategy {
    /// The strategy, checked; field paths name what is wrong.
    pub fn waves(&self) -> Result<Waves, Error> {
        let waves = self
            .waves
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let selector = w
                    .cluster_selector
                    .clone()
                    .map(Selector::try_from)
                    .transpose()
                    .map_err(|source| Error::ParseSelector {
                        path: format!("spec.rollout.waves[{i}].clusterSelector"),
                        source,
                    })?;
                let name = w.name.clone().unwrap_or_else(|| format!("wave-{}", i + 1));
                Ok((name, w.clusters.clone(), selector))
            })
            .collect::<Result<_, Error>>()?;
        let pause = match &self.pause_between_waves {
            Some(p) => parse_duration("spec.rollout.pauseBetweenWaves", p)?,
            None => Duration::ZERO,
        };
        let deadline = parse_duration(
            "spec.rollout.progressDeadline",
            self.progress_deadline
                .as_deref()
                .unwrap_or(DEFAULT_PROGRESS_DEADLINE),
        )?;
        let max_concurrency = match self.max_concurrency {
            None => None,
            Some(n) if n >= 1 => usize::try_from(n).ok(),
            Some(n) => {
                return Err(Error::OutOfRange {
                    path: "spec.rollout.maxConcurrency",
                    value: i64::from(n),
                    message: "must be at least 1",
                });
            }
        };
        Ok(Waves {
            waves,
            pause,
            deadline,
            paused: self.paused,
            max_concurrency,
        })
    }
}

impl Waves {
    /// Whether a new template is rolled out at all (otherwise every cluster gets it at once):
    /// there are waves, or a bound on the clusters at a time.
    pub fn staged(&self) -> bool {
        !self.waves.is_empty() || self.max_concurrency.is_some()
    }

    /// The wave (from 0) of the cluster with this name and these labels: the first that names
    /// or selects it, else the last, implicit one (`waves.len()`).
    pub fn wave_of(&self, cluster: &str, labels: &BTreeMap<String, String>) -> usize {
        self.waves
            .iter()
            .position(|(_, names, selector)| {
                names.iter().any(|n| n == cluster) || selector.as_ref().is_some_and(|s| s.matches(labels))
            })
            .unwrap_or(self.waves.len())
    }

    /// The name of wave `index` (the implicit last one is `rest`).
    pub fn name(&self, index: usize) -> String {
        self.waves
            .get(index)
            .map_or_else(|| "rest".to_owned(), |(name, _, _)| name.clone())
    }
}

/// Where a rollout stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RolloutPhase {
    /// A wave is rolling out, or waiting for `pauseBetweenWaves`.
    Progressing,
    /// `spec.rollout.paused`: no new wave starts.
    Paused,
    /// A wave failed or missed its deadline; later waves keep their template until the
    /// template changes again (a fix, or `nave rollout undo`).
    Halted,
    /// Every cluster runs the template.
    Complete,
}

/// How far the current template has got (written by the hub, with `spec.rollout.waves` set).
/// Its optional fields are written as `null` when unset, so a merge patch of the status clears
/// them rather than keeping an earlier wave's.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The template being rolled out: a digest of `spec.template`, also the annotation
    /// `nave.dev/template-hash` on each cluster's Deployment.
    pub template_hash: String,

    /// The wave rolling out (from 0); the number of waves once complete.
    pub wave: i32,

    /// Its name.
    #[serde(default)]
    pub wave_name: Option<String>,

    /// `Progressing`, `Paused`, `Halted` or `Complete`.
    pub phase: RolloutPhase,

    /// When the current wave started (with `maxConcurrency`, when its latest clusters got the
    /// template: the deadline and a failure's grace count from then).
    #[serde(default)]
    pub wave_started_at: Option<Time>,

    /// When the current wave finished rolling out (the next starts `pauseBetweenWaves` later).
    #[serde(default)]
    pub wave_finished_at: Option<Time>,

    /// Clusters given the template so far, of all the clusters with replicas.
    pub updated_clusters: i32,

    /// Clusters with replicas.
    pub clusters: i32,

    /// What happens now, or why the rollout halted (naming the cluster).
    #[serde(default)]
    pub message: Option<String>,
}
