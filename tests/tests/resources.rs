//! MultiClusterResources end to end, with the real hub and agents on nave-sim: any object goes
//! to the clusters a selector picks, follows the selection as it grows and shrinks, takes
//! per-cluster overrides, reports per cluster (applied, refused by an agent's allow-list, in
//! conflict), and leaves every cluster when deleted. What it may send is the fleet admin's
//! choice: a kind the hub does not allow, another namespace, a cluster-scoped kind from an
//! application's namespace are refused with the field named, and the clusters keep what they
//! had.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nave_api::wire::WORKLOAD_LABEL;
use nave_api::{MultiClusterResource, ResourceState, WorkloadCluster};
use nave_e2e::{DEADLINE, Database, Env, EnvOptions, fleet};
use nave_testkit::wait_for;
use serde_json::{Value, json};

const NS: &str = "shop";
const ADMIN_NS: &str = "nave-system";
const EU: &str = "eu-west-1";
const US: &str = "us-east-1";
const AP: &str = "ap-south-1";

const ROLE: &str = "Role.rbac.authorization.k8s.io";
const CLUSTER_ROLE: &str = "ClusterRole.rbac.authorization.k8s.io";

fn role(verbs: &[&str]) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "reader", "labels": {"team": "a"}},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}],
    })
}

fn resource(namespace: &str, name: &str, spec: Value) -> MultiClusterResource {
    serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1",
        "kind": "MultiClusterResource",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))
    .expect("a MultiClusterResource")
}

async fn set_cluster_label(env: &Env, cluster: &str, value: Option<&str>) {
    Api::<WorkloadCluster>::all(env.client.clone())
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": value}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("labelling {cluster}: {e}"));
}

/// Waits until the Role `shop/reader` is in exactly `clusters` of the fleet; answers them.
async fn wait_roles(env: &Env, clusters: &[&str], what: &str) -> BTreeMap<String, Role> {
    let want: Vec<String> = clusters.iter().map(|c| (*c).to_owned()).collect();
    wait_for(
        &format!("Role {NS}/reader in exactly {want:?} ({what})"),
        DEADLINE,
        || {
            let want = want.clone();
            async move {
                let mut found = BTreeMap::new();
                for cluster in [EU, US, AP] {
                    let api: Api<Role> = Api::namespaced(env.cluster_client(cluster), NS);
                    if let Some(role) = api.get_opt("reader").await.map_err(|e| e.to_string())? {
                        found.insert(cluster.to_owned(), role);
                    }
                }
                let have: Vec<String> = found.keys().cloned().collect();
                if have == want {
                    Ok(found)
                } else {
                    Err(format!("in {have:?}"))
                }
            }
        },
    )
    .await
}

/// Waits until `check` holds of the MultiClusterResource's status (at its generation).
async fn wait_status(
    env: &Env,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&nave_api::MultiClusterResourceStatus) -> bool,
) -> nave_api::MultiClusterResourceStatus {
    let api: Api<MultiClusterResource> = Api::namespaced(env.client.clone(), namespace);
    let check = &check;
    wait_for(&format!("{namespace}/{name}: {what}"), DEADLINE, || {
        let api = api.clone();
        async move {
            let mcr = api.get(name).await.map_err(|e| e.to_string())?;
            let status = mcr.status.clone().unwrap_or_default();
            if status.observed_generation == mcr.metadata.generation && check(&status) {
                Ok(status)
            } else {
                Err(format!(
                    "status {}",
                    serde_json::to_string(&status).unwrap_or_default()
                ))
            }
        }
    })
    .await
}

fn states(status: &nave_api::MultiClusterResourceStatus) -> BTreeMap<String, ResourceState> {
    status
        .clusters
        .iter()
        .map(|c| (c.name.clone(), c.state))
        .collect()
}

fn condition<'a>(
    status: &'a nave_api::MultiClusterResourceStatus,
    type_: &str,
) -> (&'a str, &'a str, &'a str) {
    status
        .condition(type_)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resource_follows_its_selection_with_overrides_status_and_the_admins_bounds() {
    let allowing: Vec<String> = nave_agent::allowed::DEFAULT_KINDS
        .iter()
        .map(|k| (*k).to_owned())
        .chain([ROLE.to_owned(), CLUSTER_ROLE.to_owned()])
        .collect();
    let options = EnvOptions {
        hub_resources: nave_hub::cli::ResourceArgs {
            resource_kinds: vec![ROLE.to_owned()],
            cluster_resource_kinds: vec![CLUSTER_ROLE.to_owned()],
            admin_namespace: Some(ADMIN_NS.to_owned()),
        },
        // ap-south-1's agent keeps its defaults: it applies no Role, whatever the hub sends.
        agent_allow_kinds: [(EU.to_owned(), allowing.clone()), (US.to_owned(), allowing)].into(),
        ..EnvOptions::default()
    };
    let env = Env::start_with(fleet(3), Database::Sqlite, options)
        .await
        .expect("the environment starts");
    env.create_namespace(NS, false).await;
    env.create_namespace(ADMIN_NS, false).await;
    set_cluster_label(&env, EU, Some("edge")).await;
    set_cluster_label(&env, AP, Some("edge")).await;
    let mcrs: Api<MultiClusterResource> = Api::namespaced(env.client.clone(), NS);
    let started = std::time::Instant::now();
    mcrs.create(
        &PostParams::default(),
        &resource(
            NS,
            "reader",
            json!({
                "manifest": role(&["get"]),
                "clusterSelector": {"matchLabels": {"tier": "edge"}},
                "overrides": [{
                    "clusterSelector": {"matchLabels": {"topology.kubernetes.io/region": "eu-west"}},
                    "patches": [{"op": "add", "path": "/metadata/labels/mirror", "value": "eu"}],
                }],
            }),
        ),
    )
    .await
    .expect("the MultiClusterResource is created");

    // Sent to the selected clusters: applied in eu-west-1 (with its override), refused by
    // ap-south-1's agent, absent from us-east-1.
    let roles = wait_roles(&env, &[EU], "selected by tier=edge, ap-south-1 refusing").await;
    let applied_after = started.elapsed();
    let eu = &roles[EU];
    let labels = eu.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("a"), "{labels:?}");
    assert_eq!(
        labels.get("mirror").map(String::as_str),
        Some("eu"),
        "the override: {labels:?}"
    );
    assert_eq!(
        labels.get(WORKLOAD_LABEL).map(String::as_str),
        Some("shop.mcr_reader"),
        "{labels:?}"
    );
    let status = wait_status(
        &env,
        NS,
        "reader",
        "applied in eu-west-1, refused in ap-south-1",
        |s| {
            states(s)
                == BTreeMap::from([
                    (EU.to_owned(), ResourceState::Applied),
                    (AP.to_owned(), ResourceState::Failed),
                ])
        },
    )
    .await;
    let refused = status
        .clusters
        .iter()
        .find(|c| c.name == AP)
        .and_then(|c| c.message.clone());
    assert!(
        refused.as_deref().is_some_and(
            |m| m.contains("kind Role.rbac.authorization.k8s.io is not in this agent's allow-list")
        ),
        "ap-south-1 says why: {refused:?}"
    );
    let (ready, reason, message) = condition(&status, "Ready");
    assert_eq!((ready, reason), ("False", "ApplyFailed"), "{message}");
    assert!(message.contains(AP), "{message}");
    assert_eq!((status.cluster_count, status.applied_count), (2, 1));
    println!("created -> applied in the selected cluster: {applied_after:?}");

    // The selection grows and shrinks: the Role follows.
    set_cluster_label(&env, US, Some("edge")).await;
    wait_roles(&env, &[EU, US], "us-east-1 selected too").await;
    set_cluster_label(&env, EU, None).await;
    let roles = wait_roles(&env, &[US], "eu-west-1 no longer selected").await;
    assert!(
        !roles[US]
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .contains_key("mirror"),
        "the override applies to eu-west only"
    );
    set_cluster_label(&env, EU, Some("edge")).await;
    wait_roles(&env, &[EU, US], "eu-west-1 selected again").await;

    // An edit reaches every cluster, and status waits for the new content.
    mcrs.patch(
        "reader",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"manifest": role(&["get", "list"])}})),
    )
    .await
    .expect("the manifest is edited");
    wait_for(
        "the edited rules in eu-west-1 and us-east-1",
        DEADLINE,
        || async {
            for cluster in [EU, US] {
                let role = Api::<Role>::namespaced(env.cluster_client(cluster), NS)
                    .get("reader")
                    .await
                    .map_err(|e| e.to_string())?;
                let verbs = role
                    .rules
                    .unwrap_or_default()
                    .first()
                    .map(|r| r.verbs.clone())
                    .unwrap_or_default();
                if verbs != ["get", "list"] {
                    return Err(format!("{cluster}: verbs {verbs:?}"));
                }
            }
            Ok(())
        },
    )
    .await;
    wait_status(
        &env,
        NS,
        "reader",
        "applied in both allowing clusters after the edit",
        |s| {
            let states = states(s);
            states.get(EU) == Some(&ResourceState::Applied) && states.get(US) == Some(&ResourceState::Applied)
        },
    )
    .await;

    // The admin's bounds: each refused with the field named; nothing reaches a cluster, and
    // what the clusters had stays.
    let refusals = [
        (
            "secret",
            json!({"manifest": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token"}}}),
            "KindNotAllowed",
            "spec.manifest.kind: Forbidden: Secret is not among the kinds this hub sends",
        ),
        (
            "escape",
            json!({"manifest": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "escape", "namespace": "kube-system"}, "rules": []}}),
            "InvalidSpec",
            "spec.manifest.metadata.namespace: Forbidden: \"kube-system\"",
        ),
        (
            "cluster-wide",
            json!({"manifest": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "cluster-wide"}, "rules": []}}),
            "KindNotAllowed",
            "ClusterRole.rbac.authorization.k8s.io is cluster-scoped; only MultiClusterResources in the hub's namespace (nave-system)",
        ),
        (
            "retarget",
            json!({"manifest": role(&["get"]), "overrides": [{"clusters": [EU],
                "patches": [{"op": "replace", "path": "/metadata/namespace", "value": "kube-system"}]}]}),
            "InvalidSpec",
            "spec.overrides[0].patches[0].path: Forbidden: \"/metadata/namespace\"",
        ),
    ];
    for (name, spec, _, _) in &refusals {
        mcrs.create(&PostParams::default(), &resource(NS, name, spec.clone()))
            .await
            .unwrap_or_else(|e| panic!("creating {name}: {e}"));
    }
    for (name, _, reason, says) in &refusals {
        let status = wait_status(&env, NS, name, &format!("Accepted=False/{reason}"), |s| {
            let (accepted, got, _) = condition(s, "Accepted");
            accepted == "False" && got == *reason
        })
        .await;
        let (_, _, message) = condition(&status, "Accepted");
        assert!(message.contains(says), "{name}: expected {says:?} in {message:?}");
        let event = env.event(NS, name, reason).await;
        assert!(event.contains(says), "{name}'s event: {event}");
    }
    for cluster in [EU, US, AP] {
        let escaped = Api::<Role>::namespaced(env.cluster_client(cluster), "kube-system")
            .get_opt("escape")
            .await
            .expect("GET works");
        assert!(escaped.is_none(), "nothing reaches kube-system in {cluster}");
        let cluster_wide = Api::<ClusterRole>::all(env.cluster_client(cluster))
            .get_opt("cluster-wide")
            .await
            .expect("GET works");
        assert!(
            cluster_wide.is_none(),
            "no ClusterRole from an application's namespace in {cluster}"
        );
    }

    // An edit gone wrong takes nothing away: the clusters keep the Role.
    mcrs.patch(
        "reader",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"manifest": {"kind": "Secret", "apiVersion": "v1", "rules": null}}})),
    )
    .await
    .expect("the manifest is broken");
    wait_status(&env, NS, "reader", "Accepted=False after the bad edit", |s| {
        condition(s, "Accepted").0 == "False"
    })
    .await;
    wait_roles(&env, &[EU, US], "kept after a bad edit").await;
    mcrs.patch(
        "reader",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"manifest": role(&["get", "list"])}})),
    )
    .await
    .expect("the manifest is mended");

    // Two resources sending the same object: the second is told, and sends nothing there.
    mcrs.create(
        &PostParams::default(),
        &resource(
            NS,
            "reader-copy",
            json!({"manifest": role(&["*"]), "clusters": [US]}),
        ),
    )
    .await
    .expect("the copy is created");
    let status = wait_status(&env, NS, "reader-copy", "in conflict in us-east-1", |s| {
        states(s) == BTreeMap::from([(US.to_owned(), ResourceState::Conflict)])
    })
    .await;
    let message = status.clusters[0].message.clone().unwrap_or_default();
    assert!(
        message.contains("Role shop/reader is already sent by MultiClusterResource shop/reader"),
        "{message}"
    );
    let verbs = Api::<Role>::namespaced(env.cluster_client(US), NS)
        .get("reader")
        .await
        .expect("the Role is there")
        .rules
        .unwrap_or_default()[0]
        .verbs
        .clone();
    assert_eq!(verbs, ["get", "list"], "the first resource's content stays");

    // A cluster-scoped kind from the admin's namespace goes where it is selected.
    let admin: Api<MultiClusterResource> = Api::namespaced(env.client.clone(), ADMIN_NS);
    admin
        .create(
            &PostParams::default(),
            &resource(
                ADMIN_NS,
                "viewer",
                json!({"manifest": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": "nave-viewer"},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]},
                    "clusters": [EU, US]}),
            ),
        )
        .await
        .expect("the ClusterRole resource is created");
    wait_for(
        "ClusterRole nave-viewer in eu-west-1 and us-east-1",
        DEADLINE,
        || async {
            for cluster in [EU, US] {
                Api::<ClusterRole>::all(env.cluster_client(cluster))
                    .get_opt("nave-viewer")
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("absent from {cluster}"))?;
            }
            Ok(())
        },
    )
    .await;
    wait_status(&env, ADMIN_NS, "viewer", "Ready", |s| {
        condition(s, "Ready").0 == "True"
    })
    .await;

    // Deleted: gone from every cluster.
    for (api, name) in [(&mcrs, "reader-copy"), (&mcrs, "reader"), (&admin, "viewer")] {
        api.delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
    }
    wait_roles(&env, &[], "every resource deleted").await;
    wait_for("ClusterRole nave-viewer gone everywhere", DEADLINE, || async {
        for cluster in [EU, US, AP] {
            if Api::<ClusterRole>::all(env.cluster_client(cluster))
                .get_opt("nave-viewer")
                .await
                .map_err(|e| e.to_string())?
                .is_some()
            {
                return Err(format!("still in {cluster}"));
            }
        }
        Ok(())
    })
    .await;
    env.shutdown().await;
}
