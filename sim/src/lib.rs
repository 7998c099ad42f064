//! nave-sim: a Kubernetes API emulator with simulated nodes and pods.

#![forbid(unsafe_code)]

pub mod config;
pub mod controllers;
pub mod metrics;
