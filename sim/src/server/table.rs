//! `meta.k8s.io/v1` Table rendering: the column sets kubectl users expect for the
//! common built-ins (after kubernetes `pkg/printers/internalversion/printers.go`), CRD
//! `additionalPrinterColumns`, and the default `Name, Created At` for everything else.

use serde_json::{Value, json};

use super::convert::{self, selector_string};
use super::meta::{self, age};
use super::resources::{ResourceType, Special};

/// `includeObject` of a Table request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Include {
    /// No object in rows.
    None,
    /// `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The full object.
    Object,
}

struct Col {
    name: &'static str,
    type_: &'static str,
    priority: i64,
}

const fn c(name: &'static str, type_: &'static str, priority: i64) -> Col {
    Col {
        name,
        type_,
        priority,
    }
}

fn builtin_columns(rt: &ResourceType) -> Option<Vec<Col>> {
    let s = "string";
    let i = "integer";
    Some(match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => vec![
            c("Name", s, 0),
            c("Ready", s, 0),
            c("Status", s, 0),
            c("Restarts", s, 0),
            c("Age", s, 0),
            c("IP", s, 1),
            c("Node", s, 1),
            c("Nominated Node", s, 1),
            c("Readiness Gates", s, 1),
        ],
        ("apps", "deployments") => vec![
            c("Name", s, 0),
            c("Ready", s, 0),
            c("Up-to-date", i, 0),
            c("Available", i, 0),
            c("Age", s, 0),
            c("Containers", s, 1),
            c("Images", s, 1),
            c("Selector", s, 1),
        ],
        ("apps", "replicasets") | ("", "replicationcontrollers") => vec![
            c("Name", s, 0),
            c("Desired", i, 0),
            c("Current", i, 0),
            c("Ready", i, 0),
            c("Age", s, 0),
            c("Containers", s, 1),
            c("Images", s, 1),
            c("Selector", s, 1),
        ],
        ("apps", "statefulsets") => {
            vec![
                c("Name", s, 0),
                c("Ready", s, 0),
                c("Age", s, 0),
                c("Containers", s, 1),
                c("Images", s, 1),
            ]
        }
        ("apps", "daemonsets") => vec![
            c("Name", s, 0),
            c("Desired", i, 0),
            c("Current", i, 0),
            c("Ready", i, 0),
            c("Up-to-date", i, 0),
            c("Available", i, 0),
            c("Node Selector", s, 0),
            c("Age", s, 0),
        ],
        ("", "nodes") => vec![
            c("Name", s, 0),
            c("Status", s, 0),
            c("Roles", s, 0),
            c("Age", s, 0),
            c("Version", s, 0),
            c("Internal-IP", s, 1),
            c("External-IP", s, 1),
            c("OS-Image", s, 1),
            c("Kernel-Version", s, 1),
            c("Container-Runtime", s, 1),
        ],
        ("", "namespaces") => vec![c("Name", s, 0), c("Status", s, 0), c("Age", s, 0)],
        ("", "configmaps") => vec![c("Name", s, 0), c("Data", i, 0), c("Age", s, 0)],
        ("", "secrets") => vec![c("Name", s, 0), c("Type", s, 0), c("Data", i, 0), c("Age", s, 0)],
        ("", "serviceaccounts") => vec![c("Name", s, 0), c("Secrets", i, 0), c("Age", s, 0)],
        ("apiregistration.k8s.io", "apiservices") => {
            vec![
                c("Name", s, 0),
                c("Service", s, 0),
                c("Available", s, 0),
                c("Age", s, 0),
            ]
        }
        ("", "services") => vec![
            c("Name", s, 0),
            c("Type", s, 0),
            c("Cluster-IP", s, 0),
            c("External-IP", s, 0),
            c("Port(s)", s, 0),
            c("Age", s, 0),
            c("Selector", s, 1),
        ],
        ("", "events") => vec![
            c("Last Seen", s, 0),
            c("Type", s, 0),
            c("Reason", s, 0),
            c("Object", s, 0),
            c("Subobject", s, 1),
            c("Source", s, 1),
            c("Message", s, 0),
            c("First Seen", s, 1),
            c("Count", s, 1),
            c("Name", s, 1),
        ],
        ("coordination.k8s.io", "leases") => vec![c("Name", s, 0), c("Holder", s, 0), c("Age", s, 0)],
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => {
            vec![c("Name", s, 0), c("Webhooks", i, 0), c("Age", s, 0)]
        }
        ("batch", "jobs") => vec![
            c("Name", s, 0),
            c("Status", s, 0),
            c("Completions", s, 0),
            c("Duration", s, 0),
            c("Age", s, 0),
            c("Containers", s, 1),
            c("Images", s, 1),
            c("Selector", s, 1),
        ],
        _ => return None,
    })
}

fn int(v: Option<&Value>) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(0)
}

fn containers_images(spec: Option<&Value>) -> (String, String) {
    let cs = spec.and_then(|s| s.get("containers")).and_then(Value::as_array);
    let names: Vec<&str> = cs
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    let images: Vec<&str> = cs
        .map(|a| a.iter().filter_map(|c| c["image"].as_str()).collect())
        .unwrap_or_default();
    (names.join(","), images.join(","))
}

fn pod_status(obj: &Value) -> String {
    let st = &obj["status"];
    let mut reason = st["reason"]
        .as_str()
        .or(st["phase"].as_str())
        .unwrap_or("Pending")
        .to_owned();
    let mut init_msg = None;
    if let Some(ics) = st["initContainerStatuses"].as_array() {
        let total = obj["spec"]["initContainers"].as_array().map_or(0, Vec::len);
        for (i, ic) in ics.iter().enumerate() {
            if ic.pointer("/state/terminated/exitCode").and_then(Value::as_i64) == Some(0) {
                continue;
            }
            if let Some(r) = ic.pointer("/state/waiting/reason").and_then(Value::as_str)
                && r != "PodInitializing"
            {
                init_msg = Some(format!("Init:{r}"));
            } else if ic.pointer("/state/running").is_some() && ic["started"].as_bool() != Some(true) {
                init_msg = Some(format!("Init:{i}/{total}"));
            }
            break;
        }
    }
    if let Some(m) = init_msg {
        reason = m;
    } else if let Some(cs) = st["containerStatuses"].as_array() {
        let mut has_running = false;
        for cst in cs.iter().rev() {
            if let Some(r) = cst.pointer("/state/waiting/reason").and_then(Value::as_str) {
                reason = r.to_owned();
            } else if let Some(t) = cst.pointer("/state/terminated") {
                reason = t["reason"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)));
            } else if cst["ready"].as_bool() == Some(true) && cst.pointer("/state/running").is_some() {
                has_running = true;
            }
        }
        if reason == "Completed" && has_running {
            reason = "Running".into();
        }
    }
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        reason = if st["reason"] == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason
}

fn node_status(obj: &Value) -> String {
    let ready = obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["status"].as_str().unwrap_or("Unknown").to_owned());
    let mut s = match ready.as_deref() {
        Some("True") => "Ready".to_owned(),
        Some("False") => "NotReady".to_owned(),
        _ => "Unknown".to_owned(),
    };
    if obj["spec"]["unschedulable"].as_bool() == Some(true) {
        s.push_str(",SchedulingDisabled");
    }
    s
}

fn node_roles(obj: &Value) -> String {
    let mut roles: Vec<String> = meta::labels(obj)
        .into_iter()
        .filter_map(|(k, v)| {
            if let Some(r) = k.strip_prefix("node-role.kubernetes.io/") {
                Some(r.to_owned())
            } else if k == "kubernetes.io/role" {
                Some(v)
            } else {
                None
            }
        })
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort();
    if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    }
}

fn node_address(obj: &Value, t: &str) -> String {
    obj["status"]["addresses"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["type"] == t))
        .and_then(|x| x["address"].as_str())
        .unwrap_or("<none>")
        .to_owned()
}

fn none_if_empty(s: String) -> String {
    if s.is_empty() { "<none>".into() } else { s }
}

fn builtin_cells(rt: &ResourceType, obj: &Value) -> Vec<Value> {
    let name = json!(meta::meta_str(obj, "name").unwrap_or_default());
    let created = meta::meta_str(obj, "creationTimestamp");
    let a = json!(age(created));
    let spec = &obj["spec"];
    let st = &obj["status"];
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => {
            let cs = st["containerStatuses"].as_array();
            let total = spec["containers"].as_array().map_or(0, Vec::len);
            let ready = cs.map_or(0, |a| {
                a.iter().filter(|c| c["ready"].as_bool() == Some(true)).count()
            });
            let restarts: i64 = cs.map_or(0, |a| a.iter().map(|c| int(c.get("restartCount"))).sum());
            let gates = spec["readinessGates"]
                .as_array()
                .map_or("<none>".to_owned(), |g| format!("0/{}", g.len()));
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(pod_status(obj)),
                json!(restarts.to_string()),
                a,
                json!(st["podIP"].as_str().unwrap_or("<none>")),
                json!(spec["nodeName"].as_str().unwrap_or("<none>")),
                json!(st["nominatedNodeName"].as_str().unwrap_or("<none>")),
                json!(gates),
            ]
        }
        ("apps", "deployments") => {
            let (cn, im) = containers_images(spec.pointer("/template/spec"));
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    int(st.get("readyReplicas")),
                    int(spec.get("replicas"))
                )),
                json!(int(st.get("updatedReplicas"))),
                json!(int(st.get("availableReplicas"))),
                a,
                json!(cn),
                json!(im),
                json!(none_if_empty(
                    spec.get("selector").map(selector_string).unwrap_or_default()
                )),
            ]
        }
        ("apps", "replicasets") | ("", "replicationcontrollers") => {
            let (cn, im) = containers_images(spec.pointer("/template/spec"));
            vec![
                name,
                json!(int(spec.get("replicas"))),
                json!(int(st.get("replicas"))),
                json!(int(st.get("readyReplicas"))),
                a,
                json!(cn),
                json!(im),
                json!(none_if_empty(
                    spec.get("selector").map(selector_string).unwrap_or_default()
                )),
            ]
        }
        ("apps", "statefulsets") => {
            let (cn, im) = containers_images(spec.pointer("/template/spec"));
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    int(st.get("readyReplicas")),
                    int(spec.get("replicas"))
                )),
                a,
                json!(cn),
                json!(im),
            ]
        }
        ("apps", "daemonsets") => vec![
            name,
            json!(int(st.get("desiredNumberScheduled"))),
            json!(int(st.get("currentNumberScheduled"))),
            json!(int(st.get("numberReady"))),
            json!(int(st.get("updatedNumberScheduled"))),
            json!(int(st.get("numberAvailable"))),
            json!(none_if_empty(
                spec.pointer("/template/spec/nodeSelector")
                    .and_then(Value::as_object)
                    .map(|m| m
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(","))
                    .unwrap_or_default()
            )),
            a,
        ],
        ("", "nodes") => vec![
            name,
            json!(node_status(obj)),
            json!(node_roles(obj)),
            a,
            json!(
                st.pointer("/nodeInfo/kubeletVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ),
            json!(node_address(obj, "InternalIP")),
            json!(node_address(obj, "ExternalIP")),
            json!(
                st.pointer("/nodeInfo/osImage")
                    .and_then(Value::as_str)
                    .unwrap_or("<unknown>")
            ),
            json!(
                st.pointer("/nodeInfo/kernelVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("<unknown>")
            ),
            json!(
                st.pointer("/nodeInfo/containerRuntimeVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("<unknown>")
            ),
        ],
        ("", "namespaces") => vec![name, json!(st["phase"].as_str().unwrap_or("Active")), a],
        ("", "configmaps") => {
            let n = obj["data"].as_object().map_or(0, |m| m.len())
                + obj["binaryData"].as_object().map_or(0, |m| m.len());
            vec![name, json!(n), a]
        }
        ("", "secrets") => {
            let n = obj["data"].as_object().map_or(0, |m| m.len());
            vec![name, json!(obj["type"].as_str().unwrap_or("Opaque")), json!(n), a]
        }
        ("", "serviceaccounts") => vec![name, json!(obj["secrets"].as_array().map_or(0, Vec::len)), a],
        ("apiregistration.k8s.io", "apiservices") => {
            let available = st["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Available"))
                .and_then(|c| c["status"].as_str())
                .unwrap_or("Unknown");
            vec![name, json!("Local"), json!(available), a]
        }
        ("", "services") => {
            let ports: Vec<String> = spec["ports"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            let mut s = int(p.get("port")).to_string();
                            if let Some(np) = p["nodePort"].as_i64() {
                                s.push_str(&format!(":{np}"));
                            }
                            format!("{s}/{}", p["protocol"].as_str().unwrap_or("TCP"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let ext = st
                .pointer("/loadBalancer/ingress/0/ip")
                .and_then(Value::as_str)
                .unwrap_or("<none>");
            vec![
                name,
                json!(spec["type"].as_str().unwrap_or("ClusterIP")),
                json!(spec["clusterIP"].as_str().unwrap_or("<none>")),
                json!(ext),
                json!(none_if_empty(ports.join(","))),
                a,
                json!(none_if_empty(
                    spec.get("selector").map(selector_string).unwrap_or_default()
                )),
            ]
        }
        ("", "events") => {
            let last = obj["lastTimestamp"]
                .as_str()
                .or(obj["eventTime"].as_str())
                .or(created);
            let first = obj["firstTimestamp"]
                .as_str()
                .or(obj["eventTime"].as_str())
                .or(created);
            let io = &obj["involvedObject"];
            let object = format!(
                "{}/{}",
                io["kind"].as_str().unwrap_or_default().to_lowercase(),
                io["name"].as_str().unwrap_or_default()
            );
            let source = obj["source"]["component"]
                .as_str()
                .or(obj["reportingComponent"].as_str())
                .unwrap_or_default();
            vec![
                json!(age(last)),
                json!(obj["type"].as_str().unwrap_or_default()),
                json!(obj["reason"].as_str().unwrap_or_default()),
                json!(object),
                json!(io["fieldPath"].as_str().unwrap_or_default()),
                json!(source),
                json!(obj["message"].as_str().unwrap_or_default()),
                json!(age(first)),
                json!(int(obj.get("count")).max(1).to_string()),
                name,
            ]
        }
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => {
            let n = obj["webhooks"].as_array().map_or(0, Vec::len);
            vec![name, json!(n), a]
        }
        ("coordination.k8s.io", "leases") => {
            vec![
                name,
                json!(spec["holderIdentity"].as_str().unwrap_or("<none>")),
                a,
            ]
        }
        ("batch", "jobs") => {
            let (cn, im) = containers_images(spec.pointer("/template/spec"));
            let succeeded = int(st.get("succeeded"));
            let completions = match spec["completions"].as_i64() {
                Some(c) => format!("{succeeded}/{c}"),
                None if int(spec.get("parallelism")) > 1 => {
                    format!("{succeeded}/1 of {}", int(spec.get("parallelism")))
                }
                None => format!("{succeeded}/1"),
            };
            // Upstream printJob: the first of these that holds.
            let is = |t: &str| {
                st["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
            };
            let status = if is("Complete") {
                "Complete"
            } else if is("Failed") {
                "Failed"
            } else if obj.pointer("/metadata/deletionTimestamp").is_some() {
                "Terminating"
            } else if is("Suspended") {
                "Suspended"
            } else if is("FailureTarget") {
                "FailureTarget"
            } else if is("SuccessCriteriaMet") {
                "SuccessCriteriaMet"
            } else {
                "Running"
            };
            let duration = match (
                st["startTime"].as_str().and_then(meta::parse_time),
                st["completionTime"].as_str().and_then(meta::parse_time),
            ) {
                (Some(s), Some(e)) => meta::human_duration(e - s),
                (Some(s), None) => meta::human_duration(jiff::Timestamp::now().as_second() - s),
                _ => String::new(),
            };
            vec![
                name,
                json!(status),
                json!(completions),
                json!(duration),
                a,
                json!(cn),
                json!(im),
                json!(none_if_empty(
                    spec.get("selector").map(selector_string).unwrap_or_default()
                )),
            ]
        }
        _ => vec![name, json!(created.unwrap_or_default())],
    }
}

/// Evaluates a printer-column JSONPath: `.a.b`, `.a[0].b`, `.a[*].b`, `.a[?(@.k=="v")].b`.
pub fn json_path(obj: &Value, path: &str) -> Vec<Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut current: Vec<&Value> = vec![obj];
    let mut rest = path.trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            rest = &r[end..];
            if field.is_empty() {
                continue;
            }
            current = current.into_iter().filter_map(|v| v.get(field)).collect();
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else { return vec![] };
            let inner = &r[..end];
            rest = &r[end + 1..];
            if inner == "*" {
                current = current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .collect();
            } else if let Ok(i) = inner.parse::<i64>() {
                current = current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .filter_map(|a| {
                        let idx = if i < 0 { a.len() as i64 + i } else { i };
                        usize::try_from(idx).ok().and_then(|i| a.get(i))
                    })
                    .collect();
            } else if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = match filter.split_once("==") {
                    Some((f, w)) => (f.trim(), Some(w.trim().trim_matches(['"', '\'']))),
                    None => (filter.trim(), None),
                };
                current = current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter(|item| {
                        let v = get_dotted(item, field);
                        match (v, want) {
                            (Some(v), Some(w)) => scalar_string(v) == w,
                            (Some(_), None) => true,
                            (None, _) => false,
                        }
                    })
                    .collect();
            } else {
                return vec![];
            }
        } else {
            return vec![];
        }
    }
    current.into_iter().cloned().collect()
}

fn get_dotted<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    convert::get_path(v, path)
}

fn scalar_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn custom_cells(rt: &ResourceType, obj: &Value) -> Vec<Value> {
    let mut cells = vec![json!(meta::meta_str(obj, "name").unwrap_or_default())];
    let cols = rt
        .custom
        .as_ref()
        .map(|c| c.columns.as_slice())
        .unwrap_or_default();
    if cols.is_empty() {
        cells.push(json!(age(meta::meta_str(obj, "creationTimestamp"))));
        return cells;
    }
    for col in cols {
        let vals = json_path(obj, &col.json_path);
        let cell = match vals.as_slice() {
            [] => Value::Null,
            [one] => match col.type_.as_str() {
                "date" => match one.as_str() {
                    Some(s) => json!(age(Some(s))),
                    None => Value::Null,
                },
                "integer" => one.as_i64().map(|i| json!(i)).unwrap_or_else(|| one.clone()),
                "number" => one.as_f64().map(|f| json!(f)).unwrap_or_else(|| one.clone()),
                "boolean" => one.clone(),
                _ => match one {
                    Value::String(_) => one.clone(),
                    other => json!(other.to_string()),
                },
            },
            many => json!(many.iter().map(scalar_string).collect::<Vec<_>>().join(",")),
        };
        cells.push(cell);
    }
    cells
}

/// The column definitions of `rt`.
pub fn columns(rt: &ResourceType) -> Vec<Value> {
    let def = |name: &str, type_: &str, format: &str, priority: i64, description: &str| json!({"name": name, "type": type_, "format": format, "description": description, "priority": priority});
    let name_desc = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
    if let Some(custom) = &rt.custom {
        let mut out = vec![def("Name", "string", "name", 0, name_desc)];
        if custom.columns.is_empty() {
            out.push(def(
                "Age",
                "date",
                "",
                0,
                "CreationTimestamp is a timestamp representing the server time when this object was created.",
            ));
        } else {
            for c in &custom.columns {
                out.push(def(&c.name, &c.type_, &c.format, c.priority, &c.description));
            }
        }
        return out;
    }
    match builtin_columns(rt) {
        Some(cols) => cols
            .iter()
            .map(|c| {
                def(
                    c.name,
                    c.type_,
                    if c.name == "Name" { "name" } else { "" },
                    c.priority,
                    if c.name == "Name" { name_desc } else { "" },
                )
            })
            .collect(),
        None => vec![
            def("Name", "string", "name", 0, name_desc),
            def(
                "Created At",
                "date",
                "",
                0,
                "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.",
            ),
        ],
    }
}

/// One table row for `obj` (already in its served representation).
pub fn row(rt: &ResourceType, obj: &Value, include: Include) -> Value {
    let cells = if rt.is_custom() {
        custom_cells(rt, obj)
    } else if rt.special == Special::EventsV1 {
        // Render the v1 view with the core columns' content.
        let core = convert::input(rt, obj.clone());
        builtin_cells(rt, &core)
    } else {
        builtin_cells(rt, obj)
    };
    let mut r = json!({"cells": cells});
    match include {
        Include::None => {}
        Include::Metadata => r["object"] = convert::partial(obj),
        Include::Object => r["object"] = obj.clone(),
    }
    r
}

/// A whole Table.
pub fn table(rt: &ResourceType, rows: Vec<Value>, list_meta: Value, headers: bool) -> Value {
    let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "rows": rows});
    if headers {
        t["columnDefinitions"] = json!(columns(rt));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_filters_and_indexes() {
        let o = json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]},
            "spec": {"items": [{"n": 1}, {"n": 2}]}});
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![json!("True")]
        );
        assert_eq!(json_path(&o, ".spec.items[*].n"), vec![json!(1), json!(2)]);
        assert_eq!(json_path(&o, ".spec.items[1].n"), vec![json!(2)]);
        assert!(json_path(&o, ".spec.missing").is_empty());
    }

    #[test]
    fn deployment_row_shows_ready_over_desired() {
        let r = crate::server::resources::Registry::new();
        let rt = r.get("apps", "v1", "deployments").expect("deployments");
        let d = json!({"metadata": {"name": "web", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 2, "availableReplicas": 2}});
        let row = row(&rt, &d, Include::Metadata);
        assert_eq!(row["cells"][0], "web");
        assert_eq!(row["cells"][1], "2/2");
        assert_eq!(row["cells"][7], "app=web");
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    }
}
