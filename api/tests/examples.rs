//! The manifests in `examples/` parse as Nave types and fit the generated CRD schemas.

use std::{fs, path::PathBuf};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{CustomResourceExt, ResourceExt};
use nave_api::{MultiClusterDeployment, MultiClusterService, PlacementPolicy, WorkloadCluster};
use serde_json::Value;

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("examples")
}

/// Every document of an example file, as JSON.
fn documents(file: &str) -> Vec<Value> {
    let text =
        fs::read_to_string(examples_dir().join(file)).unwrap_or_else(|e| panic!("examples/{file}: {e}"));
    serde_saphyr::from_multiple::<Value>(&text).unwrap_or_else(|e| panic!("examples/{file}: {e}"))
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// What an API server would reject or silently drop: fields the schema does not declare (pruned),
/// missing required fields, wrong types, values outside an enum or range.
fn schema_problems(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    if schema["x-kubernetes-int-or-string"] == true {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            out.push(format!("{path}: not an integer or a string"));
        }
        return;
    }
    let type_ok = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        out.push(format!("{path}: expected {}, found {value}", schema["type"]));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        out.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), value.as_f64())
        && n < min
    {
        out.push(format!("{path}: {n} is below the minimum {min}"));
    }
    if let (Some(max), Some(n)) = (schema["maximum"].as_f64(), value.as_f64())
        && n > max
    {
        out.push(format!("{path}: {n} is above the maximum {max}"));
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            schema_problems(item, &schema["items"], &format!("{path}[{i}]"), out);
        }
    }
    if let Some(fields) = value.as_object() {
        for required in schema["required"].as_array().into_iter().flatten() {
            let required = required.as_str().unwrap();
            if !fields.contains_key(required) {
                out.push(format!("{path}.{required}: required"));
            }
        }
        for (name, field) in fields {
            let field_path = format!("{path}.{name}");
            if let Some(sub) = schema["properties"].get(name) {
                schema_problems(field, sub, &field_path, out);
            } else if schema["additionalProperties"].is_object() {
                schema_problems(field, &schema["additionalProperties"], &field_path, out);
            } else if schema["x-kubernetes-preserve-unknown-fields"] != true {
                out.push(format!(
                    "{field_path}: not in the schema, the API server would drop it"
                ));
            }
        }
    }
}

fn assert_fits_crd<K: CustomResourceExt>(doc: &Value) {
    let crd = K::crd();
    let schema =
        serde_json::to_value(&crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema).unwrap();
    let mut problems = Vec::new();
    schema_problems(&doc["spec"], &schema["properties"]["spec"], "spec", &mut problems);
    assert!(
        problems.is_empty(),
        "{} {}: {problems:#?}",
        crd.spec.names.kind,
        doc["metadata"]["name"]
    );
}

#[test]
fn web_example_is_an_mcd_of_nginx_with_its_service_and_config() {
    let docs = documents("web.yaml");

    let mcds = of_kind(&docs, "MultiClusterDeployment");
    assert_eq!(mcds.len(), 1);
    assert_fits_crd::<MultiClusterDeployment>(mcds[0]);
    let mcd: MultiClusterDeployment = serde_json::from_value(mcds[0].clone()).unwrap();
    assert_eq!(mcd.name_any(), "web");
    assert_eq!(mcd.spec.replicas, 6);
    assert_eq!(mcd.spec.placement.policy, PlacementPolicy::WorstFit);
    assert!(mcd.spec.dependencies.enabled, "dependencies follow by default");
    let spec = mcd
        .spec
        .template
        .deployment_spec()
        .expect("the example template is a valid DeploymentSpec");
    let pod = spec.template.spec.expect("pod spec");
    assert!(
        pod.containers[0]
            .image
            .as_deref()
            .is_some_and(|i| i.starts_with("nginx:"))
    );

    // The ConfigMap the pod template mounts is in the same file.
    let config_maps = of_kind(&docs, "ConfigMap");
    assert_eq!(config_maps.len(), 1);
    let config_map: ConfigMap = serde_json::from_value(config_maps[0].clone()).unwrap();
    let mounted: Vec<String> = pod
        .volumes
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| v.config_map.map(|c| c.name))
        .collect();
    assert_eq!(mounted, [config_map.name_any()]);

    let services = of_kind(&docs, "MultiClusterService");
    assert_eq!(services.len(), 1);
    assert_fits_crd::<MultiClusterService>(services[0]);
    let mcs: MultiClusterService = serde_json::from_value(services[0].clone()).unwrap();
    assert_eq!(mcs.spec.deployment.as_deref(), Some("web"));
    assert_eq!(mcs.spec.ports[0].port, 80);
}

#[test]
fn clusters_example_declares_workload_clusters() {
    let docs = documents("clusters.yaml");
    let clusters = of_kind(&docs, "WorkloadCluster");
    assert_eq!(
        clusters.len(),
        docs.len(),
        "only WorkloadClusters in clusters.yaml"
    );
    assert!(clusters.len() >= 2);
    for doc in &clusters {
        assert_fits_crd::<WorkloadCluster>(doc);
        let wcl: WorkloadCluster = serde_json::from_value((*doc).clone()).unwrap();
        assert!(wcl.spec.region.is_some(), "{} has a region", wcl.name_any());
        assert!(
            wcl.metadata.namespace.is_none(),
            "WorkloadClusters are cluster-scoped"
        );
    }
    assert!(
        clusters.iter().any(|d| d["spec"]["burstOnly"] == true),
        "the example shows a burst-only cluster"
    );
}

#[test]
fn schema_check_catches_typos() {
    // The checker above is only useful if it finds mistakes.
    let mut doc = documents("web.yaml")
        .into_iter()
        .find(|d| d["kind"] == "MultiClusterDeployment")
        .unwrap();
    doc["spec"]["placement"]["maxCluster"] = Value::from(3);
    doc["spec"]["placement"]["policy"] = Value::from("first-fit");
    let crd = MultiClusterDeployment::crd();
    let schema =
        serde_json::to_value(&crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema).unwrap();
    let mut problems = Vec::new();
    schema_problems(&doc["spec"], &schema["properties"]["spec"], "spec", &mut problems);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("spec.placement.policy: \"first-fit\" is not one of"))
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("spec.placement.maxCluster: not in the schema"))
    );
}

#[test]
fn everywhere_example_runs_one_collector_per_selected_cluster() {
    let docs = documents("everywhere.yaml");
    let mcds = of_kind(&docs, "MultiClusterDeployment");
    assert_eq!(mcds.len(), 1);
    assert_fits_crd::<MultiClusterDeployment>(mcds[0]);
    let mcd: MultiClusterDeployment = serde_json::from_value(mcds[0].clone()).unwrap();
    assert_eq!(mcd.spec.placement.policy, PlacementPolicy::Everywhere);
    assert_eq!(mcd.spec.replicas, 1, "one per cluster");
    let selector = mcd
        .spec
        .placement
        .cluster_selector
        .as_ref()
        .expect("a cluster selector");
    let requirement = &selector.match_expressions.as_ref().expect("an expression")[0];
    assert_eq!(
        (requirement.key.as_str(), requirement.operator.as_str()),
        ("nave.dev/logs", "NotIn")
    );
    mcd.spec
        .template
        .deployment_spec()
        .expect("the example template is a valid DeploymentSpec");
}

#[test]
fn autoscaling_example_scales_its_workload_by_cpu() {
    use nave_api::MultiClusterHorizontalPodAutoscaler;
    let docs = documents("autoscaling.yaml");
    let mcds = of_kind(&docs, "MultiClusterDeployment");
    let hpas = of_kind(&docs, "MultiClusterHorizontalPodAutoscaler");
    assert_eq!((mcds.len(), hpas.len()), (1, 1));
    assert_fits_crd::<MultiClusterDeployment>(mcds[0]);
    assert_fits_crd::<MultiClusterHorizontalPodAutoscaler>(hpas[0]);
    let hpa: MultiClusterHorizontalPodAutoscaler = serde_json::from_value(hpas[0].clone()).unwrap();
    assert_eq!(hpa.spec.scale_target_ref.name, mcds[0]["metadata"]["name"]);
    assert_eq!((hpa.spec.min_replicas, hpa.spec.max_replicas), (Some(2), 20));
    assert_eq!(hpa.spec.metrics.len(), 1);
}

#[test]
fn drop_in_example_opens_its_namespace_and_asks_for_a_policy() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Namespace;
    let docs = documents("drop-in.yaml");
    let namespace: Namespace = serde_json::from_value(of_kind(&docs, "Namespace")[0].clone()).unwrap();
    let deployment: Deployment = serde_json::from_value(of_kind(&docs, "Deployment")[0].clone()).unwrap();
    assert_eq!(
        namespace
            .labels()
            .get(nave_api::DROP_IN_NAMESPACE_LABEL)
            .map(String::as_str),
        Some("enabled"),
        "the namespace is opened"
    );
    assert_eq!(deployment.namespace(), namespace.metadata.name);
    let policy = deployment
        .annotations()
        .get(nave_api::DROP_IN_ANNOTATION)
        .expect("the placement annotation");
    let _: PlacementPolicy =
        serde_json::from_value(Value::String(policy.clone())).expect("a policy the hub knows");
}

#[test]
fn statefulset_example_numbers_a_database_across_the_fleet() {
    let docs = documents("statefulset.yaml");
    let mcds = of_kind(&docs, "MultiClusterDeployment");
    let services = of_kind(&docs, "MultiClusterService");
    assert_eq!((mcds.len(), services.len()), (1, 1));
    assert_fits_crd::<MultiClusterDeployment>(mcds[0]);
    assert_fits_crd::<MultiClusterService>(services[0]);
    let mcd: MultiClusterDeployment = serde_json::from_value(mcds[0].clone()).unwrap();
    assert_eq!(mcd.spec.template.kind, nave_api::WorkloadKind::StatefulSet);
    let spec = mcd
        .spec
        .template
        .stateful_set_spec()
        .expect("the example template is a valid StatefulSetSpec");
    assert_eq!(spec.service_name.as_deref(), Some("db"));
    assert_eq!(spec.volume_claim_templates.map(|c| c.len()), Some(1));
    let service: MultiClusterService = serde_json::from_value(services[0].clone()).unwrap();
    assert_eq!(service.spec.deployment.as_deref(), Some("db"));
}

#[test]
fn job_example_divides_indexed_completions() {
    let docs = documents("job.yaml");
    let jobs = of_kind(&docs, "MultiClusterJob");
    assert_eq!(jobs.len(), 1);
    assert_fits_crd::<nave_api::MultiClusterJob>(jobs[0]);
    let job: nave_api::MultiClusterJob = serde_json::from_value(jobs[0].clone()).unwrap();
    let spec: k8s_openapi::api::batch::v1::JobSpec =
        serde_json::from_value(job.spec.template.spec.clone()).expect("a valid JobSpec");
    assert_eq!((spec.completions, spec.parallelism), (Some(100), Some(12)));
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    assert_eq!(job.spec.placement.policy, nave_api::JobPolicy::Spread);
}
