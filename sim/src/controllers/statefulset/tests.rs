use super::*;

use k8s_openapi::api::apps::v1::{
    StatefulSetOrdinals, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaimSpec, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

fn set() -> StatefulSet {
    let labels: BTreeMap<String, String> = [("app".to_string(), "db".to_string())].into();
    StatefulSet {
        metadata: ObjectMeta {
            name: Some("db".into()),
            namespace: Some("default".into()),
            uid: Some("u-db".into()),
            ..Default::default()
        },
        spec: StatefulSetSpec {
            replicas: Some(2),
            ordinals: Some(StatefulSetOrdinals { start: Some(3) }),
            service_name: Some("db-headless".into()),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "pg".into(),
                        image: Some("postgres:16".into()),
                        ..Default::default()
                    }],
                    volumes: Some(vec![
                        Volume {
                            name: "data".into(),
                            ..Default::default()
                        },
                        Volume {
                            name: "scratch".into(),
                            ..Default::default()
                        },
                    ]),
                    ..Default::default()
                }),
            },
            volume_claim_templates: Some(vec![PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some("data".into()),
                    ..Default::default()
                },
                spec: Some(PersistentVolumeClaimSpec::default()),
                status: None,
            }]),
            persistent_volume_claim_retention_policy: Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_deleted: Some("Delete".into()),
                when_scaled: Some("Retain".into()),
            }),
            ..Default::default()
        },
        status: None,
    }
}

#[test]
fn ordinals_parse_only_for_members() {
    assert_eq!(ordinal_of("db", "db-3"), Some(3));
    assert_eq!(ordinal_of("db", "db-x"), None);
    assert_eq!(ordinal_of("db", "db-"), None);
    assert_eq!(ordinal_of("db", "dbb-1"), None);
    assert_eq!(ordinal_of("db", "db-1-2"), None);
    assert_eq!(ordinal_of("db-1", "db-1-2"), Some(2));
}

#[test]
fn a_new_pod_has_the_upstream_identity_labels_and_claim_volumes() {
    let s = set();
    let pod = new_pod(&s, &s.spec.template, 4, "db-abc");
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    assert_eq!(pod.metadata.name.as_deref(), Some("db-4"));
    assert_eq!(pod.metadata.generate_name.as_deref(), Some("db-"));
    assert_eq!(labels.get(POD_NAME_LABEL).map(String::as_str), Some("db-4"));
    assert_eq!(labels.get(POD_INDEX_LABEL).map(String::as_str), Some("4"));
    assert_eq!(labels.get(REVISION_LABEL).map(String::as_str), Some("db-abc"));
    assert_eq!(labels.get("app").map(String::as_str), Some("db"));
    let spec = pod.spec.clone().unwrap_or_default();
    assert_eq!(spec.hostname.as_deref(), Some("db-4"));
    assert_eq!(spec.subdomain.as_deref(), Some("db-headless"));
    let volumes = spec.volumes.unwrap_or_default();
    let names: Vec<(&str, Option<&str>)> = volumes
        .iter()
        .map(|v| {
            (
                v.name.as_str(),
                v.persistent_volume_claim.as_ref().map(|c| c.claim_name.as_str()),
            )
        })
        .collect();
    assert_eq!(names, [("data", Some("data-db-4")), ("scratch", None)]);
    let owner = controller_of(pod.metadata.owner_references.as_ref()).expect("owner");
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("StatefulSet", "u-db"));
}

#[test]
fn claims_carry_selector_labels_and_the_set_owner_when_deleted_is_delete() {
    let mut s = set();
    let claims = claims_for(&s, 3);
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].metadata.name.as_deref(), Some("data-db-3"));
    assert_eq!(
        claims[0]
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("db")
    );
    let owners = claims[0].metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "owners: {owners:?}");
    s.spec.persistent_volume_claim_retention_policy = None;
    assert!(claims_for(&s, 3)[0].metadata.owner_references.is_none());
}

#[test]
fn revisions_hash_their_data_and_restore_the_template() {
    let s = set();
    let data = revision_data(&s.spec.template);
    assert_eq!(data["spec"]["template"]["$patch"], "replace");
    let r = new_revision(&s, &data, 1, 0);
    let hash = revision_hash(&data, 0);
    assert_eq!(r.metadata.name, Some(format!("db-{hash}")));
    assert_ne!(
        hash,
        revision_hash(&data, 1),
        "the collision count changes the name"
    );
    assert_eq!(revision_template(&r), s.spec.template);
    let mut other = s.spec.template.clone();
    if let Some(spec) = other.spec.as_mut() {
        spec.containers[0].image = Some("postgres:17".into());
    }
    assert_ne!(hash, revision_hash(&revision_data(&other), 0));
}
