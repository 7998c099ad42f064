//! What a pod takes from its node, counted as kube-scheduler counts it (upstream
//! `k8s.io/component-helpers/resource.PodRequests` and `PodLimits`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;

use crate::quantity::{Quantity, QuantityFormat};

#[cfg(test)]
mod tests;

/// Amounts per resource name (`cpu`, `memory`, `pods`, `ephemeral-storage`, extended resources),
/// each in thousandths of its unit, as [`Quantity::milli_value`] gives them. Sums saturate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources(BTreeMap<String, i128>);

impl Resources {
    /// No resources.
    pub fn new() -> Resources {
        Resources::default()
    }

    /// A Kubernetes resource list (`requests`, `limits`, `allocatable`, `overhead`). A quantity that
    /// does not parse counts as zero: the API server validates them, and a controller must not
    /// fail on an odd object.
    pub fn from_list(list: Option<&BTreeMap<String, KubeQuantity>>) -> Resources {
        list.into_iter()
            .flatten()
            .map(|(name, q)| {
                let milli = Quantity::try_from(q).map_or(0, |q| q.milli_value());
                (name.clone(), milli)
            })
            .collect()
    }

    /// The amount of `name` in thousandths of its unit, if listed.
    pub fn get(&self, name: &str) -> Option<i128> {
        self.0.get(name).copied()
    }

    /// The amount of `name` in thousandths of its unit; zero when absent.
    pub fn milli(&self, name: &str) -> i128 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// The amount of `name` in whole units, rounded away from zero (upstream `Value()`).
    pub fn value(&self, name: &str) -> i128 {
        Quantity::from_milli(self.milli(name), QuantityFormat::DecimalSI).value()
    }

    /// CPU in millicores, as the scheduler counts it; negative amounts count as zero and huge ones
    /// saturate.
    pub fn cpu_millis(&self) -> u64 {
        clamp_u64(self.milli("cpu"))
    }

    /// Memory in bytes, rounded up; negative amounts count as zero and huge ones saturate.
    pub fn memory_bytes(&self) -> u64 {
        clamp_u64(self.value("memory"))
    }

    /// Sets the amount of `name`, in thousandths of its unit.
    pub fn set(&mut self, name: impl Into<String>, milli: i128) {
        self.0.insert(name.into(), milli);
    }

    /// Adds `other`, resource by resource.
    pub fn add(&mut self, other: &Resources) {
        for (name, v) in &other.0 {
            let e = self.0.entry(name.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    /// Raises each resource to at least `other`'s amount.
    fn raise_to(&mut self, other: &Resources) {
        for (name, v) in &other.0 {
            let e = self.0.entry(name.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// The resource names and amounts (thousandths), by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i128)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// The resource names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Whether no resource is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, i128)> for Resources {
    fn from_iter<I: IntoIterator<Item = (String, i128)>>(iter: I) -> Resources {
        Resources(iter.into_iter().collect())
    }
}

impl IntoIterator for Resources {
    type Item = (String, i128);
    type IntoIter = std::collections::btree_map::IntoIter<String, i128>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

fn clamp_u64(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

/// A container's requests; a limit stands in for a missing request, as the API server defaults
/// it.
pub fn container_requests(c: &Container) -> Resources {
    let res = c.resources.as_ref();
    let mut out = Resources::from_list(res.and_then(|r| r.limits.as_ref()));
    for (name, v) in Resources::from_list(res.and_then(|r| r.requests.as_ref())).0 {
        out.0.insert(name, v);
    }
    out
}

/// A container's limits.
pub fn container_limits(c: &Container) -> Resources {
    Resources::from_list(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
}

/// Whether an init container is a sidecar: it keeps running next to the app containers.
fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// What a pod takes from its node, as kube-scheduler counts it (upstream `PodRequests`): per
/// resource the larger of
///
/// - the app containers plus the sidecars (init containers with `restartPolicy: Always`, which
///   keep running), and
/// - for each other init container, its request plus the sidecars started before it (it runs
///   alone next to them),
///
/// plus `spec.overhead`. A limit stands in for a missing request. Resources that come to zero are
/// left out.
pub fn pod_requests(spec: &PodSpec) -> Resources {
    let mut out = aggregate(spec, container_requests);
    out.add(&Resources::from_list(spec.overhead.as_ref()));
    out.0.retain(|_, v| *v != 0);
    out
}

/// A pod's limits, aggregated like [`pod_requests`] (upstream `PodLimits`); the overhead is added
/// only to the resources that have a limit.
pub fn pod_limits(spec: &PodSpec) -> Resources {
    let mut out = aggregate(spec, container_limits);
    for (name, v) in Resources::from_list(spec.overhead.as_ref()).0 {
        if let Some(e) = out.0.get_mut(&name) {
            *e = e.saturating_add(v);
        }
    }
    out.0.retain(|_, v| *v != 0);
    out
}

fn aggregate(spec: &PodSpec, of: fn(&Container) -> Resources) -> Resources {
    let mut running = Resources::new();
    for c in &spec.containers {
        running.add(&of(c));
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let this = of(c);
        if is_sidecar(c) {
            running.add(&this);
            sidecars.add(&this);
            init_peak.raise_to(&sidecars);
        } else {
            let mut alone = this;
            alone.add(&sidecars);
            init_peak.raise_to(&alone);
        }
    }
    running.raise_to(&init_peak);
    running
}
