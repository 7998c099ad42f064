//! Kubeconfig emission: one cluster, one user with a bearer token, one context with
//! namespace `default`, `current-context` set, and the CA (not the leaf) when serving TLS.

use base64::Engine;

/// Renders a kubeconfig (YAML) for a cluster `name` at `server`.
pub fn render(name: &str, server: &str, token: &str, ca_pem: Option<&str>) -> String {
    let mut cluster = format!("    server: {server}\n");
    if let Some(ca) = ca_pem {
        let data = base64::engine::general_purpose::STANDARD.encode(ca.as_bytes());
        cluster.push_str(&format!("    certificate-authority-data: {data}\n"));
    }
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: {name}\n  cluster:\n{cluster}\
         users:\n\
         - name: {name}-admin\n  user:\n    token: {token}\n\
         contexts:\n\
         - name: {name}\n  context:\n    cluster: {name}\n    user: {name}-admin\n    namespace: default\n\
         current-context: {name}\n\
         preferences: {{}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_parses_with_kube_rs() {
        let text = render(
            "c1",
            "https://127.0.0.1:6443",
            "tok",
            Some("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"),
        );
        let kc = kube::config::Kubeconfig::from_yaml(&text).expect("parses");
        assert_eq!(kc.current_context.as_deref(), Some("c1"));
        assert_eq!(
            kc.clusters[0]
                .cluster
                .as_ref()
                .and_then(|c| c.server.clone())
                .as_deref(),
            Some("https://127.0.0.1:6443")
        );
        assert!(
            kc.clusters[0]
                .cluster
                .as_ref()
                .and_then(|c| c.certificate_authority_data.clone())
                .is_some()
        );
        assert_eq!(
            kc.contexts[0]
                .context
                .as_ref()
                .and_then(|c| c.namespace.clone())
                .as_deref(),
            Some("default")
        );
    }
}
