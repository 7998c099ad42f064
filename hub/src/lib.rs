//! Nave's hub: runs in the management cluster, decides where `MultiClusterDeployment` replicas go,
//! and hands each workload cluster's agent the objects it should run.
//!
//! ```text
//!  MultiClusterDeployment,          agents (pull, HTTP/JSON)
//!  WorkloadCluster (CRDs)           register, heartbeat, status
//!        │                                   │
//!        ▼                                   ▼
//!   controllers ──► scheduler (nave-policies) ◄── capacity models
//!        │                 │
//!        │                 ▼
//!        │        placements + history ──► REST API (/api/v1)
//!        │                 │
//!        ▼                 ▼
//!   CRD status     per-cluster work (object set @ revision) ──► agents pull and apply
//! ```
//!
//! Everything the hub learns or decides that is not desired state lives in the [`store`]:
//! clusters, agent credentials (hashed), heartbeats, placements with their history, and each
//! cluster's work and status. The CRDs stay the source of desired state.

#![forbid(unsafe_code)]

pub mod store;
