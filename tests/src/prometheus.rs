//! The real Prometheus of the end-to-end tests: found on `PATH` (Debian package `prometheus`),
//! or the test prints a `skipped:` line and passes, unless [`REQUIRE_VAR`] is `1` (as `.ci/run`
//! sets it), when a missing binary fails the test. The server itself (configuration, port,
//! data directory, stop on drop) is [`nave_playground::prometheus::Prometheus`], which the
//! playground runs too.

use std::path::PathBuf;
use std::time::Duration;

use prometheus_http_query::response::Data;

/// Set to `1` to make a missing `prometheus` binary a failure rather than a skip.
pub const REQUIRE_VAR: &str = "NAVE_REQUIRE_PROMETHEUS";

/// How often the tests' Prometheus scrapes.
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

/// The `prometheus` binary; `None` after printing `skipped: ...` naming `case` when it is not on
/// `PATH` and [`REQUIRE_VAR`] is not `1`.
///
/// # Panics
///
/// When the binary is missing and [`REQUIRE_VAR`] is `1`.
pub fn binary_or_skip(case: &str) -> Option<PathBuf> {
    match nave_playground::prometheus::find_binary() {
        Some(binary) => Some(binary),
        None if std::env::var(REQUIRE_VAR).is_ok_and(|v| v == "1") => panic!(
            "{REQUIRE_VAR}=1 but `{}` is not on PATH ({case}); install the Debian package `prometheus`",
            nave_playground::prometheus::BINARY
        ),
        None => {
            println!(
                "skipped: `{}` is not on PATH ({case}); install the Debian package `prometheus`, \
                 or set {REQUIRE_VAR}=1 to make this a failure",
                nave_playground::prometheus::BINARY
            );
            None
        }
    }
}

/// The series an instant query returns as `(labels, value)`, or why there are none (an error,
/// or an answer that is not a vector).
pub async fn query(
    prometheus: &nave_playground::prometheus::Prometheus,
    expr: &str,
) -> Result<Vec<(std::collections::HashMap<String, String>, f64)>, String> {
    let answer = prometheus
        .client()
        .query(expr)
        .get()
        .await
        .map_err(|e| format!("query failed: {e}"))?;
    match answer.data() {
        Data::Vector(v) => Ok(v
            .iter()
            .map(|s| (s.metric().clone(), s.sample().value()))
            .collect()),
        Data::Scalar(s) => Ok(vec![(Default::default(), s.value())]),
        Data::Matrix(_) => Err("a range vector, not an instant one".to_owned()),
    }
}
