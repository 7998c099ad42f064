//! `nave explain` and `nave simulate`: placements and their reasons, from the hub's REST API.

use std::io::Read as _;
use std::path::Path;

use serde_json::{Value, json};

use crate::hub::Hub;
use crate::output::{render, table};
use crate::{CliError, Global};

/// Largest manifest read: a MultiClusterDeployment is a few KiB.
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// The namespace of a command that takes `-n`: the flag, else the kubeconfig context's, else
/// `default` when there is no kubeconfig at all, as kubectl does. A kubeconfig or context named
/// on the command line must be readable.
pub(crate) async fn namespace_or_default(
    global: &Global,
    namespace: Option<&str>,
) -> Result<String, CliError> {
    if let Some(namespace) = namespace {
        return Ok(namespace.to_owned());
    }
    Ok(crate::kube_config(global)
        .await?
        .map_or_else(|| "default".to_owned(), |c| c.default_namespace))
}

/// The placement of `namespace/name`, explained cluster by cluster.
pub async fn explain(global: &Global, name: &str, namespace: Option<&str>) -> Result<String, CliError> {
    let hub = Hub::new(global)?;
    let namespace = namespace_or_default(global, namespace).await?;
    let detail = hub
        .get(&format!(
            "/placements/{}/{}",
            segment(&namespace)?,
            segment(name)?
        ))
        .await
        .map_err(|e| match e.kind {
            crate::ExitKind::NotFound => CliError::not_found(format!(
                "MultiClusterDeployment {namespace}/{name} has no placement: is it applied in \
                 the management cluster, in that namespace? ({})",
                e.message
            )),
            _ => e,
        })?;
    render(global.output, &detail, |d| {
        format!(
            "MultiClusterDeployment {namespace}/{name}: {}, {} replicas ({} unplaced), decided for generation {} at {}\n\n{}\n",
            d["policy"].as_str().unwrap_or("?"),
            d["replicas"],
            d["unplaced"],
            d["generation"],
            d["updatedAt"].as_str().unwrap_or("?"),
            d["explanation"].as_str().unwrap_or_default().trim_end(),
        )
    })
}

/// Asks the hub to place `namespace/name` again from scratch: a new value (the time) of its
/// rebalance annotation.
pub async fn rebalance(global: &Global, name: &str, namespace: Option<&str>) -> Result<String, CliError> {
    let namespace = namespace_or_default(global, namespace).await?;
    let client = crate::kube_client(global).await?;
    let api: kube::Api<nave_api::MultiClusterDeployment> = kube::Api::namespaced(client, &namespace);
    let asked = jiff::Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {nave_api::REBALANCE_ANNOTATION: asked}}});
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(patch),
    )
    .await
    .map_err(|e| CliError::kube(&format!("MultiClusterDeployment {namespace}/{name}"), e))?;
    let result = json!({"namespace": namespace, "name": name, "rebalance": asked});
    render(global.output, &result, |_| {
        format!(
            "asked the hub to place {namespace}/{name} again from scratch; replicas that move keep \
             running until their successors are ready (`nave explain {name} -n {namespace}` shows the result)\n"
        )
    })
}

/// What the hub would decide for the manifest's MultiClusterDeployment.
pub async fn simulate(global: &Global, file: &Path, namespace: Option<&str>) -> Result<String, CliError> {
    let text = read_manifest(file)?;
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
        .map_err(|e| CliError::invalid(format!("{}: not YAML or JSON: {e}", file.display())))?;
    let mcd = documents
        .into_iter()
        .find(|d| d["kind"] == "MultiClusterDeployment")
        .ok_or_else(|| CliError::invalid(format!("{}: no MultiClusterDeployment in it", file.display())))?;
    let spec = mcd
        .get("spec")
        .filter(|s| s.is_object())
        .cloned()
        .ok_or_else(|| {
            CliError::invalid(format!(
                "{}: the MultiClusterDeployment has no spec",
                file.display()
            ))
        })?;
    let namespace = match mcd["metadata"]["namespace"].as_str() {
        Some(n) => n.to_owned(),
        None => namespace_or_default(global, namespace).await?,
    };
    let mut body = json!({"namespace": namespace, "spec": spec});
    if let Some(name) = mcd["metadata"]["name"].as_str() {
        body["name"] = json!(name);
    }
    let hub = Hub::new(global)?;
    let answer = hub.post("/placements/simulate", &body).await?;
    render(global.output, &answer, |a| {
        let rows: Vec<Vec<String>> = a["clusters"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|c| {
                vec![
                    c["name"].as_str().unwrap_or_default().to_owned(),
                    c["role"].as_str().unwrap_or_default().to_owned(),
                    c["previous"].to_string(),
                    c["replicas"].to_string(),
                    c["filteredOut"].as_str().unwrap_or("-").to_owned(),
                ]
            })
            .collect();
        let explanation = a["explanation"].as_str().unwrap_or_default().trim_end();
        let reason = a["reason"].as_str().unwrap_or_default();
        // The reason is the explanation's summary line unless the decision moves replicas.
        let reason = if explanation.starts_with(reason) {
            String::new()
        } else {
            format!("\n{reason}")
        };
        format!(
            "{}: {} replicas by {}, {} unplaced{reason}\n\n{}\n{explanation}\n",
            a["name"]
                .as_str()
                .map_or_else(|| format!("new in {namespace}"), |n| format!("{namespace}/{n}")),
            a["replicas"],
            a["policy"].as_str().unwrap_or("?"),
            a["unplaced"],
            table(&["CLUSTER", "ROLE", "NOW", "THEN", "FILTERED OUT"], &rows),
        )
    })
}

fn read_manifest(file: &Path) -> Result<String, CliError> {
    let mut bytes = Vec::new();
    let read = if file == Path::new("-") {
        std::io::stdin()
            .take(MAX_MANIFEST_BYTES + 1)
            .read_to_end(&mut bytes)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(MAX_MANIFEST_BYTES + 1).read_to_end(&mut bytes))
    };
    read.map_err(|e| CliError::invalid(format!("reading {}: {e}", file.display())))?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(CliError::invalid(format!(
            "{}: larger than {} MiB",
            file.display(),
            MAX_MANIFEST_BYTES >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|_| CliError::invalid(format!("{}: not UTF-8 text", file.display())))
}

/// A name as one path segment: Kubernetes names never need escaping, and anything else is
/// refused here rather than sent as another path.
fn segment(name: &str) -> Result<&str, CliError> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.']);
    if valid {
        Ok(name)
    } else {
        Err(CliError::invalid(format!(
            "{name:?} is not a Kubernetes name (lowercase letters, digits, '-' and '.')"
        )))
    }
}
