//! Mutating admission webhooks (`admissionregistration.k8s.io/v1` MutatingWebhookConfiguration),
//! as the API server's mutating webhook dispatcher calls them.
//!
//! ```text
//!  REST create/update/patch/apply ─► proposed object ─► [matching webhooks, in order] ─►
//!      POST AdmissionReview (https, caBundle) ─► JSONPatch applied ─► write pipeline
//!      (defaulting again, validation, managedFields, no-op check, commit)
//! ```
//!
//! Every configuration is compiled into [`Hook`]s when it is written (configurations ordered by
//! name, webhooks in their order); each matching webhook sees the previous one's result. A cluster
//! without configurations pays one read of an empty list per write and nothing else.
//!
//! What the simulator does, against upstream 1.32:
//! * Matching: `rules` (operations, apiGroups, apiVersions, resources with `pods/status`-style
//!   subresources, scope), `namespaceSelector` (the Namespace object's own labels for
//!   namespaces), `objectSelector` (new or old object). `matchPolicy` is accepted and ignored:
//!   every resource is served at one version, so Exact and Equivalent agree.
//! * Admitted writes: create, update, patch and server-side apply of a main resource or its
//!   `status` subresource, from any client (the simulated controllers write over the same REST
//!   surface, so pods a ReplicaSet creates are admitted). `scale`, `binding`, `eviction`, deletes
//!   and `CONNECT` are not admitted. As upstream, MutatingWebhookConfigurations themselves
//!   are never sent to webhooks.
//! * Calls: `clientConfig.url` only (https, trusting `caBundle` alone, or the built-in web roots
//!   when it is empty; proxies are not used); a `service` reference cannot be reached from the
//!   simulator, and calling one fails (`failurePolicy` decides). `timeoutSeconds` (default 10)
//!   bounds the call.
//! * Not implemented: `matchConditions` (CEL) are refused at create with 422 rather than
//!   silently ignored; `reinvocationPolicy: IfNeeded` is accepted and behaves as `Never`;
//!   ValidatingWebhookConfiguration is not served.
//!
//! Errors are upstream's: a denial is `admission webhook "<name>" denied the request: <message>`
//! with the webhook's code (400 when it gives none below 400); a failed call with
//! `failurePolicy: Fail` is 500 `Internal error occurred: failed calling webhook "<name>": ...`;
//! a patch that cannot be applied is 500 whatever the policy.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use base64::Engine;
use nave_sim_core::selector::LabelSelector;
use serde_json::{Value, json};

use super::ClusterState;
use super::convert;
use super::error::{ApiError, ApiResult, Cause};
use super::meta::meta_str;
use super::resources::{ResourceType, Special};
use super::write::{WriteOpts, Written};

/// Storage table of MutatingWebhookConfigurations.
pub const TABLE: &str = "admissionregistration.k8s.io/mutatingwebhookconfigurations";

const DEFAULT_TIMEOUT_SECONDS: i64 = 10;

/// Whether `rt` is the MutatingWebhookConfiguration resource.
pub fn is_configuration(rt: &ResourceType) -> bool {
    rt.group == "admissionregistration.k8s.io" && rt.plural == "mutatingwebhookconfigurations"
}

/// The admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
        }
    }
}

#[derive(Debug, Clone)]
struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    scope: String,
}

fn has(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == "*" || x == v)
}

impl Rule {
    fn matches(&self, op: Operation, rt: &ResourceType, sub: Option<&str>, namespace: &str) -> bool {
        let resource = self.resources.iter().any(|r| {
            let (res, s) = r.split_once('/').unwrap_or((r, ""));
            (res == "*" || res == rt.plural) && (s == "*" || s == sub.unwrap_or(""))
        });
        // Upstream's scope matcher: a Namespace object is cluster-scoped even though its
        // admission namespace is its own name.
        let is_namespace = rt.special == Special::Namespace;
        let scope = match self.scope.as_str() {
            "Namespaced" => !is_namespace && !namespace.is_empty(),
            "Cluster" => is_namespace || namespace.is_empty(),
            _ => true,
        };
        has(&self.operations, op.as_str())
            && has(&self.groups, &rt.group)
            && has(&self.versions, &rt.version)
            && resource
            && scope
    }
}

/// Where a webhook is.
#[derive(Debug, Clone)]
enum Target {
    Url(String),
    Service(String),
}

/// One webhook of one configuration, ready to match and call.
#[derive(Debug, Clone)]
pub struct Hook {
    name: String,
    rules: Vec<Rule>,
    namespace_selector: LabelSelector,
    object_selector: LabelSelector,
    ignore_failures: bool,
    timeout: Duration,
    target: Target,
    ca_bundle: String,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

fn selector(v: &Value) -> LabelSelector {
    if v.is_null() {
        return LabelSelector::everything();
    }
    // Validation refused bad selectors; one that still fails matches nothing, never everything.
    LabelSelector::from_label_selector_json(v).unwrap_or_else(|_| LabelSelector::nothing())
}

impl Hook {
    fn compile(w: &Value) -> Hook {
        let cc = &w["clientConfig"];
        let target = match cc["url"].as_str() {
            Some(u) => Target::Url(u.to_owned()),
            None => Target::Service(format!(
                "{}/{}",
                cc["service"]["namespace"].as_str().unwrap_or_default(),
                cc["service"]["name"].as_str().unwrap_or_default()
            )),
        };
        let timeout = w["timeoutSeconds"]
            .as_i64()
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
            .clamp(1, 30);
        Hook {
            name: w["name"].as_str().unwrap_or_default().to_owned(),
            rules: w["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| Rule {
                    operations: strings(&r["operations"]),
                    groups: strings(&r["apiGroups"]),
                    versions: strings(&r["apiVersions"]),
                    resources: strings(&r["resources"]),
                    scope: r["scope"].as_str().unwrap_or("*").to_owned(),
                })
                .collect(),
            namespace_selector: selector(&w["namespaceSelector"]),
            object_selector: selector(&w["objectSelector"]),
            ignore_failures: w["failurePolicy"].as_str() == Some("Ignore"),
            timeout: Duration::from_secs(u64::try_from(timeout).unwrap_or(10)),
            target,
            ca_bundle: cc["caBundle"].as_str().unwrap_or_default().to_owned(),
        }
    }
}

/// The compiled webhooks of one cluster and its HTTPS clients (one per `caBundle`).
#[derive(Debug, Default)]
pub struct Webhooks {
    hooks: RwLock<Arc<Vec<Hook>>>,
    clients: Mutex<HashMap<String, reqwest::Client>>,
}

impl Webhooks {
    /// Recompiles the webhooks from the stored configurations (after one of them changed).
    pub fn reload(&self, configurations: &[Arc<Value>]) {
        let mut configs: Vec<&Arc<Value>> = configurations.iter().collect();
        configs.sort_by(|a, b| meta_str(a, "name").cmp(&meta_str(b, "name")));
        let hooks: Vec<Hook> = configs
            .iter()
            .flat_map(|c| c["webhooks"].as_array().into_iter().flatten())
            .map(Hook::compile)
            .collect();
        *self.hooks.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(hooks);
    }

    /// Whether the cluster has no webhook at all (the fast path of every write).
    pub fn is_empty(&self) -> bool {
        self.hooks.read().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    /// The webhooks whose rules match a request (selectors are checked later, on the object).
    fn candidates(&self, op: Operation, rt: &ResourceType, sub: Option<&str>, ns: &str) -> Vec<Hook> {
        let hooks = self.hooks.read().unwrap_or_else(|e| e.into_inner());
        // Upstream exempts the webhook configurations themselves, so a broken webhook can always
        // be removed.
        if hooks.is_empty() || is_configuration(rt) {
            return Vec::new();
        }
        hooks
            .iter()
            .filter(|h| h.rules.iter().any(|r| r.matches(op, rt, sub, ns)))
            .cloned()
            .collect()
    }

    fn client(&self, ca_bundle: &str) -> Result<reqwest::Client, String> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(ca_bundle) {
            return Ok(c.clone());
        }
        let mut builder = reqwest::Client::builder().use_rustls_tls().no_proxy();
        if !ca_bundle.is_empty() {
            let pem = base64::engine::general_purpose::STANDARD
                .decode(ca_bundle.trim())
                .map_err(|e| format!("caBundle is not base64: {e}"))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("caBundle holds no usable certificate: {e}"))?;
            builder = builder.tls_built_in_root_certs(false);
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        let client = builder
            .build()
            .map_err(|e| format!("building the webhook client: {e}"))?;
        clients.insert(ca_bundle.to_owned(), client.clone());
        Ok(client)
    }
}

/// What is being admitted.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The resource as the client addressed it.
    pub rt: &'a ResourceType,
    /// `Some("status")` for status writes.
    pub sub: Option<&'a str>,
    /// The request namespace (`""` for cluster-scoped resources).
    pub ns: &'a str,
    /// The object name (`""` for a create with `generateName`).
    pub name: &'a str,
    /// CREATE or UPDATE.
    pub operation: Operation,
    /// The write options (manager, dry run).
    pub opts: &'a WriteOpts,
    /// `CreateOptions`, `UpdateOptions` or `PatchOptions`.
    pub options_kind: &'a str,
    /// The requesting user.
    pub user: &'a str,
}

/// Why one webhook call failed (the `failurePolicy` decides what follows).
struct CallFailed(String);

/// How one webhook call ends when it does not admit.
enum CallError {
    /// The call failed; `failurePolicy` decides.
    Failed(String),
    /// The request is refused whatever the policy (a denial, a patch that does not apply).
    Refused(ApiError),
}

impl From<ApiError> for CallError {
    fn from(e: ApiError) -> CallError {
        CallError::Refused(e)
    }
}

/// The result of admission: the object to write and the webhooks' warnings.
#[derive(Debug)]
pub struct Admitted {
    /// The (possibly mutated) object, in served form.
    pub object: Value,
    /// Warnings the webhooks returned.
    pub warnings: Vec<String>,
}

impl ClusterState {
    /// The user name admission requests carry: the strict-mode user of `token`, else `system:admin`.
    pub fn user_of(&self, authorization: Option<&str>) -> String {
        if let super::Auth::Strict(tokens) = &self.auth
            && let Some(user) = authorization
                .and_then(|a| a.strip_prefix("Bearer "))
                .and_then(|t| tokens.get(t))
        {
            return user.clone();
        }
        "system:admin".to_owned()
    }

    /// Runs the matching mutating webhooks over `object` (served form, as the client sent it;
    /// `old` in storage form); answers it unchanged, at no cost, when none match.
    pub async fn admit(&self, req: &Request<'_>, object: Value, old: Option<&Value>) -> ApiResult<Admitted> {
        let hooks = self.webhooks.candidates(req.operation, req.rt, req.sub, req.ns);
        if hooks.is_empty() {
            return Ok(Admitted {
                object,
                warnings: Vec::new(),
            });
        }
        let mut served = object;
        self.default_for_admission(req.rt, &mut served)?;
        if req.rt.namespaced && meta_str(&served, "namespace").is_none_or(str::is_empty) {
            // The API server fills the namespace from the URL before admission.
            if let Some(m) = served.get_mut("metadata").and_then(Value::as_object_mut) {
                m.insert("namespace".into(), json!(req.ns));
            }
        }
        let old_served = old.map(|o| convert::output(req.rt, o).into_owned());
        let ns_labels = self.namespace_labels(req, &served);
        let mut warnings = Vec::new();
        for hook in &hooks {
            if !hook.namespace_selector.is_everything() {
                let Some(labels) = &ns_labels else { continue };
                if !hook.namespace_selector.matches(labels) {
                    continue;
                }
            }
            if !hook.object_selector.is_everything()
                && !hook.object_selector.matches_object(&served)
                && !old_served
                    .as_ref()
                    .is_some_and(|o| hook.object_selector.matches_object(o))
            {
                continue;
            }
            match self.call(hook, req, &served, old_served.as_ref()).await {
                Ok((patched, w)) => {
                    if let Some(p) = patched {
                        served = p;
                    }
                    warnings.extend(w);
                }
                Err(CallError::Failed(why)) => {
                    let message = format!("failed calling webhook {:?}: {why}", hook.name);
                    if hook.ignore_failures {
                        tracing::warn!(webhook = %hook.name, error = %message, "failed calling webhook, failing open");
                        continue;
                    }
                    return Err(ApiError::internal(message));
                }
                Err(CallError::Refused(e)) => return Err(e),
            }
        }
        Ok(Admitted {
            object: served,
            warnings,
        })
    }

    /// Labels the namespace selector sees: the object's own for a Namespace, its namespace's
    /// otherwise; `None` for other cluster-scoped objects (never exempted).
    fn namespace_labels(&self, req: &Request<'_>, obj: &Value) -> Option<BTreeMap<String, String>> {
        let labels = |v: &Value| -> BTreeMap<String, String> {
            v.pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                        .collect()
                })
                .unwrap_or_default()
        };
        if req.rt.special == Special::Namespace {
            return Some(labels(obj));
        }
        if req.ns.is_empty() {
            return None;
        }
        Some(
            self.store
                .get("/namespaces", "", req.ns)
                .map(|n| labels(&n))
                .unwrap_or_default(),
        )
    }

    /// One webhook call: the patched object (`None` = unchanged) and the webhook's warnings.
    async fn call(
        &self,
        hook: &Hook,
        req: &Request<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(Option<Value>, Vec<String>), CallError> {
        let uid = uuid::Uuid::new_v4().to_string();
        let review = review(hook, req, &uid, object, old);
        let response = self
            .post(hook, &review)
            .await
            .map_err(|CallFailed(m)| CallError::Failed(m))?;
        let r = check_response(&response, &uid)
            .map_err(|m| CallError::Failed(format!("received invalid webhook response: {m}")))?;
        let warnings = strings(&r["warnings"]);
        if r["allowed"].as_bool() != Some(true) {
            return Err(denied(&hook.name, &r["status"]).into());
        }
        let Some(patch) = r["patch"].as_str().filter(|p| !p.is_empty()) else {
            return Ok((None, warnings));
        };
        match r["patchType"].as_str() {
            Some("JSONPatch") => {}
            other => {
                return Err(CallError::Failed(format!(
                    "unsupported patch type {:?}",
                    other.unwrap_or_default()
                )));
            }
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .map_err(|e| {
                CallError::Failed(format!(
                    "received invalid webhook response: illegal base64 data in response.patch: {e}"
                ))
            })?;
        let ops: Value = serde_json::from_slice(&raw).map_err(|e| ApiError::internal(e.to_string()))?;
        if !ops.is_array() {
            return Err(ApiError::internal(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
            )
            .into());
        }
        let patched = nave_sim_core::patch::json_patch(object, &ops).map_err(|e| {
            ApiError::internal(match e {
                nave_sim_core::patch::PatchError::Malformed(m)
                | nave_sim_core::patch::PatchError::OperationFailed(m) => m,
            })
        })?;
        if !patched.is_object() {
            return Err(ApiError::internal(format!(
                "admission webhook {:?} returned a patch that does not produce an object",
                hook.name
            ))
            .into());
        }
        Ok((Some(patched), warnings))
    }

    async fn post(&self, hook: &Hook, review: &Value) -> Result<Value, CallFailed> {
        let url = match &hook.target {
            Target::Url(u) => format!("{u}?timeout={}s", hook.timeout.as_secs()),
            Target::Service(s) => {
                return Err(CallFailed(format!(
                    "failed to call webhook: service {s} is not reachable from nave-sim (only clientConfig.url is called)"
                )));
            }
        };
        let client = self
            .webhooks
            .client(&hook.ca_bundle)
            .map_err(|e| CallFailed(format!("failed to call webhook: {e}")))?;
        let sent = client.post(&url).timeout(hook.timeout).json(review).send().await;
        let resp =
            sent.map_err(|e| CallFailed(format!("failed to call webhook: Post {url:?}: {}", describe(&e))))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| CallFailed(format!("failed to call webhook: Post {url:?}: {}", describe(&e))))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(CallFailed(format!(
                "failed to call webhook: the server responded with the status code {}: {}",
                status.as_u16(),
                text.trim()
            )));
        }
        serde_json::from_slice(&body)
            .map_err(|e| CallFailed(format!("failed to call webhook: decoding the response: {e}")))
    }
}

/// The request's `AdmissionReview`.
fn review(hook: &Hook, req: &Request<'_>, uid: &str, object: &Value, old: Option<&Value>) -> Value {
    let rt = req.rt;
    let kind = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let resource = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    // A Namespace's admission namespace is its own name, as upstream's attributes have it.
    let namespace = if rt.special == Special::Namespace {
        meta_str(object, "name").unwrap_or(req.name)
    } else {
        req.ns
    };
    let mut options =
        json!({"apiVersion": "meta.k8s.io/v1", "kind": req.options_kind, "fieldManager": req.opts.manager});
    if req.opts.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    let groups = if req.user == "system:admin" {
        json!(["system:masters", "system:authenticated"])
    } else {
        json!(["system:authenticated"])
    };
    let mut request = json!({
        "uid": uid, "kind": kind, "resource": resource,
        "requestKind": kind, "requestResource": resource,
        "name": req.name, "namespace": namespace, "operation": req.operation.as_str(),
        "userInfo": {"username": req.user, "groups": groups},
        "object": object, "oldObject": old, "dryRun": req.opts.dry_run, "options": options,
    });
    if let Some(s) = req.sub {
        request["subResource"] = json!(s);
        request["requestSubResource"] = json!(s);
    }
    tracing::debug!(webhook = %hook.name, uid, "calling admission webhook");
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// Upstream's `VerifyAdmissionResponse` for v1: answers `response`.
fn check_response<'a>(review: &'a Value, uid: &str) -> Result<&'a Value, String> {
    let r = review
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("webhook response was absent")?;
    let got = r["uid"].as_str().unwrap_or_default();
    if got != uid {
        return Err(format!("expected response.uid={uid:?}, got {got:?}"));
    }
    let gvk = (review["apiVersion"].as_str(), review["kind"].as_str());
    if gvk != (Some("admission.k8s.io/v1"), Some("AdmissionReview")) {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            gvk.0.unwrap_or_default(),
            gvk.1.unwrap_or_default()
        ));
    }
    let patch = r["patch"].as_str().is_some_and(|p| !p.is_empty());
    let patch_type = r["patchType"].as_str().is_some_and(|p| !p.is_empty());
    if patch && !patch_type {
        return Err("webhook returned response.patch but not response.patchType".into());
    }
    if patch_type && !patch {
        return Err("webhook returned response.patchType but not response.patch".into());
    }
    Ok(r)
}

/// Upstream's `ToStatusErr`: the webhook's status, at least 400, with the denial message.
fn denied(name: &str, status: &Value) -> ApiError {
    let by = format!("admission webhook {name:?} denied the request");
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let reason = status["reason"].as_str().unwrap_or_default();
    let message = match status["message"].as_str().filter(|m| !m.is_empty()) {
        Some(m) => format!("{by}: {m}"),
        None if !reason.is_empty() => format!("{by}: {reason}"),
        None => format!("{by} without explanation"),
    };
    let mut e = ApiError::new(code, reason, message);
    e.details = status.get("details").filter(|d| d.is_object()).cloned();
    e
}

/// The error chain of a failed call, with Go's word for a timeout.
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "context deadline exceeded".to_owned();
    }
    // reqwest's own text repeats the URL the message already names; its sources say what failed.
    let mut parts: Vec<String> = Vec::new();
    let mut source = std::error::Error::source(e);
    if source.is_none() {
        parts.push(e.to_string());
    }
    while let Some(s) = source {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// Upstream's v1 defaults of a MutatingWebhookConfiguration (`SetDefaults_MutatingWebhook`,
/// `SetDefaults_Rule`, `SetDefaults_ServiceReference`).
pub fn default_configuration(obj: &mut Value) {
    let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for w in hooks.iter_mut().filter(|w| w.is_object()) {
        for (k, v) in [
            ("failurePolicy", json!("Fail")),
            ("matchPolicy", json!("Equivalent")),
            ("namespaceSelector", json!({})),
            ("objectSelector", json!({})),
            ("timeoutSeconds", json!(DEFAULT_TIMEOUT_SECONDS)),
            ("reinvocationPolicy", json!("Never")),
        ] {
            if w.get(k).is_none_or(Value::is_null) {
                w[k] = v;
            }
        }
        if let Some(rules) = w.get_mut("rules").and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter(|r| r.is_object()) {
                if r.get("scope").is_none_or(Value::is_null) {
                    r["scope"] = json!("*");
                }
            }
        }
        if let Some(svc) = w.pointer_mut("/clientConfig/service").filter(|s| s.is_object())
            && svc.get("port").is_none_or(Value::is_null)
        {
            svc["port"] = json!(443);
        }
    }
}

fn unsupported(field: &str, v: &str, supported: &[&str]) -> Cause {
    let list = supported
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    Cause::new(
        "FieldValueNotSupported",
        field,
        format!("Unsupported value: {v:?}: supported values: {list}"),
    )
}

/// Upstream's `ValidateMutatingWebhookConfiguration` (the parts the simulator acts on), plus a
/// refusal of `matchConditions`, which it cannot evaluate.
pub fn validate_configuration(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let hooks = obj["webhooks"].as_array().cloned().unwrap_or_default();
    let mut seen: Vec<String> = Vec::new();
    for (i, w) in hooks.iter().enumerate() {
        let p = format!("webhooks[{i}]");
        let name = w["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            causes.push(Cause::new(
                "FieldValueRequired",
                &format!("{p}.name"),
                "Required value",
            ));
        } else {
            for e in nave_sim_core::selector::is_dns1123_subdomain(name) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    &format!("{p}.name"),
                    format!("Invalid value: {name:?}: {e}"),
                ));
            }
            if name.split('.').count() < 3 {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    &format!("{p}.name"),
                    format!("Invalid value: {name:?}: should be a domain with at least three segments separated by dots"),
                ));
            }
            if seen.iter().any(|s| s == name) {
                causes.push(Cause::new(
                    "FieldValueDuplicate",
                    &format!("{p}.name"),
                    format!("Duplicate value: {name:?}"),
                ));
            }
            seen.push(name.to_owned());
        }
        for (j, r) in w["rules"].as_array().into_iter().flatten().enumerate() {
            let rp = format!("{p}.rules[{j}]");
            for k in ["operations", "apiGroups", "apiVersions", "resources"] {
                if strings(&r[k]).is_empty() {
                    causes.push(Cause::new(
                        "FieldValueRequired",
                        &format!("{rp}.{k}"),
                        "Required value",
                    ));
                }
            }
            for (n, op) in strings(&r["operations"]).iter().enumerate() {
                if !matches!(op.as_str(), "*" | "CREATE" | "UPDATE" | "DELETE" | "CONNECT") {
                    causes.push(unsupported(
                        &format!("{rp}.operations[{n}]"),
                        op,
                        &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
                    ));
                }
            }
            if let Some(s) = r["scope"].as_str()
                && !matches!(s, "*" | "Cluster" | "Namespaced")
            {
                causes.push(unsupported(
                    &format!("{rp}.scope"),
                    s,
                    &["*", "Cluster", "Namespaced"],
                ));
            }
        }
        match w["sideEffects"].as_str() {
            None | Some("") => causes.push(Cause::new(
                "FieldValueRequired",
                &format!("{p}.sideEffects"),
                "Required value: must specify one of None, NoneOnDryRun",
            )),
            Some("None" | "NoneOnDryRun") => {}
            Some(other) => causes.push(unsupported(
                &format!("{p}.sideEffects"),
                other,
                &["None", "NoneOnDryRun"],
            )),
        }
        let versions = strings(&w["admissionReviewVersions"]);
        if versions.is_empty() {
            causes.push(Cause::new(
                "FieldValueRequired",
                &format!("{p}.admissionReviewVersions"),
                "Required value: must specify one of v1, v1beta1",
            ));
        } else if !versions.iter().any(|v| v == "v1") {
            // Upstream also accepts v1beta1 alone; the simulator speaks only v1.
            causes.push(Cause::new(
                "FieldValueInvalid",
                &format!("{p}.admissionReviewVersions"),
                format!(
                    "Invalid value: {:?}: must include v1 (nave-sim sends only admission.k8s.io/v1 AdmissionReviews)",
                    versions
                ),
            ));
        }
        for (field, allowed) in [
            ("failurePolicy", &["Fail", "Ignore"][..]),
            ("matchPolicy", &["Equivalent", "Exact"][..]),
            ("reinvocationPolicy", &["IfNeeded", "Never"][..]),
        ] {
            if let Some(v) = w[field].as_str()
                && !allowed.contains(&v)
            {
                causes.push(unsupported(&format!("{p}.{field}"), v, allowed));
            }
        }
        if let Some(t) = w["timeoutSeconds"].as_i64()
            && !(1..=30).contains(&t)
        {
            causes.push(Cause::new(
                "FieldValueInvalid",
                &format!("{p}.timeoutSeconds"),
                format!("Invalid value: {t}: the timeout value must be between 1 and 30 seconds"),
            ));
        }
        for sel in ["namespaceSelector", "objectSelector"] {
            if !w[sel].is_null()
                && let Err(e) = LabelSelector::from_label_selector_json(&w[sel])
            {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    &format!("{p}.{sel}"),
                    format!("Invalid value: {}: {}", w[sel], e.0),
                ));
            }
        }
        if w["matchConditions"].as_array().is_some_and(|a| !a.is_empty()) {
            causes.push(Cause::new(
                "FieldValueForbidden",
                &format!("{p}.matchConditions"),
                "Forbidden: nave-sim does not evaluate CEL match conditions",
            ));
        }
        causes.extend(validate_client_config(&p, &w["clientConfig"]));
    }
    causes
}

/// Upstream's `validateWebhookClientConfig` and `ValidateWebhookURL` (https forced).
fn validate_client_config(p: &str, cc: &Value) -> Vec<Cause> {
    const FORM: &str = "; desired format: https://host[/path]";
    let mut causes = Vec::new();
    let url = cc["url"].as_str();
    let service = cc.get("service").filter(|s| !s.is_null());
    match (url, service) {
        (Some(_), Some(_)) | (None, None) => causes.push(Cause::new(
            "FieldValueRequired",
            &format!("{p}.clientConfig"),
            "Required value: exactly one of url or service is required",
        )),
        (Some(u), None) => {
            let field = format!("{p}.clientConfig.url");
            match reqwest::Url::parse(u) {
                Err(e) => causes.push(Cause::new(
                    "FieldValueRequired",
                    &field,
                    format!("Required value: url must be a valid URL: {e}{FORM}"),
                )),
                Ok(parsed) => {
                    if parsed.scheme() != "https" {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            &field,
                            format!(
                                "Invalid value: {:?}: 'https' is the only allowed URL scheme{FORM}",
                                parsed.scheme()
                            ),
                        ));
                    }
                    if parsed.host_str().is_none_or(str::is_empty) {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            &field,
                            format!("Invalid value: \"\": host must be specified{FORM}"),
                        ));
                    }
                    if !parsed.username().is_empty() || parsed.password().is_some() {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            &field,
                            "Invalid value: \"\": user information is not permitted in the URL",
                        ));
                    }
                    if let Some(f) = parsed.fragment() {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            &field,
                            format!("Invalid value: {f:?}: fragments are not permitted in the URL"),
                        ));
                    }
                    if let Some(q) = parsed.query() {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            &field,
                            format!("Invalid value: {q:?}: query parameters are not permitted in the URL"),
                        ));
                    }
                }
            }
        }
        (None, Some(s)) => {
            for k in ["namespace", "name"] {
                if s[k].as_str().is_none_or(str::is_empty) {
                    causes.push(Cause::new(
                        "FieldValueRequired",
                        &format!("{p}.clientConfig.service.{k}"),
                        format!("Required value: service {k} is required"),
                    ));
                }
            }
        }
    }
    if let Some(ca) = cc["caBundle"].as_str()
        && base64::engine::general_purpose::STANDARD
            .decode(ca.trim())
            .is_err()
    {
        causes.push(Cause::new(
            "FieldValueInvalid",
            &format!("{p}.clientConfig.caBundle"),
            "Invalid value: \"<bytes>\": illegal base64 data",
        ));
    }
    causes
}

/// Admits and writes an update: `f` proposes the new object from the current one; the webhooks
/// see it; the write then commits only if nothing changed meanwhile (else all of it runs again,
/// as the API server's admission runs inside its optimistic-concurrency loop). With no matching
/// webhook this is [`ClusterState::update_with`] and nothing more.
#[allow(clippy::too_many_arguments)]
pub async fn update<F>(
    state: &ClusterState,
    rt: &Arc<ResourceType>,
    served: &ResourceType,
    ns: &str,
    name: &str,
    opts: &WriteOpts,
    managed: bool,
    user: &str,
    options_kind: &str,
    mut f: F,
) -> ApiResult<Written>
where
    F: FnMut(&Arc<Value>) -> ApiResult<Value> + Send,
{
    let sub = opts.subresource.as_deref().filter(|s| *s == "status");
    let key_ns = if rt.namespaced { ns } else { "" };
    if state
        .webhooks
        .candidates(Operation::Update, served, sub, key_ns)
        .is_empty()
    {
        return state.update_with(rt, ns, name, opts, managed, &mut f);
    }
    for _attempt in 0..16 {
        let Some(old) = state.store.get(&rt.table, key_ns, name) else {
            return Err(ApiError::not_found(served, name));
        };
        let proposed = convert::output(served, &f(&old)?).into_owned();
        let req = Request {
            rt: served,
            sub,
            ns: key_ns,
            name,
            operation: Operation::Update,
            opts,
            options_kind,
            user,
        };
        let admitted = state.admit(&req, proposed, Some(&old)).await?;
        let object = convert::input(served, admitted.object);
        let mut stale = false;
        let mut pinned = |cur: &Arc<Value>| -> ApiResult<Value> {
            if meta_str(cur, "resourceVersion") != meta_str(&old, "resourceVersion") {
                stale = true;
                return Err(ApiError::conflict(served, name));
            }
            Ok(object.clone())
        };
        match state.update_with(rt, ns, name, opts, managed, &mut pinned) {
            Err(_) if stale => continue,
            Ok(mut w) => {
                w.warnings.extend(admitted.warnings);
                return Ok(w);
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::conflict(served, name))
}

/// Admits a create of `obj` (served form; answered in served form): the webhooks see it before
/// the write pipeline defaults it again and validates it.
pub async fn create(
    state: &ClusterState,
    rt: &ResourceType,
    ns: &str,
    obj: Value,
    opts: &WriteOpts,
    user: &str,
) -> ApiResult<Admitted> {
    if state.webhooks.is_empty() {
        return Ok(Admitted {
            object: obj,
            warnings: Vec::new(),
        });
    }
    let key_ns = if rt.namespaced { ns } else { "" };
    let name = meta_str(&obj, "name").unwrap_or_default().to_owned();
    let req = Request {
        rt,
        sub: None,
        ns: key_ns,
        name: &name,
        operation: Operation::Create,
        opts,
        options_kind: "CreateOptions",
        user,
    };
    state.admit(&req, obj, None).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(hook: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": "c"}, "webhooks": [hook]})
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn configuration_needs_https_side_effects_and_v1() {
        let c = config(json!({"name": "gate.nave.dev", "clientConfig": {"url": "http://127.0.0.1:1/m"}}));
        let seen = fields(&validate_configuration(&c));
        for want in [
            "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
            "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1",
            "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
        ] {
            assert!(seen.iter().any(|s| s == want), "expected {want:?}, seen {seen:?}");
        }
    }

    #[test]
    fn webhook_names_need_three_segments_and_one_client_config() {
        let c = config(
            json!({"name": "gate", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                              "clientConfig": {}}),
        );
        let seen = fields(&validate_configuration(&c));
        assert!(
            seen.iter()
                .any(|s| s.starts_with("webhooks[0].name: Invalid value: \"gate\"")),
            "seen {seen:?}"
        );
        assert!(
            seen.iter().any(|s| s
                == "webhooks[0].clientConfig: Required value: exactly one of url or service is required"),
            "seen {seen:?}"
        );
    }

    #[test]
    fn rules_match_subresources_only_when_listed() {
        let rt = super::super::resources::builtins()
            .into_iter()
            .find(|r| r.plural == "pods")
            .expect("pods");
        let rule = |res: &str| Rule {
            operations: vec!["CREATE".into(), "UPDATE".into()],
            groups: vec![String::new()],
            versions: vec!["v1".into()],
            resources: vec![res.into()],
            scope: "*".into(),
        };
        assert!(rule("pods").matches(Operation::Create, &rt, None, "default"));
        assert!(!rule("pods").matches(Operation::Update, &rt, Some("status"), "default"));
        assert!(!rule("*").matches(Operation::Update, &rt, Some("status"), "default"));
        assert!(rule("pods/status").matches(Operation::Update, &rt, Some("status"), "default"));
        assert!(rule("*/*").matches(Operation::Update, &rt, Some("status"), "default"));
        let mut cluster = rule("pods");
        cluster.scope = "Cluster".into();
        assert!(!cluster.matches(Operation::Create, &rt, None, "default"));
    }

    #[test]
    fn denial_keeps_the_webhook_code_and_defaults_to_400() {
        let e = denied("gate.nave.dev", &json!({"code": 403, "message": "no"}));
        assert_eq!(
            (e.code, e.message.as_str()),
            (403, "admission webhook \"gate.nave.dev\" denied the request: no")
        );
        let e = denied("gate.nave.dev", &json!({}));
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                "admission webhook \"gate.nave.dev\" denied the request without explanation"
            )
        );
    }
}
