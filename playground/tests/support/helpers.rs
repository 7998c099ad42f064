//! Shared helpers of the playground's integration tests: waiting for conditions with deadlines
//! (never fixed sleeps).

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

/// Polls `f` until it returns `Ok`, or panics after `deadline` with `what` and the last error
/// `f` returned.
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
