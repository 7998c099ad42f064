//! The control plane's shared informers: one watch per resource kind feeding an in-memory cache
//! with owner and custom indexes, and change handlers that enqueue work; plus the work queue the
//! controllers drain.
//!
//! ```text
//!  API watch ──► Informer<K> ──► Cache<K> (objects, by uid, by controller owner, by index key)
//!                      └──────► handlers(old, new) ──► WorkQueue (dedup, delays) ──► reconcile
//! ```
//!
//! Writers put the objects they get back into the cache at once ("write-through"), and the cache
//! ignores watch events older than what it holds, so a controller never acts twice on a change
//! it made itself (upstream uses "expectations" for this). A uid once deleted never comes back
//! (uids are never reused), so a write-through that lands after the object's DELETED event cannot
//! resurrect it: such a ghost pod would hold its node's room forever.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

/// The key of an object.
pub fn key_of<K: Resource>(obj: &K) -> Key {
    (
        obj.meta().namespace.clone().unwrap_or_default(),
        obj.meta().name.clone().unwrap_or_default(),
    )
}

fn rv_number<K: Resource>(obj: &K) -> Option<u64> {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
}

type Handler<K> = Box<dyn Fn(Option<&K>, Option<&K>) + Send + Sync>;

struct Inner<K> {
    objects: HashMap<Key, Arc<K>>,
    by_uid: HashMap<String, Key>,
    by_owner: HashMap<String, BTreeSet<Key>>,
    by_index: HashMap<String, BTreeSet<Key>>,
    /// Uids deleted (their DELETED event, or a controller's delete), whose late writes and
    /// events are ignored; the oldest are forgotten beyond [`GONE_REMEMBERED`].
    gone: HashSet<String>,
    gone_order: VecDeque<String>,
}

/// How many deleted uids a cache remembers. A write-through answer or late event arrives within
/// moments of the delete; this is far more deletes than happen in that time.
const GONE_REMEMBERED: usize = 65_536;

impl<K> Inner<K> {
    fn bury(&mut self, uid: &str) {
        if self.gone.insert(uid.to_owned()) {
            self.gone_order.push_back(uid.to_owned());
            while self.gone_order.len() > GONE_REMEMBERED {
                if let Some(old) = self.gone_order.pop_front() {
                    self.gone.remove(&old);
                }
            }
        }
    }
}

/// An indexed in-memory copy of one kind of object.
pub struct Cache<K> {
    inner: RwLock<Inner<K>>,
    index: Option<fn(&K) -> Option<String>>,
    handlers: RwLock<Vec<Handler<K>>>,
    synced: watch::Sender<bool>,
}

impl<K> Debug for Cache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("len", &self.inner.read().map(|i| i.objects.len()).unwrap_or(0))
            .finish()
    }
}

impl<K: Resource + Clone + Send + Sync + 'static> Cache<K> {
    /// An empty cache; `index` names a secondary key (e.g. a pod's node).
    pub fn new(index: Option<fn(&K) -> Option<String>>) -> Arc<Self> {
        Arc::new(Cache {
            inner: RwLock::new(Inner {
                objects: HashMap::new(),
                by_uid: HashMap::new(),
                by_owner: HashMap::new(),
                by_index: HashMap::new(),
                gone: HashSet::new(),
                gone_order: VecDeque::new(),
            }),
            index,
            handlers: RwLock::new(Vec::new()),
            synced: watch::Sender::new(false),
        })
    }

    /// Registers a change handler, called with `(old, new)` after the cache changed.
    pub fn on_change(&self, f: impl Fn(Option<&K>, Option<&K>) + Send + Sync + 'static) {
        if let Ok(mut h) = self.handlers.write() {
            h.push(Box::new(f));
        }
    }

    /// Drops the handlers (at shutdown: they hold other caches, and would keep them alive).
    pub fn clear_handlers(&self) {
        if let Ok(mut h) = self.handlers.write() {
            h.clear();
        }
    }

    fn notify(&self, old: Option<&K>, new: Option<&K>) {
        if let Ok(handlers) = self.handlers.read() {
            for h in handlers.iter() {
                h(old, new);
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner<K>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn unlink(&self, inner: &mut Inner<K>, key: &Key, obj: &K) {
        if let Some(uid) = obj.meta().uid.as_ref() {
            inner.by_uid.remove(uid);
        }
        for owner in obj
            .owner_references()
            .iter()
            .filter(|o| o.controller == Some(true))
        {
            if let Some(set) = inner.by_owner.get_mut(&owner.uid) {
                set.remove(key);
                if set.is_empty() {
                    inner.by_owner.remove(&owner.uid);
                }
            }
        }
        if let Some(ix) = self.index.and_then(|f| f(obj))
            && let Some(set) = inner.by_index.get_mut(&ix)
        {
            set.remove(key);
            if set.is_empty() {
                inner.by_index.remove(&ix);
            }
        }
    }

    fn link(&self, inner: &mut Inner<K>, key: &Key, obj: &K) {
        if let Some(uid) = obj.meta().uid.as_ref() {
            inner.by_uid.insert(uid.clone(), key.clone());
        }
        for owner in obj
            .owner_references()
            .iter()
            .filter(|o| o.controller == Some(true))
        {
            inner
                .by_owner
                .entry(owner.uid.clone())
                .or_default()
                .insert(key.clone());
        }
        if let Some(ix) = self.index.and_then(|f| f(obj)) {
            inner.by_index.entry(ix).or_default().insert(key.clone());
        }
    }

    /// Stores an object unless the cache already holds a newer version (or a controller deleted
    /// it); runs the handlers when it changed.
    pub fn apply(&self, obj: K) {
        let key = key_of(&obj);
        let obj = Arc::new(obj);
        let old = {
            let mut inner = self.write();
            if obj.meta().uid.as_ref().is_some_and(|u| inner.gone.contains(u)) {
                return;
            }
            if let Some(cur) = inner.objects.get(&key) {
                let same_uid = cur.meta().uid == obj.meta().uid;
                if same_uid
                    && let (Some(a), Some(b)) = (rv_number(cur.as_ref()), rv_number(obj.as_ref()))
                    && b <= a
                {
                    return;
                }
            }
            let old = inner.objects.insert(key.clone(), obj.clone());
            if let Some(old) = &old {
                self.unlink(&mut inner, &key, old);
            }
            self.link(&mut inner, &key, &obj);
            old
        };
        self.notify(old.as_deref(), Some(&obj));
    }

    /// Removes an object (its DELETED event, or a controller's delete).
    pub fn remove(&self, obj: &K) {
        let key = key_of(obj);
        let old = {
            let mut inner = self.write();
            if let Some(uid) = obj.meta().uid.as_ref() {
                inner.bury(uid);
            }
            match inner.objects.get(&key) {
                Some(cur) if cur.meta().uid == obj.meta().uid || obj.meta().uid.is_none() => {}
                _ => return,
            }
            let old = inner.objects.remove(&key);
            if let Some(old) = &old {
                self.unlink(&mut inner, &key, old);
            }
            old
        };
        if let Some(old) = old {
            self.notify(Some(&old), None);
        }
    }

    /// Forgets an object a controller deleted, ignoring its late watch events until its DELETED.
    pub fn forget(&self, key: &Key, uid: &str) {
        let old = {
            let mut inner = self.write();
            inner.bury(uid);
            match inner.objects.get(key) {
                Some(cur) if cur.meta().uid.as_deref() == Some(uid) => {}
                _ => return,
            }
            let old = inner.objects.remove(key);
            if let Some(old) = &old {
                self.unlink(&mut inner, key, old);
            }
            old
        };
        if let Some(old) = old {
            self.notify(Some(&old), None);
        }
    }

    /// Replaces everything (after a relist), notifying about the differences.
    fn replace_all(&self, objects: Vec<K>) {
        let fresh: HashMap<Key, Arc<K>> = objects.into_iter().map(|o| (key_of(&o), Arc::new(o))).collect();
        let (removed, changed) = {
            let mut inner = self.write();
            let old = std::mem::take(&mut inner.objects);
            inner.by_uid.clear();
            inner.by_owner.clear();
            inner.by_index.clear();
            // What the list holds exists, whatever a controller deleted before.
            let listed: HashSet<&str> = fresh.values().filter_map(|o| o.meta().uid.as_deref()).collect();
            inner.gone.retain(|u| !listed.contains(u.as_str()));
            inner.gone_order.retain(|u| !listed.contains(u.as_str()));
            for (k, o) in &fresh {
                self.link(&mut inner, k, o);
            }
            inner.objects = fresh.clone();
            let removed: Vec<Arc<K>> = old
                .iter()
                .filter(|(k, _)| !fresh.contains_key(*k))
                .map(|(_, o)| o.clone())
                .collect();
            let changed: Vec<(Option<Arc<K>>, Arc<K>)> = fresh
                .iter()
                .filter(|(k, o)| {
                    old.get(*k)
                        .is_none_or(|p| p.meta().resource_version != o.meta().resource_version)
                })
                .map(|(k, o)| (old.get(k).cloned(), o.clone()))
                .collect();
            (removed, changed)
        };
        for o in removed {
            self.notify(Some(&o), None);
        }
        for (old, new) in changed {
            self.notify(old.as_deref(), Some(&new));
        }
    }

    /// One object.
    pub fn get(&self, key: &Key) -> Option<Arc<K>> {
        self.read().objects.get(key).cloned()
    }

    /// One object by name (cluster-scoped kinds).
    pub fn get_named(&self, name: &str) -> Option<Arc<K>> {
        self.get(&(String::new(), name.to_owned()))
    }

    /// One object by uid.
    pub fn get_uid(&self, uid: &str) -> Option<Arc<K>> {
        let inner = self.read();
        inner.by_uid.get(uid).and_then(|k| inner.objects.get(k)).cloned()
    }

    /// Every object.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().objects.values().cloned().collect()
    }

    /// Objects in a namespace matching a predicate.
    pub fn filter(&self, f: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
        self.read().objects.values().filter(|o| f(o)).cloned().collect()
    }

    /// The objects whose controller owner has this uid.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<K>> {
        let inner = self.read();
        inner
            .by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|k| inner.objects.get(k).cloned())
            .collect()
    }

    /// The objects with this secondary index key.
    pub fn indexed(&self, ix: &str) -> Vec<Arc<K>> {
        let inner = self.read();
        inner
            .by_index
            .get(ix)
            .into_iter()
            .flatten()
            .filter_map(|k| inner.objects.get(k).cloned())
            .collect()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the first list has been loaded.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits for the first list.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// Keeps `cache` in sync with the API until `shutdown`.
pub async fn run_informer<K>(api: Api<K>, cache: Arc<Cache<K>>, shutdown: CancellationToken)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    run_informer_inner(api, &cache, shutdown).await;
    cache.clear_handlers();
}

async fn run_informer_inner<K>(api: Api<K>, cache: &Cache<K>, shutdown: CancellationToken)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let stream = watcher(api, watcher::Config::default());
    let mut stream = std::pin::pin!(stream);
    let mut buffer: Vec<K> = Vec::new();
    let mut backoff = Duration::from_millis(100);
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = stream.next() => next,
        };
        match next {
            None => return,
            Some(Ok(event)) => {
                backoff = Duration::from_millis(100);
                match event {
                    watcher::Event::Apply(o) => cache.apply(o),
                    watcher::Event::Delete(o) => cache.remove(&o),
                    watcher::Event::Init => buffer.clear(),
                    watcher::Event::InitApply(o) => buffer.push(o),
                    watcher::Event::InitDone => {
                        cache.replace_all(std::mem::take(&mut buffer));
                        cache.synced.send_replace(true);
                    }
                }
            }
            Some(Err(e)) => {
                tracing::debug!(kind = std::any::type_name::<K>(), error = %e, "watch failed; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

struct QueueState<T> {
    ready: std::collections::VecDeque<T>,
    queued: HashSet<T>,
    running: HashSet<T>,
    /// Keys re-added while running: queued again when they finish.
    again: HashSet<T>,
    delayed: BTreeMap<Instant, Vec<T>>,
    failures: HashMap<T, u32>,
}

/// A deduplicating work queue with delayed adds; a key is never handed out twice at once.
pub struct WorkQueue<T> {
    state: Mutex<QueueState<T>>,
    notify: Notify,
}

impl<T> Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue").finish_non_exhaustive()
    }
}

impl<T: Clone + Eq + Hash + Send + 'static> WorkQueue<T> {
    /// An empty queue.
    pub fn new() -> Arc<Self> {
        Arc::new(WorkQueue {
            state: Mutex::new(QueueState {
                ready: Default::default(),
                queued: HashSet::new(),
                running: HashSet::new(),
                again: HashSet::new(),
                delayed: BTreeMap::new(),
                failures: HashMap::new(),
            }),
            notify: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a key now.
    pub fn add(&self, key: T) {
        let mut s = self.lock();
        if s.running.contains(&key) {
            s.again.insert(key);
            return;
        }
        if s.queued.insert(key.clone()) {
            s.ready.push_back(key);
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Adds a key after a delay.
    pub fn add_after(&self, key: T, after: Duration) {
        if after.is_zero() {
            return self.add(key);
        }
        let at = Instant::now() + after;
        let mut s = self.lock();
        let first = s.delayed.keys().next().is_none_or(|k| at < *k);
        s.delayed.entry(at).or_default().push(key);
        drop(s);
        if first {
            self.notify.notify_one();
        }
    }

    fn promote(&self, s: &mut QueueState<T>) -> Option<Instant> {
        let now = Instant::now();
        while let Some((&at, _)) = s.delayed.iter().next() {
            if at > now {
                return Some(at);
            }
            for key in s.delayed.remove(&at).unwrap_or_default() {
                if s.running.contains(&key) {
                    s.again.insert(key);
                } else if s.queued.insert(key.clone()) {
                    s.ready.push_back(key);
                }
            }
        }
        None
    }

    /// Waits for the next key (or `None` on shutdown).
    pub async fn next(&self, shutdown: &CancellationToken) -> Option<T> {
        loop {
            let wake = {
                let mut s = self.lock();
                let wake = self.promote(&mut s);
                if let Some(key) = s.ready.pop_front() {
                    s.queued.remove(&key);
                    s.running.insert(key.clone());
                    return Some(key);
                }
                wake
            };
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return None,
                _ = self.notify.notified() => {}
                _ = sleep => {}
            }
        }
    }

    /// Marks a key done; `requeue` schedules it again; `failed` backs off exponentially.
    pub fn done(&self, key: T, requeue: Option<Duration>, failed: bool) {
        let retry = {
            let mut s = self.lock();
            s.running.remove(&key);
            let retry = if failed {
                let n = s.failures.entry(key.clone()).or_insert(0);
                *n = (*n + 1).min(10);
                Some(Duration::from_millis(50u64 << *n).min(Duration::from_secs(30)))
            } else {
                s.failures.remove(&key);
                None
            };
            if s.again.remove(&key) && s.queued.insert(key.clone()) {
                s.ready.push_back(key.clone());
                drop(s);
                self.notify.notify_one();
            }
            retry
        };
        if let Some(after) = retry.or(requeue) {
            self.add_after(key, after);
        }
    }
}

/// Runs `reconcile` over the queue's keys with up to `concurrency` at once, until `shutdown`.
pub async fn run_queue<T, F, Fut>(
    queue: Arc<WorkQueue<T>>,
    concurrency: usize,
    shutdown: CancellationToken,
    reconcile: F,
) where
    T: Clone + Eq + Hash + Send + Sync + Debug + 'static,
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<Option<Duration>, kube::Error>>,
{
    let mut running = futures::stream::FuturesUnordered::new();
    loop {
        tokio::select! {
            next = queue.next(&shutdown), if running.len() < concurrency => {
                let Some(key) = next else { break };
                let fut = reconcile(key.clone());
                running.push(async move { (key, fut.await) });
            }
            Some((key, result)) = running.next(), if !running.is_empty() => {
                match result {
                    Ok(requeue) => queue.done(key, requeue, false),
                    Err(e) => {
                        tracing::debug!(key = ?key, error = %e, "reconcile failed; retrying");
                        queue.done(key, None, true);
                    }
                }
            }
            _ = shutdown.cancelled() => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::Pod;

    fn pod(name: &str, uid: &str, rv: &str, node: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some(uid.into());
        p.metadata.resource_version = Some(rv.into());
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: node.map(Into::into),
            ..Default::default()
        });
        p
    }

    fn node_of(p: &Pod) -> Option<String> {
        p.spec.as_ref().and_then(|s| s.node_name.clone())
    }

    #[test]
    fn older_events_do_not_overwrite_and_tombstones_hide_late_events() {
        let cache = Cache::<Pod>::new(Some(node_of));
        cache.apply(pod("a", "u1", "5", Some("n1")));
        cache.apply(pod("a", "u1", "4", None));
        assert_eq!(cache.indexed("n1").len(), 1, "stale event ignored");
        cache.apply(pod("a", "u1", "6", Some("n2")));
        assert!(cache.indexed("n1").is_empty());
        assert_eq!(cache.indexed("n2").len(), 1);
        cache.forget(&("default".into(), "a".into()), "u1");
        cache.apply(pod("a", "u1", "7", Some("n2")));
        assert!(cache.is_empty(), "late event of a deleted pod is ignored");
        cache.remove(&pod("a", "u1", "8", None));
        cache.apply(pod("a", "u2", "9", None));
        assert_eq!(cache.len(), 1, "a new pod with the same name is accepted");
    }

    #[test]
    fn a_write_that_lands_after_the_deleted_event_does_not_resurrect_the_object() {
        let cache = Cache::<Pod>::new(Some(node_of));
        cache.apply(pod("a", "u1", "5", Some("n1")));
        // The watch delivers DELETED, then a controller's earlier write returns.
        cache.remove(&pod("a", "u1", "6", Some("n1")));
        cache.apply(pod("a", "u1", "5", Some("n1")));
        assert!(
            cache.indexed("n1").is_empty(),
            "expected no pod on n1 after its DELETED event, saw {}",
            cache.indexed("n1").len()
        );
        cache.apply(pod("a", "u2", "7", Some("n1")));
        assert_eq!(
            cache.indexed("n1").len(),
            1,
            "a new pod with the same name is accepted"
        );
    }

    #[tokio::test]
    async fn queue_dedups_and_delays() {
        let q = WorkQueue::<u32>::new();
        let stop = CancellationToken::new();
        q.add(1);
        q.add(1);
        q.add_after(2, Duration::from_millis(20));
        assert_eq!(q.next(&stop).await, Some(1));
        q.add(1); // while running: comes back after done
        let start = Instant::now();
        assert_eq!(q.next(&stop).await, Some(2));
        assert!(start.elapsed() >= Duration::from_millis(15));
        q.done(1, None, false);
        assert_eq!(q.next(&stop).await, Some(1));
    }
}
