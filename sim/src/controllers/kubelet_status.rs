//! What the simulated kubelet writes: pod status shapes (kwok `pod-ready` and friends), failure
//! injection, start delays, and pod IP allocation from per-node CIDRs. Plain functions.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod};
use regex::Regex;
use serde_json::{Value, json};

use super::resources::qos_class;

/// Per-pod start delay, kwok's annotation (a Go duration such as `1s` or `1500ms`).
pub const KWOK_READY_DELAY_ANNOTATION: &str = "pod-ready.stage.kwok.x-k8s.io/delay";
/// Per-pod start delay in milliseconds.
pub const START_DELAY_ANNOTATION: &str = "sim.nave.dev/start-delay-millis";
/// Failure injection: `Failed`, `CrashLoopBackOff`, `ImagePullBackOff`, `NeverReady` or
/// `Succeeded`.
pub const FAULT_ANNOTATION: &str = "sim.nave.dev/fault";
/// How long the containers of a pod that runs to completion run, in milliseconds.
pub const RUN_MILLIS_ANNOTATION: &str = "sim.nave.dev/run-millis";
/// The same, kwok's annotation (a Go duration such as `30s`).
pub const KWOK_COMPLETE_DELAY_ANNOTATION: &str = "pod-complete.stage.kwok.x-k8s.io/delay";
/// The exit code of the pod's containers when they finish (an integer). Makes any pod run to
/// completion; a Job's pods do anyway, with 0 unless this says otherwise.
pub const EXIT_CODE_ANNOTATION: &str = "sim.nave.dev/exit-code";
/// Completion indexes (`"1,4-6"`) whose pods fail: a pod of an Indexed Job whose
/// `batch.kubernetes.io/job-completion-index` is listed exits with the exit code annotation (1 when
/// absent); the others exit with 0.
pub const FAIL_INDEXES_ANNOTATION: &str = "sim.nave.dev/fail-indexes";
/// The completion index annotation the Job controller puts on the pods of Indexed Jobs.
pub const COMPLETION_INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";

/// How the simulated containers of a pod behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Running and Ready.
    Ready,
    /// Running, never Ready.
    NeverReady,
    /// Containers exit with an error and are restarted with back-off.
    CrashLoop,
    /// The image cannot be pulled: stays Pending.
    ImagePull,
    /// An image is not a valid reference (`Nginx!`): stays Pending with `InvalidImageName`, as
    /// the API server accepts any non-empty image and leaves the parsing to the kubelet.
    InvalidImage,
    /// The pod fails (phase Failed).
    Failed,
    /// The pod has run to completion (phase Succeeded).
    Succeeded,
}

/// Whether `image` parses as a container image reference (`[domain[:port]/]path[:tag][@digest]`,
/// after the `distribution/reference` grammar the kubelet applies).
pub fn is_image_reference(image: &str) -> bool {
    static REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
        let component = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
        let domain = format!(r"{component}(?:\.{component})*(?::[0-9]+)?");
        let path = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*";
        let tag = r"[\w][\w.-]{0,127}";
        let digest = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
        Regex::new(&format!(
            "^(?:{domain}/)?{path}(?:/{path})*(?::{tag})?(?:@{digest})?$"
        ))
        .expect("the image reference grammar is a valid regex")
    });
    image.len() <= 255 && REFERENCE.is_match(image)
}

/// The behaviour a pod asks for (annotation); an image the kubelet cannot parse comes first, as no
/// container can be created then. A pod that runs to completion ([`exit_code`]) is `Ready` until
/// it finishes, unless its containers fail and are restarted (`restartPolicy` other than `Never`):
/// then it crash-loops.
pub fn behaviour(pod: &Pod) -> Behaviour {
    let containers = pod.spec.iter().flat_map(|s| s.containers.iter());
    if containers
        .filter_map(|c| c.image.as_deref())
        .any(|i| !is_image_reference(i))
    {
        return Behaviour::InvalidImage;
    }
    let fault = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FAULT_ANNOTATION));
    match fault.map(String::as_str) {
        Some("Failed") => Behaviour::Failed,
        Some("CrashLoopBackOff") => Behaviour::CrashLoop,
        Some("ImagePullBackOff") => Behaviour::ImagePull,
        Some("NeverReady") => Behaviour::NeverReady,
        Some("Succeeded") => Behaviour::Succeeded,
        _ => {
            let restart = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref());
            match exit_code(pod) {
                Some(code) if code != 0 && restart != Some("Never") => Behaviour::CrashLoop,
                _ => Behaviour::Ready,
            }
        }
    }
}

/// Whether the pod's containers run to completion, and with which exit code: pods owned by a Job
/// (R-P-7, kwok's `pod-complete` stage) and pods with [`EXIT_CODE_ANNOTATION`] or
/// [`FAIL_INDEXES_ANNOTATION`]. `None`: the containers run until the pod is deleted.
pub fn exit_code(pod: &Pod) -> Option<i32> {
    let ann = pod.metadata.annotations.as_ref();
    let declared = ann
        .and_then(|a| a.get(EXIT_CODE_ANNOTATION))
        .and_then(|v| v.trim().parse::<i32>().ok());
    let fail_indexes = ann.and_then(|a| a.get(FAIL_INDEXES_ANNOTATION));
    let owned_by_job = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Job" && o.controller == Some(true));
    if !owned_by_job && declared.is_none() && fail_indexes.is_none() {
        return None;
    }
    Some(match fail_indexes {
        Some(list) => {
            let index = ann
                .and_then(|a| a.get(COMPLETION_INDEX_ANNOTATION))
                .and_then(|v| v.parse::<u32>().ok());
            let listed = index.is_some_and(|i| super::job::parse_indexes(list).contains(&i));
            if listed {
                declared.filter(|c| *c != 0).unwrap_or(1)
            } else {
                0
            }
        }
        None => declared.unwrap_or(0),
    })
}

/// How long a pod that runs to completion runs once started: its annotation, else `default`.
pub fn run_time(pod: &Pod, default: Duration) -> Duration {
    let ann = pod.metadata.annotations.as_ref();
    if let Some(ms) = ann
        .and_then(|a| a.get(RUN_MILLIS_ANNOTATION))
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return Duration::from_millis(ms);
    }
    ann.and_then(|a| a.get(KWOK_COMPLETE_DELAY_ANNOTATION))
        .and_then(|v| parse_go_duration(v))
        .unwrap_or(default)
}

/// The status the kubelet writes when the containers of a started pod exit with `exit_code`:
/// `Succeeded` with `Completed` containers for 0, else `Failed` with `Error` containers.
pub fn finished_status(pod: &Pod, exit_code: i32, host_ip: &str, pod_ip: &str, now: Timestamp) -> Value {
    let behaviour = if exit_code == 0 {
        Behaviour::Succeeded
    } else {
        Behaviour::Failed
    };
    let restarts = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().map(|c| c.restart_count).max())
        .unwrap_or(0);
    let mut status = started_status(pod, behaviour, restarts, host_ip, pod_ip, now);
    if let Some(cs) = status["containerStatuses"].as_array_mut() {
        for c in cs {
            c["state"]["terminated"]["exitCode"] = json!(exit_code);
        }
    }
    status
}

/// Whether every readiness gate of the pod has its condition True; `Err` gives the upstream
/// reason message of the first gate that does not.
pub fn readiness_gates(pod: &Pod) -> Result<(), String> {
    let gates = pod.spec.as_ref().and_then(|s| s.readiness_gates.as_ref());
    for gate in gates.into_iter().flatten() {
        let cond = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == gate.condition_type));
        match cond {
            None => {
                return Err(format!(
                    "corresponding condition of pod readiness gate \"{}\" does not exist.",
                    gate.condition_type
                ));
            }
            Some(c) if c.status != "True" => {
                return Err(format!(
                    "the status of pod readiness gate \"{}\" is not \"True\", but {}",
                    gate.condition_type, c.status
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Parses a Go duration (`300ms`, `1.5s`, `1m30s`, `2h`); `None` if malformed.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += n * factor;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// The delay from binding to Running for this pod: its annotation, else the configured default.
pub fn start_delay(pod: &Pod, default: Duration) -> Duration {
    let ann = pod.metadata.annotations.as_ref();
    if let Some(ms) = ann
        .and_then(|a| a.get(START_DELAY_ANNOTATION))
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return Duration::from_millis(ms);
    }
    ann.and_then(|a| a.get(KWOK_READY_DELAY_ANNOTATION))
        .and_then(|v| parse_go_duration(v))
        .unwrap_or(default)
}

fn time(t: Timestamp) -> Value {
    Value::String(Timestamp::from_second(t.as_second()).unwrap_or(t).to_string())
}

fn pod_condition(type_: &str, ok: bool, reason: Option<&str>, message: Option<String>, now: &Value) -> Value {
    let mut c = json!({"type": type_, "status": if ok { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// An `imageID` for an image.
fn image_id(image: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in image.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("sim://{image}@sha256:{h:016x}{h:016x}{h:016x}{h:016x}")
}

fn container_id(pod_uid: &str, name: &str, restarts: i32) -> String {
    format!("sim://{pod_uid}/{name}/{restarts}")
}

/// The status the kubelet writes for a started pod ; `restarts` counts crash-loop
/// restarts so far. Existing PodScheduled and unchanged conditions keep their transition times.
pub fn started_status(
    pod: &Pod,
    behaviour: Behaviour,
    restarts: i32,
    host_ip: &str,
    pod_ip: &str,
    now: Timestamp,
) -> Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let old = pod.status.clone().unwrap_or_default();
    let now_v = time(now);
    let started_at = old
        .start_time
        .as_ref()
        .map(|t| time(t.0))
        .unwrap_or_else(|| now_v.clone());
    let (phase, ready) = match behaviour {
        Behaviour::Ready => ("Running", true),
        Behaviour::NeverReady | Behaviour::CrashLoop => ("Running", false),
        Behaviour::ImagePull | Behaviour::InvalidImage => ("Pending", false),
        Behaviour::Failed => ("Failed", false),
        Behaviour::Succeeded => ("Succeeded", false),
    };
    let container_status = |c: &Container| -> Value {
        let image = c.image.clone().unwrap_or_default();
        let mut s = json!({
            "name": c.name, "image": image, "imageID": image_id(&image),
            "containerID": container_id(&uid, &c.name, restarts),
            "ready": ready, "started": matches!(behaviour, Behaviour::Ready | Behaviour::NeverReady),
            "restartCount": restarts,
        });
        s["state"] = match behaviour {
            Behaviour::Ready | Behaviour::NeverReady => json!({"running": {"startedAt": started_at}}),
            Behaviour::CrashLoop => json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!(
                "back-off {}s restarting failed container={} pod={}_{}({})",
                crash_backoff(restarts).as_secs().max(10), c.name, name, ns, uid)}}),
            Behaviour::InvalidImage if !is_image_reference(&image) => {
                s["imageID"] = json!("");
                s.as_object_mut().map(|o| o.remove("containerID"));
                json!({"waiting": {"reason": "InvalidImageName", "message": format!(
                    "Failed to apply default image tag \"{image}\": couldn't parse image name \"{image}\": invalid reference format")}})
            }
            Behaviour::InvalidImage => json!({"running": {"startedAt": started_at}}),
            Behaviour::ImagePull => {
                s["imageID"] = json!("");
                s.as_object_mut().map(|o| o.remove("containerID"));
                json!({"waiting": {"reason": "ImagePullBackOff", "message": format!("Back-off pulling image \"{image}\"")}})
            }
            Behaviour::Failed => {
                json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": started_at,
                "finishedAt": now_v, "containerID": container_id(&uid, &c.name, restarts)}})
            }
            Behaviour::Succeeded => {
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started_at,
                "finishedAt": now_v, "containerID": container_id(&uid, &c.name, restarts)}})
            }
        };
        if behaviour == Behaviour::CrashLoop && restarts > 0 {
            s["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": now_v,
                "finishedAt": now_v, "containerID": container_id(&uid, &c.name, restarts - 1)}});
        }
        s
    };
    let init_status = |c: &Container| -> Value {
        let image = c.image.clone().unwrap_or_default();
        let mut s = json!({"name": c.name, "image": image, "imageID": image_id(&image),
            "containerID": container_id(&uid, &c.name, 0), "restartCount": 0});
        if c.restart_policy.as_deref() == Some("Always") {
            s["ready"] = json!(true);
            s["started"] = json!(true);
            s["state"] = json!({"running": {"startedAt": started_at}});
        } else {
            s["ready"] = json!(true);
            s["started"] = json!(false);
            s["state"] = json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started_at,
                "finishedAt": started_at, "containerID": container_id(&uid, &c.name, 0)}});
        }
        s
    };
    let unready: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    let not_ready_msg = Some(format!("containers with unready status: [{}]", unready.join(" ")));
    let (ready_reason, ready_msg) = match behaviour {
        Behaviour::Ready => (None, None),
        Behaviour::Succeeded => (Some("PodCompleted"), None),
        Behaviour::Failed => (Some("PodFailed"), None),
        _ => (Some("ContainersNotReady"), not_ready_msg),
    };
    // Readiness gates: containers may be ready while the pod is not.
    let gates = if behaviour == Behaviour::Ready {
        readiness_gates(pod).err()
    } else {
        None
    };
    let (pod_ready, pod_reason, pod_msg) = match &gates {
        Some(msg) => (false, Some("ReadinessGatesNotReady"), Some(msg.clone())),
        None => (ready, ready_reason, ready_msg.clone()),
    };
    let mut conditions = vec![
        pod_condition(
            "PodReadyToStartContainers",
            behaviour != Behaviour::Succeeded && behaviour != Behaviour::Failed,
            None,
            None,
            &now_v,
        ),
        pod_condition(
            "Initialized",
            true,
            ready_reason.filter(|r| *r == "PodCompleted"),
            None,
            &now_v,
        ),
        pod_condition("Ready", pod_ready, pod_reason, pod_msg, &now_v),
        pod_condition("ContainersReady", ready, ready_reason, ready_msg, &now_v),
        pod_condition("PodScheduled", true, None, None, &now_v),
    ];
    // Conditions owned by others (readiness gates) are kept: the merge patch replaces the list.
    const OWN: [&str; 5] = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ];
    for c in old
        .conditions
        .iter()
        .flatten()
        .filter(|c| !OWN.contains(&c.type_.as_str()))
    {
        if let Ok(v) = serde_json::to_value(c) {
            conditions.push(v);
        }
    }
    // Keep transition times of conditions whose status does not change.
    for c in &mut conditions {
        let same = old
            .conditions
            .iter()
            .flatten()
            .find(|o| Some(o.type_.as_str()) == c["type"].as_str());
        if let Some(o) = same
            && Some(o.status.as_str()) == c["status"].as_str()
            && let Some(t) = &o.last_transition_time
        {
            c["lastTransitionTime"] = time(t.0);
        }
    }
    let mut status = json!({
        "phase": phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": started_at,
        "qosClass": qos_class(&spec),
        "containerStatuses": spec.containers.iter().map(container_status).collect::<Vec<_>>(),
    });
    if !matches!(behaviour, Behaviour::ImagePull | Behaviour::InvalidImage) || !pod_ip.is_empty() {
        status["podIP"] = json!(pod_ip);
        status["podIPs"] = json!([{"ip": pod_ip}]);
    }
    if let Some(inits) = spec.init_containers.as_ref().filter(|i| !i.is_empty()) {
        status["initContainerStatuses"] = json!(inits.iter().map(init_status).collect::<Vec<_>>());
    }
    status
}

/// Upstream's crash-loop back-off: 10 s doubling to 5 min.
pub fn crash_backoff(restarts: i32) -> Duration {
    let exp = restarts.clamp(0, 5) as u32;
    Duration::from_secs(10u64 << exp).min(Duration::from_secs(300))
}

/// Pod IPs from per-node /24 CIDRs (`spec.podCIDR`).
#[derive(Debug, Default)]
pub struct IpAllocator {
    nodes: HashMap<String, NodeIps>,
    by_pod: HashMap<String, (String, u8)>,
}

#[derive(Debug, Default)]
struct NodeIps {
    prefix: String,
    used: BTreeMap<u8, String>,
    next: u8,
}

/// The pod CIDR of the `index`-th simulated node.
pub fn pod_cidr(index: u32) -> String {
    format!("10.{}.{}.0/24", 244 + index / 256, index % 256)
}

/// The InternalIP of the `index`-th simulated node.
pub fn node_ip(index: u32) -> String {
    format!("10.0.{}.{}", index / 250, index % 250 + 2)
}

fn prefix_of(cidr: Option<&str>, node: &str) -> String {
    if let Some(c) = cidr
        && let Some(base) = c.strip_suffix(".0/24")
        && base.split('.').count() == 3
    {
        return base.to_owned();
    }
    // Nodes created by clients without a CIDR get one derived from their name.
    let h = node
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!("10.{}.{}", 200 + (h % 40), (h / 40) % 256)
}

impl IpAllocator {
    /// The IP of a pod, allocating one on first use.
    pub fn ip_for(&mut self, pod_uid: &str, node: &str, cidr: Option<&str>) -> String {
        let ips = self.nodes.entry(node.to_owned()).or_insert_with(|| NodeIps {
            prefix: prefix_of(cidr, node),
            used: BTreeMap::new(),
            next: 1,
        });
        if let Some((n, octet)) = self.by_pod.get(pod_uid)
            && n == node
        {
            return format!("{}.{}", ips.prefix, octet);
        }
        let mut octet = ips.next;
        for _ in 0..254 {
            if !ips.used.contains_key(&octet) {
                break;
            }
            octet = if octet >= 254 { 1 } else { octet + 1 };
        }
        ips.next = if octet >= 254 { 1 } else { octet + 1 };
        ips.used.insert(octet, pod_uid.to_owned());
        self.by_pod.insert(pod_uid.to_owned(), (node.to_owned(), octet));
        format!("{}.{}", ips.prefix, octet)
    }

    /// Frees a pod's IP.
    pub fn release(&mut self, pod_uid: &str) {
        if let Some((node, octet)) = self.by_pod.remove(pod_uid)
            && let Some(ips) = self.nodes.get_mut(&node)
        {
            ips.used.remove(&octet);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::PodSpec;

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web-1".into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some("u1".into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "nginx".into(),
                image: Some("nginx:1.25".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    #[test]
    fn image_references_parse_as_the_kubelet_parses_them() {
        for ok in [
            "nginx",
            "nginx:1.25",
            "registry.k8s.io/pause:3.10",
            "localhost:5000/team/app_x-1:v1.0",
            "busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(is_image_reference(ok), "{ok} should parse");
        }
        for bad in [
            "Nginx", "nginx!", "nginx:", "ngi nx", ":latest", "nginx:-1", "a//b",
        ] {
            assert!(!is_image_reference(bad), "{bad} should not parse");
        }
    }

    #[test]
    fn an_unparsable_image_leaves_the_pod_pending_with_invalid_image_name() {
        let mut p = pod();
        if let Some(s) = p.spec.as_mut() {
            s.containers[0].image = Some("Nginx!".into());
        }
        assert_eq!(behaviour(&p), Behaviour::InvalidImage);
        let st = started_status(&p, Behaviour::InvalidImage, 0, "10.0.0.1", "", Timestamp::now());
        assert_eq!(st["phase"], "Pending");
        assert_eq!(
            st["containerStatuses"][0]["state"]["waiting"]["reason"],
            "InvalidImageName"
        );
    }

    #[test]
    fn ready_status_has_the_kwok_shape() {
        let now = Timestamp::from_second(1_700_000_000).expect("ts");
        let s = started_status(&pod(), Behaviour::Ready, 0, "10.0.0.2", "10.244.0.1", now);
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["podIPs"], json!([{"ip": "10.244.0.1"}]));
        assert_eq!(s["hostIP"], "10.0.0.2");
        assert_eq!(s["qosClass"], "BestEffort");
        let types: Vec<_> = s["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .map(|c| (c["type"].clone(), c["status"].clone()))
            .collect();
        assert_eq!(types.len(), 5);
        assert!(types.iter().all(|(_, st)| st == "True"));
        let cs = &s["containerStatuses"][0];
        assert_eq!(
            (
                cs["ready"].clone(),
                cs["started"].clone(),
                cs["restartCount"].clone()
            ),
            (json!(true), json!(true), json!(0))
        );
        assert_eq!(cs["state"]["running"]["startedAt"], "2023-11-14T22:13:20Z");
    }

    #[test]
    fn crash_loop_is_running_not_ready_with_restarts() {
        let s = started_status(&pod(), Behaviour::CrashLoop, 3, "h", "p", Timestamp::UNIX_EPOCH);
        assert_eq!(s["phase"], "Running");
        let cs = &s["containerStatuses"][0];
        assert_eq!(cs["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(cs["restartCount"], 3);
        let ready = s["conditions"]
            .as_array()
            .expect("c")
            .iter()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .expect("Ready");
        assert_eq!(
            (ready["status"].clone(), ready["reason"].clone()),
            (json!("False"), json!("ContainersNotReady"))
        );
        assert_eq!(ready["message"], "containers with unready status: [nginx]");
    }

    #[test]
    fn delays_from_annotations() {
        let mut p = pod();
        assert_eq!(
            start_delay(&p, Duration::from_millis(500)),
            Duration::from_millis(500)
        );
        p.metadata.annotations =
            Some([(KWOK_READY_DELAY_ANNOTATION.to_string(), "1m1.5s".to_string())].into());
        assert_eq!(start_delay(&p, Duration::ZERO), Duration::from_millis(61_500));
        p.metadata.annotations = Some([(START_DELAY_ANNOTATION.to_string(), "20".to_string())].into());
        assert_eq!(start_delay(&p, Duration::ZERO), Duration::from_millis(20));
        assert_eq!(parse_go_duration("abc"), None);
        assert_eq!(parse_go_duration(""), None);
    }

    #[test]
    fn ips_come_from_the_node_cidr_and_are_reused_after_release() {
        let mut ips = IpAllocator::default();
        assert_eq!(ips.ip_for("a", "n1", Some("10.244.3.0/24")), "10.244.3.1");
        assert_eq!(ips.ip_for("b", "n1", Some("10.244.3.0/24")), "10.244.3.2");
        assert_eq!(ips.ip_for("a", "n1", None), "10.244.3.1", "stable per pod");
        ips.release("a");
        assert_eq!(pod_cidr(257), "10.245.1.0/24");
        assert_eq!(node_ip(3), "10.0.0.5");
    }

    #[test]
    fn readiness_gates_hold_the_pod_not_ready_and_foreign_conditions_survive() {
        let mut p = pod();
        p.spec.as_mut().expect("spec").readiness_gates =
            Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
                condition_type: "example.com/lb".into(),
            }]);
        let s = started_status(&p, Behaviour::Ready, 0, "h", "p", Timestamp::UNIX_EPOCH);
        let ready = s["conditions"]
            .as_array()
            .expect("c")
            .iter()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .expect("Ready");
        assert_eq!(
            (ready["status"].clone(), ready["reason"].clone()),
            (json!("False"), json!("ReadinessGatesNotReady"))
        );
        assert_eq!(
            ready["message"],
            "corresponding condition of pod readiness gate \"example.com/lb\" does not exist."
        );
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "example.com/lb".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let s = started_status(&p, Behaviour::Ready, 0, "h", "p", Timestamp::UNIX_EPOCH);
        let conds = s["conditions"].as_array().expect("c");
        assert!(
            conds
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        );
        assert!(
            conds
                .iter()
                .any(|c| c["type"] == "example.com/lb" && c["status"] == "True"),
            "gate condition kept"
        );
    }
}
