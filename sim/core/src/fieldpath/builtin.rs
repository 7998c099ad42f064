//! The list semantics of built-in kinds: `+listType` / `+listMapKey` (server-side apply) and
//! `patchStrategy` / `patchMergeKey` (strategic merge patch) from the `kubernetes/api` struct tags.

use serde_json::Value;

use super::{ListType, ListTypes, SmpListStrategy, Step};

/// SSA semantics of one list field.
#[derive(Debug, Clone, Copy)]
enum Ssa {
    Atomic,
    Set,
    Map(&'static [&'static str]),
}

/// SMP semantics of one list field.
#[derive(Debug, Clone, Copy)]
enum Smp {
    Replace,
    Key(&'static str),
    Primitives,
}

/// One row of a table: a path pattern (`a.b[].c`, `[]` = any list element) and its semantics.
type Entry = (&'static str, Ssa, Smp);

/// Lists every object has.
const METADATA: &[Entry] = &[
    ("metadata.finalizers", Ssa::Set, Smp::Primitives),
    ("metadata.ownerReferences", Ssa::Map(&["uid"]), Smp::Key("uid")),
    ("metadata.managedFields", Ssa::Atomic, Smp::Replace),
];

/// Lists of a `PodSpec`, relative to it.
const POD_SPEC: &[Entry] = &[
    ("containers", Ssa::Map(&["name"]), Smp::Key("name")),
    ("initContainers", Ssa::Map(&["name"]), Smp::Key("name")),
    ("ephemeralContainers", Ssa::Map(&["name"]), Smp::Key("name")),
    ("volumes", Ssa::Map(&["name"]), Smp::Key("name")),
    ("imagePullSecrets", Ssa::Map(&["name"]), Smp::Key("name")),
    ("tolerations", Ssa::Atomic, Smp::Replace),
    ("hostAliases", Ssa::Map(&["ip"]), Smp::Key("ip")),
    (
        "topologySpreadConstraints",
        Ssa::Map(&["topologyKey", "whenUnsatisfiable"]),
        Smp::Key("topologyKey"),
    ),
    ("schedulingGates", Ssa::Map(&["name"]), Smp::Key("name")),
    ("resourceClaims", Ssa::Map(&["name"]), Smp::Key("name")),
    ("readinessGates", Ssa::Atomic, Smp::Replace),
];

/// Lists of a `Container` (and `EphemeralContainer`), relative to it.
const CONTAINER: &[Entry] = &[
    ("env", Ssa::Map(&["name"]), Smp::Key("name")),
    (
        "ports",
        Ssa::Map(&["containerPort", "protocol"]),
        Smp::Key("containerPort"),
    ),
    ("volumeMounts", Ssa::Map(&["mountPath"]), Smp::Key("mountPath")),
    ("volumeDevices", Ssa::Map(&["devicePath"]), Smp::Key("devicePath")),
    ("command", Ssa::Atomic, Smp::Replace),
    ("args", Ssa::Atomic, Smp::Replace),
    ("envFrom", Ssa::Atomic, Smp::Replace),
    ("resizePolicy", Ssa::Atomic, Smp::Replace),
    ("resources.claims", Ssa::Map(&["name"]), Smp::Replace),
];

/// Atomic structs and maps of a `PodSpec` (`+structType=atomic`, `+mapType=atomic`), relative to it.
const POD_SPEC_ATOMIC: &[&str] = &[
    "nodeSelector",
    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
];

/// Atomic structs of a `Container`, relative to it.
const CONTAINER_ATOMIC: &[&str] = &[
    "env[].valueFrom.configMapKeyRef",
    "env[].valueFrom.secretKeyRef",
    "env[].valueFrom.fieldRef",
    "env[].valueFrom.resourceFieldRef",
];

/// Field names that are `LabelSelector`s (`+structType=atomic`) wherever they occur in a pod spec.
const SELECTOR_NAMES: &[&str] = &["labelSelector", "namespaceSelector"];

const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

const WORKLOAD_STATUS: &[Entry] = &[("status.conditions", Ssa::Map(&["type"]), Smp::Key("type"))];

const POD: &[Entry] = &[
    ("status.conditions", Ssa::Map(&["type"]), Smp::Key("type")),
    ("status.podIPs", Ssa::Map(&["ip"]), Smp::Key("ip")),
    ("status.hostIPs", Ssa::Atomic, Smp::Key("ip")),
    ("status.containerStatuses", Ssa::Atomic, Smp::Replace),
    ("status.initContainerStatuses", Ssa::Atomic, Smp::Replace),
    ("status.ephemeralContainerStatuses", Ssa::Atomic, Smp::Replace),
    (
        "status.resourceClaimStatuses",
        Ssa::Map(&["name"]),
        Smp::Key("name"),
    ),
];

const STATEFUL_SET: &[Entry] = &[
    ("status.conditions", Ssa::Map(&["type"]), Smp::Key("type")),
    ("spec.volumeClaimTemplates", Ssa::Atomic, Smp::Replace),
];

const JOB: &[Entry] = &[
    ("status.conditions", Ssa::Atomic, Smp::Key("type")),
    ("status.uncountedTerminatedPods.succeeded", Ssa::Set, Smp::Replace),
    ("status.uncountedTerminatedPods.failed", Ssa::Set, Smp::Replace),
];

const CRON_JOB: &[Entry] = &[("status.active", Ssa::Atomic, Smp::Replace)];

const NODE: &[Entry] = &[
    ("spec.taints", Ssa::Atomic, Smp::Replace),
    ("spec.podCIDRs", Ssa::Set, Smp::Primitives),
    ("status.conditions", Ssa::Map(&["type"]), Smp::Key("type")),
    ("status.addresses", Ssa::Map(&["type"]), Smp::Key("type")),
    ("status.images", Ssa::Atomic, Smp::Replace),
    ("status.volumesInUse", Ssa::Atomic, Smp::Replace),
    ("status.volumesAttached", Ssa::Atomic, Smp::Replace),
];

const SERVICE: &[Entry] = &[
    ("spec.ports", Ssa::Map(&["port", "protocol"]), Smp::Key("port")),
    ("spec.clusterIPs", Ssa::Atomic, Smp::Replace),
    ("spec.ipFamilies", Ssa::Atomic, Smp::Replace),
    ("spec.externalIPs", Ssa::Atomic, Smp::Replace),
    ("status.conditions", Ssa::Map(&["type"]), Smp::Key("type")),
    ("status.loadBalancer.ingress", Ssa::Atomic, Smp::Replace),
];

const NAMESPACE: &[Entry] = &[
    ("spec.finalizers", Ssa::Atomic, Smp::Replace),
    ("status.conditions", Ssa::Map(&["type"]), Smp::Key("type")),
];

const PVC: &[Entry] = &[
    ("spec.accessModes", Ssa::Atomic, Smp::Replace),
    ("status.conditions", Ssa::Map(&["type"]), Smp::Key("type")),
];

const CRD: &[Entry] = &[
    ("spec.versions", Ssa::Atomic, Smp::Replace),
    ("status.conditions", Ssa::Map(&["type"]), Smp::Key("type")),
];

const MUTATING_WEBHOOK_CONFIGURATION: &[Entry] = &[
    ("webhooks", Ssa::Map(&["name"]), Smp::Key("name")),
    ("webhooks[].rules", Ssa::Atomic, Smp::Replace),
    ("webhooks[].admissionReviewVersions", Ssa::Atomic, Smp::Replace),
    (
        "webhooks[].matchConditions",
        Ssa::Map(&["name"]),
        Smp::Key("name"),
    ),
];

/// The list types of one built-in kind.  Build it with [`BuiltinListTypes::new`] or
/// [`crate::fieldpath::builtin`].
#[derive(Debug, Clone)]
pub struct BuiltinListTypes {
    /// Where pod specs sit (`spec` for Pods, `spec.template.spec` for workloads, ...).
    pod_spec_roots: &'static [&'static str],
    /// Kind-specific rows (full paths).
    table: &'static [Entry],
    /// Top-level fields an empty object of this kind already has.
    preexisting: &'static [&'static str],
    /// Kind-specific atomic maps (full paths).
    atomic_maps: &'static [&'static str],
}

impl BuiltinListTypes {
    /// The table for `group`/`kind` (`""` is the core group).  Unknown kinds know only the
    /// `metadata` lists.
    pub fn new(group: &str, kind: &str) -> Self {
        const SPEC_STATUS: &[&str] = &["spec", "status"];
        const SELECTOR: &[&str] = &["spec.selector"];
        let (pod_spec_roots, table, preexisting): (&[&str], &[Entry], &[&str]) = match (group, kind) {
            ("", "Pod") => (&["spec"], POD, SPEC_STATUS),
            ("", "PodTemplate") => (&["template.spec"], &[], &["template"]),
            ("", "ReplicationController") => (&["spec.template.spec"], WORKLOAD_STATUS, SPEC_STATUS),
            ("apps", "Deployment" | "ReplicaSet" | "DaemonSet") => {
                (&["spec.template.spec"], WORKLOAD_STATUS, SPEC_STATUS)
            }
            ("apps", "StatefulSet") => (&["spec.template.spec"], STATEFUL_SET, SPEC_STATUS),
            ("batch", "Job") => (&["spec.template.spec"], JOB, SPEC_STATUS),
            ("batch", "CronJob") => (&["spec.jobTemplate.spec.template.spec"], CRON_JOB, SPEC_STATUS),
            ("", "Node") => (&[], NODE, SPEC_STATUS),
            ("", "Service") => (&[], SERVICE, SPEC_STATUS),
            ("", "Namespace") => (&[], NAMESPACE, SPEC_STATUS),
            ("", "PersistentVolumeClaim") => (&[], PVC, SPEC_STATUS),
            ("", "ConfigMap" | "Secret") => (&[], &[], &[]),
            ("", "Event") => (&[], &[], &["involvedObject", "source"]),
            ("events.k8s.io", "Event") => (&[], &[], &["regarding"]),
            ("coordination.k8s.io", "Lease") => (&[], &[], &["spec"]),
            ("apiextensions.k8s.io", "CustomResourceDefinition") => (&[], CRD, SPEC_STATUS),
            ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
                (&[], MUTATING_WEBHOOK_CONFIGURATION, &[])
            }
            _ => (&[], &[], &[]),
        };
        let atomic_maps: &[&str] = match (group, kind) {
            ("apps", "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet") | ("batch", "Job") => {
                SELECTOR
            }
            // `ServiceSpec.selector` is `+mapType=atomic`.
            ("", "Service") => SELECTOR,
            // `ObjectReference` is `+structType=atomic`.
            ("", "Event") => &["involvedObject", "related"],
            // `LabelSelector` is `+structType=atomic`.
            ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
                &["webhooks[].namespaceSelector", "webhooks[].objectSelector"]
            }
            _ => &[],
        };
        BuiltinListTypes {
            pod_spec_roots,
            table,
            preexisting,
            atomic_maps,
        }
    }

    fn is_atomic_map(&self, path: &[Step]) -> bool {
        if self.atomic_maps.iter().any(|p| matches(p, path)) {
            return true;
        }
        for root in self.pod_spec_roots {
            let Some(rest) = strip_pattern(root, path) else {
                continue;
            };
            if POD_SPEC_ATOMIC.iter().any(|p| matches(p, rest)) {
                return true;
            }
            if matches!(rest.last(), Some(Step::Field(f)) if SELECTOR_NAMES.contains(&f.as_str())) {
                return true;
            }
            for list in CONTAINER_LISTS {
                if let Some(in_container) =
                    strip_pattern(list, rest).and_then(|r| r.strip_prefix(&[Step::Item]))
                    && CONTAINER_ATOMIC.iter().any(|p| matches(p, in_container))
                {
                    return true;
                }
            }
        }
        false
    }

    fn lookup(&self, path: &[Step]) -> Option<(Ssa, Smp)> {
        let row = |table: &[Entry], steps: &[Step]| {
            table
                .iter()
                .find(|(pattern, _, _)| matches(pattern, steps))
                .map(|&(_, ssa, smp)| (ssa, smp))
        };
        if let Some(found) = row(METADATA, path).or_else(|| row(self.table, path)) {
            return Some(found);
        }
        for root in self.pod_spec_roots {
            let Some(rest) = strip_pattern(root, path) else {
                continue;
            };
            if let Some(found) = row(POD_SPEC, rest) {
                return Some(found);
            }
            for list in CONTAINER_LISTS {
                if let Some(in_container) =
                    strip_pattern(list, rest).and_then(|r| r.strip_prefix(&[Step::Item]))
                    && let Some(found) = row(CONTAINER, in_container)
                {
                    return Some(found);
                }
            }
        }
        None
    }
}

/// The steps of a table pattern: `a.b[].c` is `a`, `b`, item, `c`.
fn pattern_steps(pattern: &str) -> impl Iterator<Item = PatternStep<'_>> {
    pattern
        .split('.')
        .flat_map(|part| match part.strip_suffix("[]") {
            Some(name) => [Some(PatternStep::Field(name)), Some(PatternStep::Item)],
            None => [Some(PatternStep::Field(part)), None],
        })
        .flatten()
}

#[derive(Debug, Clone, Copy)]
enum PatternStep<'a> {
    Field(&'a str),
    Item,
}

fn step_matches(p: PatternStep<'_>, s: &Step) -> bool {
    match (p, s) {
        (PatternStep::Field(a), Step::Field(b)) => a == b,
        (PatternStep::Item, Step::Item) => true,
        _ => false,
    }
}

/// Whether `steps` is exactly `pattern`.
fn matches(pattern: &str, steps: &[Step]) -> bool {
    strip_pattern(pattern, steps).is_some_and(|rest| rest.is_empty())
}

/// `steps` without the leading `pattern`, if it starts with it.
fn strip_pattern<'s>(pattern: &str, steps: &'s [Step]) -> Option<&'s [Step]> {
    let mut rest = steps;
    for p in pattern_steps(pattern) {
        let (first, tail) = rest.split_first()?;
        if !step_matches(p, first) {
            return None;
        }
        rest = tail;
    }
    Some(rest)
}

impl ListTypes for BuiltinListTypes {
    fn map_is_atomic(&self, path: &[Step]) -> bool {
        self.is_atomic_map(path)
    }

    fn list_type(&self, path: &[Step]) -> Option<ListType> {
        self.lookup(path).map(|(ssa, _)| match ssa {
            Ssa::Atomic => ListType::Atomic,
            Ssa::Set => ListType::Set,
            Ssa::Map(keys) => ListType::Map(keys.iter().map(|k| (*k).to_owned()).collect()),
        })
    }

    fn smp_merge_key(&self, path: &[Step]) -> Option<String> {
        match self.lookup(path) {
            Some((_, Smp::Key(key))) => Some(key.to_owned()),
            _ => None,
        }
    }

    fn smp_list_strategy(&self, path: &[Step]) -> SmpListStrategy {
        match self.lookup(path) {
            Some((_, Smp::Key(key))) => SmpListStrategy::MergeByKey(key.to_owned()),
            Some((_, Smp::Primitives)) => SmpListStrategy::MergePrimitives,
            Some((_, Smp::Replace)) | None => SmpListStrategy::Replace,
        }
    }

    fn map_key_default(&self, list_path: &[Step], key: &str) -> Option<Value> {
        // Container and Service ports default their protocol to TCP (`+default="TCP"`).
        match self.lookup(list_path) {
            Some((Ssa::Map(keys), _)) if key == "protocol" && keys.contains(&"protocol") => {
                Some(Value::String("TCP".to_owned()))
            }
            _ => None,
        }
    }

    fn preexisting_top_level_fields(&self) -> &[&str] {
        self.preexisting
    }
}
