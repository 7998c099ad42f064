//! Policy `traffic` against the real Prometheus server: the simulated clusters' ingresses count
//! requests per Service (`nave_sim_ingress_requests_per_second`), Prometheus scrapes them, the
//! hub reads the workload's own traffic by cluster and divides its replicas by it; when the
//! traffic shifts, the replicas follow it (make-before-break, once per cooldown).

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, PostParams};
use nave_api::MultiClusterDeployment;
use nave_e2e::{DEADLINE, Database, Env, EnvOptions, placed, prometheus};
use nave_testkit::{Mcd, wait_for};
use serde_json::json;

const NS: &str = "default";

/// Each cluster's ingress traffic of the Service `service`, by workload: the simulator's series
/// relabelled as the hub expects (`cluster`, `namespace`, `workload`).
const TRAFFIC_QUERY: &str = nave_playground::up::SIM_TRAFFIC_QUERY;

async fn explanation(env: &Env, name: &str) -> Result<String, String> {
    let placement = env.rest(&format!("/placements/{NS}/{name}")).await?;
    Ok(placement["explanation"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_go_where_the_traffic_arrives_and_follow_it_when_it_shifts() {
    let Some(binary) = prometheus::binary_or_skip("policy traffic") else {
        return;
    };
    let hub_prometheus = nave_hub::cli::PrometheusArgs {
        prometheus_ttl: Duration::from_secs(5),
        prometheus_traffic_query: Some(TRAFFIC_QUERY.to_owned()),
        ..nave_hub::cli::PrometheusArgs::default()
    };
    let options = EnvOptions {
        prometheus: Some(binary),
        hub_prometheus,
        ..EnvOptions::default()
    };
    let mut env = Env::start_with(nave_e2e::fleet(2), Database::Sqlite, options)
        .await
        .expect("the environment starts");

    // 4 of 5 requests for `web` arrive in eu-west-1; another Service's traffic arrives only in
    // us-east-1 and must not count for `web`.
    env.set_traffic("eu-west-1", NS, "web", 80.0).await;
    env.set_traffic("us-east-1", NS, "web", 20.0).await;
    env.set_traffic("us-east-1", NS, "other", 500.0).await;
    wait_for("the hub to read each cluster's traffic", DEADLINE, || async {
        let eu = env.rest("/clusters/eu-west-1").await?["usage"]["traffic"].as_f64();
        let us = env.rest("/clusters/us-east-1").await?["usage"]["traffic"].as_f64();
        match (eu, us) {
            (Some(eu), Some(us)) if (eu - 80.0).abs() < 1e-6 && (us - 520.0).abs() < 1e-6 => Ok(()),
            seen => {
                let server = env.prometheus().expect("Prometheus runs");
                let series = prometheus::query(server, TRAFFIC_QUERY).await;
                Err(format!(
                    "traffic of eu-west-1, us-east-1: {seen:?}; Prometheus answers the query with {series:?}"
                ))
            }
        }
    })
    .await;

    let placement = json!({"policy": "traffic", "rescheduling": {"cooldown": "2s"}});
    Api::<MultiClusterDeployment>::namespaced(env.client.clone(), NS)
        .create(
            &PostParams::default(),
            &Mcd::new("web")
                .namespace(NS)
                .replicas(4)
                .placement(placement)
                .build(),
        )
        .await
        .expect("MCD created");
    let web = env.wait_rolled_out(NS, "web", 4).await;
    assert_eq!(
        placed(&web),
        BTreeMap::from([("eu-west-1".to_owned(), 3), ("us-east-1".to_owned(), 1)]),
        "80:20 of web's own traffic (us-east-1's other Service not counted) gives 3:1"
    );
    let why = explanation(&env, "web").await.expect("the placement explains");
    assert!(
        why.contains("traffic (by the workload's own traffic)") && why.contains("traffic 80.000, 80% of it"),
        "the explanation names the traffic; seen\n{why}"
    );

    // The traffic turns around: the replicas follow, make-before-break. (Prometheus may scrape
    // between the two changes, and the hub may follow that half-way state first.)
    env.set_traffic("eu-west-1", NS, "web", 20.0).await;
    env.set_traffic("us-east-1", NS, "web", 80.0).await;
    env.event(NS, "web", "FollowedTraffic").await;
    wait_for("web to run 1:3 as the traffic now arrives", DEADLINE, || async {
        let running = env.replicas_by_cluster(NS, "web").await;
        let want = BTreeMap::from([("eu-west-1".to_owned(), 1), ("us-east-1".to_owned(), 3)]);
        if running == want {
            Ok(())
        } else {
            Err(format!("running {running:?}"))
        }
    })
    .await;
    env.wait_rolled_out(NS, "web", 4).await;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.client.clone(), NS);
    let notes: Vec<String> = events
        .list(&kube::api::ListParams::default().fields("involvedObject.name=web"))
        .await
        .expect("the events of web")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FollowedTraffic"))
        .filter_map(|e| e.message)
        .collect();
    for note in &notes {
        // "... requests served in the cluster they arrive at: 45% -> 95%"
        let gain = note
            .rsplit(": ")
            .next()
            .and_then(|shares| shares.split_once(" -> "))
            .and_then(|(a, b)| {
                Some((
                    a.trim_end_matches('%').parse::<f64>().ok()?,
                    b.trim_end_matches('%').parse::<f64>().ok()?,
                ))
            });
        assert!(
            note.starts_with("followed the traffic: moved ")
                && note.contains(" from eu-west-1 to us-east-1 +")
                && gain.is_some_and(|(a, b)| b >= a + 5.0),
            "each move says what moved where and gains at least 5 points; seen {note:?}"
        );
    }
    wait_for("the hub to export web's traffic locality", DEADLINE, || async {
        let series = r#"nave_mcd_traffic_locality{namespace="default",name="web"}"#;
        match env.hub_metric(series).await? {
            v if (v - 0.95).abs() < 1e-6 => Ok(()),
            v => Err(format!("{series} {v}")),
        }
    })
    .await;

    // Prometheus gone: the values expire and the next placement says it placed as worst-fit.
    env.stop_prometheus().await;
    wait_for("the hub to let the traffic it read expire", DEADLINE, || async {
        match env.rest("/clusters/eu-west-1").await?["usage"]["traffic"].as_f64() {
            None => Ok(()),
            Some(t) => Err(format!("eu-west-1's traffic still {t}")),
        }
    })
    .await;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(env.client.clone(), NS);
    mcds.patch(
        "web",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .expect("scaled");
    wait_for(
        "a placement that says no traffic was measured",
        DEADLINE,
        || async {
            let why = explanation(&env, "web").await?;
            if why.contains("no traffic measured") {
                Ok(())
            } else {
                Err(why)
            }
        },
    )
    .await;
    env.wait_rolled_out(NS, "web", 5).await;
    env.shutdown().await;
}
