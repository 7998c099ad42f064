//! A rollout with `maxConcurrency` against the hub on a real socket: a new template goes to one
//! cluster at a time, the next once the one before reports it rolled out, while the others keep
//! the Deployment they hold, with the ConfigMap it refers to, and follow scaling.

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nave_api::{MultiClusterDeployment, RolloutPhase, TEMPLATE_HASH_ANNOTATION};
use nave_testkit::{DEADLINE, FakeAgent, Mcd, idle_capacity, wait_for};
use serde_json::json;

/// The template hash and replicas of `web`'s Deployment in `agent`'s work set.
async fn web(agent: &FakeAgent) -> Option<(String, i64)> {
    let work = agent.work().await;
    let deployment = work
        .objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "web")?;
    Some((
        deployment["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        deployment["spec"]["replicas"].as_i64().unwrap_or_default(),
    ))
}

/// Waits until the clusters hold `web` with these template hashes (in agent order).
async fn wait_hashes(agents: &[FakeAgent], want: &[&str]) {
    wait_for(
        &format!("the clusters to hold templates {want:?}"),
        DEADLINE,
        || async {
            let mut seen = Vec::new();
            for agent in agents {
                seen.push(web(agent).await.map(|(hash, _)| hash).unwrap_or_default());
            }
            if seen == want {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_max_concurrency_one_cluster_at_a_time_takes_the_new_template() {
    let (management, client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let hub = support::start_hub(&management, dir.path(), |_| {});
    let mut agents = Vec::new();
    for name in ["eu-1", "eu-2", "eu-3"] {
        agents.push(FakeAgent::join(&hub.base, name, idle_capacity(name, 2, 4000)).await);
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["config-1", "config-2"] {
        let object: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name}, "data": {"VERSION": name}
        }))
        .expect("a ConfigMap");
        config_maps
            .create(&PostParams::default(), &object)
            .await
            .expect("ConfigMap created");
    }
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "default");
    let mcd = |image: &str, replicas: i64| {
        let config = if image == "app:1" { "config-1" } else { "config-2" };
        Mcd::new("web")
            .replicas(replicas)
            .image(image)
            .env_from_config_map(config)
            .placement(json!({"policy": "spread"}))
            .extra_spec(json!({"rollout": {"maxConcurrency": 1}}))
            .build()
    };
    mcds.create(&PostParams::default(), &mcd("app:1", 3))
        .await
        .expect("MCD created");
    let old = wait_for("web in every cluster", DEADLINE, || async {
        let mut hashes = Vec::new();
        for agent in &agents {
            hashes.push(web(agent).await.ok_or(format!("not in {}", agent.cluster()))?.0);
        }
        Ok::<_, String>(hashes)
    })
    .await;
    let old = old[0].clone();
    for agent in &agents {
        agent.report_all_ready().await;
    }

    let change = |image: &'static str, replicas: i64| {
        let mcds = mcds.clone();
        async move {
            let spec = serde_json::to_value(mcd(image, replicas).spec).expect("a spec");
            mcds.patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .expect("MCD changed");
        }
    };
    change("app:2", 3).await;
    let new = wait_for("eu-1 to take the new template first", DEADLINE, || async {
        match web(&agents[0]).await {
            Some((hash, _)) if hash != old => Ok(hash),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    wait_hashes(&agents, &[&new, &old, &old]).await;
    let config_maps_in = |agent: &FakeAgent| {
        let agent = agent.clone();
        async move {
            agent
                .work()
                .await
                .objects
                .iter()
                .filter(|o| o["kind"] == "ConfigMap")
                .map(|o| o["metadata"]["name"].as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        config_maps_in(&agents[0]).await,
        ["config-2"],
        "the new template's"
    );
    assert_eq!(
        config_maps_in(&agents[1]).await,
        ["config-1"],
        "a cluster the rollout has not reached keeps what its Deployment refers to"
    );

    // Scaling during the rollout: the clusters not reached yet keep their template and follow.
    change("app:2", 6).await;
    wait_for("every cluster to run 2 replicas", DEADLINE, || async {
        let mut seen = Vec::new();
        for agent in &agents {
            seen.push(web(agent).await);
        }
        let want = vec![
            Some((new.clone(), 2)),
            Some((old.clone(), 2)),
            Some((old.clone(), 2)),
        ];
        if seen == want {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;

    agents[0].report_all_ready().await;
    wait_hashes(&agents, &[&new, &new, &old]).await;
    agents[1].report_all_ready().await;
    wait_hashes(&agents, &[&new, &new, &new]).await;
    agents[2].report_all_ready().await;
    wait_for("the rollout to complete", DEADLINE, || async {
        let status = mcds.get("web").await.map_err(|e| e.to_string())?.status;
        match status.as_ref().and_then(|s| s.rollout.as_ref()) {
            Some(r) if r.phase == RolloutPhase::Complete && r.template_hash == new => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    hub.shutdown.cancel();
    let _ = hub.task.await;
}
