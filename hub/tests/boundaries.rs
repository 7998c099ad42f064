//! What an application team writes in a MultiClusterDeployment cannot make the hub send an agent
//! anything but that workload's Deployment: an override that retargets the object (another
//! namespace, another kind, the agent's own Deployment) is refused with a condition and an event
//! naming the field, and nothing is dispatched.

mod support;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_api::conditions::{self, reasons, types};
use nave_api::wire::{Heartbeat, RegisterRequest, Resources};
use serde_json::json;
use support::wait_for;

fn retargeting(name: &str, path: &str, value: &str) -> MultiClusterDeployment {
    serde_json::from_value(json!({
        "apiVersion": "nave.dev/v1alpha1",
        "kind": "MultiClusterDeployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "placement": {"policy": "spread"},
            "template": {"spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}
                }
            }},
            "overrides": [{"clusters": ["eu-1"], "patches": [{"op": "replace", "path": path, "value": value}]}]
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_that_retarget_the_deployment_are_refused_and_nothing_is_dispatched() {
    let (management, client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let hub = support::start_hub(&management, dir.path(), |_| {});
    let http = reqwest::Client::new();
    let request = RegisterRequest {
        cluster_name: "eu-1".to_owned(),
        agent_version: "0.1.0".to_owned(),
        ..RegisterRequest::default()
    };
    let credential = support::register(&http, &hub.base, &request).await;
    let beat = Heartbeat {
        cluster_name: Some("eu-1".to_owned()),
        agent_version: "0.1.0".to_owned(),
        capacity: support::capacity(
            "eu-1",
            2,
            Resources::new(4000, 8 << 30, 110),
            Resources::default(),
        ),
        ..Heartbeat::default()
    };
    support::heartbeat(&http, &hub.base, &credential, &beat).await;

    let mcds: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "default");
    let attacks = [
        ("to-kube-system", "/metadata/namespace", "kube-system"),
        ("to-a-secret", "/kind", "Secret"),
        ("to-the-agent", "/metadata/name", "nave-agent"),
    ];
    for (name, path, value) in attacks {
        mcds.create(&PostParams::default(), &retargeting(name, path, value))
            .await
            .expect("the API server admits it; the hub refuses it");
    }
    for (name, _, _) in attacks {
        let message = wait_for(&format!("{name} to be Scheduled=False/InvalidSpec"), || async {
            let mcd = mcds.get(name).await.map_err(|e| e.to_string())?;
            let conds = mcd.status.map(|s| s.conditions).unwrap_or_default();
            match conditions::find(&conds, types::SCHEDULED) {
                Some(c) if c.status == conditions::FALSE && c.reason == reasons::INVALID_SPEC => {
                    Ok(c.message.clone())
                }
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert!(
            message.starts_with("spec.overrides[0].patches[0].path: Forbidden"),
            "{name}: the condition names the field: {message}"
        );
    }
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    wait_for("a Warning event InvalidSpec per refused MCD", || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let refused = list
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reasons::INVALID_SPEC))
            .count();
        if refused >= attacks.len() {
            Ok(())
        } else {
            Err(format!("{refused} InvalidSpec events"))
        }
    })
    .await;
    let work = support::work(&http, &hub.base, &credential, "eu-1").await;
    assert!(
        work.objects.is_empty(),
        "nothing is dispatched for a refused spec: {:?}",
        work.objects
    );
    hub.shutdown.cancel();
    hub.task.await.unwrap().expect("the hub stops cleanly");
    management.shutdown().await;
}
