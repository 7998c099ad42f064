//! The resource types a cluster serves: the built-in set plus one entry per served version of
//! every established CRD.  Discovery, OpenAPI, routing and storage all read this registry, so a CRD
//! becomes (and stops being) servable in the same write that stores it.

use std::collections::BTreeMap;
use std::sync::Arc;

use nave_sim_core::schema::Schema;
use serde_json::Value;

/// The scale subresource of a CRD version (`subresources.scale`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePaths {
    /// `.spec.replicas`-like JSON path.
    pub spec_replicas: String,
    /// `.status.replicas`-like JSON path.
    pub status_replicas: String,
    /// Optional `.status.selector`-like JSON path.
    pub label_selector: Option<String>,
}

/// A CRD printer column.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Column title.
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: String,
    /// OpenAPI format hint.
    pub format: String,
    /// Description.
    pub description: String,
    /// 0 = always shown, >0 = `-o wide`.
    pub priority: i64,
    /// The JSON path of the cell.
    pub json_path: String,
}

/// What a custom resource type adds to a resource type.
#[derive(Debug, Clone)]
pub struct CustomInfo {
    /// Compiled structural schema of the version, if it has one.
    pub schema: Option<Arc<Schema>>,
    /// The version's `openAPIV3Schema` as written, for publishing in OpenAPI v3.
    pub openapi_schema: Option<Arc<Value>>,
    /// Printer columns (empty = the default `Age` column).
    pub columns: Vec<PrinterColumn>,
    /// `deprecated: true` warning text.
    pub deprecation: Option<String>,
    /// `selectableFields[].jsonPath`.
    pub selectable_fields: Vec<String>,
    /// The storage version (objects are stored at it; others only rewrite `apiVersion`).
    pub storage_version: String,
}

/// A subresource: name, response kind `(group, version, kind)` and verbs.
pub type Subresource = (&'static str, (String, String, String), Vec<&'static str>);

/// Special behaviour some built-ins need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// Nothing special.
    None,
    /// Namespaces: lifecycle, finalize subresource.
    Namespace,
    /// Pods: binding, eviction, graceful deletion, status reset.
    Pod,
    /// Nodes: status kept on create.
    Node,
    /// CRDs: registration.
    Crd,
    /// `events.k8s.io/v1` Events: a view of the core Events store.
    EventsV1,
    /// Create-only review resources (`selfsubjectaccessreviews`).
    Review,
    /// `apiregistration.k8s.io` APIServices: read-only, kept in step with the served groups.
    ApiService,
    /// `metrics.k8s.io` PodMetrics and NodeMetrics: computed from the usage model on every
    /// request, never stored; get and list only (see [`super::resource_metrics`]).
    ResourceMetrics,
}

/// One servable resource at one group/version.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group, `""` for core.
    pub group: String,
    /// Version served.
    pub version: String,
    /// Plural resource name (URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// List kind.
    pub list_kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// kubectl short names.
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Has a `/status` subresource.
    pub status: bool,
    /// Has a `/scale` subresource (`None` for no scale; built-ins use `.spec.replicas`).
    pub scale: Option<ScalePaths>,
    /// Other subresources (binding, eviction, log, finalize, approval).
    pub extra_subresources: Vec<&'static str>,
    /// Whether `metadata.generation` is maintained.
    pub generation: bool,
    /// Storage table key shared by every version of the resource.
    pub table: Arc<str>,
    /// Custom-resource details; `None` for built-ins.
    pub custom: Option<CustomInfo>,
    /// Special behaviour.
    pub special: Special,
}

impl ResourceType {
    /// `group/version`, or `version` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether this is a custom resource.
    pub fn is_custom(&self) -> bool {
        self.custom.is_some()
    }

    /// The verbs of the main resource.
    pub fn verbs(&self) -> Vec<&'static str> {
        if self.special == Special::Review {
            return vec!["create"];
        }
        if self.special == Special::ApiService {
            return vec!["get", "list", "watch"];
        }
        if self.special == Special::ResourceMetrics {
            return vec!["get", "list"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }

    /// Subresources as `(name, responseKind (group, version, kind), verbs)`.
    pub fn subresources(&self) -> Vec<Subresource> {
        let own = (self.group.clone(), self.version.clone(), self.kind.clone());
        let gpu = vec!["get", "patch", "update"];
        let mut out = Vec::new();
        if self.scale.is_some() {
            out.push((
                "scale",
                ("autoscaling".to_owned(), "v1".to_owned(), "Scale".to_owned()),
                gpu.clone(),
            ));
        }
        if self.status {
            out.push(("status", own.clone(), gpu.clone()));
        }
        for s in &self.extra_subresources {
            match *s {
                "binding" => out.push((
                    "binding",
                    ("".into(), "v1".into(), "Binding".into()),
                    vec!["create"],
                )),
                "eviction" => out.push((
                    "eviction",
                    ("policy".into(), "v1".into(), "Eviction".into()),
                    vec!["create"],
                )),
                "log" => out.push(("log", ("".into(), "v1".into(), "Pod".into()), vec!["get"])),
                "exec" | "attach" | "portforward" => {
                    let kind = match *s {
                        "exec" => "PodExecOptions",
                        "attach" => "PodAttachOptions",
                        _ => "PodPortForwardOptions",
                    };
                    out.push((*s, ("".into(), "v1".into(), kind.into()), vec!["create", "get"]));
                }
                "token" => out.push((
                    "token",
                    ("authentication.k8s.io".into(), "v1".into(), "TokenRequest".into()),
                    vec!["create"],
                )),
                "finalize" => out.push(("finalize", own.clone(), vec!["update"])),
                "approval" => out.push(("approval", own.clone(), gpu.clone())),
                _ => {}
            }
        }
        out.sort_by(|a, b| a.0.cmp(b.0));
        out
    }
}

struct B {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    all: bool,
    status: bool,
    scale: bool,
    extra: &'static [&'static str],
    generation: bool,
    special: Special,
}

const fn b(group: &'static str, version: &'static str, plural: &'static str, kind: &'static str) -> B {
    B {
        group,
        version,
        plural,
        kind,
        namespaced: true,
        short: &[],
        all: false,
        status: false,
        scale: false,
        extra: &[],
        generation: false,
        special: Special::None,
    }
}

impl B {
    const fn cluster(mut self) -> B {
        self.namespaced = false;
        self
    }
    const fn short(mut self, s: &'static [&'static str]) -> B {
        self.short = s;
        self
    }
    const fn all(mut self) -> B {
        self.all = true;
        self
    }
    const fn status(mut self) -> B {
        self.status = true;
        self
    }
    const fn scale(mut self) -> B {
        self.scale = true;
        self
    }
    const fn gen_(mut self) -> B {
        self.generation = true;
        self
    }
    const fn extra(mut self, e: &'static [&'static str]) -> B {
        self.extra = e;
        self
    }
    const fn special(mut self, s: Special) -> B {
        self.special = s;
        self
    }
}

fn builtin_table() -> Vec<B> {
    vec![
        b("", "v1", "namespaces", "Namespace")
            .cluster()
            .short(&["ns"])
            .status()
            .extra(&["finalize"])
            .special(Special::Namespace),
        b("", "v1", "pods", "Pod")
            .short(&["po"])
            .all()
            .status()
            .extra(&["attach", "binding", "eviction", "exec", "log", "portforward"])
            .special(Special::Pod),
        b("", "v1", "nodes", "Node")
            .cluster()
            .short(&["no"])
            .status()
            .special(Special::Node),
        b("", "v1", "configmaps", "ConfigMap").short(&["cm"]),
        b("", "v1", "secrets", "Secret"),
        b("", "v1", "services", "Service").short(&["svc"]).all().status(),
        b("", "v1", "serviceaccounts", "ServiceAccount")
            .short(&["sa"])
            .extra(&["token"]),
        b("", "v1", "events", "Event").short(&["ev"]),
        b("", "v1", "endpoints", "Endpoints").short(&["ep"]),
        b("", "v1", "replicationcontrollers", "ReplicationController")
            .short(&["rc"])
            .all()
            .status()
            .scale()
            .gen_(),
        b("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
            .short(&["pvc"])
            .status(),
        b("", "v1", "persistentvolumes", "PersistentVolume")
            .cluster()
            .short(&["pv"])
            .status(),
        b("", "v1", "resourcequotas", "ResourceQuota")
            .short(&["quota"])
            .status(),
        b("", "v1", "limitranges", "LimitRange").short(&["limits"]),
        b("apps", "v1", "deployments", "Deployment")
            .short(&["deploy"])
            .all()
            .status()
            .scale()
            .gen_(),
        b("apps", "v1", "replicasets", "ReplicaSet")
            .short(&["rs"])
            .all()
            .status()
            .scale()
            .gen_(),
        b("apps", "v1", "statefulsets", "StatefulSet")
            .short(&["sts"])
            .all()
            .status()
            .scale()
            .gen_(),
        b("apps", "v1", "daemonsets", "DaemonSet")
            .short(&["ds"])
            .all()
            .status()
            .gen_(),
        b("apps", "v1", "controllerrevisions", "ControllerRevision"),
        b("batch", "v1", "jobs", "Job").all().status().gen_(),
        b("batch", "v1", "cronjobs", "CronJob")
            .short(&["cj"])
            .all()
            .status()
            .gen_(),
        b("coordination.k8s.io", "v1", "leases", "Lease"),
        b("events.k8s.io", "v1", "events", "Event")
            .short(&["ev"])
            .special(Special::EventsV1),
        b(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
        )
        .cluster()
        .short(&["crd", "crds"])
        .status()
        .gen_()
        .special(Special::Crd),
        b(
            "certificates.k8s.io",
            "v1",
            "certificatesigningrequests",
            "CertificateSigningRequest",
        )
        .cluster()
        .short(&["csr"])
        .status()
        .extra(&["approval"]),
        b("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
            .short(&["pdb"])
            .status()
            .gen_(),
        b("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
        b("networking.k8s.io", "v1", "ingresses", "Ingress")
            .short(&["ing"])
            .status()
            .gen_(),
        b("apiregistration.k8s.io", "v1", "apiservices", "APIService")
            .cluster()
            .status()
            .special(Special::ApiService),
        b(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
        )
        .cluster()
        .gen_(),
        b("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass")
            .cluster()
            .short(&["pc"]),
        b("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        b("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        b("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole").cluster(),
        b(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
        )
        .cluster(),
        b(
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
        )
        .cluster()
        .special(Special::Review),
        // Last, as metrics-server's APIService has the lowest group priority of a usual cluster.
        b("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics")
            .cluster()
            .special(Special::ResourceMetrics),
        b("metrics.k8s.io", "v1beta1", "pods", "PodMetrics").special(Special::ResourceMetrics),
    ]
}

fn singular_of(kind: &str) -> String {
    kind.to_lowercase()
}

/// The built-in resource types.
pub fn builtins() -> Vec<Arc<ResourceType>> {
    builtin_table()
        .into_iter()
        .map(|b| {
            // Both Event views share the core store, as in a real cluster: one object, two APIs.
            let table: Arc<str> = if b.special == Special::EventsV1 {
                Arc::from("/events")
            } else {
                Arc::from(format!("{}/{}", b.group, b.plural))
            };
            Arc::new(ResourceType {
                group: b.group.to_owned(),
                version: b.version.to_owned(),
                plural: b.plural.to_owned(),
                singular: singular_of(b.kind),
                kind: b.kind.to_owned(),
                list_kind: format!("{}List", b.kind),
                namespaced: b.namespaced,
                short_names: b.short.iter().map(|s| (*s).to_owned()).collect(),
                categories: if b.all { vec!["all".to_owned()] } else { vec![] },
                status: b.status,
                scale: b.scale.then(|| ScalePaths {
                    spec_replicas: ".spec.replicas".into(),
                    status_replicas: ".status.replicas".into(),
                    label_selector: None,
                }),
                extra_subresources: b.extra.to_vec(),
                generation: b.generation,
                table,
                custom: None,
                special: b.special,
            })
        })
        .collect()
}

/// Every servable resource type, by `(group, version)` then plural.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// `(group, version)` → plural → type.  Group order follows insertion via `group_order`.
    pub by_gv: BTreeMap<(String, String), BTreeMap<String, Arc<ResourceType>>>,
    /// Group names in discovery order (core first, then built-ins, then CRD groups).
    pub group_order: Vec<String>,
    /// Versions per group in preference order.
    pub group_versions: BTreeMap<String, Vec<String>>,
    /// CRD name → the types it contributed.
    pub crds: BTreeMap<String, Vec<Arc<ResourceType>>>,
}

impl Registry {
    /// A registry with the built-ins.
    pub fn new() -> Registry {
        let mut r = Registry::default();
        for rt in builtins() {
            r.insert(rt);
        }
        r
    }

    fn insert(&mut self, rt: Arc<ResourceType>) {
        if !self.group_order.contains(&rt.group) {
            self.group_order.push(rt.group.clone());
        }
        let versions = self.group_versions.entry(rt.group.clone()).or_default();
        if !versions.contains(&rt.version) {
            versions.push(rt.version.clone());
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        self.by_gv
            .entry((rt.group.clone(), rt.version.clone()))
            .or_default()
            .insert(rt.plural.clone(), rt);
    }

    /// Stops serving every version of `group`.
    pub fn remove_group(&mut self, group: &str) {
        self.by_gv.retain(|(g, _), _| g != group);
        self.group_versions.remove(group);
        self.group_order.retain(|g| g != group);
    }

    /// Looks a resource up by group, version and plural.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.by_gv
            .get(&(group.to_owned(), version.to_owned()))?
            .get(plural)
            .cloned()
    }

    /// Whether a group/version is served.
    pub fn has_gv(&self, group: &str, version: &str) -> bool {
        self.by_gv.contains_key(&(group.to_owned(), version.to_owned()))
    }

    /// Every type of one storage table (all versions of a resource).
    pub fn by_table(&self, table: &str) -> Vec<Arc<ResourceType>> {
        self.by_gv
            .values()
            .flat_map(|m| m.values())
            .filter(|rt| &*rt.table == table)
            .cloned()
            .collect()
    }

    /// The resource type serving `kind` in `group` at its preferred version.
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let versions = self.group_versions.get(group)?;
        versions.iter().find_map(|v| {
            self.by_gv
                .get(&(group.to_owned(), v.clone()))?
                .values()
                .find(|rt| rt.kind == kind)
                .cloned()
        })
    }

    /// Replaces what the CRD `name` contributes (empty `types` removes it).
    pub fn set_crd(&mut self, name: &str, types: Vec<Arc<ResourceType>>) {
        if let Some(old) = self.crds.remove(name) {
            for rt in old {
                let key = (rt.group.clone(), rt.version.clone());
                if let Some(m) = self.by_gv.get_mut(&key) {
                    m.remove(&rt.plural);
                    if m.is_empty() {
                        self.by_gv.remove(&key);
                        if let Some(vs) = self.group_versions.get_mut(&rt.group) {
                            vs.retain(|v| v != &rt.version);
                            if vs.is_empty() {
                                self.group_versions.remove(&rt.group);
                                self.group_order.retain(|g| g != &rt.group);
                            }
                        }
                    }
                }
            }
        }
        if !types.is_empty() {
            for rt in &types {
                self.insert(rt.clone());
            }
            self.crds.insert(name.to_owned(), types);
        }
    }

    /// Whether another CRD or a built-in already uses `plural` or `kind` in `group`.
    pub fn name_conflict(
        &self,
        crd_name: &str,
        group: &str,
        plural: &str,
        kind: &str,
    ) -> Option<&'static str> {
        for ((g, _), m) in &self.by_gv {
            if g != group {
                continue;
            }
            for rt in m.values() {
                let own = self
                    .crds
                    .get(crd_name)
                    .is_some_and(|ts| ts.iter().any(|t| Arc::ptr_eq(t, rt)));
                if own {
                    continue;
                }
                if rt.plural == plural {
                    return Some("PluralConflict");
                }
                if rt.kind == kind {
                    return Some("KindConflict");
                }
            }
        }
        None
    }
}

/// Kubernetes version ordering: GA > beta > alpha, then by number.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let major: u32 = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, n) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    (level, major, n.parse().unwrap_or(0))
}

/// Reads a CRD object's `spec.versions[]` into resource types (only `served` versions).
pub fn types_from_crd(crd: &Value) -> Result<Vec<Arc<ResourceType>>, String> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default().to_owned();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default().to_owned();
    let kind = names["kind"].as_str().unwrap_or_default().to_owned();
    let singular = names["singular"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| kind.to_lowercase());
    let list_kind = names["listKind"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{kind}List"));
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let short_names = strs(&names["shortNames"]);
    let categories = strs(&names["categories"]);
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default()
        .to_owned();
    let table: Arc<str> = Arc::from(format!("{group}/{plural}"));
    let mut out = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        if v["served"].as_bool() != Some(true) {
            continue;
        }
        let version = v["name"].as_str().unwrap_or_default().to_owned();
        let schema = match v.pointer("/schema/openAPIV3Schema") {
            Some(s) if s.is_object() => Some(Arc::new(
                Schema::compile_at(s, &format!("spec.versions[{i}].schema.openAPIV3Schema"))
                    .map_err(|errs| nave_sim_core::schema::aggregate_messages(&errs))?,
            )),
            _ => None,
        };
        let columns = v["additionalPrinterColumns"]
            .as_array()
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: c["name"].as_str().unwrap_or_default().to_owned(),
                        type_: c["type"].as_str().unwrap_or("string").to_owned(),
                        format: c["format"].as_str().unwrap_or_default().to_owned(),
                        description: c["description"].as_str().unwrap_or_default().to_owned(),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        json_path: c["jsonPath"].as_str().unwrap_or_default().to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let subs = &v["subresources"];
        let scale = subs.get("scale").filter(|s| s.is_object()).map(|s| ScalePaths {
            spec_replicas: s["specReplicasPath"]
                .as_str()
                .unwrap_or(".spec.replicas")
                .to_owned(),
            status_replicas: s["statusReplicasPath"]
                .as_str()
                .unwrap_or(".status.replicas")
                .to_owned(),
            label_selector: s["labelSelectorPath"].as_str().map(str::to_owned),
        });
        let deprecation = (v["deprecated"].as_bool() == Some(true)).then(|| {
            v["deprecationWarning"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{group}/{version} {kind} is deprecated"))
        });
        let selectable_fields = v["selectableFields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f["jsonPath"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        out.push(Arc::new(ResourceType {
            group: group.clone(),
            version,
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            list_kind: list_kind.clone(),
            namespaced,
            short_names: short_names.clone(),
            categories: categories.clone(),
            status: subs.get("status").is_some_and(|s| s.is_object()),
            scale,
            extra_subresources: vec![],
            generation: true,
            table: table.clone(),
            custom: Some(CustomInfo {
                schema,
                openapi_schema: v
                    .pointer("/schema/openAPIV3Schema")
                    .filter(|s| s.is_object())
                    .map(|s| Arc::new(s.clone())),
                columns,
                deprecation,
                selectable_fields,
                storage_version: storage_version.clone(),
            }),
            special: Special::None,
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_ga_beta_alpha() {
        let mut v = vec!["v1alpha1", "v2", "v1beta2", "v1", "v1beta1"];
        v.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1"]);
    }

    #[test]
    fn builtins_have_deployment_scale_and_status() {
        let r = Registry::new();
        let d = r.get("apps", "v1", "deployments").expect("deployments");
        let subs: Vec<_> = d.subresources().into_iter().map(|s| s.0).collect();
        assert_eq!(subs, vec!["scale", "status"]);
        assert_eq!(r.group_order[0], "");
    }
}
