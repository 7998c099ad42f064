//! Waiting for a condition with a deadline.

use std::future::Future;
use std::time::Duration;

/// How long a test usually waits for the system to act.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// How often the condition is checked again.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// Polls `check` until it returns `Ok`, and returns that value. After `deadline`, panics with
/// `what` was expected and the last `Err` seen, so a failure says what the system looked like.
///
/// ```ignore
/// let work = wait_for("web's work to hold 3 replicas", DEADLINE, || async {
///     let work = agent.work().await;
///     if replicas(&work) == 3 { Ok(work) } else { Err(format!("{work:?}")) }
/// })
/// .await;
/// ```
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    match try_wait_for(what, deadline, check).await {
        Ok(value) => value,
        Err(message) => panic!("{message}"),
    }
}

/// As [`wait_for`], but after `deadline` returns the failure message instead of panicking, for
/// helpers that report their failures with more context (a fleet's logs).
pub async fn try_wait_for<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        match check().await {
            Ok(value) => return Ok(value),
            Err(seen) if tokio::time::Instant::now() >= end => {
                return Err(format!(
                    "timed out after {deadline:?} waiting for {what}; last seen: {seen}"
                ));
            }
            Err(_) => tokio::time::sleep(POLL_EVERY).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_first_ok() {
        let mut calls = 0;
        let value = wait_for("the third call", DEADLINE, || {
            calls += 1;
            let seen = calls;
            async move {
                if seen == 3 {
                    Ok(seen)
                } else {
                    Err(format!("call {seen}"))
                }
            }
        })
        .await;
        assert_eq!(value, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for nothing; last seen: still nothing")]
    async fn fails_with_what_was_expected_and_the_last_thing_seen() {
        wait_for("nothing", Duration::from_millis(120), || async {
            Err::<(), _>("still nothing".to_owned())
        })
        .await;
    }
}
