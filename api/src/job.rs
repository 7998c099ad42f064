//! `MultiClusterJob`: a batch Job whose completions are divided among workload clusters.
//!
//! The hub admits a job when the pods it runs at once (`parallelism`) all fit in the fleet, and
//! until then keeps it in a queue (higher `priority` first, then older first) with the reason in
//! status, instead of leaving pods Pending in a full cluster. Admitted, its completions are cut
//! into pieces, one Job per cluster: an Indexed job's pieces hold contiguous ranges of indexes, so
//! each index runs in one cluster (the pod reads its fleet-wide index as `JOB_COMPLETION_INDEX`
//! plus [`JOB_INDEX_OFFSET_ENV`], because a Kubernetes Job has no first index). A piece whose
//! cluster is lost is run again elsewhere, for the indexes its cluster had not reported
//! complete: at least once, as Kubernetes runs a Job's pods.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::TemplateMetadata;

/// Environment variable set in every container of a piece's pods: the fleet-wide index of the
/// piece's first completion. A pod's own index is `JOB_COMPLETION_INDEX + NAVE_JOB_INDEX_OFFSET`.
pub const JOB_INDEX_OFFSET_ENV: &str = "NAVE_JOB_INDEX_OFFSET";

/// Annotation on each piece's Job: the fleet-wide index (or, for a NonIndexed job, the position
/// among the completions) of its first completion.
pub const JOB_INDEX_OFFSET_ANNOTATION: &str = "nave.dev/job-index-offset";

/// Longest MultiClusterJob name: its pieces' Jobs are named `<name>-<uid>-<first index>` (five
/// characters of its uid; `r<attempt>` after a rerun), which must stay a valid label value (63
/// characters).
pub const MAX_JOB_NAME: usize = 44;

/// Desired state of a MultiClusterJob.
// Printer columns repeat `type_ = ...` and `priority = ...` inside `printcolumn(...)`, which the
// lint mistakes for duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "nave.dev",
    version = "v1alpha1",
    kind = "MultiClusterJob",
    namespaced,
    shortname = "mcj",
    category = "nave",
    status = "MultiClusterJobStatus",
    derive = "PartialEq",
    doc = "A batch Job run across workload clusters: its completions are divided among the \
           clusters the placement picks (an Indexed job's as disjoint ranges of indexes), one Job \
           per cluster. It waits in the hub's queue (by `priority`, then age) until all of its \
           `parallelism` fits; a cluster lost mid-run has its unfinished part run elsewhere.",
    printcolumn(
        name = "Status",
        type_ = "string",
        description = "Queued, Running, Complete or Failed",
        json_path = ".status.phase"
    ),
    printcolumn(
        name = "Completions",
        type_ = "string",
        description = "Succeeded of completions",
        json_path = ".status.progress"
    ),
    printcolumn(
        name = "Active",
        type_ = "integer",
        description = "Pods running now, in every cluster",
        json_path = ".status.active"
    ),
    printcolumn(
        name = "Clusters",
        type_ = "integer",
        description = "Clusters running or having run a piece",
        json_path = ".status.clusterCount"
    ),
    printcolumn(
        name = "Priority",
        type_ = "integer",
        json_path = ".spec.priority",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Message",
        type_ = "string",
        description = "Why it waits, or how it ended",
        json_path = ".status.message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterJobSpec {
    /// The Job each cluster runs its piece of. Cannot change once created, as a Job's template.
    pub template: JobTemplate,

    /// Which clusters may run pieces, and how the pods running at once are divided among them.
    #[serde(default)]
    pub placement: JobPlacement,

    /// Order in the hub's queue: a job with a higher priority is admitted first; among equal
    /// priorities, the older first. A job that does not fit yet does not hold back a later one
    /// that fits (best-effort order). Default 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,

    /// Seconds after the job completes or fails before the hub deletes it, and with it its Job
    /// in every cluster. Unset: kept until deleted. The pieces' Jobs in the clusters never carry
    /// their own TTL (a Job deleted there would be created again and run once more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// `{metadata, spec}` of a `batch/v1` Job.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self == oldSelf",
        "message": "the job template cannot change once created, as a Job's: delete the MultiClusterJob and create it again",
        "reason": "FieldValueForbidden"
    }
]))]
pub struct JobTemplate {
    /// Labels and annotations of each cluster's Job (its pods' are in `spec.template.metadata`).
    /// Nave adds its own `nave.dev/*` labels.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,

    /// An ordinary `batch/v1` JobSpec: `completions` (required), `parallelism`,
    /// `completionMode`, `backoffLimit`, `template` (the pod template) and so on, as in its
    /// manifest. `completions` and `parallelism` are the whole job's: each cluster's Job gets its
    /// share. `backoffLimit` and `activeDeadlineSeconds` apply to each cluster's Job. Fields not
    /// described here are kept as written and checked when the Jobs are built.
    #[schemars(schema_with = "job_spec_schema")]
    pub spec: serde_json::Value,
}

/// Where a MultiClusterJob's pieces may run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobPlacement {
    /// How the pods running at once are divided: `worst-fit` (default, most free room first),
    /// `best-fit` (pack into the fullest clusters that fit) or `spread` (as evenly as room allows).
    #[serde(default)]
    pub policy: JobPolicy,

    /// Allow-list of WorkloadCluster names; empty allows every cluster. Example: `[eu-1, eu-2]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,

    /// Only clusters whose WorkloadCluster labels match run pieces. Combined with `clusters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,

    /// The most clusters one admission divides the job among. Unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_clusters: Option<i32>,
}

/// How a MultiClusterJob's pods are divided among clusters.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum JobPolicy {
    /// The most free room first.
    #[default]
    #[serde(rename = "worst-fit")]
    WorstFit,
    /// The least free room that still fits first.
    #[serde(rename = "best-fit")]
    BestFit,
    /// As evenly as room allows.
    #[serde(rename = "spread")]
    Spread,
}

/// Observed state of a MultiClusterJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultiClusterJobStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Queued` (waiting in the hub for room), `Running`, `Complete` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,

    /// Completions of the whole job (`spec.template.spec.completions`).
    #[serde(default)]
    pub completions: i32,

    /// Completions succeeded, counted once each (an index run twice counts once).
    #[serde(default)]
    pub succeeded: i32,

    /// Pods that failed, in every cluster.
    #[serde(default)]
    pub failed: i32,

    /// Pods running or pending now, in every cluster.
    #[serde(default)]
    pub active: i32,

    /// `succeeded/completions`, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,

    /// Indexed jobs: the fleet-wide indexes succeeded, as a Job's `status.completedIndexes`
    /// (`0-3,7`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_indexes: Option<String>,

    /// While queued: 1 for the first job in the hub's queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<i32>,

    /// How many clusters run or ran a piece.
    #[serde(default)]
    pub cluster_count: i32,

    /// Why it waits, or how it ended: the `Admitted`, `Complete` or `Failed` condition's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// When its first piece was sent to a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,

    /// When it completed or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,

    /// The pieces: each a Job in one cluster running a range of the completions, or a range
    /// waiting for room. This list is the hub's record of what runs where; it survives the hub's
    /// store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pieces: Vec<JobPiece>,

    /// `Admitted` (every piece has a cluster), `Complete` and `Failed`, as a Job's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl MultiClusterJobStatus {
    /// The condition of this type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        crate::conditions::find(&self.conditions, type_)
    }
}

/// Where a MultiClusterJob stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum JobPhase {
    /// Some of its completions wait in the hub's queue for room.
    Queued,
    /// Every piece has a cluster; some have not finished.
    Running,
    /// Every completion succeeded.
    Complete,
    /// A piece's Job failed (its `backoffLimit` or deadline was reached); the others are
    /// suspended.
    Failed,
}

/// One piece of a MultiClusterJob.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobPiece {
    /// Name of its Job in the cluster; empty while it waits for room.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub job: String,

    /// WorkloadCluster it runs in; empty while it waits for room.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,

    /// Fleet-wide index (NonIndexed: position) of its first completion.
    pub start: i32,

    /// How many completions it runs: indexes `start` to `start + completions - 1`.
    pub completions: i32,

    /// Pods it runs at once.
    pub parallelism: i32,

    /// `Queued`, `Running`, `Complete`, `Failed` or `Lost`.
    pub state: PieceState,

    /// Pods running or pending, as its cluster's agent last reported.
    #[serde(default)]
    pub active: i32,

    /// Completions succeeded, as last reported.
    #[serde(default)]
    pub succeeded: i32,

    /// Pods failed, as last reported.
    #[serde(default)]
    pub failed: i32,

    /// Indexed jobs: the fleet-wide indexes it completed, as last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_indexes: Option<String>,

    /// What its cluster's agent says is wrong, or why it was lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where a piece stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PieceState {
    /// Waiting in the hub's queue for room for all its pods at once.
    Queued,
    /// Sent to its cluster.
    Running,
    /// Its Job completed.
    Complete,
    /// Its Job failed.
    Failed,
    /// Its cluster was lost before it finished: what it had not reported complete runs again in
    /// new pieces.
    Lost,
}

/// The JobSpec's schema: the fields Nave reads, declared and checked; the rest kept as written.
fn job_spec_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "required": ["completions", "template"],
        "x-kubernetes-validations": [
            {
                "rule": "!has(self.parallelism) || self.parallelism <= self.completions",
                "message": "parallelism cannot exceed completions",
                "fieldPath": ".parallelism",
                "reason": "FieldValueInvalid",
            },
            {
                "rule": "!has(self.completionMode) || self.completionMode == 'NonIndexed' || self.completions <= 100000",
                "message": "an Indexed job has at most 100000 completions",
                "fieldPath": ".completions",
                "reason": "FieldValueInvalid",
            },
            {
                "rule": "!has(self.ttlSecondsAfterFinished)",
                "message": "set ttlSecondsAfterFinished on the MultiClusterJob (spec.ttlSecondsAfterFinished): each cluster's Job must stay until the hub removes it",
                "fieldPath": ".ttlSecondsAfterFinished",
                "reason": "FieldValueForbidden",
            },
            {
                "rule": "!has(self.successPolicy)",
                "message": "successPolicy is not supported: its rules name indexes of the whole job, and each cluster's Job holds a part of them",
                "fieldPath": ".successPolicy",
                "reason": "FieldValueForbidden",
            },
            {
                "rule": "!has(self.maxFailedIndexes)",
                "message": "maxFailedIndexes is not supported: it would apply to each cluster's part, not to the whole job",
                "fieldPath": ".maxFailedIndexes",
                "reason": "FieldValueForbidden",
            },
            {
                "rule": "!has(self.managedBy)",
                "message": "managedBy is not supported: the clusters' Jobs are managed by their own Job controller",
                "fieldPath": ".managedBy",
                "reason": "FieldValueForbidden",
            },
            {
                "rule": "!has(self.suspend) || !self.suspend",
                "message": "suspend is not supported: a MultiClusterJob waits in the hub's queue instead",
                "fieldPath": ".suspend",
                "reason": "FieldValueForbidden",
            },
        ],
        "properties": {
            "successPolicy": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "description": "Not supported in a MultiClusterJob.",
            },
            "maxFailedIndexes": {
                "type": "integer",
                "format": "int32",
                "description": "Not supported in a MultiClusterJob.",
            },
            "managedBy": {"type": "string", "description": "Not supported in a MultiClusterJob."},
            "suspend": {"type": "boolean", "description": "Not supported in a MultiClusterJob."},
            "completions": {
                "type": "integer",
                "format": "int32",
                "minimum": 1,
                "description": "Completions of the whole job (required), divided among the clusters. Example: `100`.",
            },
            "parallelism": {
                "type": "integer",
                "format": "int32",
                "minimum": 1,
                "description": "Pods of the whole job running at once (default 1), divided among the clusters; the job waits in the hub's queue until all of them fit.",
            },
            "completionMode": {
                "type": "string",
                "enum": ["NonIndexed", "Indexed"],
                "description": "`Indexed`: each completion has an index, and each index runs in one cluster (its pod reads `JOB_COMPLETION_INDEX + NAVE_JOB_INDEX_OFFSET`). `NonIndexed` (default): the completions are counted.",
            },
            "ttlSecondsAfterFinished": {
                "type": "integer",
                "format": "int32",
                "description": "Not here: set the MultiClusterJob's own spec.ttlSecondsAfterFinished.",
            },
            "backoffLimit": {
                "type": "integer",
                "format": "int32",
                "minimum": 0,
                "description": "Retries of failed pods in each cluster's Job before it, and the whole job, fails (default 6).",
            },
            "template": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "required": ["spec"],
                "description": "The pod template, as in a Job; `restartPolicy` must be `Never` or `OnFailure`.",
                "properties": {
                    "spec": {
                        "type": "object",
                        "description": "The pod spec (core/v1 PodSpec); placement counts its containers' requests.",
                        "x-kubernetes-preserve-unknown-fields": true,
                        "required": ["containers"],
                        "x-kubernetes-validations": [
                            {
                                "rule": "has(self.restartPolicy) && (self.restartPolicy == 'Never' || self.restartPolicy == 'OnFailure')",
                                "message": "a Job's pods need restartPolicy Never or OnFailure",
                                "fieldPath": ".restartPolicy",
                                "reason": "FieldValueRequired",
                            },
                        ],
                        "properties": {
                            "restartPolicy": {"type": "string", "description": "`Never` or `OnFailure` (required)."},
                            "containers": {
                                "type": "array",
                                "minItems": 1,
                                "description": "The containers; placement counts their `resources.requests`.",
                                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            },
                        },
                    },
                },
            },
        },
    })
}
