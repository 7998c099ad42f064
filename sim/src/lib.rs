//! nave-sim: a Kubernetes API emulator with simulated nodes and pods, good enough that the real
//! `kubectl` (1.32) and kube-rs (watchers, reflectors, controllers, server-side apply) work
//! against it.  Many virtual clusters can run in one process, each with its own listener, store,
//! resourceVersion counter, CRDs and control plane.  `docs/simulator.md` says what it emulates,
//! what it does not, and the fidelity rule it is held to.
//!
//! ```text
//!   kubectl / kube-rs ──HTTP(S)──► ListenerCtl ──► middleware (auth, faults, log, Cache-Control)
//!                                                     │
//!         ┌───────────────────────────────────────────┴──────────────────────┐
//!         ▼                         ▼                          ▼              ▼
//!   /api, /apis (rest)     discovery / openapi       /_sim/v1 hooks     /metrics
//!         │ create/update/patch/apply/delete (write.rs, sim-core rules)
//!         ▼
//!   Store (objects, global RV, event log) ──► watch streams, garbage collector
//!         ▲
//!   ControlPlane (scheduler, controllers, kubelet) via an in-process kube::Client
//! ```
//!
//! Entry points: [`SimCluster`] and [`SimFleet`] for tests and other crates; [`cli`] for the
//! `nave-sim` binary; [`up`] for the playground (a management cluster, the hub, a fleet with its
//! agents), [`scenario`] for evaluation runs on it, and [`prometheus`] for a real Prometheus
//! scraping simulated clusters (the playground's and the end-to-end tests').

#![forbid(unsafe_code)]

pub mod cli;
pub mod cluster;
pub mod config;
pub mod controllers;
pub mod kubectl;
pub mod metrics;
pub mod prometheus;
pub mod scenario;
pub mod server;
pub mod up;

pub use cluster::{Faults, ServeOptions, SimCluster, SimError, SimFleet, install_crypto_provider};
pub use config::{ClusterConfig, FleetConfig, Link, NetworkConfig};
pub use server::hooks::FaultRule;
