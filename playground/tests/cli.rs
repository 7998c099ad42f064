//! The `nave-sim` binary: the playground's subcommands and the emulator's side by side, and the
//! emulator's `fleet` subcommand serving a fleet file.

use std::path::Path;
use std::time::Duration;

use kube::api::Api;
use nave_testkit::wait_for;

#[test]
fn help_lists_the_playground_and_the_emulator_subcommands() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_nave-sim"))
        .arg("--help")
        .output()
        .expect("run nave-sim --help");
    assert!(output.status.success(), "nave-sim --help: {output:?}");
    let help = String::from_utf8_lossy(&output.stdout);
    for command in ["up", "scenario", "serve", "fleet"] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "nave-sim --help lists {command}:\n{help}"
        );
    }
}

#[tokio::test]
async fn the_fleet_command_writes_kubeconfigs_and_ready_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("fleet.yaml");
    std::fs::write(&config, "clusters:\n  - name: a\n    nodePools: [{name: n, count: 1}]\n  - name: b\n    nodePools: [{name: n, count: 1}]\n")
        .expect("write");
    let out = dir.path().join("out");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_nave-sim"))
        .args(["fleet", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn nave-sim");
    let ready_path = out.join("ready.json");
    let ready: serde_json::Value = wait_for("ready.json", Duration::from_secs(20), || async {
        let text = std::fs::read_to_string(&ready_path).map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    })
    .await;
    let clusters = ready["clusters"].as_array().cloned().unwrap_or_default();
    assert_eq!(clusters.len(), 2, "ready.json: {ready}");
    for c in &clusters {
        assert!(
            c["metricsUrl"].as_str().is_some_and(|u| u.ends_with("/metrics")),
            "{c}"
        );
        let kubeconfig = c["kubeconfig"].as_str().expect("kubeconfig path");
        assert!(Path::new(kubeconfig).is_file());
        nave_sim::install_crypto_provider();
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("config");
        let client = kube::Client::try_from(cfg).expect("client");
        let nodes = wait_for("the configured node", Duration::from_secs(10), || {
            let client = client.clone();
            async move {
                let n = Api::<k8s_openapi::api::core::v1::Node>::all(client)
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len();
                if n == 1 { Ok(n) } else { Err(format!("{n} nodes")) }
            }
        })
        .await;
        assert_eq!(nodes, 1);
    }
    let _ = child.kill().await;
}
