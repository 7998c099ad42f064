//! Where the kubectl that matches the simulator's Kubernetes version (1.32) is installed, for
//! tests and benchmarks that drive the real client.

use std::path::PathBuf;

/// The versioned binary: the `kubectl` on many machines is a dispatcher that runs
/// `kubectl.1.<server minor>`, and tests call the version they were written against directly.
pub const KUBECTL_BINARY: &str = "kubectl.1.32";

/// Finds [`KUBECTL_BINARY`]: in the kubectl package's file list, then on `PATH`, then in the
/// Google Cloud SDK's directory.
pub fn find_kubectl() -> Option<PathBuf> {
    if let Ok(out) = std::process::Command::new("dpkg")
        .args(["-L", "kubectl"])
        .output()
    {
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(line) = text.lines().find(|l| l.ends_with(&format!("/{KUBECTL_BINARY}"))) {
            return Some(PathBuf::from(line));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(KUBECTL_BINARY);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let sdk = PathBuf::from("/usr/lib/google-cloud-sdk/bin").join(KUBECTL_BINARY);
    sdk.is_file().then_some(sdk)
}
