//! Objects every real cluster has and tests may look for: the system namespaces, a `default`
//! ServiceAccount in every namespace, the `kubernetes` Service in `default` with its Endpoints
//! and EndpointSlice, and one `apiregistration.k8s.io/v1`
//! APIService per served group-version (custom resource groups included, as the API server's
//! CRD auto-registration adds them).  All are written with the API server's field manager.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::ClusterState;
use super::error::ApiError;
use super::meta;
use super::resources::Registry;
use super::write::WriteOpts;

const MANAGER: &str = "kube-apiserver";

/// The `kubernetes` Service's cluster IP: the first address of the default service range.
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The system namespaces.
pub const NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

impl ClusterState {
    fn create_if_missing(&self, group: &str, plural: &str, ns: &str, obj: Value) -> Result<(), ApiError> {
        let rt = self
            .registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(group, "v1", plural)
            .ok_or_else(|| ApiError::internal(format!("{plural} are not registered")))?;
        match self.create(&rt, ns, obj, &WriteOpts::internal(MANAGER), false) {
            Ok(_) => Ok(()),
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Creates the system namespaces, the `kubernetes` Service and the APIServices.
    pub fn bootstrap(&self) -> Result<(), ApiError> {
        for ns in NAMESPACES {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}});
            self.create_if_missing("", "namespaces", "", obj)?;
            // A namespace that survived a reset lost its ServiceAccount.
            if let Some(stored) = self.store.get("/namespaces", "", ns) {
                self.ensure_default_service_account(&stored);
            }
        }
        let labels = json!({"component": "apiserver", "provider": "kubernetes"});
        let svc = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "labels": labels},
            "spec": {"type": "ClusterIP", "clusterIP": KUBERNETES_SERVICE_IP,
                "clusterIPs": [KUBERNETES_SERVICE_IP], "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster",
                "sessionAffinity": "None",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}});
        self.create_if_missing("", "services", "default", svc)?;
        let port = json!({"name": "https", "port": 6443, "protocol": "TCP"});
        let ep = json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [port]}]});
        self.create_if_missing("", "endpoints", "default", ep)?;
        let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [port]});
        self.create_if_missing("discovery.k8s.io", "endpointslices", "default", slice)?;
        self.sync_api_services();
        Ok(())
    }

    /// Creates the `default` ServiceAccount of a namespace that is not being deleted, as the
    /// ServiceAccount controller of a real cluster does (again, if it was deleted).
    pub fn ensure_default_service_account(&self, namespace: &Value) {
        let ns = meta::meta_str(namespace, "name").unwrap_or_default();
        if ns.is_empty()
            || namespace.pointer("/metadata/deletionTimestamp").is_some()
            || self.store.get("/serviceaccounts", ns, "default").is_some()
        {
            return;
        }
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
        if let Err(e) = self.create_if_missing("", "serviceaccounts", ns, sa) {
            tracing::warn!(namespace = ns, error = %e.message, "creating the default ServiceAccount failed");
        }
    }

    /// Makes the stored APIServices match the served group-versions: adds the new, deletes the
    /// gone.  Runs at start-up, after a reset, and after every CRD write.
    pub fn sync_api_services(&self) {
        let reg = self.registry.read().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(rt) = reg.get("apiregistration.k8s.io", "v1", "apiservices") else {
            return;
        };
        let wanted = api_services(&reg);
        let (stored, _) = self.store.list(&rt.table, None, None);
        for obj in stored {
            let name = meta::meta_str(&obj, "name").unwrap_or_default().to_owned();
            if !wanted.contains_key(&name) {
                let key = (String::new(), name);
                let _ = self.store.commit(&rt.table, &key, Some(&obj), None);
            }
        }
        for (name, obj) in wanted {
            if self.store.get(&rt.table, "", &name).is_none() {
                let _ = self.create(&rt, "", obj, &WriteOpts::internal(MANAGER), false);
            }
        }
    }
}

/// The APIService of every served group-version, by name (`v1.`, `v1.apps`, ...).
fn api_services(reg: &Registry) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (group, versions) in &reg.group_versions {
        let custom = versions.iter().any(|v| {
            reg.by_gv
                .get(&(group.clone(), v.clone()))
                .is_some_and(|m| m.values().any(|rt| rt.is_custom()))
        });
        let (group_priority, version_priority, managed) = match (group.as_str(), custom) {
            ("", _) => (18000, 1, "onstart"),
            (_, false) => (17000, 15, "onstart"),
            (_, true) => (1000, 100, "true"),
        };
        for v in versions {
            let name = format!("{v}.{group}");
            let obj = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": name, "labels": {"kube-aggregator.kubernetes.io/automanaged": managed}},
                "spec": {"group": group, "version": v, "groupPriorityMinimum": group_priority,
                    "versionPriority": version_priority},
                "status": {"conditions": [{"type": "Available", "status": "True",
                    "lastTransitionTime": meta::now_rfc3339(), "reason": "Local",
                    "message": "Local APIServices are always available"}]}});
            out.insert(name, obj);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_group_version_has_an_api_service_named_version_dot_group() {
        let services = api_services(&Registry::new());
        for name in ["v1.", "v1.apps", "v1.batch", "v1.apiregistration.k8s.io"] {
            assert!(
                services.contains_key(name),
                "{name} missing from {:?}",
                services.keys()
            );
        }
        assert_eq!(services["v1.apps"]["spec"]["group"], "apps");
        assert_eq!(services["v1.apps"]["status"]["conditions"][0]["reason"], "Local");
    }
}
