//! RBAC as the Kubernetes API server applies it, for checking a Helm chart's rules against the
//! requests Nave's components really make (nave-sim logs every request it serves).
//!
//! ```text
//!  logged request (method, path, query) ──► classify ──► ResourceRequest {verb, group, resource, name}
//!                                                              │
//!  chart's ClusterRole rules ──────────────────────────► allows(rule, request)
//! ```
//!
//! [`classify`] follows the API server's `RequestInfoFactory`: `GET` of one object is `get`, of a
//! collection `list` (or `watch` with `?watch=true`), `POST` is `create`, `PUT` `update`, `PATCH`
//! `patch`, `DELETE` of one object `delete` and of a collection `deletecollection`. [`allows`]
//! follows the RBAC authorizer's rule matching (`*` wildcards, `resource/subresource`,
//! `resourceNames`).

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::rbac::v1::PolicyRule;

/// A request on a resource, as RBAC sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceRequest {
    /// The RBAC verb.
    pub verb: String,
    /// API group; empty for the core group.
    pub group: String,
    /// Resource, with `/subresource` when there is one (`multiclusterdeployments/status`).
    pub resource: String,
    /// Namespace; `None` for a cluster-wide request.
    pub namespace: Option<String>,
    /// Object name, when the request names one.
    pub name: Option<String>,
}

impl ResourceRequest {
    /// The (verb, group, resource) a rule has to grant.
    pub fn permission(&self) -> Permission {
        Permission {
            verb: self.verb.clone(),
            group: self.group.clone(),
            resource: self.resource.clone(),
        }
    }
}

/// A verb on a resource of a group: one cell of what a role grants.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permission {
    /// The RBAC verb.
    pub verb: String,
    /// API group; empty for the core group.
    pub group: String,
    /// Resource, with `/subresource` when there is one.
    pub resource: String,
}

impl Permission {
    /// A permission from its parts.
    pub fn new(verb: &str, group: &str, resource: &str) -> Self {
        Permission {
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource: resource.to_owned(),
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {}/{}", self.verb, group, self.resource)
    }
}

/// What a request is to the authorizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiRequest {
    /// A request on a resource.
    Resource(ResourceRequest),
    /// Discovery, `/version`, `/openapi/...`: granted to every authenticated user by the
    /// default `system:discovery` and `system:public-info-viewer` roles.
    NonResource(String),
}

/// Classifies an HTTP request as the API server does.
pub fn classify(method: &str, path: &str, query: &str) -> ApiRequest {
    let non_resource = || ApiRequest::NonResource(path.to_owned());
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
        return non_resource();
    }
    let mut rest = &parts[1..];
    let mut group = "";
    if parts[0] == "apis" {
        if rest.len() < 3 {
            return non_resource();
        }
        group = rest[0];
        rest = &rest[1..];
    }
    // The version.
    rest = &rest[1..];
    let mut verb = match rest[0] {
        "watch" | "proxy" if rest.len() >= 2 => {
            let verb = rest[0];
            rest = &rest[1..];
            verb
        }
        _ => match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        },
    }
    .to_owned();
    let mut namespace = None;
    if rest[0] == "namespaces" && rest.len() > 1 {
        namespace = Some(rest[1].to_owned());
        // `namespaces/{name}/status` and `/finalize` are subresources of the Namespace.
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    let resource = rest[0];
    let mut name = rest.get(1).map(|n| (*n).to_owned());
    let subresource = if rest.len() >= 3 && verb != "proxy" {
        Some(rest[2])
    } else {
        None
    };
    if resource == "namespaces" && rest.len() >= 2 {
        // `/api/v1/namespaces/{name}`: the Namespace itself, not a namespace of the request.
        namespace = None;
    }
    if name.is_none() && verb == "get" {
        let params = query_params(query);
        let watch = params
            .iter()
            .any(|(k, v)| *k == "watch" && matches!(v.as_str(), "true" | "1"));
        verb = if watch { "watch" } else { "list" }.to_owned();
        // A field selector on exactly one name makes it a request on that name.
        name = params
            .iter()
            .find(|(k, _)| *k == "fieldSelector")
            .and_then(|(_, v)| v.strip_prefix("metadata.name="))
            .filter(|n| !n.contains(','))
            .map(str::to_owned);
    }
    if name.is_none() && verb == "delete" {
        verb = "deletecollection".to_owned();
    }
    ApiRequest::Resource(ResourceRequest {
        verb,
        group: group.to_owned(),
        resource: match subresource {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_owned(),
        },
        namespace,
        name,
    })
}

/// `key=value` pairs of a raw query, percent-decoded.
fn query_params(query: &str) -> Vec<(&str, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k, percent_decode(v))
        })
        .collect()
}

fn percent_decode(value: &str) -> String {
    let hex = |b: u8| char::from(b).to_digit(16);
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| Some(hex(bytes[i + 1])? * 16 + hex(bytes[i + 2])?))
            .flatten();
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b as u8);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `rule` grants `request`, as the RBAC authorizer decides.
pub fn allows(rule: &PolicyRule, request: &ResourceRequest) -> bool {
    let any = |list: &[String], wanted: &str| list.iter().any(|v| v == "*" || v == wanted);
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let resources = rule.resources.as_deref().unwrap_or_default();
    let names = rule.resource_names.as_deref().unwrap_or_default();
    let resource_matches = resources.iter().any(|r| {
        r == "*"
            || *r == request.resource
            || request
                .resource
                .split_once('/')
                .is_some_and(|(_, sub)| r.strip_prefix("*/") == Some(sub))
    });
    any(&rule.verbs, &request.verb)
        && any(groups, &request.group)
        && resource_matches
        && (names.is_empty() || request.name.as_ref().is_some_and(|n| names.contains(n)))
}

/// Every (verb, group, resource) a rule names, wildcards as written.
pub fn permissions(rule: &PolicyRule) -> BTreeSet<Permission> {
    let mut out = BTreeSet::new();
    for group in rule.api_groups.as_deref().unwrap_or_default() {
        for resource in rule.resources.as_deref().unwrap_or_default() {
            for verb in &rule.verbs {
                out.insert(Permission::new(verb, group, resource));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(method: &str, path: &str, query: &str) -> ResourceRequest {
        match classify(method, path, query) {
            ApiRequest::Resource(r) => r,
            other => panic!("{method} {path}?{query}: expected a resource request, got {other:?}"),
        }
    }

    fn verb_group_resource(method: &str, path: &str, query: &str) -> (String, String, String) {
        let r = resource(method, path, query);
        (r.verb, r.group, r.resource)
    }

    fn vgr(verb: &str, group: &str, resource: &str) -> (String, String, String) {
        (verb.to_owned(), group.to_owned(), resource.to_owned())
    }

    #[test]
    fn http_methods_map_to_verbs_as_the_api_server_maps_them() {
        let cases = [
            (
                "GET",
                "/api/v1/namespaces/default/configmaps/site",
                "",
                vgr("get", "", "configmaps"),
            ),
            (
                "GET",
                "/api/v1/namespaces/default/configmaps",
                "",
                vgr("list", "", "configmaps"),
            ),
            (
                "GET",
                "/api/v1/configmaps",
                "labelSelector=a%3Db",
                vgr("list", "", "configmaps"),
            ),
            (
                "GET",
                "/api/v1/pods",
                "watch=true&resourceVersion=12&timeoutSeconds=290",
                vgr("watch", "", "pods"),
            ),
            ("GET", "/api/v1/watch/pods", "", vgr("watch", "", "pods")),
            (
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                "",
                vgr("create", "events.k8s.io", "events"),
            ),
            (
                "PUT",
                "/apis/apps/v1/namespaces/default/deployments/web",
                "",
                vgr("update", "apps", "deployments"),
            ),
            (
                "PATCH",
                "/apis/apps/v1/namespaces/default/deployments/web",
                "fieldManager=nave-agent&force=true",
                vgr("patch", "apps", "deployments"),
            ),
            (
                "DELETE",
                "/apis/apps/v1/namespaces/default/deployments/web",
                "",
                vgr("delete", "apps", "deployments"),
            ),
            (
                "DELETE",
                "/apis/apps/v1/namespaces/default/deployments",
                "",
                vgr("deletecollection", "apps", "deployments"),
            ),
            (
                "PATCH",
                "/apis/nave.dev/v1alpha1/namespaces/default/multiclusterdeployments/web/status",
                "",
                vgr("patch", "nave.dev", "multiclusterdeployments/status"),
            ),
            (
                "PATCH",
                "/apis/nave.dev/v1alpha1/workloadclusters/eu-1/status",
                "",
                vgr("patch", "nave.dev", "workloadclusters/status"),
            ),
            (
                "GET",
                "/api/v1/namespaces/team-a",
                "",
                vgr("get", "", "namespaces"),
            ),
            ("POST", "/api/v1/namespaces", "", vgr("create", "", "namespaces")),
            (
                "PUT",
                "/api/v1/namespaces/team-a/finalize",
                "",
                vgr("update", "", "namespaces/finalize"),
            ),
        ];
        for (method, path, query, expected) in cases {
            assert_eq!(
                verb_group_resource(method, path, query),
                expected,
                "{method} {path}?{query}"
            );
        }
    }

    #[test]
    fn names_and_namespaces_are_read_from_the_path_and_a_name_field_selector() {
        let r = resource("GET", "/api/v1/namespaces/team-a/secrets/db", "");
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref()),
            (Some("team-a"), Some("db"))
        );
        let r = resource("GET", "/api/v1/namespaces/team-a", "");
        assert_eq!((r.namespace, r.name.as_deref()), (None, Some("team-a")));
        let r = resource(
            "GET",
            "/api/v1/namespaces/x/secrets",
            "fieldSelector=metadata.name%3Dcred&watch=1",
        );
        assert_eq!((r.verb.as_str(), r.name.as_deref()), ("watch", Some("cred")));
        let r = resource(
            "GET",
            "/apis/apps/v1/deployments",
            "fieldSelector=metadata.name%3Da%2Cb%3Dc",
        );
        assert_eq!(r.name, None, "a selector on more than the name names nothing");
    }

    #[test]
    fn discovery_and_version_are_not_resource_requests() {
        for path in [
            "/version",
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps/v1",
            "/openapi/v3",
            "/healthz",
        ] {
            assert_eq!(
                classify("GET", path, ""),
                ApiRequest::NonResource(path.to_owned()),
                "{path}"
            );
        }
    }

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> PolicyRule {
        let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(strings(groups)),
            resources: Some(strings(resources)),
            verbs: strings(verbs),
            resource_names: (!names.is_empty()).then(|| strings(names)),
            non_resource_urls: None,
        }
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let status = resource(
            "PATCH",
            "/apis/nave.dev/v1alpha1/namespaces/default/multiclusterdeployments/web/status",
            "",
        );
        assert!(allows(
            &rule(
                &["nave.dev"],
                &["multiclusterdeployments/status"],
                &["patch"],
                &[]
            ),
            &status
        ));
        assert!(
            !allows(
                &rule(&["nave.dev"], &["multiclusterdeployments"], &["patch"], &[]),
                &status
            ),
            "the resource does not grant its subresources"
        );
        assert!(allows(
            &rule(&["nave.dev"], &["*/status"], &["patch"], &[]),
            &status
        ));
        assert!(allows(&rule(&["*"], &["*"], &["*"], &[]), &status));
        assert!(
            !allows(&rule(&[""], &["*"], &["*"], &[]), &status),
            "another group"
        );
        assert!(!allows(
            &rule(
                &["nave.dev"],
                &["multiclusterdeployments/status"],
                &["update"],
                &[]
            ),
            &status
        ));

        let get = resource(
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/a.nave.dev",
            "",
        );
        let named = rule(
            &["apiextensions.k8s.io"],
            &["customresourcedefinitions"],
            &["get", "list"],
            &["a.nave.dev"],
        );
        assert!(allows(&named, &get));
        let other = resource(
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/b.nave.dev",
            "",
        );
        assert!(!allows(&named, &other), "another name");
        let list = resource(
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "",
        );
        assert!(!allows(&named, &list), "a list names no object");
    }

    #[test]
    fn a_rule_expands_to_every_verb_group_and_resource_it_names() {
        let expanded = permissions(&rule(&["", "apps"], &["a", "b"], &["get", "list"], &[]));
        assert_eq!(expanded.len(), 8);
        assert!(expanded.contains(&Permission::new("list", "apps", "b")));
        assert_eq!(
            Permission::new("get", "", "secrets").to_string(),
            "get core/secrets"
        );
    }
}
