//! The write pipeline shared by the REST handlers, the garbage collector and the namespace/CRD
//! lifecycle: create, update (optimistic retry around a caller-supplied transformation), and
//! delete with finalizers, propagation and pod graceful deletion.
//!
//! ```text
//!  proposed object ─► identity/namespace checks ─► status split ─► CR schema (prune/default/
//!  validate) or built-in defaults ─► generation ─► managedFields ─► normalise ─► no-op? ─► commit
//! ```

use std::sync::Arc;

use nave_sim_core::fieldpath::ListTypes;
use serde_json::{Value, json};

use super::ClusterState;
use super::error::{ApiError, ApiResult, Cause};
use super::meta::{self, meta_mut, meta_str};
use super::resources::{ResourceType, Special};
use super::store::{CommitError, ObjKey};
use super::{admission, crd, defaults, podspec};

/// `fieldValidation` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop unknown fields silently.
    Ignore,
    /// Drop unknown fields with a warning (the server default).
    #[default]
    Warn,
    /// Reject unknown fields.
    Strict,
}

/// Options of one write.
#[derive(Debug, Clone)]
pub struct WriteOpts {
    /// Field manager recorded in managedFields.
    pub manager: String,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldValidation`.
    pub validation: FieldValidation,
    /// `Some("status")` for status writes.
    pub subresource: Option<String>,
}

impl WriteOpts {
    /// Options of an internal write by `manager`.
    pub fn internal(manager: &str) -> WriteOpts {
        WriteOpts {
            manager: manager.to_owned(),
            dry_run: false,
            validation: FieldValidation::Ignore,
            subresource: None,
        }
    }
}

/// The result of a write.
#[derive(Debug)]
pub struct Written {
    /// The stored (or would-be) object.
    pub object: Arc<Value>,
    /// Whether the write created the object.
    pub created: bool,
    /// Warnings for the `Warning` header.
    pub warnings: Vec<String>,
}

/// The list types of `rt` for server-side apply and strategic merge patch.
pub fn list_types(rt: &ResourceType) -> Box<dyn ListTypes> {
    if let Some(schema) = rt.custom.as_ref().and_then(|c| c.schema.clone()) {
        return Box::new(SchemaTypes(schema));
    }
    let (group, kind) = if rt.special == Special::EventsV1 {
        ("", "Event")
    } else {
        (rt.group.as_str(), rt.kind.as_str())
    };
    nave_sim_core::fieldpath::builtin(group, kind)
}

struct SchemaTypes(Arc<nave_sim_core::schema::Schema>);

impl ListTypes for SchemaTypes {
    fn list_type(
        &self,
        path: &[nave_sim_core::fieldpath::Step],
    ) -> Option<nave_sim_core::fieldpath::ListType> {
        self.0.list_type(path)
    }
    fn map_is_atomic(&self, path: &[nave_sim_core::fieldpath::Step]) -> bool {
        self.0.map_is_atomic(path)
    }
    fn smp_merge_key(&self, path: &[nave_sim_core::fieldpath::Step]) -> Option<String> {
        self.0.smp_merge_key(path)
    }
}

fn key_of(rt: &ResourceType, ns: &str, name: &str) -> ObjKey {
    (
        if rt.namespaced {
            ns.to_owned()
        } else {
            String::new()
        },
        name.to_owned(),
    )
}

/// Checks the body's `apiVersion`/`kind` against the resource and sets them.
pub fn check_type(rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
    let Some(m) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    let api_version = rt.api_version();
    if let Some(av) = m
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        && av != api_version
    {
        // Built-ins accept other served versions of the same group only for the same kind;
        // nothing else is convertible here.
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({api_version})"
        )));
    }
    if let Some(k) = m.get("kind").and_then(Value::as_str).filter(|s| !s.is_empty())
        && k != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    m.insert("apiVersion".into(), json!(api_version));
    m.insert("kind".into(), json!(rt.kind));
    Ok(())
}

impl ClusterState {
    fn namespace_admission(&self, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<()> {
        if !rt.namespaced {
            return Ok(());
        }
        match self.store.get("/namespaces", "", ns) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => Err(ApiError::forbidden(
                rt,
                name,
                &format!("unable to create new content in namespace {ns} because it is being terminated"),
                Some("NamespaceTerminating"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Applies the CR schema (prune, default, validate) or the built-in defaults.
    fn shape(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOpts,
        warnings: &mut Vec<String>,
    ) -> ApiResult<()> {
        let name = meta_str(obj, "name").unwrap_or_default().to_owned();
        if let Some(schema) = rt.custom.as_ref().and_then(|c| c.schema.as_ref()) {
            let unknown = schema.prune_unknown(obj);
            if !unknown.is_empty() {
                match opts.validation {
                    FieldValidation::Strict => {
                        let msg = unknown
                            .iter()
                            .map(|u| format!("unknown field \"{u}\""))
                            .collect::<Vec<_>>()
                            .join(", ");
                        return Err(ApiError::bad_request(format!("strict decoding error: {msg}")));
                    }
                    FieldValidation::Warn => {
                        warnings.extend(unknown.iter().map(|u| format!("unknown field \"{u}\"")));
                    }
                    FieldValidation::Ignore => {}
                }
            }
            schema.default(obj);
            let errs = schema.validate(obj, old);
            if !errs.is_empty() {
                let causes: Vec<Cause> = errs
                    .iter()
                    .map(|e| {
                        let body = e
                            .message
                            .strip_prefix(&format!("{}: ", e.field))
                            .unwrap_or(&e.message);
                        Cause::new(e.reason, &e.field, body)
                    })
                    .collect();
                return Err(ApiError::invalid(rt, &name, &causes));
            }
        } else if !rt.is_custom() {
            podspec::check_quantities(rt, obj)?;
            podspec::fold_string_data(rt, obj);
            defaults::apply(rt, obj);
            meta::strip_nulls(obj);
        }
        Ok(())
    }

    /// Creates an object.  `keep_managed` keeps `metadata.managedFields` as given (apply-create).
    pub fn create(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        mut obj: Value,
        opts: &WriteOpts,
        keep_managed: bool,
    ) -> ApiResult<Written> {
        check_type(rt, &mut obj)?;
        let mut warnings = Vec::new();
        if let Some(dep) = rt.custom.as_ref().and_then(|c| c.deprecation.clone()) {
            warnings.push(dep);
        }
        let meta = meta_mut(&mut obj);
        if rt.namespaced {
            match meta.get("namespace").and_then(Value::as_str) {
                Some(b) if !b.is_empty() && b != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    meta.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            meta.remove("namespace");
        }
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
        ] {
            meta.remove(k);
        }
        if !keep_managed {
            meta.remove("managedFields");
        }
        let explicit_name = meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let generate = meta
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        if explicit_name.is_none() && generate.is_none() {
            return Err(ApiError::invalid(
                rt,
                "",
                &[Cause::new(
                    "FieldValueRequired",
                    "metadata.name",
                    "Required value: name or generateName is required",
                )],
            ));
        }
        let display_name = explicit_name.clone().or(generate.clone()).unwrap_or_default();
        self.namespace_admission(rt, ns, &display_name)?;

        // Status on create.
        if rt.status {
            match (rt.special, rt.is_custom()) {
                (Special::Node, _) => {}
                (_, true) => {
                    if let Some(m) = obj.as_object_mut() {
                        m.remove("status");
                    }
                }
                (Special::Pod, _) => {
                    let qos = defaults::qos_class(&obj["spec"]);
                    obj["status"] = json!({"phase": "Pending", "qosClass": qos});
                }
                (Special::Namespace, _) => obj["status"] = json!({"phase": "Active"}),
                // Upstream defaulting gives a new claim `phase: Pending` (nothing binds it here).
                _ if rt.group.is_empty() && rt.plural == "persistentvolumeclaims" => {
                    obj["status"] = json!({"phase": "Pending"});
                }
                (Special::Crd | Special::ApiService, _) => {}
                _ => {
                    if let Some(m) = obj.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        self.shape(rt, &mut obj, None, opts, &mut warnings)?;
        if rt.special == Special::Pod {
            // QoS is computed from the defaulted spec.
            let qos = defaults::qos_class(&obj["spec"]);
            obj["status"]["qosClass"] = json!(qos);
            if podspec::is_gated(&obj) {
                // Upstream's pod strategy (`applySchedulingGatedCondition`) marks a gated pod at
                // creation, so no scheduler is needed to explain why it waits.
                obj["status"]["conditions"] =
                    json!([podspec::scheduling_gated_condition(&meta::now_rfc3339())]);
            }
        }
        if rt.special == Special::Crd {
            let registry = self.registry.read().unwrap_or_else(|e| e.into_inner()).clone();
            crd::prepare_create(&registry, &mut obj)
                .map_err(|causes| ApiError::invalid(rt, &display_name, &causes))?;
        }
        if let Some(name) = &explicit_name
            && let Some(c) = meta::validate_name(rt, name)
        {
            return Err(ApiError::invalid(rt, name, &[c]));
        }
        let mut causes = meta::validate_metadata(&obj);
        causes.extend(validate_builtin(rt, &obj, None));
        if !causes.is_empty() {
            return Err(ApiError::invalid(rt, &display_name, &causes));
        }
        let now = meta::now_rfc3339();
        {
            let meta = meta_mut(&mut obj);
            meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            meta.insert("creationTimestamp".into(), json!(now));
            if rt.generation {
                meta.insert("generation".into(), json!(1));
            }
        }
        let is_job = rt.group == "batch" && rt.plural == "jobs";
        if is_job && explicit_name.is_some() {
            defaults::generate_job_selector(&mut obj, None);
        }
        let mut tried: Option<String> = None;
        if !keep_managed {
            nave_sim_core::ssa::record_update(None, &mut obj, &opts.manager, None, &now, &*list_types(rt));
        }
        meta::normalize_metadata(&mut obj);
        meta::normalize_workload_status(rt, &mut obj);
        meta::normalize_data_maps(rt, &mut obj);

        for _attempt in 0..8 {
            let name = match (&explicit_name, &generate) {
                (Some(n), _) => n.clone(),
                (None, Some(prefix)) => {
                    let n = format!("{prefix}{}", meta::random_suffix());
                    if let Some(c) = meta::validate_name(rt, &n) {
                        return Err(ApiError::invalid(rt, &n, &[c]));
                    }
                    n
                }
                (None, None) => String::new(),
            };
            meta_mut(&mut obj).insert("name".into(), json!(name));
            if is_job && explicit_name.is_none() {
                // The job-name labels carry the generated name.
                defaults::generate_job_selector(&mut obj, tried.as_deref());
                tried = Some(name.clone());
            }
            let key = key_of(rt, ns, &name);
            if self.store.get(&rt.table, &key.0, &key.1).is_some() {
                if explicit_name.is_some() {
                    return Err(ApiError::already_exists(rt, &name));
                }
                continue;
            }
            if opts.dry_run {
                let mut o = obj.clone();
                super::store::set_rv(&mut o, self.store.rv());
                return Ok(Written {
                    object: Arc::new(o),
                    created: true,
                    warnings,
                });
            }
            match self.store.commit(&rt.table, &key, None, Some(obj.clone())) {
                Ok(c) => {
                    self.after_commit(rt, &c.object, false);
                    return Ok(Written {
                        object: c.object,
                        created: true,
                        warnings,
                    });
                }
                Err(CommitError::Changed) if explicit_name.is_some() => {
                    return Err(ApiError::already_exists(rt, &name));
                }
                Err(CommitError::Changed) => continue,
            }
        }
        Err(ApiError::new(
            500,
            "AlreadyExists",
            "could not find a free generated name",
        ))
    }

    /// Updates an object: `f` turns the current object into the proposed one (it runs again when
    /// the object changed concurrently).  `managed` = `f` already computed managedFields (apply).
    pub fn update_with(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        opts: &WriteOpts,
        managed: bool,
        f: &mut dyn FnMut(&Arc<Value>) -> ApiResult<Value>,
    ) -> ApiResult<Written> {
        let key = key_of(rt, ns, name);
        for _attempt in 0..16 {
            let Some(old) = self.store.get(&rt.table, &key.0, &key.1) else {
                return Err(ApiError::not_found(rt, name));
            };
            let proposed = f(&old)?;
            let mut warnings = Vec::new();
            let new = self.finish_update(rt, &old, proposed, opts, managed, &mut warnings)?;
            let Some(new) = new else {
                return Ok(Written {
                    object: old,
                    created: false,
                    warnings,
                });
            };
            let deletes = is_finished_deleting(rt, &new);
            if opts.dry_run {
                return Ok(Written {
                    object: Arc::new(new),
                    created: false,
                    warnings,
                });
            }
            let res = if deletes {
                self.store.commit(&rt.table, &key, Some(&old), None)
            } else {
                self.store.commit(&rt.table, &key, Some(&old), Some(new))
            };
            match res {
                Ok(c) => {
                    self.after_commit(rt, &c.object, deletes);
                    return Ok(Written {
                        object: c.object,
                        created: false,
                        warnings,
                    });
                }
                Err(CommitError::Changed) => continue,
            }
        }
        Err(ApiError::conflict(rt, name))
    }

    /// Completes a proposed update; `None` = no change.
    fn finish_update(
        &self,
        rt: &ResourceType,
        old: &Value,
        mut new: Value,
        opts: &WriteOpts,
        managed: bool,
        warnings: &mut Vec<String>,
    ) -> ApiResult<Option<Value>> {
        check_type(rt, &mut new)?;
        if let Some(dep) = rt.custom.as_ref().and_then(|c| c.deprecation.clone()) {
            warnings.push(dep);
        }
        let name = meta_str(old, "name").unwrap_or_default().to_owned();
        {
            let m = meta_mut(&mut new);
            if let Some(n) = m.get("name").and_then(Value::as_str)
                && !n.is_empty()
                && n != name
            {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            if rt.namespaced
                && let Some(n) = m.get("namespace").and_then(Value::as_str)
                && !n.is_empty()
                && Some(n) != meta_str(old, "namespace")
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let status_write = opts.subresource.as_deref() == Some("status");
        if status_write {
            // Status writes take only `.status` (ResetObjectMetaForStatus); managedFields may change.
            let mut merged = old.clone();
            match new.get("status") {
                Some(s) => merged["status"] = s.clone(),
                None => {
                    if let Some(m) = merged.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if managed && let Some(mf) = new.pointer("/metadata/managedFields") {
                meta_mut(&mut merged).insert("managedFields".into(), mf.clone());
            }
            new = merged;
        } else {
            let m = meta_mut(&mut new);
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old.get("metadata").and_then(|om| om.get(k)) {
                    Some(v) => {
                        m.insert(k.into(), v.clone());
                    }
                    None => {
                        m.remove(k);
                    }
                }
            }
            m.insert("name".into(), json!(name));
            if let Some(ns) = meta_str(old, "namespace") {
                m.insert("namespace".into(), json!(ns));
            }
            if !managed {
                match old.pointer("/metadata/managedFields") {
                    Some(v) => {
                        m.insert("managedFields".into(), v.clone());
                    }
                    None => {
                        m.remove("managedFields");
                    }
                }
            }
            if rt.status && opts.subresource.as_deref() != Some("binding") {
                // The main resource never writes status (for CRDs the server owns it).
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
        }
        let mut shaped = new;
        self.shape(rt, &mut shaped, Some(old), opts, warnings)?;
        let mut new = shaped;
        if rt.special == Special::Crd && !status_write {
            let registry = self.registry.read().unwrap_or_else(|e| e.into_inner()).clone();
            crd::prepare_update(&registry, old, &mut new)
                .map_err(|causes| ApiError::invalid(rt, &name, &causes))?;
        }
        // Finalizers cannot be added while deleting.
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            let before = meta::finalizers(old);
            let added: Vec<String> = meta::finalizers(&new)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                let list = added
                    .iter()
                    .map(|f| format!("{f:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(ApiError::invalid(
                    rt,
                    &name,
                    &[Cause::new(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
                        ),
                    )],
                ));
            }
        }
        let mut causes = meta::validate_metadata(&new);
        causes.extend(validate_builtin(rt, &new, Some(old)));
        if !causes.is_empty() {
            return Err(ApiError::invalid(rt, &name, &causes));
        }
        if rt.generation {
            let ignore_status = rt.status || !rt.is_custom();
            if meta::spec_changed(old, &new, ignore_status) {
                let g = old
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                meta_mut(&mut new).insert("generation".into(), json!(g + 1));
            }
        }
        if !managed {
            let now = meta::now_rfc3339();
            nave_sim_core::ssa::record_update(
                Some(old),
                &mut new,
                &opts.manager,
                opts.subresource.as_deref().filter(|s| *s == "status"),
                &now,
                &*list_types(rt),
            );
        }
        meta::normalize_metadata(&mut new);
        meta::normalize_workload_status(rt, &mut new);
        meta::normalize_data_maps(rt, &mut new);
        if meta::same_content(old, &new) {
            return Ok(None);
        }
        Ok(Some(new))
    }

    /// Recompiles the admission webhooks from the stored configurations.
    pub fn reload_webhooks(&self) {
        let (configs, _) = self.store.list(admission::TABLE, None, None);
        self.webhooks.reload(&configs);
    }

    /// The defaulting a write's object gets before admission (upstream defaults while decoding):
    /// type, built-in defaults, or a CR schema's pruning and defaults. Validation comes later.
    pub fn default_for_admission(&self, rt: &ResourceType, obj: &mut Value) -> ApiResult<()> {
        check_type(rt, obj)?;
        if let Some(schema) = rt.custom.as_ref().and_then(|c| c.schema.as_ref()) {
            schema.prune_unknown(obj);
            schema.default(obj);
        } else if !rt.is_custom() {
            podspec::check_quantities(rt, obj)?;
            defaults::apply(rt, obj);
        }
        Ok(())
    }

    /// Hooks run after a committed write (registry updates for CRDs, a namespace's `default`
    /// ServiceAccount, the compiled admission webhooks).
    fn after_commit(&self, rt: &ResourceType, obj: &Value, deleted: bool) {
        if admission::is_configuration(rt) {
            self.reload_webhooks();
        }
        if rt.special == Special::Crd {
            crd::sync_registry(self, obj, deleted);
            self.sync_api_services();
        }
        if rt.special == Special::Namespace && !deleted {
            self.ensure_default_service_account(obj);
        }
    }

    /// Deletes an object with `opts`.
    pub fn delete(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> ApiResult<Deleted> {
        if rt.special == Special::Namespace && matches!(name, "default" | "kube-system" | "kube-public") {
            return Err(ApiError::forbidden(
                rt,
                name,
                "this namespace may not be deleted",
                None,
            ));
        }
        let key = key_of(rt, ns, name);
        for _attempt in 0..16 {
            let Some(old) = self.store.get(&rt.table, &key.0, &key.1) else {
                return Err(ApiError::not_found(rt, name));
            };
            if let Some(uid) = &opts.uid
                && Some(uid.as_str()) != meta_str(&old, "uid")
            {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&old, "uid").unwrap_or_default()
                    ),
                ));
            }
            if let Some(rv) = &opts.resource_version
                && Some(rv.as_str()) != meta_str(&old, "resourceVersion")
            {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta_str(&old, "resourceVersion").unwrap_or_default()
                    ),
                ));
            }
            let already = old.pointer("/metadata/deletionTimestamp").is_some();
            let mut finalizers = meta::finalizers(&old);
            let mut grace: i64 = 0;
            if rt.special == Special::Pod {
                let bound = old
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty());
                let terminal = matches!(
                    old.pointer("/status/phase").and_then(Value::as_str),
                    Some("Succeeded" | "Failed")
                );
                grace = opts
                    .grace_period
                    .or_else(|| {
                        old.pointer("/spec/terminationGracePeriodSeconds")
                            .and_then(Value::as_i64)
                    })
                    .unwrap_or(30)
                    .max(0);
                if !bound || terminal {
                    grace = 0;
                }
            }
            let mut new = (*old).clone();
            let mut changed = false;
            if !already {
                match opts.propagation.as_deref() {
                    Some("Orphan") if !finalizers.iter().any(|f| f == "orphan") => {
                        finalizers.push("orphan".into());
                    }
                    Some("Foreground") if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
                        finalizers.push("foregroundDeletion".into());
                    }
                    _ => {}
                }
                if rt.special == Special::Crd && !finalizers.iter().any(|f| f == crd::CLEANUP_FINALIZER) {
                    finalizers.push(crd::CLEANUP_FINALIZER.into());
                }
            }
            let ns_pending = rt.special == Special::Namespace
                && old
                    .pointer("/spec/finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty());
            let graceful = !finalizers.is_empty() || grace > 0 || ns_pending;
            if !graceful {
                if opts.dry_run {
                    return Ok(Deleted::Gone(old));
                }
                match self.store.commit(&rt.table, &key, Some(&old), None) {
                    Ok(c) => {
                        self.after_commit(rt, &c.object, true);
                        return Ok(Deleted::Gone(c.object));
                    }
                    Err(CommitError::Changed) => continue,
                }
            }
            if already {
                // A repeated delete may only shorten a pod's grace period.
                let current = old
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if rt.special == Special::Pod && grace < current {
                    let m = meta_mut(&mut new);
                    m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                    m.insert("deletionTimestamp".into(), json!(meta::rfc3339_in(grace)));
                    changed = true;
                    if grace == 0 && finalizers.is_empty() {
                        if opts.dry_run {
                            return Ok(Deleted::Gone(old));
                        }
                        match self.store.commit(&rt.table, &key, Some(&old), None) {
                            Ok(c) => return Ok(Deleted::Gone(c.object)),
                            Err(CommitError::Changed) => continue,
                        }
                    }
                }
            } else {
                let m = meta_mut(&mut new);
                m.insert("deletionTimestamp".into(), json!(meta::rfc3339_in(grace)));
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                if !finalizers.is_empty() {
                    m.insert("finalizers".into(), json!(finalizers));
                }
                if rt.generation {
                    let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
                    m.insert("generation".into(), json!(g + 1));
                }
                if rt.special == Special::Namespace {
                    new["status"]["phase"] = json!("Terminating");
                }
                if rt.special == Special::Crd {
                    crd::mark_terminating(&mut new);
                }
                changed = true;
            }
            if !changed {
                return Ok(Deleted::Pending(old));
            }
            if opts.dry_run {
                return Ok(Deleted::Pending(Arc::new(new)));
            }
            match self.store.commit(&rt.table, &key, Some(&old), Some(new)) {
                Ok(c) => return Ok(Deleted::Pending(c.object)),
                Err(CommitError::Changed) => continue,
            }
        }
        Err(ApiError::conflict(rt, name))
    }
}

impl ClusterState {
    /// `pods/binding`: sets `spec.nodeName` and the `PodScheduled` condition in one write.
    pub fn bind_pod(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        opts: &WriteOpts,
        f: &mut dyn FnMut(&Arc<Value>) -> ApiResult<Value>,
    ) -> ApiResult<Written> {
        let mut opts = opts.clone();
        opts.subresource = Some("binding".into());
        self.update_with(rt, ns, name, &opts, false, f)
    }

    /// `namespaces/<n>/finalize`: replaces `spec.finalizers`; an empty list completes a deletion.
    pub fn finalize_namespace(
        &self,
        rt: &Arc<ResourceType>,
        name: &str,
        finalizers: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        let mut f = |cur: &Arc<Value>| -> ApiResult<Value> {
            let mut n = (**cur).clone();
            n["spec"]["finalizers"] = finalizers.clone();
            Ok(n)
        };
        self.update_with(rt, "", name, opts, false, &mut f)
    }
}

/// Whether an update completes a pending deletion (last finalizer gone, no grace left).
fn is_finished_deleting(rt: &ResourceType, obj: &Value) -> bool {
    if obj.pointer("/metadata/deletionTimestamp").is_none() || !meta::finalizers(obj).is_empty() {
        return false;
    }
    if rt.special == Special::Namespace
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    {
        return false;
    }
    obj.pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        == 0
}

/// Kind-specific validation of built-ins (immutable fields, obvious range checks).
fn validate_builtin(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = podspec::validate_containers(rt, obj);
    causes.extend(podspec::validate_scheduling_gates(rt, obj, old));
    if rt.is_custom() {
        return causes;
    }
    if admission::is_configuration(rt) {
        causes.extend(admission::validate_configuration(obj));
    }
    if rt.group == "apps"
        && matches!(
            rt.plural.as_str(),
            "deployments" | "replicasets" | "statefulsets" | "daemonsets"
        )
    {
        if let Some(r) = obj.pointer("/spec/replicas").and_then(Value::as_i64)
            && r < 0
        {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.replicas",
                format!("Invalid value: {r}: must be greater than or equal to 0"),
            ));
        }
        if let Some(old) = old
            && old.pointer("/spec/selector") != obj.pointer("/spec/selector")
        {
            let shown = obj.pointer("/spec/selector").cloned().unwrap_or(Value::Null);
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.selector",
                format!("Invalid value: {shown}: field is immutable"),
            ));
        }
    }
    if rt.special == Special::Pod
        && let Some(old) = old
    {
        let on = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let nn = obj
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !on.is_empty() && on != nn {
            causes.push(Cause::new(
                "FieldValueForbidden",
                "spec",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
            ));
        }
    }
    causes
}

/// Options of a delete (`DeleteOptions` body and query parameters).
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `propagationPolicy` (`Orphan`, `Background`, `Foreground`).
    pub propagation: Option<String>,
    /// `gracePeriodSeconds`.
    pub grace_period: Option<i64>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

/// The outcome of a delete.
#[derive(Debug)]
pub enum Deleted {
    /// Removed now; the last state.
    Gone(Arc<Value>),
    /// Marked for deletion (finalizers or grace period pending).
    Pending(Arc<Value>),
}
