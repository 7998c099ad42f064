//! The crate's one error type.

/// Why a field of a Nave resource could not be interpreted.
///
/// Every variant names the field path as a user would type it after `kubectl explain`, so the
/// hub can copy the message into a condition unchanged.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `spec.template.spec` is not a valid `apps/v1` `DeploymentSpec`.
    #[error("{path}: {source}")]
    ParseTemplate {
        /// Path of the offending field, e.g. `spec.template.spec.template.spec.containers[0].image`.
        path: String,
        /// What serde found wrong there.
        #[source]
        source: serde_json::Error,
    },

    /// `spec.template.spec` parses but breaks a rule of Deployments (the CRD's validation rules
    /// check the same; this catches objects that bypassed them).
    #[error("{path}: {message}")]
    InvalidTemplate {
        /// Path of the offending field, e.g. `spec.template.spec.selector`.
        path: String,
        /// What is wrong, e.g. `selector.matchLabels must match template.metadata.labels`.
        message: &'static str,
    },

    /// A duration field is not a Go-style duration such as `5m` or `1h30m`.
    #[error("{path}: invalid duration {value:?}: {source}")]
    ParseDuration {
        /// Path of the offending field, e.g. `spec.placement.rescheduling.pendingTimeout`.
        path: String,
        /// The text that failed to parse.
        value: String,
        /// Why it failed.
        #[source]
        source: kube::core::duration::ParseError,
    },

    /// A duration field is negative (only possible when the schema was bypassed).
    #[error("{path}: duration {value:?} must not be negative")]
    NegativeDuration {
        /// Path of the offending field.
        path: String,
        /// The negative duration as written.
        value: String,
    },

    /// A label selector has an invalid expression (e.g. `In` without values).
    #[error("{path}: invalid label selector: {source}")]
    ParseSelector {
        /// Path of the offending selector, e.g. `spec.overrides[0].clusterSelector`.
        path: String,
        /// Why it is invalid.
        #[source]
        source: kube::core::ParseExpressionError,
    },

    /// A number out of its range (only possible when the schema was bypassed).
    #[error("{path}: Invalid value: {value}: {message}")]
    OutOfRange {
        /// Path of the offending field, e.g. `spec.rollout.maxConcurrency`.
        path: &'static str,
        /// The value as written.
        value: i64,
        /// The range, e.g. `must be at least 1`.
        message: &'static str,
    },
}
