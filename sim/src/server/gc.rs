//! The garbage collector, namespace controller and CRD cleanup of one cluster, driven by the store's event log: owner references are matched by uid through the
//! store's owner index, so a deletion costs O(dependents), not O(objects).

use std::sync::Arc;

use serde_json::{Value, json};

use super::ClusterState;
use super::meta::{self, meta_str};
use super::resources::{ResourceType, Special};
use super::store::{Event, EventType};
use super::write::{DeleteOpts, WriteOpts};

const MANAGER: &str = "generic-garbage-collector";

/// Runs until the cluster shuts down.
pub async fn run(state: Arc<ClusterState>) {
    let mut notify = state.store.subscribe();
    let mut last = state.store.rv();
    loop {
        let current = state.store.rv();
        match state.store.all_events_after(last) {
            Ok(events) => {
                for e in &events {
                    process(&state, e);
                    last = last.max(e.rv);
                }
            }
            Err(_) => sweep(&state),
        }
        last = last.max(current);
        tokio::select! {
            changed = notify.changed() => if changed.is_err() { return },
            _ = state.shutdown.cancelled() => return,
        }
    }
}

fn rt_for(state: &ClusterState, table: &str) -> Option<Arc<ResourceType>> {
    let reg = state.registry.read().unwrap_or_else(|e| e.into_inner());
    let all = reg.by_table(table);
    all.iter()
        .find(|r| r.special != Special::EventsV1)
        .cloned()
        .or_else(|| all.first().cloned())
}

fn owner_refs(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Whether an owner reference points at an existing object this dependent may reference.
fn owner_alive(state: &ClusterState, dependent: &Value, r: &Value) -> bool {
    let Some(uid) = r["uid"].as_str() else {
        return false;
    };
    let Some((_, (ns, _))) = state.store.by_uid(uid) else {
        return false;
    };
    let dep_ns = meta_str(dependent, "namespace").unwrap_or_default();
    ns.is_empty() || ns == dep_ns
}

fn process(state: &ClusterState, e: &Event) {
    let obj = &e.object;
    match e.kind {
        EventType::Deleted => {
            if let Some(uid) = meta_str(obj, "uid") {
                owner_gone(state, uid);
            }
            // Owners waiting for this dependent (foreground) and namespaces/CRDs waiting to empty.
            for r in owner_refs(obj) {
                if let Some(uid) = r["uid"].as_str()
                    && let Some((table, key)) = state.store.by_uid(uid)
                    && let Some(owner) = state.store.get(&table, &key.0, &key.1)
                {
                    deleting(state, &table, &owner);
                }
            }
            let ns = e.namespace();
            if !ns.is_empty()
                && let Some(n) = state.store.get("/namespaces", "", ns)
                && n.pointer("/metadata/deletionTimestamp").is_some()
            {
                namespace_terminating(state, &n);
            }
            if let Some((group, plural)) = e.table.split_once('/')
                && !group.is_empty()
                && let Some(crd) = state.store.get(
                    "apiextensions.k8s.io/customresourcedefinitions",
                    "",
                    &format!("{plural}.{group}"),
                )
                && crd.pointer("/metadata/deletionTimestamp").is_some()
            {
                deleting(
                    state,
                    &Arc::from("apiextensions.k8s.io/customresourcedefinitions"),
                    &crd,
                );
            }
        }
        EventType::Added | EventType::Modified => {
            if obj.pointer("/metadata/deletionTimestamp").is_some() {
                deleting(state, &e.table, obj);
            }
            // A dependent created after its owner vanished.
            if e.kind == EventType::Added && !owner_refs(obj).is_empty() {
                check_dependent(state, &e.table, obj, None);
            }
        }
    }
}

/// An owner with this uid is gone: collect or fix its dependents.
fn owner_gone(state: &ClusterState, uid: &str) {
    for (table, key) in state.store.dependents(uid) {
        if let Some(dep) = state.store.get(&table, &key.0, &key.1) {
            check_dependent(state, &table, &dep, Some(uid));
        }
    }
}

fn check_dependent(state: &ClusterState, table: &Arc<str>, dep: &Value, gone: Option<&str>) {
    let refs = owner_refs(dep);
    let alive: Vec<&Value> = refs
        .iter()
        .filter(|r| Some(r["uid"].as_str().unwrap_or_default()) != gone && owner_alive(state, dep, r))
        .collect();
    let Some(rt) = rt_for(state, table) else { return };
    let ns = meta_str(dep, "namespace").unwrap_or_default().to_owned();
    let name = meta_str(dep, "name").unwrap_or_default().to_owned();
    if alive.is_empty() {
        let _ = state.delete(
            &rt,
            &ns,
            &name,
            &DeleteOpts {
                propagation: Some("Background".into()),
                ..DeleteOpts::default()
            },
        );
    } else if alive.len() < refs.len() {
        let keep: Vec<String> = alive
            .iter()
            .filter_map(|r| r["uid"].as_str().map(str::to_owned))
            .collect();
        remove_owner_refs(state, &rt, &ns, &name, &|uid| !keep.iter().any(|k| k == uid));
    }
}

fn remove_owner_refs(
    state: &ClusterState,
    rt: &Arc<ResourceType>,
    ns: &str,
    name: &str,
    drop: &dyn Fn(&str) -> bool,
) {
    let mut f = |cur: &Arc<Value>| {
        let mut o = (**cur).clone();
        let refs: Vec<Value> = owner_refs(&o)
            .into_iter()
            .filter(|r| !drop(r["uid"].as_str().unwrap_or_default()))
            .collect();
        o["metadata"]["ownerReferences"] = json!(refs);
        Ok(o)
    };
    let _ = state.update_with(rt, ns, name, &WriteOpts::internal(MANAGER), false, &mut f);
}

fn remove_finalizer(state: &ClusterState, rt: &Arc<ResourceType>, obj: &Value, finalizer: &str) {
    let ns = meta_str(obj, "namespace").unwrap_or_default().to_owned();
    let name = meta_str(obj, "name").unwrap_or_default().to_owned();
    let mut f = |cur: &Arc<Value>| {
        let mut o = (**cur).clone();
        let fins: Vec<String> = meta::finalizers(&o)
            .into_iter()
            .filter(|f| f != finalizer)
            .collect();
        o["metadata"]["finalizers"] = json!(fins);
        Ok(o)
    };
    let _ = state.update_with(rt, &ns, &name, &WriteOpts::internal(MANAGER), false, &mut f);
}

/// Dependents that still reference `uid` and exist.
fn live_dependents(state: &ClusterState, uid: &str) -> Vec<(Arc<str>, Arc<Value>)> {
    state
        .store
        .dependents(uid)
        .into_iter()
        .filter_map(|(t, k)| state.store.get(&t, &k.0, &k.1).map(|o| (t, o)))
        .collect()
}

/// An object with a deletionTimestamp: run the finalizers the server owns.
fn deleting(state: &ClusterState, table: &Arc<str>, obj: &Value) {
    let Some(rt) = rt_for(state, table) else { return };
    let fins = meta::finalizers(obj);
    let uid = meta_str(obj, "uid").unwrap_or_default().to_owned();
    if fins.iter().any(|f| f == "orphan") {
        for (t, dep) in live_dependents(state, &uid) {
            if let Some(drt) = rt_for(state, &t) {
                let ns = meta_str(&dep, "namespace").unwrap_or_default().to_owned();
                let name = meta_str(&dep, "name").unwrap_or_default().to_owned();
                remove_owner_refs(state, &drt, &ns, &name, &|u| u == uid);
            }
        }
        remove_finalizer(state, &rt, obj, "orphan");
        return;
    }
    if fins.iter().any(|f| f == "foregroundDeletion") {
        let deps = live_dependents(state, &uid);
        let mut blocking = 0;
        for (t, dep) in &deps {
            let blocks = owner_refs(dep).iter().any(|r| {
                r["uid"].as_str() == Some(uid.as_str()) && r["blockOwnerDeletion"].as_bool() == Some(true)
            });
            if blocks {
                blocking += 1;
            }
            if dep.pointer("/metadata/deletionTimestamp").is_none()
                && let Some(drt) = rt_for(state, t)
            {
                let ns = meta_str(dep, "namespace").unwrap_or_default().to_owned();
                let name = meta_str(dep, "name").unwrap_or_default().to_owned();
                let _ = state.delete(
                    &drt,
                    &ns,
                    &name,
                    &DeleteOpts {
                        propagation: Some("Foreground".into()),
                        ..DeleteOpts::default()
                    },
                );
            }
        }
        if blocking == 0 {
            remove_finalizer(state, &rt, obj, "foregroundDeletion");
        }
        return;
    }
    match rt.special {
        Special::Namespace => namespace_terminating(state, obj),
        Special::Crd if fins.iter().any(|f| f == super::crd::CLEANUP_FINALIZER) => {
            let group = obj
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let plural = obj
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let table = format!("{group}/{plural}");
            let (items, _) = state.store.list(&table, None, None);
            if items.is_empty() {
                remove_finalizer(state, &rt, obj, super::crd::CLEANUP_FINALIZER);
                return;
            }
            if let Some(crt) = rt_for(state, &table) {
                for item in items {
                    if item.pointer("/metadata/deletionTimestamp").is_none() {
                        let ns = meta_str(&item, "namespace").unwrap_or_default().to_owned();
                        let name = meta_str(&item, "name").unwrap_or_default().to_owned();
                        let _ = state.delete(&crt, &ns, &name, &DeleteOpts::default());
                    }
                }
            }
        }
        _ => {}
    }
}

fn namespace_terminating(state: &ClusterState, ns_obj: &Value) {
    let name = meta_str(ns_obj, "name").unwrap_or_default().to_owned();
    let keys = state.store.keys_in_namespace(&name);
    if keys.is_empty() {
        let reg_rt = rt_for(state, "/namespaces");
        if let Some(rt) = reg_rt {
            let _ = state.finalize_namespace(
                &rt,
                &name,
                json!([]),
                &WriteOpts::internal("namespace-controller"),
            );
        }
        return;
    }
    for (table, (ns, n)) in keys {
        let Some(obj) = state.store.get(&table, &ns, &n) else {
            continue;
        };
        if obj.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        if let Some(rt) = rt_for(state, &table) {
            let _ = state.delete(
                &rt,
                &ns,
                &n,
                &DeleteOpts {
                    propagation: Some("Background".into()),
                    ..DeleteOpts::default()
                },
            );
        }
    }
}

/// Full pass after the event log was compacted past the collector's position.
fn sweep(state: &ClusterState) {
    for (table, obj) in state.store.all_objects() {
        if obj.pointer("/metadata/deletionTimestamp").is_some() {
            deleting(state, &table, &obj);
        } else if !owner_refs(&obj).is_empty() {
            check_dependent(state, &table, &obj, None);
        }
    }
}
