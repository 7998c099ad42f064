//! Condition types and reasons of Nave's resources.
//!
//! Conditions are `meta/v1` [`Condition`]s (type, status, reason, message, lastTransitionTime,
//! observedGeneration), so `kubectl wait --for=condition=...` works. Reasons are the constants in
//! [`reasons`]; messages are free text for people.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// `status` of a condition that holds.
pub const TRUE: &str = "True";
/// `status` of a condition that does not hold.
pub const FALSE: &str = "False";
/// `status` of a condition that cannot be determined.
pub const UNKNOWN: &str = "Unknown";

/// Condition types.
pub mod types {
    /// MultiClusterDeployment: every replica of `spec.replicas` is assigned to a cluster.
    pub const SCHEDULED: &str = "Scheduled";
    /// MultiClusterDeployment: at least the minimum of replicas is available, as for a Deployment.
    pub const AVAILABLE: &str = "Available";
    /// MultiClusterDeployment: a rollout, placement change or move is under way.
    pub const PROGRESSING: &str = "Progressing";
    /// MultiClusterDeployment: something keeps it from its desired state (unplaced replicas,
    /// Pending pods, an unreachable cluster, an invalid template).
    pub const DEGRADED: &str = "Degraded";
    /// MultiClusterDeployment: some replicas run in burst clusters.
    pub const BURSTING: &str = "Bursting";
    /// WorkloadCluster: an agent has registered for it. MultiClusterService: see [`READY`].
    pub const JOINED: &str = "Joined";
    /// WorkloadCluster: its agent sends heartbeats. MultiClusterService: the Service exists in
    /// every cluster that runs the workload.
    pub const READY: &str = "Ready";
    /// WorkloadCluster: the hub may place work on it. `False` (reason `AwaitingAcceptance`)
    /// for a cluster that joined with the fleet's bootstrap token and waits for an admin, or
    /// whose acceptance an admin withdrew: its labels select nothing and it runs no replicas.
    pub const ACCEPTED: &str = "Accepted";
    /// WorkloadCluster: its agent keeps what runs instead of following the hub's work set,
    /// because the hub's store is another one, went back to an older revision, or has no work
    /// for the cluster (reason `StoreChanged`, `RevisionWentBack` or `NoWork`); `False` with
    /// reason `FollowingWork` while it follows.
    pub const HUB_STORE_CHANGED: &str = "HubStoreChanged";
    /// WorkloadCluster: it is being deleted; its workloads move away and the hub waits for its
    /// agent to apply the empty work set (reason `WithdrawingWork`; the message says what is left).
    pub const REMOVING: &str = "Removing";
    /// MultiClusterJob: every piece of it has a cluster (`False`, reason `Queued`, while some
    /// wait in the hub's queue for room).
    pub const ADMITTED: &str = "Admitted";
    /// MultiClusterJob: every completion succeeded, as a Job's `Complete`.
    pub const COMPLETE: &str = "Complete";
    /// MultiClusterJob: a cluster's Job failed, as a Job's `Failed`; the others are suspended.
    pub const FAILED: &str = "Failed";
}

/// Condition reasons (CamelCase, as Kubernetes requires).
pub mod reasons {
    // Scheduled
    /// Every replica is assigned to a cluster.
    pub const ALL_REPLICAS_PLACED: &str = "AllReplicasPlaced";
    /// Some replicas are assigned, the others have no room anywhere.
    pub const PARTIALLY_PLACED: &str = "PartiallyPlaced";
    /// A StatefulSet's replicas wait for their ordinals to stop in the cluster that gave them up
    /// (an ordinal never runs in two clusters); nothing else keeps them from being placed.
    pub const WAITING_FOR_ORDINALS: &str = "WaitingForOrdinals";
    /// No cluster passes the placement's filters (allow-list, selector, readiness, cordon).
    pub const NO_ELIGIBLE_CLUSTERS: &str = "NoEligibleClusters";
    /// Eligible clusters exist but none has room for a replica.
    pub const INSUFFICIENT_CAPACITY: &str = "InsufficientCapacity";
    /// The spec cannot be acted on (e.g. `spec.template.spec` is not a valid DeploymentSpec).
    pub const INVALID_SPEC: &str = "InvalidSpec";

    // Available
    /// At least the minimum of replicas is available.
    pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
    /// Fewer replicas than the minimum are available.
    pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

    // Progressing
    /// Clusters are rolling out a new template or new replica counts.
    pub const ROLLOUT_IN_PROGRESS: &str = "RolloutInProgress";
    /// Every cluster runs the latest template with its assigned replicas.
    pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    /// Replicas are being moved between clusters (rescheduling, failover, burst retraction).
    pub const MOVING_REPLICAS: &str = "MovingReplicas";

    // Degraded
    /// Nothing is wrong.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// Some replicas have no cluster; the message gives the numbers.
    pub const REPLICAS_UNPLACED: &str = "ReplicasUnplaced";
    /// Replicas stay Pending in some cluster.
    pub const PODS_PENDING: &str = "PodsPending";
    /// A cluster with replicas stopped sending heartbeats.
    pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
    /// An agent refused or failed to apply one of the workload's objects (an object of the same
    /// name that is not Nave's, a namespace or kind the agent does not allow); the message
    /// names the cluster, the object and what the agent said.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// Degraded: a cluster's Deployment says it cannot progress (`Progressing=False`, such as
    /// `ProgressDeadlineExceeded`) or cannot create pods (`ReplicaFailure=True`, such as a quota).
    pub const DEPLOYMENT_FAILING: &str = "DeploymentFailing";
    /// A rollout in waves halted: a cluster of a started wave failed with the new template, or
    /// the wave missed `spec.rollout.progressDeadline` (`status.rollout.message` says which).
    pub const ROLLOUT_HALTED: &str = "RolloutHalted";
    /// A per-cluster override could not be applied to the Deployment.
    pub const OVERRIDE_FAILED: &str = "OverrideFailed";
    /// A ConfigMap or Secret the pod template references does not exist in the management
    /// cluster, so it cannot follow the workload; the message names it.
    pub const DEPENDENCY_MISSING: &str = "DependencyMissing";

    // Bursting
    /// The preferred clusters passed the utilization threshold; some replicas run in burst clusters.
    pub const THRESHOLD_EXCEEDED: &str = "ThresholdExceeded";
    /// Replicas that did not fit elsewhere run in burstOnly clusters.
    pub const OVERFLOW: &str = "Overflow";
    /// No replica runs in a burst cluster.
    pub const NOT_BURSTING: &str = "NotBursting";

    // Joined (WorkloadCluster)
    /// An agent registered with a valid bootstrap token.
    pub const AGENT_REGISTERED: &str = "AgentRegistered";
    /// An admin removed the cluster (`Joined=False`).
    pub const CLUSTER_REMOVED: &str = "ClusterRemoved";

    // Ready (WorkloadCluster)
    /// Heartbeats arrive on time.
    pub const HEARTBEAT_RECEIVED: &str = "HeartbeatReceived";
    /// No heartbeat within the grace period; the cluster's replicas are placed elsewhere.
    pub const HEARTBEAT_MISSED: &str = "HeartbeatMissed";

    // Accepted (WorkloadCluster)
    /// An admin accepted the cluster, it joined with a join token, or the hub accepts new
    /// clusters.
    pub const CLUSTER_ACCEPTED: &str = "ClusterAccepted";
    /// The cluster waits for an admin to accept it.
    pub const AWAITING_ACCEPTANCE: &str = "AwaitingAcceptance";

    // HubStoreChanged (WorkloadCluster); the reasons of `True` are `wire::HeldReason`'s.
    /// The agent follows the hub's work set.
    pub const FOLLOWING_WORK: &str = "FollowingWork";

    // Removing (WorkloadCluster)
    /// Its workloads move away; the message says what is left and whom the hub waits for.
    pub const WITHDRAWING_WORK: &str = "WithdrawingWork";

    // Ready (MultiClusterService)
    /// The Service exists in every cluster that runs the workload.
    pub const SERVICES_READY: &str = "ServicesReady";
    /// The Service is not yet created or reported in some clusters.
    pub const SERVICES_PENDING: &str = "ServicesPending";

    // Accepted and Ready (MultiClusterResource)
    /// The hub sends the object to the selected clusters.
    pub const SENT: &str = "Sent";
    /// The manifest's kind is not among those the fleet admin lets the hub send.
    pub const KIND_NOT_ALLOWED: &str = "KindNotAllowed";
    /// Applied in every selected cluster.
    pub const APPLIED: &str = "Applied";
    /// Not yet applied in some selected clusters; the message names them.
    pub const APPLY_PENDING: &str = "ApplyPending";
    /// Another object of the hub sends the same object to some clusters.
    pub const CONFLICT: &str = "Conflict";
    /// No cluster is selected.
    pub const NO_CLUSTERS_SELECTED: &str = "NoClustersSelected";

    // MultiClusterJob
    /// Admitted: waiting in the hub's queue until all of its pods at once fit.
    pub const QUEUED: &str = "Queued";
    /// Admitted: every piece runs in a cluster.
    pub const PIECES_PLACED: &str = "PiecesPlaced";
    /// Complete: every completion succeeded.
    pub const COMPLETIONS_REACHED: &str = "CompletionsReached";
    /// Failed: a cluster's Job failed (its backoffLimit or deadline reached).
    pub const PIECE_FAILED: &str = "PieceFailed";
    /// Event: a cluster running a piece was lost; what it had not completed runs again.
    pub const CLUSTER_LOST: &str = "ClusterLost";
}

/// The condition of this type in a list, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of this type is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == TRUE)
}

/// Sets a condition, replacing the one of the same type.
///
/// `lastTransitionTime` is kept from the old condition when the status did not change, so it
/// records when the status last changed, as Kubernetes conventions require.
pub fn upsert(conditions: &mut Vec<Condition>, mut condition: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(old) => {
            if old.status == condition.status {
                condition.last_transition_time = old.last_transition_time.clone();
            }
            *old = condition;
        }
        None => conditions.push(condition),
    }
}
