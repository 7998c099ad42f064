//! Who may join the fleet, and taking access away, against the hub on a real socket: the fleet's
//! bootstrap token cannot take over a cluster that joined, a cluster it adds gets no work until
//! an admin accepts it (whatever capacity and labels it claims), a join token registers its one
//! name once, and an admin can withdraw a cluster's work, remove it and revoke credentials.

mod support;

use kube::api::{Api, PostParams};
use nave_api::conditions::{self, reasons, types};
use nave_api::wire::RegisterRequest;
use nave_api::{MultiClusterDeployment, WorkloadCluster};
use nave_testkit::{BOOTSTRAP, DEADLINE, FakeAgent, Mcd, idle_capacity, wait_for};
use reqwest::Method;
use serde_json::{Value, json};

const ADMIN: &str = "admin-token";
const READER: &str = "read-token";

struct Rest {
    http: reqwest::Client,
    base: String,
}

impl Rest {
    /// The status and body of a REST call with `token`.
    async fn call(&self, token: &str, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        // Status 0: no answer (the hub not listening yet).
        let res = match request.send().await {
            Ok(res) => res,
            Err(e) => return (0, Value::String(e.to_string())),
        };
        let status = res.status().as_u16();
        let text = res.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, value) = self.call(ADMIN, method, path, body).await;
        assert!((200..300).contains(&status), "{path}: {status} {value}");
        value
    }
}

fn request(cluster: &str) -> RegisterRequest {
    RegisterRequest {
        cluster_name: cluster.to_owned(),
        agent_version: "0.1.0".to_owned(),
        labels: [("tier".to_owned(), "gold".to_owned())].into(),
        ..RegisterRequest::default()
    }
}

async fn deployments_in(agent: &FakeAgent) -> Vec<String> {
    agent
        .work()
        .await
        .objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|o| o["metadata"]["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn wait_deployments(agent: &FakeAgent, expected: &[&str]) {
    wait_for(
        &format!(
            "{}'s work set to hold the Deployments {expected:?}",
            agent.cluster()
        ),
        DEADLINE,
        || async {
            let found = deployments_in(agent).await;
            if found == expected {
                Ok(())
            } else {
                Err(format!("{found:?}"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joining_needs_acceptance_or_a_join_token_and_admins_can_take_access_away() {
    let (management, client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("api-tokens");
    std::fs::write(&tokens, format!("admin {ADMIN}\nread {READER}\n")).unwrap();
    let hub = support::start_hub(&management, dir.path(), |args| {
        args.accept_new_clusters = false;
        args.api_tokens_file = Some(tokens);
    });
    let rest = Rest {
        http: reqwest::Client::new(),
        base: hub.base.clone(),
    };

    // A rogue cluster joins with the fleet's token, claiming a huge capacity and the label the
    // workload selects. It is registered, but nothing is placed there.
    let mut rogue = FakeAgent::register_with(&hub.base, request("rogue")).await;
    rogue.set_capacity(idle_capacity("rogue", 50, 64_000));
    rogue.heartbeat().await;
    let mcds: Api<MultiClusterDeployment> = Api::namespaced(client.clone(), "default");
    let gold = Mcd::new("web")
        .replicas(2)
        .placement(json!({"policy": "worst-fit", "clusterSelector": {"matchLabels": {"tier": "gold"}}}))
        .build();
    mcds.create(&PostParams::default(), &gold)
        .await
        .expect("MCD created");
    wait_for("web to be Scheduled=False", DEADLINE, || async {
        let mcd = mcds.get("web").await.map_err(|e| e.to_string())?;
        let conds = mcd.status.map(|s| s.conditions).unwrap_or_default();
        match conditions::find(&conds, types::SCHEDULED) {
            Some(c) if c.status == conditions::FALSE => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(
        deployments_in(&rogue).await.is_empty(),
        "nothing is sent to a cluster awaiting acceptance"
    );
    let objects: Api<WorkloadCluster> = Api::all(client.clone());
    wait_for(
        "rogue's WorkloadCluster to say Accepted=False",
        DEADLINE,
        || async {
            let object = objects.get("rogue").await.map_err(|e| e.to_string())?;
            let conds = object.status.map(|s| s.conditions).unwrap_or_default();
            match conditions::find(&conds, types::ACCEPTED) {
                Some(c) if c.status == conditions::FALSE && c.reason == reasons::AWAITING_ACCEPTANCE => {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // A join token, issued by an admin only, registers its one name, once, accepted at once.
    let (status, _) = rest
        .call(
            READER,
            Method::POST,
            "/api/v1/join-tokens",
            Some(json!({"cluster": "eu-1"})),
        )
        .await;
    assert_eq!(status, 403, "a read token cannot issue join tokens");
    let (status, body) = rest
        .call(
            ADMIN,
            Method::POST,
            "/api/v1/join-tokens",
            Some(json!({"cluster": "eu-1", "ttlSeconds": 5})),
        )
        .await;
    assert_eq!(status, 422, "a TTL under a minute is refused: {body}");
    let issued = rest
        .admin(
            Method::POST,
            "/api/v1/join-tokens",
            Some(json!({"cluster": "eu-1"})),
        )
        .await;
    let token = issued["token"]
        .as_str()
        .expect("the token is shown once")
        .to_owned();
    let refused = FakeAgent::try_register(&hub.base, request("eu-9"), &token)
        .await
        .err();
    assert_eq!(
        refused.map(|(status, _)| status),
        Some(403),
        "the token is for eu-1 only"
    );
    let mut eu1 = FakeAgent::try_register(&hub.base, request("eu-1"), &token)
        .await
        .expect("eu-1 joins with its join token");
    eu1.set_capacity(idle_capacity("eu-1", 2, 4000));
    eu1.heartbeat().await;
    wait_deployments(&eu1, &["web"]).await;
    let again = FakeAgent::try_register(&hub.base, request("eu-1"), &token)
        .await
        .err();
    assert_eq!(
        again.map(|(status, _)| status),
        Some(401),
        "a join token works once"
    );
    let listed = rest.admin(Method::GET, "/api/v1/join-tokens", None).await;
    assert_eq!(listed["items"][0]["state"], "used", "{listed}");
    assert!(
        listed.to_string().find(&token[token.len() - 20..]).is_none(),
        "lists hold no secret"
    );

    // The same through `nave-hub admin`: a join token for eu-2, listed with the others.
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, format!("{ADMIN}\n")).unwrap();
    let admin = |command: nave_hub::admin_cli::AdminCommand| nave_hub::admin_cli::AdminArgs {
        hub_url: hub.base.clone(),
        token_file: token_file.clone(),
        ca_file: None,
        command,
    };
    use nave_hub::admin_cli::{AdminCommand, JoinTokenCommand};
    let printed = nave_hub::admin_cli::run(&admin(AdminCommand::JoinToken(JoinTokenCommand::Create {
        cluster: "eu-2".to_owned(),
        ttl: std::time::Duration::from_secs(600),
    })))
    .await
    .expect("the CLI issues a join token");
    let issued: Value = serde_json::from_str(&printed).expect("the hub's JSON, printed");
    let eu2_token = issued["token"].as_str().expect("a token").to_owned();
    FakeAgent::try_register(&hub.base, request("eu-2"), &eu2_token)
        .await
        .expect("eu-2 joins with the token the CLI printed");
    let listed = nave_hub::admin_cli::run(&admin(AdminCommand::JoinToken(JoinTokenCommand::List)))
        .await
        .expect("the CLI lists join tokens");
    assert!(
        listed.contains("eu-2") && !listed.contains(&eu2_token),
        "{listed}"
    );
    let refused = nave_hub::admin_cli::run(&admin(AdminCommand::Remove {
        cluster: "eu-2".to_owned(),
    }))
    .await
    .expect_err("an accepted cluster is not removed");
    assert!(
        matches!(&refused, nave_hub::admin_cli::AdminError::Hub { status: 409, message } if message.contains("withdraw")),
        "{refused}"
    );

    // The impostor: the fleet's token does not take eu-1 over, and eu-1 keeps its work.
    let impostor = FakeAgent::try_register(&hub.base, request("eu-1"), BOOTSTRAP)
        .await
        .err();
    assert_eq!(impostor.map(|(status, _)| status), Some(409));
    assert_eq!(
        eu1.work_status().await,
        200,
        "the real agent keeps its credential"
    );
    wait_deployments(&eu1, &["web"]).await;

    // Accepting the rogue lets it take work (now it is the admin's call).
    let accepted = rest
        .admin(
            Method::PUT,
            "/api/v1/clusters/rogue/acceptance",
            Some(json!({"accepted": true})),
        )
        .await;
    assert_eq!(accepted, json!({"accepted": true}));
    mcds.create(
        &PostParams::default(),
        &Mcd::new("api").placement(json!({"clusters": ["rogue"]})).build(),
    )
    .await
    .expect("MCD created");
    wait_deployments(&rogue, &["api"]).await;

    // Withdrawing acceptance withdraws its work, the removal confirmed (an agent holds a set
    // that removes most of what it runs otherwise); removal waits until the agent applied it.
    rest.admin(
        Method::PUT,
        "/api/v1/clusters/rogue/acceptance",
        Some(json!({"accepted": false})),
    )
    .await;
    wait_deployments(&rogue, &[]).await;
    let withdrawn = rogue.work().await;
    assert_eq!(
        withdrawn.prune_confirmed,
        Some(withdrawn.revision),
        "a withdrawn cluster's removals need no other confirmation"
    );
    let (status, body) = rest
        .call(ADMIN, Method::DELETE, "/api/v1/clusters/eu-1", None)
        .await;
    assert_eq!(status, 409, "an accepted cluster is not removed: {body}");
    let (status, body) = rest
        .call(ADMIN, Method::DELETE, "/api/v1/clusters/rogue", None)
        .await;
    assert_eq!(status, 409, "not before its agent applied the empty set: {body}");
    rogue.report_all_ready().await;
    let (status, body) = rest
        .call(ADMIN, Method::DELETE, "/api/v1/clusters/rogue", None)
        .await;
    assert_eq!((status, body), (200, json!({"removed": "rogue"})));
    assert_eq!(
        rogue.work_status().await,
        401,
        "a removed cluster's credential is gone"
    );
    let (status, _) = rest
        .call(READER, Method::GET, "/api/v1/clusters/rogue/credentials", None)
        .await;
    assert_eq!(status, 403, "credentials are for admins");

    // An admin confirms that eu-1's agent may remove most of what it runs: its current revision
    // by default, never one not written yet; the CLI says the same.
    assert_eq!(eu1.work().await.prune_confirmed, None, "nothing confirmed yet");
    let current = eu1.work().await.revision;
    let confirmed = rest
        .admin(Method::POST, "/api/v1/clusters/eu-1/prune-confirmation", None)
        .await;
    assert_eq!(confirmed, json!({"revision": current}));
    assert_eq!(eu1.work().await.prune_confirmed, Some(current));
    let (status, body) = rest
        .call(
            ADMIN,
            Method::POST,
            "/api/v1/clusters/eu-1/prune-confirmation",
            Some(json!({"revision": current + 1})),
        )
        .await;
    assert_eq!(status, 422, "a revision not written yet: {body}");
    assert!(
        body["message"].as_str().unwrap_or_default().contains("revision"),
        "{body}"
    );
    let (status, _) = rest
        .call(
            READER,
            Method::POST,
            "/api/v1/clusters/eu-1/prune-confirmation",
            None,
        )
        .await;
    assert_eq!(status, 403, "confirmations are for admins");
    let (status, _) = rest
        .call(
            ADMIN,
            Method::POST,
            "/api/v1/clusters/nowhere/prune-confirmation",
            None,
        )
        .await;
    assert_eq!(status, 404);
    let printed = nave_hub::admin_cli::run(&admin(AdminCommand::ConfirmPrune {
        cluster: "eu-1".to_owned(),
        revision: Some(current),
    }))
    .await
    .expect("the CLI confirms a prune");
    assert!(printed.contains(&current.to_string()), "{printed}");

    // Revoking eu-1's credentials: its agent is shut out (what it runs is not touched).
    let revoked = rest
        .admin(Method::POST, "/api/v1/clusters/eu-1/credentials/revoke", None)
        .await;
    assert_eq!(revoked, json!({"revoked": 1}));
    assert_eq!(eu1.work_status().await, 401);
    let listed = rest
        .admin(Method::GET, "/api/v1/clusters/eu-1/credentials", None)
        .await;
    assert!(listed["items"][0]["revokedAt"].is_string(), "{listed}");

    hub.shutdown.cancel();
    hub.task.await.expect("hub task").expect("hub ends cleanly");
    drop(management);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_token_files_are_read_again_without_a_restart() {
    let (management, _client) = support::management_cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("api-tokens");
    std::fs::write(&tokens, format!("admin {ADMIN}\n")).unwrap();
    let hub = support::start_hub(&management, dir.path(), |args| {
        args.api_tokens_file = Some(tokens.clone());
    });
    let rest = Rest {
        http: reqwest::Client::new(),
        base: hub.base.clone(),
    };
    wait_for(
        "the hub to answer with the first admin token",
        DEADLINE,
        || async {
            match rest.call(ADMIN, Method::GET, "/api/v1/join-tokens", None).await {
                (200, _) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // The REST API's tokens: the new one works, the old one stops.
    std::fs::write(&tokens, "admin rotated-admin-token\n").unwrap();
    wait_for("the rotated admin token to be accepted", DEADLINE, || async {
        match rest
            .call("rotated-admin-token", Method::GET, "/api/v1/join-tokens", None)
            .await
        {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (status, _) = rest.call(ADMIN, Method::GET, "/api/v1/join-tokens", None).await;
    assert_eq!(status, 401, "the replaced token no longer works");

    // The bootstrap token likewise.
    let bootstrap = dir.path().join("bootstrap-token");
    std::fs::write(&bootstrap, "rotated-bootstrap-token\n").unwrap();
    wait_for(
        "the rotated bootstrap token to register a cluster",
        DEADLINE,
        || async {
            FakeAgent::try_register(&hub.base, request("eu-7"), "rotated-bootstrap-token")
                .await
                .map(drop)
                .map_err(|(status, body)| format!("{status} {body}"))
        },
    )
    .await;
    let old = FakeAgent::try_register(&hub.base, request("eu-8"), BOOTSTRAP)
        .await
        .err();
    assert_eq!(
        old.map(|(status, _)| status),
        Some(401),
        "the old bootstrap token is refused"
    );

    hub.shutdown.cancel();
    hub.task.await.expect("hub task").expect("hub ends cleanly");
    drop(management);
}
