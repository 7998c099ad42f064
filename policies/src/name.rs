//! Cluster names as decisions hold them.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, LazyLock, Mutex};

/// A cluster's name in a decision.
///
/// A decision names every cluster of the fleet, so each decision copies every name once. The
/// names of the fleet's clusters are kept once for the life of the process, so that copy is a
/// pointer: a name shared by count cost an atomic increment and decrement per cluster, a tenth
/// of a decision over 1,000 clusters. A name from outside the fleet (a current assignment
/// naming a cluster that is gone, a simulation sent to the REST API) is shared by count and
/// freed with its last holder.
///
/// The fleet's names are never freed: they cost their bytes once per distinct cluster name the
/// process ever had in a fleet, and only the fleet's administrator creates clusters.
#[derive(Clone)]
pub struct ClusterName(Repr);

#[derive(Clone)]
enum Repr {
    Fleet(&'static str),
    Shared(Arc<str>),
}

/// Every name a fleet had in this process.
static FLEET_NAMES: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Mutex::default);

impl ClusterName {
    /// The name of a cluster of the fleet, kept once for the life of the process.
    pub(crate) fn of_fleet(name: &str) -> Self {
        let mut names = FLEET_NAMES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let kept = match names.get(name) {
            Some(kept) => *kept,
            None => {
                let kept: &'static str = Box::leak(name.into());
                names.insert(kept);
                kept
            }
        };
        ClusterName(Repr::Fleet(kept))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Fleet(name) => name,
            Repr::Shared(name) => name,
        }
    }
}

impl Deref for ClusterName {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ClusterName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for ClusterName {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for ClusterName {
    fn from(name: &str) -> Self {
        ClusterName(Repr::Shared(name.into()))
    }
}

impl From<String> for ClusterName {
    fn from(name: String) -> Self {
        ClusterName(Repr::Shared(name.into()))
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for ClusterName {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ClusterName {}

impl PartialEq<str> for ClusterName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ClusterName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialOrd for ClusterName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ClusterName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for ClusterName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::ClusterName;

    #[test]
    fn a_fleet_name_is_kept_once_and_equals_a_shared_one() {
        let a = ClusterName::of_fleet("eu-1");
        let b = ClusterName::of_fleet(&String::from("eu-1"));
        assert!(
            std::ptr::eq(a.as_str(), b.as_str()),
            "a fleet name must be kept once, not once per layout"
        );
        let shared = ClusterName::from("eu-1");
        assert_eq!(a, shared);
        assert_eq!(a, "eu-1");
        assert_eq!(format!("{a} {a:?}"), "eu-1 \"eu-1\"");
        let (before, after) = (ClusterName::from("eu-0"), ClusterName::of_fleet("eu-2"));
        assert!(
            before < a && a < after,
            "names order as their text: {before} < {a} < {after}"
        );
    }
}
