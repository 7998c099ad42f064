//! The Deployment controller's decisions as plain functions (upstream `pkg/controller/deployment`
//! `sync.go`, `rolling.go`, `recreate.go`, `progress.go`, `util/deployment_util.go`): which
//! ReplicaSet is new, what to create, scale and delete, and the resulting status.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetCondition, ReplicaSetSpec,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Label carrying the template hash on ReplicaSets and their pods.
pub const HASH_LABEL: &str = "pod-template-hash";
/// Revision annotation on Deployments and ReplicaSets.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// Desired replicas annotation on ReplicaSets.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// Max replicas (desired + surge) annotation on ReplicaSets.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// The upstream "safe" alphabet of generated names and hashes (no vowels, no look-alikes).
pub(crate) const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const DEFAULT_PROGRESS_DEADLINE: i32 = 600;
const DEFAULT_HISTORY_LIMIT: i32 = 10;

/// What the controller needs to know of one ReplicaSet owned by the Deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct RsState {
    /// Name.
    pub name: String,
    /// Uid (for delete preconditions).
    pub uid: String,
    /// Creation time; `None` sorts first.
    pub created: Option<Timestamp>,
    /// `deployment.kubernetes.io/revision`, 0 when absent.
    pub revision: i64,
    /// `spec.template`.
    pub template: Option<PodTemplateSpec>,
    /// `spec.replicas`.
    pub spec_replicas: i32,
    /// `status.replicas`.
    pub replicas: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// The RS's `ReplicaFailure` condition, to copy onto the Deployment.
    pub failure: Option<ReplicaSetCondition>,
}

impl RsState {
    /// Extracts the state of a ReplicaSet.
    pub fn from_rs(rs: &ReplicaSet) -> RsState {
        let status = rs.status.as_ref();
        RsState {
            name: rs.metadata.name.clone().unwrap_or_default(),
            uid: rs.metadata.uid.clone().unwrap_or_default(),
            created: rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
            revision: revision_of(rs.metadata.annotations.as_ref()),
            template: rs.spec.template.clone(),
            spec_replicas: rs.spec.replicas.unwrap_or(1),
            replicas: status.map(|s| s.replicas).unwrap_or(0),
            ready: status.and_then(|s| s.ready_replicas).unwrap_or(0),
            available: status.and_then(|s| s.available_replicas).unwrap_or(0),
            failure: status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| {
                    cs.iter().find(|c| {
                        c.type_.as_deref() == Some("ReplicaFailure") && c.status.as_deref() == Some("True")
                    })
                })
                .cloned(),
        }
    }
}

fn revision_of(annotations: Option<&BTreeMap<String, String>>) -> i64 {
    annotations
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// A change to one existing ReplicaSet.
#[derive(Debug, Clone, PartialEq)]
pub struct RsUpdate {
    /// RS name.
    pub name: String,
    /// New `spec.replicas`.
    pub replicas: i32,
    /// Annotations to set.
    pub annotations: BTreeMap<String, String>,
}

/// Everything one sync of a Deployment decides.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// A new ReplicaSet to create.
    pub create: Option<ReplicaSet>,
    /// ReplicaSets to scale or re-annotate.
    pub updates: Vec<RsUpdate>,
    /// Old ReplicaSets beyond the history limit: `(name, uid)`.
    pub delete: Vec<(String, String)>,
    /// The Deployment's revision annotation, when it must change.
    pub revision: Option<String>,
    /// The status the Deployment should have.
    pub status: DeploymentStatus,
    /// `(reason, message)` of Normal events to record on the Deployment.
    pub events: Vec<(String, String)>,
    /// When to look again even if nothing changes (progress deadline, minReadySeconds).
    pub requeue_after: Option<Duration>,
}

/// The pod-template hash: FNV-32a over the template (+ collision count), its decimal digits mapped
/// onto the upstream "safe" alphabet (the values differ from upstream's, which is allowed).
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(&serde_json::to_vec(template).unwrap_or_default());
    if let Some(c) = collision_count {
        let mut buf = [0u8; 8];
        buf[..4].copy_from_slice(&(c as u32).to_le_bytes());
        feed(&buf);
    }
    h.to_string()
        .bytes()
        .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char)
        .collect()
}

fn without_hash(t: &PodTemplateSpec) -> serde_json::Value {
    let mut t = t.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(HASH_LABEL);
        if labels.is_empty()
            && let Some(m) = t.metadata.as_mut()
        {
            m.labels = None;
        }
    }
    serde_json::to_value(t).unwrap_or_default()
}

/// Whether two templates are equal ignoring the hash label (upstream `EqualIgnoreHash`).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    without_hash(a) == without_hash(b)
}

/// Resolves an int-or-percent against `total`, rounding up or down.
pub fn resolve(value: Option<&IntOrString>, default: &str, total: i32, round_up: bool) -> i32 {
    let parse_pct = |s: &str| s.strip_suffix('%').and_then(|p| p.trim().parse::<i64>().ok());
    let v = match value {
        Some(IntOrString::Int(i)) => i64::from(*i),
        Some(IntOrString::String(s)) => match parse_pct(s) {
            Some(p) => pct(p, total, round_up),
            None => s.parse().unwrap_or(0),
        },
        None => pct(parse_pct(default).unwrap_or(0), total, round_up),
    };
    v.clamp(0, i64::from(i32::MAX)) as i32
}

fn pct(p: i64, total: i32, round_up: bool) -> i64 {
    let x = p * i64::from(total);
    if round_up {
        (x + 99).div_euclid(100)
    } else {
        x.div_euclid(100)
    }
}

/// `(maxSurge, maxUnavailable)` of a Deployment (both 0 for Recreate; unavailable 1 if both 0).
pub fn surge_and_unavailable(d: &Deployment) -> (i32, i32) {
    let spec = Some(&d.spec);
    let replicas = spec.and_then(|s| s.replicas).unwrap_or(1);
    let strategy = spec.and_then(|s| s.strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return (0, 0);
    }
    let ru = strategy.and_then(|s| s.rolling_update.as_ref());
    let surge = resolve(ru.and_then(|r| r.max_surge.as_ref()), "25%", replicas, true);
    let unavailable = resolve(
        ru.and_then(|r| r.max_unavailable.as_ref()),
        "25%",
        replicas,
        false,
    );
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

/// Truncates to whole seconds, the precision of `metav1.Time` on the wire, so that a condition
/// written now compares equal to itself read back.
pub fn whole_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: Some(type_.into()),
        status: Some(status.into()),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Upstream `SetDeploymentCondition`: no-op for the same status and reason; the transition time
/// survives a same-status change; the condition moves to the end.
pub fn set_condition(conditions: &mut Vec<DeploymentCondition>, mut c: DeploymentCondition) {
    if let Some(cur) = conditions.iter().find(|x| x.type_ == c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    conditions.retain(|x| x.type_ != c.type_);
    conditions.push(c);
}

fn get_condition<'a>(conditions: &'a [DeploymentCondition], type_: &str) -> Option<&'a DeploymentCondition> {
    conditions.iter().find(|c| c.type_.as_deref() == Some(type_))
}

fn replicas_of(d: &Deployment) -> i32 {
    d.spec.replicas.unwrap_or(1)
}

fn progress_deadline(d: &Deployment) -> Option<i32> {
    let v = d
        .spec
        .progress_deadline_seconds
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE);
    (v != i32::MAX).then_some(v)
}

/// Upstream `calculateStatus` (conditions other than Available are carried over).
pub fn calculate_status(
    d: &Deployment,
    all: &[RsState],
    new: Option<&RsState>,
    max_unavailable: i32,
    now: Timestamp,
) -> DeploymentStatus {
    let old = d.status.clone().unwrap_or_default();
    let available: i32 = all.iter().map(|r| r.available).sum();
    let total_spec: i32 = all.iter().map(|r| r.spec_replicas).sum();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(all.iter().map(|r| r.replicas).sum()),
        updated_replicas: Some(new.map(|n| n.replicas).unwrap_or(0)),
        ready_replicas: Some(all.iter().map(|r| r.ready).sum()),
        available_replicas: Some(available),
        unavailable_replicas: Some((total_spec - available).max(0)),
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
        terminating_replicas: None,
    };
    let mut conditions = status.conditions.take().unwrap_or_default();
    if available >= replicas_of(d) - max_unavailable {
        set_condition(
            &mut conditions,
            condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
                now,
            ),
        );
    } else {
        set_condition(
            &mut conditions,
            condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
                now,
            ),
        );
    }
    status.conditions = Some(conditions);
    normalize(&mut status);
    status
}

/// Go `omitempty`: zero counts and empty lists are absent.
pub fn normalize(s: &mut DeploymentStatus) {
    for f in [
        &mut s.replicas,
        &mut s.updated_replicas,
        &mut s.ready_replicas,
        &mut s.available_replicas,
        &mut s.unavailable_replicas,
        &mut s.terminating_replicas,
    ] {
        if *f == Some(0) {
            *f = None;
        }
    }
    if s.observed_generation == Some(0) {
        s.observed_generation = None;
    }
    if s.conditions.as_ref().is_some_and(Vec::is_empty) {
        s.conditions = None;
    }
}

fn complete(d: &Deployment, s: &DeploymentStatus) -> bool {
    let r = replicas_of(d);
    s.updated_replicas.unwrap_or(0) == r
        && s.replicas.unwrap_or(0) == r
        && s.available_replicas.unwrap_or(0) == r
        && s.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

fn progressing(old: &DeploymentStatus, new: &DeploymentStatus) -> bool {
    let g = |v: Option<i32>| v.unwrap_or(0);
    let old_old = g(old.replicas) - g(old.updated_replicas);
    let new_old = g(new.replicas) - g(new.updated_replicas);
    g(new.updated_replicas) > g(old.updated_replicas)
        || g(new.ready_replicas) > g(old.ready_replicas)
        || g(new.available_replicas) > g(old.available_replicas)
        || old_old > new_old
}

/// Upstream `syncRolloutStatus`: the Progressing and ReplicaFailure conditions; returns the status
/// and, while progressing, when the progress deadline would pass.
fn rollout_status(
    d: &Deployment,
    all: &[RsState],
    new: Option<&RsState>,
    max_unavailable: i32,
    now: Timestamp,
) -> (DeploymentStatus, Option<Duration>) {
    let old = d.status.clone().unwrap_or_default();
    let mut status = calculate_status(d, all, new, max_unavailable, now);
    let mut conditions = status.conditions.take().unwrap_or_default();
    let deadline = progress_deadline(d);
    let mut requeue = None;
    if deadline.is_none() {
        conditions.retain(|c| c.type_.as_deref() != Some("Progressing"));
    }
    let current = get_condition(&conditions, "Progressing").cloned();
    let is_complete = status.replicas == status.updated_replicas
        && current.as_ref().and_then(|c| c.reason.as_deref()) == Some("NewReplicaSetAvailable");
    if let Some(deadline) = deadline
        && !is_complete
    {
        let rs_name = new.map(|n| n.name.as_str());
        if complete(d, &status) {
            let msg = match rs_name {
                Some(n) => format!("ReplicaSet \"{n}\" has successfully progressed."),
                None => "Deployment has successfully progressed.".to_owned(),
            };
            set_condition(
                &mut conditions,
                condition("Progressing", "True", "NewReplicaSetAvailable", msg, now),
            );
        } else if progressing(&old, &status) {
            let msg = match rs_name {
                Some(n) => format!("ReplicaSet \"{n}\" is progressing."),
                None => "Deployment is progressing.".to_owned(),
            };
            let mut c = condition("Progressing", "True", "ReplicaSetUpdated", msg, now);
            if let Some(cur) = &current {
                if cur.status.as_deref() == Some("True") {
                    c.last_transition_time = cur.last_transition_time.clone();
                }
                conditions.retain(|x| x.type_.as_deref() != Some("Progressing"));
            }
            set_condition(&mut conditions, c);
            requeue = Some(Duration::from_secs(deadline.max(0) as u64));
        } else if let Some(cur) = &current
            && cur.reason.as_deref() != Some("ProgressDeadlineExceeded")
            && cur.reason.as_deref() != Some("DeploymentPaused")
        {
            let since = cur.last_update_time.as_ref().map(|t| t.0).unwrap_or(now);
            let due = since
                .checked_add(SignedDuration::from_secs(i64::from(deadline)))
                .unwrap_or(since);
            if due <= now {
                let msg = match rs_name {
                    Some(n) => format!("ReplicaSet \"{n}\" has timed out progressing."),
                    None => "Deployment has timed out progressing.".to_owned(),
                };
                set_condition(
                    &mut conditions,
                    condition("Progressing", "False", "ProgressDeadlineExceeded", msg, now),
                );
            } else {
                let left = due.duration_since(now).as_millis().max(0) as u64;
                requeue = Some(Duration::from_millis(left + 1));
            }
        }
    }
    let failure = new
        .and_then(|n| n.failure.clone())
        .or_else(|| all.iter().find_map(|r| r.failure.clone()));
    match failure {
        Some(f) => set_condition(
            &mut conditions,
            DeploymentCondition {
                type_: Some("ReplicaFailure".into()),
                status: f.status,
                reason: f.reason,
                message: f.message,
                last_update_time: f.last_transition_time.clone(),
                last_transition_time: f.last_transition_time,
            },
        ),
        None => conditions.retain(|c| c.type_.as_deref() != Some("ReplicaFailure")),
    }
    status.conditions = if conditions.is_empty() {
        None
    } else {
        Some(conditions)
    };
    (status, requeue)
}

fn set_replicas_annotations(d: &Deployment, surge: i32) -> BTreeMap<String, String> {
    let r = replicas_of(d);
    [
        (DESIRED_REPLICAS.to_string(), r.to_string()),
        (MAX_REPLICAS.to_string(), (r + surge).to_string()),
    ]
    .into()
}

/// The ReplicaSet a Deployment creates for its current template.
pub fn new_replica_set(d: &Deployment, hash: &str, replicas: i32, revision: i64, surge: i32) -> ReplicaSet {
    let spec = d.spec.clone();
    let name = d.metadata.name.clone().unwrap_or_default();
    let mut template = spec.template.clone();
    let meta = template.metadata.get_or_insert_with(Default::default);
    meta.labels
        .get_or_insert_with(Default::default)
        .insert(HASH_LABEL.into(), hash.into());
    let mut selector: LabelSelector = spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(Default::default)
        .insert(HASH_LABEL.into(), hash.into());
    let mut annotations: BTreeMap<String, String> = d
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "kubectl.kubernetes.io/last-applied-configuration"
                    | REVISION
                    | "deployment.kubernetes.io/revision-history"
                    | DESIRED_REPLICAS
                    | MAX_REPLICAS
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.insert(REVISION.into(), revision.to_string());
    annotations.extend(set_replicas_annotations(d, surge));
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{hash}")),
            namespace: d.metadata.namespace.clone(),
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name,
                uid: d.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: ReplicaSetSpec {
            replicas: Some(replicas),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        },
        status: None,
    }
}

fn scale_event(name: &str, from: i32, to: i32) -> (String, String) {
    let dir = if to > from { "up" } else { "down" };
    (
        "ScalingReplicaSet".into(),
        format!("Scaled {dir} replica set {name} from {from} to {to}"),
    )
}

/// Sorts oldest first (creation time, then name), as upstream `ReplicaSetsByCreationTimestamp`.
fn by_age(a: &RsState, b: &RsState) -> std::cmp::Ordering {
    a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name))
}

struct Planner<'a> {
    d: &'a Deployment,
    rss: Vec<RsState>,
    new: Option<usize>,
    plan: Plan,
    surge: i32,
    unavailable: i32,
}

impl Planner<'_> {
    fn scale(&mut self, i: usize, to: i32) {
        let from = self.rss[i].spec_replicas;
        let annotations = set_replicas_annotations(self.d, self.surge);
        self.rss[i].spec_replicas = to;
        let name = self.rss[i].name.clone();
        if from != to {
            self.plan.events.push(scale_event(&name, from, to));
        }
        match self.plan.updates.iter_mut().find(|u| u.name == name) {
            Some(u) => u.replicas = to,
            None => self.plan.updates.push(RsUpdate {
                name,
                replicas: to,
                annotations,
            }),
        }
    }

    fn olds(&self) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.rss.len()).filter(|i| Some(*i) != self.new).collect();
        v.sort_by(|a, b| by_age(&self.rss[*a], &self.rss[*b]));
        v
    }

    /// Upstream `reconcileNewReplicaSet`.
    fn reconcile_new(&mut self) -> bool {
        let Some(n) = self.new else { return false };
        let replicas = replicas_of(self.d);
        let cur = self.rss[n].spec_replicas;
        if cur == replicas {
            return false;
        }
        if cur > replicas {
            self.scale(n, replicas);
            return true;
        }
        let total: i32 = self.rss.iter().map(|r| r.spec_replicas).sum();
        let max_total = replicas + self.surge;
        if total >= max_total {
            return false;
        }
        let up = (max_total - total).min(replicas - cur);
        self.scale(n, cur + up);
        true
    }

    /// Upstream `reconcileOldReplicaSets` (cleanup of unhealthy replicas, then scale-down within
    /// maxUnavailable).
    fn reconcile_old(&mut self) -> bool {
        let olds: Vec<usize> = self
            .olds()
            .into_iter()
            .filter(|i| self.rss[*i].spec_replicas > 0)
            .collect();
        if olds.is_empty() {
            return false;
        }
        let replicas = replicas_of(self.d);
        let all: i32 = self.rss.iter().map(|r| r.spec_replicas).sum();
        let min_available = replicas - self.unavailable;
        let new_unavailable = self
            .new
            .map(|n| self.rss[n].spec_replicas - self.rss[n].available)
            .unwrap_or(0);
        let max_scaled_down = all - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        let mut cleaned = 0;
        for &i in &olds {
            if cleaned >= max_scaled_down {
                break;
            }
            let rs = &self.rss[i];
            if rs.spec_replicas == rs.available {
                continue;
            }
            let unhealthy = rs.spec_replicas - rs.available;
            let down = (max_scaled_down - cleaned).min(unhealthy);
            let to = rs.spec_replicas - down;
            cleaned += down;
            self.scale(i, to);
        }
        let available: i32 = self.rss.iter().map(|r| r.available.min(r.spec_replicas)).sum();
        let mut scaled = 0;
        if available > min_available {
            let total_down = available - min_available;
            for &i in &olds {
                if scaled >= total_down {
                    break;
                }
                let cur = self.rss[i].spec_replicas;
                if cur == 0 {
                    continue;
                }
                let down = cur.min(total_down - scaled);
                scaled += down;
                self.scale(i, cur - down);
            }
        }
        cleaned + scaled > 0
    }

    fn cleanup(&mut self) {
        let limit = self
            .d
            .spec
            .revision_history_limit
            .unwrap_or(DEFAULT_HISTORY_LIMIT);
        let mut dead: Vec<&RsState> = self
            .olds()
            .into_iter()
            .map(|i| &self.rss[i])
            .filter(|r| r.spec_replicas == 0 && r.replicas == 0)
            .collect();
        let excess = dead.len() as i64 - i64::from(limit.max(0));
        if excess <= 0 {
            return;
        }
        dead.sort_by(|a, b| a.revision.cmp(&b.revision).then_with(|| by_age(a, b)));
        self.plan.delete = dead
            .iter()
            .take(excess as usize)
            .map(|r| (r.name.clone(), r.uid.clone()))
            .collect();
    }

    fn finish(mut self, now: Timestamp) -> Plan {
        let new = self.new.map(|n| self.rss[n].clone());
        let (status, requeue) = rollout_status(self.d, &self.rss, new.as_ref(), self.unavailable, now);
        self.plan.status = status;
        self.plan.requeue_after = requeue;
        self.plan
    }
}

/// One sync of a Deployment over its (non-deleted) ReplicaSets: upstream `syncDeployment` without
/// adoption and proportional scaling.
pub fn plan(d: &Deployment, owned: &[RsState], now: Timestamp) -> Plan {
    let now = whole_seconds(now);
    let spec = d.spec.clone();
    let (surge, unavailable) = surge_and_unavailable(d);
    let mut rss = owned.to_vec();
    rss.sort_by(by_age);
    let new = rss.iter().position(|r| {
        r.template
            .as_ref()
            .is_some_and(|t| equal_ignore_hash(t, &spec.template))
    });
    let mut p = Planner {
        d,
        rss,
        new,
        plan: Plan::default(),
        surge,
        unavailable,
    };
    let max_old_revision = p
        .rss
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != new)
        .map(|(_, r)| r.revision)
        .max();
    let next_revision = max_old_revision.unwrap_or(0) + 1;
    let mut status_conditions = d
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let paused = spec.paused == Some(true);
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let current_revision = d
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .cloned();

    // Revision bookkeeping of an existing new RS (rollback to an old template bumps it).
    if let Some(n) = new {
        if p.rss[n].revision < next_revision {
            p.rss[n].revision = next_revision;
            let mut annotations = set_replicas_annotations(d, surge);
            annotations.insert(REVISION.into(), next_revision.to_string());
            p.plan.updates.push(RsUpdate {
                name: p.rss[n].name.clone(),
                replicas: p.rss[n].spec_replicas,
                annotations,
            });
        }
        let rev = p.rss[n].revision.to_string();
        if current_revision.as_deref() != Some(rev.as_str()) {
            p.plan.revision = Some(rev);
        }
        if progress_deadline(d).is_some() && get_condition(&status_conditions, "Progressing").is_none() {
            let msg = format!("Found new replica set \"{}\"", p.rss[n].name);
            set_condition(
                &mut status_conditions,
                condition("Progressing", "True", "FoundNewReplicaSet", msg, now),
            );
        }
    }

    if paused {
        if get_condition(&status_conditions, "Progressing").and_then(|c| c.reason.as_deref())
            != Some("DeploymentPaused")
        {
            set_condition(
                &mut status_conditions,
                condition(
                    "Progressing",
                    "Unknown",
                    "DeploymentPaused",
                    "Deployment is paused".into(),
                    now,
                ),
            );
        }
        let mut d2 = d.clone();
        d2.status.get_or_insert_with(Default::default).conditions = Some(status_conditions);
        let (mut status, _) = {
            let new = p.new.map(|n| p.rss[n].clone());
            let status = calculate_status(&d2, &p.rss, new.as_ref(), unavailable, now);
            (status, ())
        };
        normalize(&mut status);
        let mut plan = p.plan;
        plan.status = status;
        return plan;
    }
    if get_condition(&status_conditions, "Progressing").and_then(|c| c.reason.as_deref())
        == Some("DeploymentPaused")
    {
        set_condition(
            &mut status_conditions,
            condition(
                "Progressing",
                "Unknown",
                "DeploymentResumed",
                "Deployment is resumed".into(),
                now,
            ),
        );
    }

    let create_new = |p: &mut Planner, count: i32, conds: &mut Vec<DeploymentCondition>| {
        let collision = d.status.as_ref().and_then(|s| s.collision_count);
        let hash = template_hash(&spec.template, collision);
        let rs = new_replica_set(d, &hash, count, next_revision, surge);
        let name = rs.metadata.name.clone().unwrap_or_default();
        p.rss.push(RsState {
            name: name.clone(),
            uid: String::new(),
            created: Some(now),
            revision: next_revision,
            template: rs.spec.template.clone(),
            spec_replicas: count,
            replicas: 0,
            ready: 0,
            available: 0,
            failure: None,
        });
        p.new = Some(p.rss.len() - 1);
        if count > 0 {
            p.plan.events.push(scale_event(&name, 0, count));
        }
        if progress_deadline(d).is_some() {
            let msg = format!("Created new replica set \"{name}\"");
            set_condition(
                conds,
                condition("Progressing", "True", "NewReplicaSetCreated", msg, now),
            );
        }
        if current_revision.as_deref() != Some(next_revision.to_string().as_str()) {
            p.plan.revision = Some(next_revision.to_string());
        }
        p.plan.create = Some(rs);
    };

    let replicas = spec.replicas.unwrap_or(1);
    if recreate {
        let olds: Vec<usize> = p
            .olds()
            .into_iter()
            .filter(|i| p.rss[*i].spec_replicas > 0)
            .collect();
        let with_conditions = |p: Planner, conds: Vec<DeploymentCondition>| {
            let mut d2 = d.clone();
            d2.status.get_or_insert_with(Default::default).conditions = Some(conds);
            let mut p2 = Planner { d: &d2, ..p };
            let plan = std::mem::take(&mut p2.plan);
            let new = p2.new.map(|n| p2.rss[n].clone());
            let (status, requeue) = rollout_status(&d2, &p2.rss, new.as_ref(), p2.unavailable, now);
            Plan {
                status,
                requeue_after: requeue,
                ..plan
            }
        };
        if !olds.is_empty() {
            for i in olds {
                p.scale(i, 0);
            }
            return with_conditions(p, status_conditions);
        }
        let old_running: i32 = p.olds().iter().map(|i| p.rss[*i].replicas).sum();
        if old_running > 0 {
            return with_conditions(p, status_conditions);
        }
        if p.new.is_none() {
            create_new(&mut p, replicas, &mut status_conditions);
        } else if let Some(n) = p.new
            && p.rss[n].spec_replicas != replicas
        {
            p.scale(n, replicas);
        }
        let mut d2 = d.clone();
        d2.status.get_or_insert_with(Default::default).conditions = Some(status_conditions.clone());
        if complete(&d2, &d2.status.clone().unwrap_or_default()) {
            p.cleanup();
        }
        return with_conditions(p, status_conditions);
    }

    if p.new.is_none() {
        let total: i32 = p.rss.iter().map(|r| r.spec_replicas).sum();
        let max_total = replicas + surge;
        let count = if total >= max_total {
            0
        } else {
            (max_total - total).min(replicas)
        };
        create_new(&mut p, count, &mut status_conditions);
    }
    let mut d2 = d.clone();
    d2.status.get_or_insert_with(Default::default).conditions = Some(status_conditions);
    let mut p = Planner { d: &d2, ..p };
    if !p.reconcile_new() && !p.reconcile_old() && complete(&d2, &d2.status.clone().unwrap_or_default()) {
        p.cleanup();
    }
    p.finish(now)
}

#[cfg(test)]
mod tests;
