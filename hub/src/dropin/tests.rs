use k8s_openapi::api::apps::v1::Deployment;
use nave_api::{
    DROP_IN_ANNOTATION, DROP_IN_GATE, DROP_IN_PROXY_LABEL, MultiClusterDeployment,
    MultiClusterDeploymentStatus, PlacementPolicy,
};
use serde_json::{Value, json};

use super::{fleet_copy, gate_patch, proxies_ready};

fn deployment(extra: Value) -> Deployment {
    let mut d = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "d-1", "labels": {"app": "web"},
                     "annotations": {DROP_IN_ANNOTATION: "spread"}},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}},
        },
    });
    json_patch::merge(&mut d, &extra);
    serde_json::from_value(d).expect("a Deployment")
}

fn apply(pod: &Value, patch: &[Value]) -> Value {
    let mut pod = pod.clone();
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(patch.to_vec())).expect("a JSON patch");
    json_patch::patch(&mut pod, &patch).expect("the patch applies");
    pod
}

#[test]
fn a_drop_in_deployments_pod_is_gated_and_labelled_whatever_it_already_has() {
    let bare = json!({"metadata": {"name": "web-abc-1"}, "spec": {"containers": []}});
    let patched = apply(&bare, &gate_patch(&bare, &deployment(json!({}))).expect("gated"));
    assert_eq!(
        patched["spec"]["schedulingGates"],
        json!([{"name": DROP_IN_GATE}])
    );
    assert_eq!(patched["metadata"]["labels"][DROP_IN_PROXY_LABEL], "true");

    // Labels and another gate already there are kept.
    let busy = json!({"metadata": {"name": "web-abc-2", "labels": {"app": "web"}},
                      "spec": {"schedulingGates": [{"name": "example.com/quota"}]}});
    let patched = apply(&busy, &gate_patch(&busy, &deployment(json!({}))).expect("gated"));
    assert_eq!(
        patched["spec"]["schedulingGates"],
        json!([{"name": "example.com/quota"}, {"name": DROP_IN_GATE}])
    );
    assert_eq!(patched["metadata"]["labels"]["app"], "web");
    assert_eq!(patched["metadata"]["labels"][DROP_IN_PROXY_LABEL], "true");
}

#[test]
fn a_pod_of_a_deployment_not_annotated_is_left_alone() {
    let pod = json!({"metadata": {"name": "web-abc-1"}, "spec": {}});
    let mut plain = deployment(json!({}));
    plain.metadata.annotations = None;
    assert_eq!(gate_patch(&pod, &plain), None);
}

#[test]
fn names_the_api_server_would_refuse_are_not_looked_up() {
    assert!(nave_api::wire::is_dns_label("shop-1"));
    assert!(nave_api::wire::is_dns_subdomain("web-7d9f8c6b5"));
    let long = "a".repeat(64);
    for bad in [
        "",
        "Shop",
        "kube-system/secrets/x",
        "-a",
        "a-",
        "web?watch=true",
        "a..b",
        long.as_str(),
    ] {
        assert!(!nave_api::wire::is_dns_label(bad), "{bad:?} is not a namespace");
    }
    for bad in ["web?watch=true", "../x", "a/b", "", ".a"] {
        assert!(
            !nave_api::wire::is_dns_subdomain(bad),
            "{bad:?} is not a ReplicaSet name"
        );
    }
}

#[test]
fn the_fleet_copy_takes_replicas_template_and_policy_and_is_owned_by_the_deployment() {
    let copy = fleet_copy(&deployment(json!({})), PlacementPolicy::Spread, None);
    assert_eq!(copy["spec"]["replicas"], 4);
    assert_eq!(copy["spec"]["placement"]["policy"], "spread");
    assert_eq!(
        copy["spec"]["template"]["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1"
    );
    assert_eq!(
        copy["spec"]["template"]["spec"].get("replicas"),
        None,
        "the hub divides replicas"
    );
    assert_eq!(copy["spec"]["template"]["metadata"]["labels"]["app"], "web");
    let owner = &copy["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["kind"].as_str(),
            owner["uid"].as_str(),
            owner["controller"].as_bool()
        ),
        (Some("Deployment"), Some("d-1"), Some(true))
    );
    let parsed: MultiClusterDeployment =
        serde_json::from_value(copy).expect("a valid MultiClusterDeployment");
    parsed
        .spec
        .template
        .deployment_spec()
        .expect("a template the hub renders");

    // Unset replicas is one, as for a Deployment.
    let one = fleet_copy(
        &deployment(json!({"spec": {"replicas": null}})),
        PlacementPolicy::WorstFit,
        None,
    );
    assert_eq!(one["spec"]["replicas"], 1);
}

#[test]
fn a_paused_deployment_keeps_the_fleets_template_but_not_its_replicas() {
    let before = fleet_copy(&deployment(json!({})), PlacementPolicy::Spread, None);
    let existing: MultiClusterDeployment = serde_json::from_value(before).expect("an MCD");
    let changed = deployment(json!({"spec": {"paused": true, "replicas": 6,
        "template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}}));
    let copy = fleet_copy(&changed, PlacementPolicy::Spread, Some(&existing));
    assert_eq!(copy["spec"]["replicas"], 6);
    assert_eq!(
        copy["spec"]["template"]["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1"
    );
}

fn copy_with(generation: i64, observed: i64, ready: i32, updated_ready: i32) -> MultiClusterDeployment {
    let mut copy: MultiClusterDeployment =
        serde_json::from_value(fleet_copy(&deployment(json!({})), PlacementPolicy::Spread, None))
            .expect("an MCD");
    copy.metadata.generation = Some(generation);
    copy.status = Some(MultiClusterDeploymentStatus {
        observed_generation: Some(observed),
        ready_replicas: ready,
        updated_ready_replicas: updated_ready,
        ..MultiClusterDeploymentStatus::default()
    });
    copy
}

#[test]
fn proxies_are_ready_as_the_fleets_replicas_of_their_template_are() {
    // Steady: every replica of the current template is ready.
    assert_eq!(proxies_ready(4, 0, &copy_with(2, 2, 4, 4)), Some((4, 0)));
    // No rollout at home, but the copy's template changed (a label, minReadySeconds) and the
    // clusters have not reported it yet: the proxies stay as ready as the fleet is.
    assert_eq!(proxies_ready(4, 0, &copy_with(3, 3, 4, 0)), Some((4, 0)));
    // A rollout: 1 new ready in the fleet, 3 old; the management cluster surged one new proxy.
    assert_eq!(proxies_ready(2, 4, &copy_with(3, 3, 4, 1)), Some((1, 3)));
    // Never more Ready than there are proxies, nor than the fleet has.
    assert_eq!(proxies_ready(1, 1, &copy_with(3, 3, 9, 9)), Some((1, 1)));
    assert_eq!(proxies_ready(4, 0, &copy_with(1, 1, 0, 0)), Some((0, 0)));
    // A status of an older spec says nothing yet.
    assert_eq!(proxies_ready(4, 0, &copy_with(3, 2, 4, 4)), None);
    let mut unseen = copy_with(1, 1, 4, 4);
    unseen.status = None;
    assert_eq!(proxies_ready(4, 0, &unseen), None);
}
