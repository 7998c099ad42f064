//! The three resources the engine accounts for, in the units the scheduler uses.

use std::fmt;

/// An amount of CPU, memory and pod slots.
///
/// Used for a node's allocatable and requested amounts and for measured usage. Quantities are
/// converted by the caller (`"500m"` is 500 millicores, `"1Gi"` is 1,073,741,824 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resources {
    /// CPU in millicores (1 core = 1000).
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Pod slots.
    pub pods: u64,
}

impl Resources {
    /// Nothing at all.
    pub const ZERO: Resources = Resources {
        cpu_millis: 0,
        memory_bytes: 0,
        pods: 0,
    };

    /// An amount from its three parts.
    pub const fn new(cpu_millis: u64, memory_bytes: u64, pods: u64) -> Self {
        Resources {
            cpu_millis,
            memory_bytes,
            pods,
        }
    }

    /// `self - other` per resource, stopping at zero: a node that reports more requested than
    /// allocatable (it happens while allocatable shrinks) has no room, not negative room.
    pub fn saturating_sub(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
            pods: self.pods.saturating_sub(other.pods),
        }
    }

    /// `self + other` per resource, stopping at `u64::MAX`.
    pub fn saturating_add(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            pods: self.pods.saturating_add(other.pods),
        }
    }

    /// `self * n` per resource, stopping at `u64::MAX`.
    pub fn saturating_mul(self, n: u64) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_mul(n),
            memory_bytes: self.memory_bytes.saturating_mul(n),
            pods: self.pods.saturating_mul(n),
        }
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu {}m, memory {} bytes, {} pods",
            self.cpu_millis, self.memory_bytes, self.pods
        )
    }
}
