//! The agent link over HTTPS: the hub serves the chain of a CA made for the test, the agents of
//! every end-to-end test pin that CA by its hash, and a client that pins another CA, trusts only
//! the public CAs, or asks for plain HTTP without saying so, is refused before anything is sent.

use nave_agent::hub::{HubClient, HubTrust};
use nave_api::wire::RegisterRequest;
use nave_e2e::{Database, Env, fleet};

fn request() -> RegisterRequest {
    RegisterRequest {
        cluster_name: "probe-only".to_owned(),
        agent_version: "0.1.0".to_owned(),
        ..RegisterRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_reach_the_hub_over_https_only_with_its_ca() {
    let env = Env::start(fleet(1), Database::Sqlite)
        .await
        .expect("the environment starts");
    let pki = env.pki.clone();
    assert!(env.hub_url.starts_with("https://"), "{}", env.hub_url);
    // The fleet came up: its agent registered and reports through the pinned CA.
    let clusters = env.rest("/clusters").await.expect("the REST API over HTTPS");
    assert_eq!(clusters["items"][0]["ready"], true, "{clusters}");

    let wrong = HubTrust {
        ca_sha256: Some("00".repeat(32)),
        ..HubTrust::default()
    };
    let error = HubClient::with_trust(&env.hub_url, &wrong)
        .expect("a client")
        .register("not-even-read", &request())
        .await
        .expect_err("another pin is refused");
    let chain = format!("{error:?}");
    assert!(chain.contains("pinned SHA-256"), "the error says why: {chain}");

    let public_only = HubClient::with_trust(&env.hub_url, &HubTrust::default()).expect("a client");
    assert!(
        public_only.register("not-even-read", &request()).await.is_err(),
        "a private CA is not trusted through the public ones"
    );

    // The CA file works as well as the pin; the hub then answers (here: 401 for a bad token).
    let by_file = HubTrust {
        ca_file: Some(pki.ca_file.clone()),
        ..HubTrust::default()
    };
    let error = HubClient::with_trust(&env.hub_url, &by_file)
        .expect("a client")
        .register("not-a-token", &request())
        .await
        .expect_err("a bad token");
    assert!(
        matches!(error, nave_agent::Error::Unauthorized { .. }),
        "the TLS handshake succeeded and the hub answered 401: {error:?}"
    );

    let plain = env.hub_url.replacen("https://", "http://", 1);
    let refused =
        HubClient::with_trust(&plain, &HubTrust::default()).expect_err("http:// needs --insecure-http");
    assert!(refused.to_string().contains("--insecure-http"), "{refused}");
    env.shutdown().await;
}
