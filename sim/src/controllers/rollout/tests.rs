use super::*;

use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{Container, PodSpec};

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(s).expect("timestamp")
}

fn template(image: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some([("app".to_string(), "web".to_string())].into()),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "web".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

fn deployment(replicas: i32, image: &str) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("d-uid".into()),
            generation: Some(1),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some([("app".to_string(), "web".to_string())].into()),
                match_expressions: None,
            },
            template: template(image),
            ..Default::default()
        },
        status: None,
    }
}

fn rs_from_plan(p: &Plan, replicas: i32, available: i32) -> RsState {
    let rs = p.create.as_ref().expect("a new ReplicaSet");
    let mut s = RsState::from_rs(rs);
    s.uid = format!("{}-uid", s.name);
    s.created = Some(ts(100));
    s.replicas = replicas;
    s.ready = available;
    s.available = available;
    s
}

fn cond<'a>(s: &'a DeploymentStatus, t: &str) -> (&'a str, &'a str) {
    let c = s
        .conditions
        .as_ref()
        .and_then(|cs| cs.iter().find(|c| c.type_.as_deref() == Some(t)))
        .expect("condition");
    (
        c.status.as_deref().unwrap_or(""),
        c.reason.as_deref().unwrap_or(""),
    )
}

#[test]
fn fresh_deployment_creates_a_replica_set_with_revision_1_and_is_unavailable() {
    let d = deployment(2, "nginx:1");
    let p = plan(&d, &[], ts(100));
    let rs = p.create.as_ref().expect("creates an RS");
    let name = rs.metadata.name.clone().unwrap_or_default();
    let hash = name.strip_prefix("web-").expect("name is <deploy>-<hash>");
    assert!(
        hash.bytes().all(|b| ALPHABET.contains(&b)),
        "hash {hash:?} uses the safe alphabet"
    );
    assert_eq!(rs.spec.replicas, Some(2));
    let ann = rs.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(ann.get(REVISION).map(String::as_str), Some("1"));
    assert_eq!(ann.get(DESIRED_REPLICAS).map(String::as_str), Some("2"));
    assert_eq!(ann.get(MAX_REPLICAS).map(String::as_str), Some("3"));
    let sel = rs.spec.selector.clone();
    assert_eq!(
        sel.match_labels
            .unwrap_or_default()
            .get(HASH_LABEL)
            .map(String::as_str),
        Some(hash)
    );
    assert_eq!(p.revision.as_deref(), Some("1"));
    assert_eq!(
        p.events,
        vec![(
            "ScalingReplicaSet".to_string(),
            format!("Scaled up replica set {name} from 0 to 2")
        )]
    );
    assert_eq!(p.status.observed_generation, Some(1));
    assert_eq!(p.status.unavailable_replicas, Some(2));
    assert_eq!(p.status.replicas, None, "zero counts are omitted");
    assert_eq!(
        cond(&p.status, "Available"),
        ("False", "MinimumReplicasUnavailable")
    );
    assert_eq!(cond(&p.status, "Progressing"), ("True", "NewReplicaSetCreated"));
}

#[test]
fn rollout_reaches_new_replica_set_available() {
    let mut d = deployment(2, "nginx:1");
    let first = plan(&d, &[], ts(100));
    let rs = rs_from_plan(&first, 2, 0);
    d.status = Some(first.status.clone());
    d.metadata.annotations = Some([(REVISION.to_string(), "1".to_string())].into());
    // Pods exist but are not ready yet: progressing.
    let p = plan(&d, std::slice::from_ref(&rs), ts(101));
    assert_eq!(p.create, None);
    assert_eq!(cond(&p.status, "Progressing"), ("True", "ReplicaSetUpdated"));
    d.status = Some(p.status.clone());
    let done = rs_from_plan(&first, 2, 2);
    let p = plan(&d, std::slice::from_ref(&done), ts(102));
    let s = &p.status;
    assert_eq!(
        (
            s.observed_generation,
            s.replicas,
            s.updated_replicas,
            s.ready_replicas,
            s.available_replicas
        ),
        (Some(1), Some(2), Some(2), Some(2), Some(2))
    );
    assert_eq!(s.unavailable_replicas, None);
    assert_eq!(cond(s, "Available"), ("True", "MinimumReplicasAvailable"));
    assert_eq!(cond(s, "Progressing"), ("True", "NewReplicaSetAvailable"));
    let progressing = s
        .conditions
        .as_ref()
        .and_then(|c| c.iter().find(|c| c.type_.as_deref() == Some("Progressing")))
        .cloned();
    assert_eq!(
        progressing.and_then(|c| c.message),
        Some(format!(
            "ReplicaSet \"{}\" has successfully progressed.",
            done.name
        ))
    );
    // Steady state: the same status again, nothing to do.
    d.status = Some(p.status.clone());
    let again = plan(&d, &[done], ts(200));
    assert_eq!(again.status, p.status);
    assert!(again.updates.is_empty() && again.create.is_none() && again.events.is_empty());
}

#[test]
fn image_change_creates_revision_2_within_surge_and_keeps_old_pods_for_availability() {
    let mut d = deployment(4, "nginx:1");
    let first = plan(&d, &[], ts(100));
    let old = rs_from_plan(&first, 4, 4);
    d.metadata.annotations = Some([(REVISION.to_string(), "1".to_string())].into());
    d.spec.template = template("nginx:2");
    d.metadata.generation = Some(2);
    let p = plan(&d, std::slice::from_ref(&old), ts(110));
    let rs = p.create.as_ref().expect("second RS");
    assert_ne!(rs.metadata.name.as_deref(), Some(old.name.as_str()));
    // 25% surge of 4 = 1, 25% unavailable of 4 = 1: one new pod, one old pod scaled down.
    assert_eq!(rs.spec.replicas, Some(1));
    assert_eq!(
        rs.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION))
            .map(String::as_str),
        Some("2")
    );
    assert_eq!(p.revision.as_deref(), Some("2"));
    assert_eq!(p.updates.len(), 1);
    assert_eq!(
        (p.updates[0].name.as_str(), p.updates[0].replicas),
        (old.name.as_str(), 3)
    );
}

#[test]
fn recreate_scales_old_to_zero_before_creating() {
    let mut d = deployment(2, "nginx:1");
    d.spec.strategy = Some(DeploymentStrategy {
        type_: Some("Recreate".into()),
        rolling_update: None,
    });
    let first = plan(&d, &[], ts(100));
    let old = rs_from_plan(&first, 2, 2);
    d.spec.template = template("nginx:2");
    let p = plan(&d, std::slice::from_ref(&old), ts(110));
    assert!(p.create.is_none(), "waits for the old pods");
    assert_eq!(
        p.updates
            .iter()
            .map(|u| (u.name.as_str(), u.replicas))
            .collect::<Vec<_>>(),
        vec![(old.name.as_str(), 0)]
    );
    let mut gone = old.clone();
    (gone.spec_replicas, gone.replicas, gone.ready, gone.available) = (0, 0, 0, 0);
    let p = plan(&d, &[gone], ts(111));
    assert_eq!(p.create.as_ref().and_then(|r| r.spec.replicas), Some(2));
}

#[test]
fn old_replica_sets_beyond_history_limit_are_deleted_oldest_revision_first() {
    let mut d = deployment(1, "nginx:9");
    d.spec.revision_history_limit = Some(1);
    let cur = plan(&d, &[], ts(100));
    let mut live = rs_from_plan(&cur, 1, 1);
    live.revision = 4;
    d.status = Some(DeploymentStatus {
        observed_generation: Some(1),
        replicas: Some(1),
        updated_replicas: Some(1),
        available_replicas: Some(1),
        ..Default::default()
    });
    let dead = |n: &str, rev: i64| RsState {
        name: n.into(),
        uid: format!("{n}-uid"),
        created: Some(ts(rev)),
        revision: rev,
        template: Some(template(n)),
        spec_replicas: 0,
        replicas: 0,
        ready: 0,
        available: 0,
        failure: None,
    };
    let p = plan(&d, &[dead("r3", 3), dead("r1", 1), dead("r2", 2), live], ts(200));
    assert_eq!(
        p.delete,
        vec![
            ("r1".to_string(), "r1-uid".to_string()),
            ("r2".to_string(), "r2-uid".to_string())
        ]
    );
}

#[test]
fn percentages_round_surge_up_and_unavailable_down() {
    let pct = |s: &str| IntOrString::String(s.into());
    assert_eq!(resolve(Some(&pct("25%")), "25%", 2, true), 1);
    assert_eq!(resolve(Some(&pct("25%")), "25%", 2, false), 0);
    assert_eq!(resolve(None, "25%", 10, true), 3);
    assert_eq!(resolve(Some(&IntOrString::Int(3)), "25%", 10, false), 3);
    let mut d = deployment(1, "x");
    d.spec.strategy = Some(DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(k8s_openapi::api::apps::v1::RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(0)),
            max_unavailable: Some(IntOrString::Int(0)),
        }),
    });
    assert_eq!(surge_and_unavailable(&d), (0, 1));
}

#[test]
fn hash_is_stable_and_depends_on_collision_count() {
    let t = template("nginx:1");
    assert_eq!(template_hash(&t, None), template_hash(&t, None));
    assert_ne!(template_hash(&t, None), template_hash(&t, Some(1)));
    assert_ne!(template_hash(&t, None), template_hash(&template("nginx:2"), None));
    let mut labelled = t.clone();
    labelled
        .metadata
        .as_mut()
        .and_then(|m| m.labels.as_mut())
        .map(|l| l.insert(HASH_LABEL.into(), "abc".into()));
    assert!(equal_ignore_hash(&t, &labelled));
}

#[test]
fn transition_time_is_kept_when_only_the_reason_changes() {
    let mut conds = vec![condition(
        "Progressing",
        "True",
        "NewReplicaSetCreated",
        "a".into(),
        ts(1),
    )];
    set_condition(
        &mut conds,
        condition("Progressing", "True", "NewReplicaSetAvailable", "b".into(), ts(5)),
    );
    assert_eq!(conds[0].last_transition_time, Some(Time(ts(1))));
    assert_eq!(conds[0].last_update_time, Some(Time(ts(5))));
}

#[test]
fn no_progress_for_the_deadline_times_out_and_progress_requeues() {
    let mut d = deployment(2, "nginx:1");
    d.spec.progress_deadline_seconds = Some(10);
    let first = plan(&d, &[], ts(100));
    let rs = rs_from_plan(&first, 2, 0);
    d.status = Some(first.status.clone());
    let p = plan(&d, std::slice::from_ref(&rs), ts(101));
    assert_eq!(cond(&p.status, "Progressing"), ("True", "ReplicaSetUpdated"));
    assert_eq!(
        p.requeue_after,
        Some(Duration::from_secs(10)),
        "looks again at the deadline"
    );
    d.status = Some(p.status.clone());
    let early = plan(&d, std::slice::from_ref(&rs), ts(105));
    assert_eq!(cond(&early.status, "Progressing"), ("True", "ReplicaSetUpdated"));
    let late = plan(&d, std::slice::from_ref(&rs), ts(112));
    assert_eq!(
        cond(&late.status, "Progressing"),
        ("False", "ProgressDeadlineExceeded")
    );
    let c = late.status.conditions.as_ref().and_then(|c| {
        c.iter()
            .find(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded"))
    });
    assert_eq!(
        c.and_then(|c| c.message.clone()),
        Some(format!("ReplicaSet \"{}\" has timed out progressing.", rs.name))
    );
}

#[test]
fn paused_deployment_reports_unknown_progress_and_creates_nothing() {
    let mut d = deployment(2, "nginx:1");
    d.spec.paused = Some(true);
    let p = plan(&d, &[], ts(100));
    assert!(p.create.is_none());
    assert_eq!(cond(&p.status, "Progressing"), ("Unknown", "DeploymentPaused"));
}
