//! Shared helpers of the nave-sim integration tests: starting clusters and waiting for
//! conditions with deadlines (never fixed sleeps).

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use nave_sim::{ClusterConfig, ServeOptions, SimCluster};

/// A cluster with `nodes` default nodes and the control plane running (or not).
pub async fn cluster(name: &str, control_plane: bool) -> SimCluster {
    let mut config = ClusterConfig {
        name: name.to_owned(),
        ..ClusterConfig::default()
    };
    if let Some(pool) = config.node_pools.first_mut() {
        pool.count = 1;
    }
    let opts = ServeOptions {
        control_plane,
        ..ServeOptions::default()
    };
    SimCluster::start(config, opts).await.expect("cluster starts")
}

/// Polls `f` until it returns `Some`, or panics after `deadline` with `what` and the last value
/// `describe` produced.
pub async fn wait_for<T, F, Fut>(deadline: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let end = tokio::time::Instant::now() + deadline;
    let mut last: String;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(seen) => last = seen,
        }
        if tokio::time::Instant::now() >= end {
            panic!("timed out after {deadline:?} waiting for {what}; last seen: {last}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
