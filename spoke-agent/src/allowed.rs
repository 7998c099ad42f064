//! What this agent applies, whatever its work set holds: an allow-list of kinds and of
//! namespaces, set by whoever installs the agent in the cluster. A compromised hub or store can
//! then ask for nothing beyond it: no DaemonSet in `kube-system`, no change to the agent's own
//! Deployment or credential.
//!
//! Kinds are written `Kind.group` as `kubectl api-resources` shows them (`Deployment.apps`),
//! and a bare `Kind` for the core group (`Service`). Namespace patterns are names, or prefixes
//! ending in `*` (`kube-*`, `team-*`).

use std::collections::BTreeSet;

use crate::apply::ObjectRef;

/// The kinds the hub sends today.
pub const DEFAULT_KINDS: &[&str] = &[
    "Deployment.apps",
    "StatefulSet.apps",
    "Job.batch",
    "Service",
    "ServiceExport.multicluster.x-k8s.io",
    "ConfigMap",
    "Secret",
    "Namespace",
];

/// Namespaces refused unless configured otherwise; the agent's own namespace is always refused.
pub const DEFAULT_DENIED_NAMESPACES: &[&str] = &["kube-*"];

/// The kinds and namespaces an agent applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// `Kind.group` (or `Kind` for the core group) of every kind applied.
    pub kinds: BTreeSet<String>,
    /// Namespace patterns objects may be in; empty: any namespace not denied.
    pub namespaces: Vec<String>,
    /// Namespace patterns objects may never be in (checked first).
    pub denied_namespaces: Vec<String>,
    /// The agent's own namespace: never written by a work set.
    pub own_namespace: String,
}

impl Allowed {
    /// The defaults: [`DEFAULT_KINDS`], any namespace but [`DEFAULT_DENIED_NAMESPACES`] and
    /// `own_namespace`.
    pub fn defaults(own_namespace: &str) -> Allowed {
        Allowed {
            kinds: DEFAULT_KINDS.iter().map(|k| (*k).to_owned()).collect(),
            namespaces: Vec::new(),
            denied_namespaces: DEFAULT_DENIED_NAMESPACES
                .iter()
                .map(|n| (*n).to_owned())
                .collect(),
            own_namespace: own_namespace.to_owned(),
        }
    }

    /// Why `object` is refused; `Ok` when the agent may apply it. A Namespace object is held to
    /// the namespace rules by its name.
    pub fn check(&self, object: &ObjectRef) -> Result<(), String> {
        self.check_kind(&object.api_version, &object.kind)?;
        let namespace = match (&object.namespace, object.kind.as_str()) {
            (Some(namespace), _) => namespace.as_str(),
            (None, "Namespace") => object.name.as_str(),
            (None, _) => return Ok(()),
        };
        if namespace == self.own_namespace {
            return Err(format!(
                "namespace {namespace} is the agent's own; a work set never writes there"
            ));
        }
        if let Some(pattern) = self.denied_namespaces.iter().find(|p| matches(p, namespace)) {
            return Err(format!(
                "namespace {namespace} is denied to this agent ({pattern}; --deny-namespace)"
            ));
        }
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|p| matches(p, namespace)) {
            return Err(format!(
                "namespace {namespace} is not in this agent's allow-list ({}; --allow-namespace)",
                self.namespaces.join(", ")
            ));
        }
        Ok(())
    }
}

impl Allowed {
    /// The namespaces the agent is confined to when they are all names (no `*`); `None` when
    /// it may write in any namespace not denied, or a pattern widens the list.
    pub fn exact_namespaces(&self) -> Option<Vec<&str>> {
        if self.namespaces.is_empty() || self.namespaces.iter().any(|n| n.contains('*')) {
            return None;
        }
        Some(self.namespaces.iter().map(String::as_str).collect())
    }

    /// Why objects of this kind are refused; `Ok` when the kind is allowed. Checked before the
    /// kind is looked up in the cluster, so a refused kind costs no API call.
    pub fn check_kind(&self, api_version: &str, kind: &str) -> Result<(), String> {
        let kind = kind_key(api_version, kind);
        if self.kinds.contains(&kind) {
            return Ok(());
        }
        Err(format!(
            "kind {kind} is not in this agent's allow-list ({}); an admin of the cluster can add \
             it (--allow-kind)",
            self.kinds.iter().cloned().collect::<Vec<_>>().join(", ")
        ))
    }
}

pub use nave_api::wire::kind_key;

fn matches(pattern: &str, namespace: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => namespace.starts_with(prefix),
        None => pattern == namespace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_owned),
            name: name.into(),
        }
    }

    #[test]
    fn the_defaults_take_what_the_hub_sends_and_nothing_else() {
        let allowed = Allowed::defaults("nave-system");
        for ok in [
            object("apps/v1", "Deployment", Some("shop"), "web"),
            object("v1", "Service", Some("shop"), "web"),
            object("v1", "Secret", Some("shop"), "db"),
            object("v1", "Namespace", None, "shop"),
        ] {
            assert_eq!(allowed.check(&ok), Ok(()), "{ok}");
        }
        let refused = [
            (
                object("apps/v1", "DaemonSet", Some("shop"), "x"),
                "kind DaemonSet.apps",
            ),
            (
                object("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, "x"),
                "kind ClusterRoleBinding.rbac",
            ),
            (
                object("apps/v1", "Deployment", Some("kube-system"), "x"),
                "namespace kube-system is denied",
            ),
            (
                object("v1", "Secret", Some("nave-system"), "nave-agent-credential"),
                "the agent's own",
            ),
            (
                object("apps/v1", "Deployment", Some("nave-system"), "nave-agent"),
                "the agent's own",
            ),
            (
                object("v1", "Namespace", None, "kube-public"),
                "namespace kube-public is denied",
            ),
        ];
        for (object, why) in refused {
            let error = allowed.check(&object).expect_err("refused");
            assert!(error.contains(why), "{object}: {error}");
        }
    }

    #[test]
    fn an_allow_list_of_namespaces_confines_the_agent() {
        let allowed = Allowed {
            namespaces: vec!["team-*".into(), "shop".into()],
            ..Allowed::defaults("nave-system")
        };
        assert_eq!(
            allowed.check(&object("v1", "Service", Some("team-a"), "x")),
            Ok(())
        );
        assert_eq!(allowed.check(&object("v1", "Service", Some("shop"), "x")), Ok(()));
        let error = allowed
            .check(&object("v1", "Service", Some("default"), "x"))
            .unwrap_err();
        assert!(error.contains("not in this agent's allow-list"), "{error}");
    }

    #[test]
    fn kinds_are_named_as_kubectl_names_them() {
        assert_eq!(kind_key("apps/v1", "Deployment"), "Deployment.apps");
        assert_eq!(kind_key("v1", "ConfigMap"), "ConfigMap");
        assert_eq!(
            kind_key("networking.k8s.io/v1", "NetworkPolicy"),
            "NetworkPolicy.networking.k8s.io"
        );
    }
}
