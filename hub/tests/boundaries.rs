//! What an application team writes in a MultiClusterDeployment cannot make the hub send an agent
//! anything but that workload's Deployment: an override that retargets the object (another
//! namespace, another kind, the agent's own Deployment) is refused with a condition and an event
//! naming the field, and nothing is dispatched.

mod support;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use nave_api::MultiClusterDeployment;
use nave_api::conditions::{self, reasons, types};
use nave_testkit::{DEADLINE, FakeAgent, Mcd, idle_capacity, wait_for};
use serde_json::json;

fn retargeting(name: &str, path: &str, value: &str) -> MultiClusterDeployment {
    Mcd::new(name)
        .overrides(
            json!([{"clusters": ["eu-1"], "patches": [{"op": "replace", "path": path, "value": value}]}]),
        )
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_that_retarget_the_deployment_are_refused_and_nothing_is_dispatched() {
    let (management, client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let hub = support::start_hub(&management, dir.path(), |_| {});
    let agent = FakeAgent::join(&hub.base, "eu-1", idle_capacity("eu-1", 2, 4000)).await;

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
        let message = wait_for(
            &format!("{name} to be Scheduled=False/InvalidSpec"),
            DEADLINE,
            || async {
                let mcd = mcds.get(name).await.map_err(|e| e.to_string())?;
                let conds = mcd.status.map(|s| s.conditions).unwrap_or_default();
                match conditions::find(&conds, types::SCHEDULED) {
                    Some(c) if c.status == conditions::FALSE && c.reason == reasons::INVALID_SPEC => {
                        Ok(c.message.clone())
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        assert!(
            message.starts_with("spec.overrides[0].patches[0].path: Forbidden"),
            "{name}: the condition names the field: {message}"
        );
    }
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    wait_for(
        "a Warning event InvalidSpec per refused MCD",
        DEADLINE,
        || async {
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
        },
    )
    .await;
    let work = agent.work().await;
    assert!(
        work.objects.is_empty(),
        "nothing is dispatched for a refused spec: {:?}",
        work.objects
    );
    hub.shutdown.cancel();
    hub.task.await.unwrap().expect("the hub stops cleanly");
    management.shutdown().await;
}
