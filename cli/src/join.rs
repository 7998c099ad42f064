//! `nave join`: a single-use join token for a new cluster, and the commands that install its
//! agent with it.

use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use crate::hub::Hub;
use crate::output::render;
use crate::{CliError, Global};

/// The agent's chart as the release workflow publishes it, at this CLI's version.
const AGENT_CHART: &str = "oci://ghcr.io/nave-dev/charts/nave-agent";

/// What `-o json|yaml` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Joining {
    cluster: String,
    token: String,
    expires_at: String,
    /// The hash of the hub's CA the agent pins; `null` when the hub serves plain HTTP.
    hub_ca_sha256: Option<String>,
    /// Shell commands to run against the new cluster.
    commands: Vec<String>,
}

/// Issues the token and answers the commands.
pub async fn join(
    global: &Global,
    cluster: &str,
    ttl: Duration,
    region: Option<&str>,
) -> Result<String, CliError> {
    let hub = Hub::new(global)?;
    let hub_url = global.hub_url.clone().unwrap_or_default();
    let answer = hub
        .post(
            "/join-tokens",
            &json!({"cluster": cluster, "ttlSeconds": ttl.as_secs()}),
        )
        .await?;
    let token = answer["token"]
        .as_str()
        .ok_or_else(|| CliError::failed("the hub's answer holds no token"))?
        .to_owned();
    // The hash goes into a command the operator runs: only what a SHA-256 in hex can be.
    let hub_ca_sha256 = match answer["hubCaSha256"].as_str() {
        None => None,
        Some(hash) if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some(hash.to_owned())
        }
        Some(other) => {
            return Err(CliError::failed(format!(
                "the hub's answer holds no SHA-256 of its CA: {:?}",
                other.chars().take(80).collect::<String>()
            )));
        }
    };
    let set =
        |key: &str, value: &str| format!("--set-string {}", quote(&format!("{key}={}", helm_escape(value))));
    let mut helm = format!(
        "helm install nave-agent {AGENT_CHART} --version {} -n nave-system \\\n  {} {} \\\n  --set bootstrapToken.existingSecret=nave-bootstrap-token",
        env!("CARGO_PKG_VERSION"),
        set("hubUrl", hub_url.trim_end_matches('/')),
        set("clusterName", cluster),
    );
    match &hub_ca_sha256 {
        Some(hash) => helm.push_str(&format!(" \\\n  {}", set("hubTls.caSha256", hash))),
        None => helm.push_str(" \\\n  --set hubTls.insecureHttp=true"),
    }
    if let Some(region) = region {
        helm.push_str(&format!(" {}", set("region", region)));
    }
    let joining = Joining {
        cluster: cluster.to_owned(),
        expires_at: answer["expiresAt"].as_str().unwrap_or_default().to_owned(),
        hub_ca_sha256,
        commands: vec![
            "kubectl create namespace nave-system".to_owned(),
            format!(
                "kubectl -n nave-system create secret generic nave-bootstrap-token --from-literal=token={}",
                quote(&token)
            ),
            helm,
        ],
        token,
    };
    render(global.output, &joining, |j| {
        let mut text = format!(
            "Join token for cluster {} (usable once, until {}):\n\n  {}\n\nWith kubectl and helm pointed at the new cluster, install its agent:\n\n",
            j.cluster, j.expires_at, j.token
        );
        for command in &j.commands {
            text.push_str(command);
            text.push('\n');
        }
        if j.hub_ca_sha256.is_none() {
            text.push_str(
                "\nThe hub serves plain HTTP: the token and the agent's credential cross the \
                 network in clear. Serve HTTPS (the hub chart's default) on any network you do \
                 not control.\n",
            );
        }
        text.push_str(&format!(
            "\nThen `nave clusters` shows {} Ready once its agent beats.\n",
            j.cluster
        ));
        text
    })
}

/// `value` as Helm's `--set` reads it: a comma would start another key, a backslash escapes.
fn helm_escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace(',', "\\,")
}

/// `value` as one shell word: bare when it is plainly safe, else in single quotes.
fn quote(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,".contains(c));
    if plain {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(quote("eu-west-1"), "eu-west-1");
        assert_eq!(
            quote("https://hub.example.com:8443"),
            "https://hub.example.com:8443"
        );
        assert_eq!(quote("eu west"), "'eu west'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("$(rm -rf /)"), "'$(rm -rf /)'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn helm_values_cannot_add_keys() {
        assert_eq!(
            super::helm_escape("eu,hubTls.insecureHttp=true"),
            r"eu\,hubTls.insecureHttp=true"
        );
        assert_eq!(super::helm_escape(r"a\b"), r"a\\b");
    }
}
