//! Kubernetes resource semantics shared by the hub, the agent and the simulator: exact resource
//! quantities and what a pod takes from its node, counted as kube-scheduler counts it.
//!
//! ```text
//!  "500m", "1.5Gi", "2e3" ──► Quantity::parse ──► milli_value() / value()   (no floating point)
//!                                    │
//!  PodSpec ──► container_requests ───┴──► pod_requests / pod_limits ──► Resources
//!              (a limit stands in         (app containers + sidecars, or the init peak,
//!               for a missing request)     plus spec.overhead)
//!                                                      │
//!        hub: per-replica demand ◄─────────────────────┼──► agent: requested per node
//!                                                      └──► simulator: scheduler, kubelet, metrics
//! ```
//!
//! The hub's demand and the agent's reported usage must agree for the same pod, so both count it
//! here. This is a leaf crate: it depends on no other Nave crate, only on `k8s-openapi`, so that
//! the Kubernetes emulator (`nave-sim` and `nave-sim-core`), which must not depend on Nave's own
//! crates, can use it too.

#![forbid(unsafe_code)]

pub mod pod;
pub mod quantity;

pub use pod::{Resources, container_limits, container_requests, pod_limits, pod_requests};
pub use quantity::{Quantity, QuantityError, QuantityFormat};
