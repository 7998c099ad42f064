//! What the benches that run the hub and agents over simulated clusters share.

use nave_api::MultiClusterDeployment;

/// The sizes in the comma-separated environment variable `var`, else in `default`.
pub fn sizes(var: &str, default: &str) -> Vec<usize> {
    std::env::var(var)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

/// Replicas available, summed over the workloads.
pub fn available(mcds: &[MultiClusterDeployment]) -> i32 {
    mcds.iter()
        .filter_map(|m| m.status.as_ref())
        .map(|s| s.available_replicas)
        .sum()
}
