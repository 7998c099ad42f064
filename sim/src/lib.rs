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
//!         │ create/update/patch/apply ──► mutating admission webhooks (admission.rs, https)
//!         │ create/update/patch/apply/delete (write.rs, sim-core rules)
//!         ▼
//!   Store (objects, global RV, event log) ──► watch streams, garbage collector
//!         ▲
//!   ControlPlane (scheduler, controllers, kubelet) via an in-process kube::Client
//! ```
//!
//! `/metrics` and the resource metrics API (`metrics.k8s.io`, what `kubectl top` reads) are both
//! computed from the control plane's usage model ([`metrics::resource_usage`]), never stored.
//!
//! Beyond the requirements it was written to, it emulates pod scheduling gates
//! (`spec.schedulingGates`: validation, `PodScheduled=False/SchedulingGated`, see
//! `controllers::scheduler`) and `admissionregistration.k8s.io/v1` MutatingWebhookConfigurations
//! called over HTTPS on every create and update, the simulated controllers' included (see
//! [`server::admission`] for what is and is not implemented), and StatefulSet and Job controllers
//! ([`controllers::statefulset`], [`controllers::job`]), with Job pods that run to completion.
//!
//! Entry points: [`SimCluster`] and [`SimFleet`] for tests and other crates, configured by
//! [`ClusterConfig`] and [`FleetConfig`] (YAML files too); [`cli`] for the `serve` and `fleet`
//! subcommands a binary embeds.
//!
//! The emulator depends on no Nave crate: it is a Kubernetes API server, nothing more. Nave's
//! playground (`nave-sim up`, scenarios, a Prometheus beside the clusters) is built on it in the
//! `nave-playground` crate, which also builds the `nave-sim` binary.

#![forbid(unsafe_code)]

pub mod cli;
pub mod cluster;
pub mod config;
pub mod controllers;
pub mod kubectl;
pub mod metrics;
pub mod server;

pub use cluster::{Faults, ServeOptions, SimCluster, SimError, SimFleet, install_crypto_provider};
pub use config::{ClusterConfig, FleetConfig, Link, NetworkConfig};
pub use server::hooks::FaultRule;
