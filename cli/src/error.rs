//! How a command fails, and the exit code that says so to scripts.

/// What kind of failure, each with its own exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// 0: done.
    Done,
    /// 1: the hub or the cluster could not be reached, or refused for a reason of its own.
    Failed,
    /// 2: the input is invalid: flags, files, a spec the hub refuses (as clap's own usage errors).
    Invalid,
    /// 3: what was named does not exist.
    NotFound,
    /// 4: the token is missing, unknown, or of too small a scope.
    NotAllowed,
}

impl ExitKind {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitKind::Done => 0,
            ExitKind::Failed => 1,
            ExitKind::Invalid => 2,
            ExitKind::NotFound => 3,
            ExitKind::NotAllowed => 4,
        }
    }
}

impl From<ExitKind> for std::process::ExitCode {
    fn from(kind: ExitKind) -> Self {
        std::process::ExitCode::from(kind.code())
    }
}

/// A failed command: what to tell the user, and the exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    /// The exit code's kind.
    pub kind: ExitKind,
    /// What went wrong, for people.
    pub message: String,
}

impl CliError {
    /// Unreachable, or refused for a reason of the other side's.
    pub fn failed(message: impl Into<String>) -> Self {
        CliError {
            kind: ExitKind::Failed,
            message: message.into(),
        }
    }

    /// Invalid input.
    pub fn invalid(message: impl Into<String>) -> Self {
        CliError {
            kind: ExitKind::Invalid,
            message: message.into(),
        }
    }

    /// Not found.
    pub fn not_found(message: impl Into<String>) -> Self {
        CliError {
            kind: ExitKind::NotFound,
            message: message.into(),
        }
    }

    /// An error of the management cluster's API, about `what`.
    pub fn kube(what: &str, error: kube::Error) -> Self {
        match &error {
            kube::Error::Api(status) if status.code == 404 => {
                CliError::not_found(format!("{what}: not found"))
            }
            kube::Error::Api(status) if status.code == 401 || status.code == 403 => CliError {
                kind: ExitKind::NotAllowed,
                message: format!("{what}: {}", status.message),
            },
            kube::Error::Api(status) if status.code == 400 || status.code == 422 => {
                CliError::invalid(format!("{what}: {}", status.message))
            }
            _ => CliError::failed(format!("{what}: {error}")),
        }
    }
}
