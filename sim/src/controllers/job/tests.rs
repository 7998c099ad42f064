use super::*;

use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::{Container, PodSpec};

fn job(name: &str, indexed: bool) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some("u-job".into()),
            ..Default::default()
        },
        spec: Some(JobSpec {
            completions: Some(10),
            parallelism: Some(3),
            completion_mode: Some(if indexed { "Indexed" } else { "NonIndexed" }.into()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some([(JOB_NAME_LABEL.to_string(), name.to_string())].into()),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    containers: vec![Container {
                        name: "work".into(),
                        image: Some("busybox".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

#[test]
fn indexes_parse_and_format_as_upstream_intervals() {
    let set = parse_indexes("0-3,7, 9-9,x,5-4");
    assert_eq!(set, [0, 1, 2, 3, 7, 9].into());
    assert_eq!(format_indexes(&set), "0-3,7,9");
    assert_eq!(format_indexes(&[1, 2].into()), "1-2");
    assert_eq!(format_indexes(&BTreeSet::new()), "");
    assert_eq!(format_indexes(&(0..10).collect()), "0-9");
}

#[test]
fn pending_indexes_skip_taken_ones_lowest_first() {
    let taken: BTreeSet<u32> = [0, 2, 3].into();
    assert_eq!(first_pending_indexes(6, &taken, 2), [1, 4]);
    assert_eq!(first_pending_indexes(4, &taken, 5), [1]);
}

#[test]
fn backoff_doubles_up_to_36_times_the_base() {
    let base = Duration::from_millis(100);
    assert_eq!(backoff(base, 0), Duration::ZERO);
    assert_eq!(backoff(base, 1), base);
    assert_eq!(backoff(base, 3), Duration::from_millis(400));
    assert_eq!(backoff(base, 30), Duration::from_millis(3600));
}

#[test]
fn an_indexed_pod_carries_its_index_hostname_and_variable() {
    let j = job("render", true);
    let pod = new_pod(&j, Some(7), None);
    let ann = pod.metadata.annotations.clone().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    assert_eq!(pod.metadata.generate_name.as_deref(), Some("render-7-"));
    assert_eq!(
        ann.get(COMPLETION_INDEX_ANNOTATION).map(String::as_str),
        Some("7")
    );
    assert_eq!(
        labels.get(COMPLETION_INDEX_ANNOTATION).map(String::as_str),
        Some("7")
    );
    assert_eq!(labels.get(JOB_NAME_LABEL).map(String::as_str), Some("render"));
    assert!(!ann.contains_key(INDEX_FAILURE_COUNT_ANNOTATION));
    let spec = pod.spec.clone().unwrap_or_default();
    assert_eq!(spec.hostname.as_deref(), Some("render-7"));
    let env = spec.containers[0].env.clone().unwrap_or_default();
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].name, COMPLETION_INDEX_ENV);
    assert_eq!(
        env[0]
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str()),
        Some("metadata.labels['batch.kubernetes.io/job-completion-index']")
    );
    let owner = controller_of(pod.metadata.owner_references.as_ref()).expect("owner");
    assert_eq!(
        (owner.kind.as_str(), owner.api_version.as_str()),
        ("Job", "batch/v1")
    );

    let plain = new_pod(&job("batch", false), None, None);
    assert_eq!(plain.metadata.generate_name.as_deref(), Some("batch-"));
    assert!(plain.spec.unwrap_or_default().hostname.is_none());
    let counted = new_pod(&j, Some(2), Some(3));
    assert_eq!(
        counted
            .metadata
            .annotations
            .unwrap_or_default()
            .get(INDEX_FAILURE_COUNT_ANNOTATION)
            .map(String::as_str),
        Some("3")
    );
}

#[test]
fn long_names_are_cut_to_fit_the_generated_name() {
    let long = "j".repeat(70);
    let name = generate_name(&long, Some(12));
    assert_eq!(name.len(), MAX_GENERATE_NAME);
    assert!(name.ends_with("-12-"));
}

#[test]
fn conditions_are_set_as_upstream_ensure_job_condition_status() {
    let now = Timestamp::from_second(1_700_000_000).expect("ts");
    let later = Timestamp::from_second(1_700_000_100).expect("ts");
    let mut list = Vec::new();
    assert!(!ensure_condition(
        &mut list,
        "Suspended",
        "False",
        "JobResumed",
        "Job resumed",
        now
    ));
    assert!(
        list.is_empty(),
        "a False condition is not added where there was none"
    );
    assert!(ensure_condition(
        &mut list,
        "Suspended",
        "True",
        "JobSuspended",
        "Job suspended",
        now
    ));
    assert!(!ensure_condition(
        &mut list,
        "Suspended",
        "True",
        "JobSuspended",
        "Job suspended",
        later
    ));
    assert!(ensure_condition(
        &mut list,
        "Suspended",
        "False",
        "JobResumed",
        "Job resumed",
        later
    ));
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].last_transition_time, Some(Time(later)));
}

#[test]
fn restarts_under_on_failure_count_against_the_backoff_limit() {
    let mut j = job("retry", false);
    let pod = |restarts: i32| {
        Arc::new(Pod {
            status: Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
                    restart_count: restarts,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        })
    };
    assert!(
        !past_backoff_limit_on_failure(&j, &[pod(5)], 2),
        "restartPolicy Never"
    );
    if let Some(spec) = j.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.restart_policy = Some("OnFailure".into());
    }
    assert!(!past_backoff_limit_on_failure(&j, &[pod(1)], 2));
    assert!(past_backoff_limit_on_failure(&j, &[pod(1), pod(1)], 2));
    assert!(past_backoff_limit_on_failure(&j, &[pod(1)], 0));
}
