//! The object store of one cluster: objects as shared JSON values in ordered maps, one global
//! resourceVersion counter, a bounded event log for watch resumption, and owner/uid indexes for the
//! garbage collector.
//!
//! Writes are optimistic: callers read a snapshot (an `Arc`), compute the new object without any
//! lock held, then [`Store::commit`] checks that the object is still the one they read (pointer
//! equality) and either stores it or asks them to retry.  The lock is a `std::sync::Mutex`, never
//! held across an `.await`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

/// `(namespace, name)`; the namespace is `""` for cluster-scoped objects.
pub type ObjKey = (String, String);

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as retained in the event log.
#[derive(Debug, Clone)]
pub struct Event {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// Type of change.
    pub kind: EventType,
    /// Storage table.
    pub table: Arc<str>,
    /// The object after the change (for deletes: the last state, with the deletion RV).
    pub object: Arc<Value>,
    /// The object before the change (for selector transitions in watches).
    pub prev: Option<Arc<Value>>,
}

impl Event {
    /// Namespace of the object.
    pub fn namespace(&self) -> &str {
        self.object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// Why a commit did not happen.
#[derive(Debug, PartialEq, Eq)]
pub enum CommitError {
    /// The object changed since it was read: re-read and retry.
    Changed,
}

/// The current state of one stored object, as seen at commit time.
#[derive(Debug)]
pub struct Committed {
    /// The stored object (with its new resourceVersion), or the deleted object's last state.
    pub object: Arc<Value>,
    /// The resourceVersion of the write.
    pub rv: u64,
}

#[derive(Debug, Default)]
struct Inner {
    rv: u64,
    tables: HashMap<Arc<str>, BTreeMap<ObjKey, Arc<Value>>>,
    log: VecDeque<Event>,
    /// Every event with `rv <= compacted` has been dropped from the log.
    compacted: u64,
    /// uid → where the object lives.
    uids: HashMap<String, (Arc<str>, ObjKey)>,
    /// owner uid → dependents.
    dependents: HashMap<String, BTreeSet<(Arc<str>, ObjKey)>>,
}

/// The object store of one cluster.
#[derive(Debug)]
pub struct Store {
    inner: Mutex<Inner>,
    log_capacity: usize,
    notify: tokio::sync::watch::Sender<u64>,
}

fn uid_of(v: &Value) -> Option<&str> {
    v.pointer("/metadata/uid").and_then(Value::as_str)
}

fn owner_uids(v: &Value) -> Vec<String> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|o| o["uid"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Sets `metadata.resourceVersion`.
pub fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".to_owned(), Value::String(rv.to_string()));
    }
}

impl Store {
    /// An empty store whose event log keeps `log_capacity` events.
    pub fn new(log_capacity: usize) -> Store {
        let (notify, _) = tokio::sync::watch::channel(0);
        Store {
            inner: Mutex::new(Inner::default()),
            log_capacity: log_capacity.max(1),
            notify,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every mutation is completed
        // before any fallible step), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current global resourceVersion.
    pub fn rv(&self) -> u64 {
        self.lock().rv
    }

    /// Subscribes to "the resourceVersion moved" notifications.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// One object.
    pub fn get(&self, table: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        let inner = self.lock();
        inner
            .tables
            .get(table)?
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Where the object with this uid lives, if it exists.
    pub fn by_uid(&self, uid: &str) -> Option<(Arc<str>, ObjKey)> {
        self.lock().uids.get(uid).cloned()
    }

    /// The dependents of an owner uid.
    pub fn dependents(&self, owner_uid: &str) -> Vec<(Arc<str>, ObjKey)> {
        self.lock()
            .dependents
            .get(owner_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The objects of a table (of one namespace if given), in `(namespace, name)` order, starting
    /// after `after` if given, with the RV of the snapshot.
    pub fn list(&self, table: &str, ns: Option<&str>, after: Option<&ObjKey>) -> (Vec<Arc<Value>>, u64) {
        let inner = self.lock();
        let Some(t) = inner.tables.get(table) else {
            return (Vec::new(), inner.rv);
        };
        let items: Vec<Arc<Value>> = match (ns, after) {
            (Some(ns), after) => {
                let start = match after {
                    Some(k) if k.0.as_str() == ns => std::ops::Bound::Excluded(k.clone()),
                    _ => std::ops::Bound::Included((ns.to_owned(), String::new())),
                };
                t.range((start, std::ops::Bound::Unbounded))
                    .take_while(|(k, _)| k.0 == ns)
                    .map(|(_, v)| v.clone())
                    .collect()
            }
            (None, Some(k)) => t
                .range((std::ops::Bound::Excluded(k.clone()), std::ops::Bound::Unbounded))
                .map(|(_, v)| v.clone())
                .collect(),
            (None, None) => t.values().cloned().collect(),
        };
        (items, inner.rv)
    }

    /// Number of objects of a table in a namespace (for namespace deletion).
    pub fn count_in_namespace(&self, ns: &str) -> usize {
        let inner = self.lock();
        inner
            .tables
            .values()
            .map(|t| {
                t.range((ns.to_owned(), String::new())..)
                    .take_while(|(k, _)| k.0 == ns)
                    .count()
            })
            .sum()
    }

    /// Every `(table, key)` in a namespace.
    pub fn keys_in_namespace(&self, ns: &str) -> Vec<(Arc<str>, ObjKey)> {
        let inner = self.lock();
        let mut out = Vec::new();
        for (table, t) in &inner.tables {
            for (k, _) in t
                .range((ns.to_owned(), String::new())..)
                .take_while(|(k, _)| k.0 == ns)
            {
                out.push((table.clone(), k.clone()));
            }
        }
        out
    }

    /// Stores `new` (or deletes when `None`) if the object is still `expected` (`None` = must not
    /// exist).  Assigns the next resourceVersion, records the event and wakes watchers.
    pub fn commit(
        &self,
        table: &Arc<str>,
        key: &ObjKey,
        expected: Option<&Arc<Value>>,
        new: Option<Value>,
    ) -> Result<Committed, CommitError> {
        let mut inner = self.lock();
        let current = inner.tables.get(table).and_then(|t| t.get(key)).cloned();
        match (&current, expected) {
            (None, None) => {}
            (Some(c), Some(e)) if Arc::ptr_eq(c, e) => {}
            _ => return Err(CommitError::Changed),
        }
        let rv = inner.rv + 1;
        inner.rv = rv;
        let (kind, object) = match new {
            Some(mut obj) => {
                set_rv(&mut obj, rv);
                let obj = Arc::new(obj);
                inner
                    .tables
                    .entry(table.clone())
                    .or_default()
                    .insert(key.clone(), obj.clone());
                (
                    if current.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    },
                    obj,
                )
            }
            None => {
                let Some(old) = &current else {
                    return Err(CommitError::Changed);
                };
                let mut last = (**old).clone();
                set_rv(&mut last, rv);
                if let Some(t) = inner.tables.get_mut(table) {
                    t.remove(key);
                }
                (EventType::Deleted, Arc::new(last))
            }
        };
        // Indexes.
        if let Some(old) = &current {
            if let Some(uid) = uid_of(old)
                && kind == EventType::Deleted
            {
                inner.uids.remove(uid);
            }
            for owner in owner_uids(old) {
                if let Some(s) = inner.dependents.get_mut(&owner) {
                    s.remove(&(table.clone(), key.clone()));
                    if s.is_empty() {
                        inner.dependents.remove(&owner);
                    }
                }
            }
        }
        if kind != EventType::Deleted {
            if let Some(uid) = uid_of(&object) {
                inner.uids.insert(uid.to_owned(), (table.clone(), key.clone()));
            }
            for owner in owner_uids(&object) {
                inner
                    .dependents
                    .entry(owner)
                    .or_default()
                    .insert((table.clone(), key.clone()));
            }
        }
        inner.log.push_back(Event {
            rv,
            kind,
            table: table.clone(),
            object: object.clone(),
            prev: current,
        });
        while inner.log.len() > self.log_capacity {
            if let Some(e) = inner.log.pop_front() {
                inner.compacted = e.rv;
            }
        }
        drop(inner);
        self.notify.send_replace(rv);
        Ok(Committed { object, rv })
    }

    /// Events of `table` (optionally one namespace) with `rv > after`, or `Err(oldest)` when some
    /// of them are no longer retained.
    pub fn events_after(&self, table: &str, ns: Option<&str>, after: u64) -> Result<Vec<Event>, u64> {
        let inner = self.lock();
        if after < inner.compacted {
            return Err(inner.compacted + 1);
        }
        let start = inner.log.partition_point(|e| e.rv <= after);
        Ok(inner
            .log
            .range(start..)
            .filter(|e| &*e.table == table && ns.is_none_or(|n| e.namespace() == n))
            .cloned()
            .collect())
    }

    /// Every event with `rv > after`, or `Err(oldest)` when some are no longer retained.
    pub fn all_events_after(&self, after: u64) -> Result<Vec<Event>, u64> {
        let inner = self.lock();
        if after < inner.compacted {
            return Err(inner.compacted + 1);
        }
        let start = inner.log.partition_point(|e| e.rv <= after);
        Ok(inner.log.range(start..).cloned().collect())
    }

    /// Every stored object of every table (for a full garbage-collection sweep).
    pub fn all_objects(&self) -> Vec<(Arc<str>, Arc<Value>)> {
        let inner = self.lock();
        inner
            .tables
            .iter()
            .flat_map(|(t, m)| m.values().map(move |v| (t.clone(), v.clone())))
            .collect()
    }

    /// The oldest resourceVersion a watch can resume from.
    pub fn oldest_resumable(&self) -> u64 {
        self.lock().compacted
    }

    /// Drops the whole event history (the compact hook): every resume from an older RV gets 410.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.log.clear();
        // Move past the current RV so that even a watcher that has seen everything must relist.
        inner.rv += 1;
        inner.compacted = inner.rv;
        let rv = inner.rv;
        drop(inner);
        self.notify.send_replace(rv);
    }

    /// Every object, grouped by table (the dump hook).
    pub fn dump(&self) -> BTreeMap<String, Vec<Arc<Value>>> {
        let inner = self.lock();
        inner
            .tables
            .iter()
            .filter(|(_, t)| !t.is_empty())
            .map(|(k, t)| (k.to_string(), t.values().cloned().collect()))
            .collect()
    }

    /// Removes every object and the history, keeping the resourceVersion counter increasing.
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.tables.clear();
        inner.uids.clear();
        inner.dependents.clear();
        inner.log.clear();
        inner.rv += 1;
        inner.compacted = inner.rv;
        let rv = inner.rv;
        drop(inner);
        self.notify.send_replace(rv);
    }

    /// Total number of stored objects.
    pub fn len(&self) -> usize {
        self.lock().tables.values().map(BTreeMap::len).sum()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "d", "uid": format!("u-{name}")}})
    }

    #[test]
    fn commits_assign_increasing_rvs_and_log_events() {
        let s = Store::new(10);
        let t: Arc<str> = Arc::from("/configmaps");
        let a = s
            .commit(&t, &("d".into(), "a".into()), None, Some(obj("a")))
            .expect("a");
        let b = s
            .commit(&t, &("d".into(), "b".into()), None, Some(obj("b")))
            .expect("b");
        assert!(b.rv > a.rv);
        assert_eq!(a.object["metadata"]["resourceVersion"], "1");
        let evs = s.events_after("/configmaps", None, 0).expect("retained");
        assert_eq!(evs.len(), 2);
        assert!(
            s.commit(&t, &("d".into(), "a".into()), None, Some(obj("a")))
                .is_err(),
            "create of existing"
        );
        let stale = s.commit(&t, &("d".into(), "a".into()), Some(&b.object), None);
        assert_eq!(stale.err(), Some(CommitError::Changed));
    }

    #[test]
    fn compaction_makes_old_rvs_too_old() {
        let s = Store::new(2);
        let t: Arc<str> = Arc::from("/configmaps");
        for n in ["a", "b", "c"] {
            s.commit(&t, &("d".into(), n.into()), None, Some(obj(n)))
                .expect("commit");
        }
        assert_eq!(s.events_after("/configmaps", None, 0).err(), Some(2));
        assert_eq!(s.events_after("/configmaps", None, 1).map(|e| e.len()), Ok(2));
        s.compact();
        assert!(s.events_after("/configmaps", None, 3).is_err());
        assert_eq!(s.events_after("/configmaps", None, 4).map(|e| e.len()), Ok(0));
    }

    #[test]
    fn owner_index_follows_writes() {
        let s = Store::new(10);
        let t: Arc<str> = Arc::from("/pods");
        let mut p = obj("p");
        p["metadata"]["ownerReferences"] =
            json!([{"uid": "owner-1", "name": "o", "kind": "X", "apiVersion": "v1"}]);
        let c = s.commit(&t, &("d".into(), "p".into()), None, Some(p)).expect("p");
        assert_eq!(s.dependents("owner-1").len(), 1);
        s.commit(&t, &("d".into(), "p".into()), Some(&c.object), None)
            .expect("delete");
        assert!(s.dependents("owner-1").is_empty());
        assert!(s.by_uid("u-p").is_none());
    }
}
