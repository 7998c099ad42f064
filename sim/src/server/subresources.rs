//! Subresources that store nothing of their own: a simulated pod's `log`, its `exec`, `attach`
//! and `portforward` (there is no process behind a simulated container), and a ServiceAccount's
//! `token`.  They answer as a real API server does where the answer does not need a container
//! runtime: the same errors for unknown containers or a missing previous instance, and a clear
//! `400` instead of a stream where one would be needed.

use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::rest::Query;

fn containers(pod: &Value) -> Vec<&str> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|l| pod["spec"][l].as_array())
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect()
}

fn container_status<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|l| pod["status"][l].as_array())
        .flatten()
        .find(|s| s["name"] == container)
}

/// The text of `GET pods/{name}/log`: what a simulated container "printed", after the API
/// server's checks of `container` and `previous`.
pub fn log(pod: &Value, q: &Query) -> ApiResult<String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let all = containers(pod);
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) if all.contains(&c) => c,
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None => match pod["spec"]["containers"].as_array().map(Vec::as_slice) {
            Some([only]) => only["name"].as_str().unwrap_or_default(),
            _ => {
                let names: Vec<&str> = pod["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["name"].as_str())
                    .collect();
                return Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    names.join(" ")
                )));
            }
        },
    };
    // An unscheduled pod has no kubelet to ask: the API server answers with no lines.
    if pod["spec"]["nodeName"].as_str().unwrap_or_default().is_empty() {
        return Ok(String::new());
    }
    let status = container_status(pod, container);
    let restarts = status.and_then(|s| s["restartCount"].as_i64()).unwrap_or(0);
    if q.get("previous") == Some("true") && restarts == 0 {
        return Err(ApiError::bad_request(format!(
            "previous terminated container \"{container}\" in pod \"{name}\" not found"
        )));
    }
    let state = status.map(|s| &s["state"]);
    let started = match state {
        Some(s) if s.get("running").is_some() => s["running"]["startedAt"].as_str(),
        Some(s) if s.get("terminated").is_some() => s["terminated"]["startedAt"].as_str(),
        _ => None,
    };
    let Some(started) = started else {
        let reason = state
            .and_then(|s| s["waiting"]["reason"].as_str())
            .map_or("ContainerCreating", |r| match r {
                "ImagePullBackOff" | "ErrImagePull" => "trying and failing to pull image",
                other => other,
            });
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
        )));
    };
    let image = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(pod["spec"]["initContainers"].as_array().into_iter().flatten())
        .find(|c| c["name"] == container)
        .and_then(|c| c["image"].as_str())
        .unwrap_or_default();
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    let instance = if q.get("previous") == Some("true") {
        restarts - 1
    } else {
        restarts
    };
    let lines = [
        format!(
            "nave-sim: simulated container {container:?} of pod {ns}/{name} on node {node} (image {image}, restart {instance})"
        ),
        format!("nave-sim: started at {started}"),
        "nave-sim: a simulated container runs no process, so it writes no other output".to_owned(),
    ];
    let tail = q
        .get("tailLines")
        .and_then(|t| t.parse::<usize>().ok())
        .unwrap_or(lines.len());
    let timestamps = q.get("timestamps") == Some("true");
    let mut out = String::new();
    for l in &lines[lines.len().saturating_sub(tail)..] {
        if timestamps {
            out.push_str(started);
            out.push(' ');
        }
        out.push_str(l);
        out.push('\n');
    }
    Ok(out)
}

/// `exec`, `attach` and `portforward` of a simulated pod: there is no process to connect to.
pub fn no_process(pod: &Value, sub: &str) -> ApiError {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let what = match sub {
        "exec" => "no container process to exec into",
        "attach" => "no container process to attach to",
        _ => "no container process to forward ports to",
    };
    ApiError::bad_request(format!("pod {name} runs in a simulated cluster: there is {what}"))
}

/// `POST serviceaccounts/{name}/token`: the TokenRequest back with a token that any nave-sim
/// cluster accepts unless it runs with a fixed token list (the token is opaque; nothing checks
/// its audience or expiry).
pub fn token(sa: &Value, mut request: Value) -> Value {
    let name = sa["metadata"]["name"].as_str().unwrap_or_default();
    let ns = sa["metadata"]["namespace"].as_str().unwrap_or_default();
    let seconds = request["spec"]["expirationSeconds"].as_i64().unwrap_or(3600);
    let expires = jiff::Timestamp::now().as_second().saturating_add(seconds);
    let expires = jiff::Timestamp::from_second(expires)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let token = format!("nave-sim.{ns}.{name}.{}", uuid::Uuid::new_v4().simple());
    request["apiVersion"] = json!("authentication.k8s.io/v1");
    request["kind"] = json!("TokenRequest");
    request["metadata"]["name"] = json!(name);
    request["metadata"]["namespace"] = json!(ns);
    request["spec"]["expirationSeconds"] = json!(seconds);
    if request["spec"].get("audiences").is_none() {
        request["spec"]["audiences"] = json!(["https://kubernetes.default.svc.cluster.local"]);
    }
    request["status"] = json!({"token": token, "expirationTimestamp": expires});
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(restarts: i64) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "nginx", "image": "nginx:1.25"}]},
            "status": {"containerStatuses": [{"name": "nginx", "restartCount": restarts,
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}})
    }

    fn q(raw: &str) -> Query {
        Query::parse(Some(raw))
    }

    #[test]
    fn a_running_container_logs_who_it_is_and_tail_lines_keeps_the_last() {
        let text = log(&pod(0), &q("")).unwrap();
        assert!(
            text.starts_with("nave-sim: simulated container \"nginx\" of pod default/web"),
            "{text}"
        );
        assert!(text.contains("image nginx:1.25"), "{text}");
        assert_eq!(text.lines().count(), 3);
        let last = log(&pod(0), &q("tailLines=1")).unwrap();
        assert_eq!(last.lines().count(), 1);
        assert!(text.ends_with(&last));
    }

    #[test]
    fn unknown_containers_and_missing_previous_instances_are_bad_requests() {
        let e = log(&pod(0), &q("container=db")).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "container db is not valid for pod web")
        );
        let e = log(&pod(0), &q("previous=true")).unwrap_err();
        assert_eq!(
            e.message,
            "previous terminated container \"nginx\" in pod \"web\" not found"
        );
        assert!(log(&pod(2), &q("previous=true")).is_ok());
    }

    #[test]
    fn a_waiting_container_has_no_logs_yet() {
        let mut p = pod(0);
        p["status"]["containerStatuses"][0]["state"] = json!({"waiting": {"reason": "ImagePullBackOff"}});
        let e = log(&p, &q("")).unwrap_err();
        assert_eq!(
            e.message,
            "container \"nginx\" in pod \"web\" is waiting to start: trying and failing to pull image"
        );
    }
}
