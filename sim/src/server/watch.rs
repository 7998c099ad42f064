//! Watch streams: one compact JSON event per line, in resourceVersion order, resumable
//! from the retained event log, with synthetic `ADDED`s, streaming-list bookmarks, server-side
//! timeouts and the in-stream `410 Expired` error that makes kube-rs relist.
//!
//! Each watch is a task that reads the store's event log whenever the global resourceVersion
//! moves (a `tokio::sync::watch` notification) and writes lines into a bounded channel that is the
//! HTTP response body; a slow client therefore only delays its own task.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, header};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::ClusterState;
use super::convert;
use super::error::ApiError;
use super::resources::ResourceType;
use super::rest::{Filter, Format};
use super::store::EventType;
use super::table;

/// What a watch request asked for.
#[derive(Debug, Clone)]
pub struct WatchParams {
    /// `resourceVersion` (`None` or `"0"` = start with the current state).
    pub resource_version: Option<String>,
    /// `sendInitialEvents=true`.
    pub send_initial_events: bool,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// When to close the stream.
    pub timeout: Duration,
    /// Response representation.
    pub format: Format,
    /// Label and field selectors.
    pub filter: Filter,
    /// Namespace, or all.
    pub namespace: Option<String>,
}

/// How often an idle watch with bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

struct Encoder {
    rt: Arc<ResourceType>,
    format: Format,
    headers_sent: bool,
}

impl Encoder {
    fn line(&mut self, type_: &str, obj: &Value) -> Bytes {
        let served = convert::output(&self.rt, obj);
        let object = match self.format {
            Format::Json => served.into_owned(),
            Format::Partial => convert::partial(&served),
            Format::Table(include) => {
                let rv = served
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(Value::Null);
                let row = table::row(&self.rt, &served, include);
                let t = table::table(
                    &self.rt,
                    vec![row],
                    json!({"resourceVersion": rv}),
                    !self.headers_sent,
                );
                self.headers_sent = true;
                t
            }
        };
        let mut s = json!({"type": type_, "object": object}).to_string();
        s.push('\n');
        Bytes::from(s)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let (kind, api_version) = match self.format {
            Format::Partial => ("PartialObjectMetadata".to_owned(), "meta.k8s.io/v1".to_owned()),
            _ => (self.rt.kind.clone(), self.rt.api_version()),
        };
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let mut s = json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": meta}})
            .to_string();
        s.push('\n');
        Bytes::from(s)
    }
}

fn error_line(err: &ApiError) -> Bytes {
    let mut s = json!({"type": "ERROR", "object": err.to_status()}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// Starts a watch and returns the streaming response.
pub fn start(state: Arc<ClusterState>, rt: Arc<ResourceType>, p: WatchParams) -> Response {
    let (tx, mut rx) = mpsc::channel::<Bytes>(256);
    let content_type = match p.format {
        Format::Json => "application/json",
        Format::Partial => "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        Format::Table(_) => "application/json;as=Table;g=meta.k8s.io;v=v1",
    };
    tokio::spawn(run(state, rt, p, tx));
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|o| o.map(Ok::<Bytes, Infallible>)));
    let mut resp = Body::from_stream(stream).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

async fn run(state: Arc<ClusterState>, rt: Arc<ResourceType>, p: WatchParams, tx: mpsc::Sender<Bytes>) {
    let mut notify = state.store.subscribe();
    let drop_token = state.watch_drop_token();
    let shutdown = state.shutdown.clone();
    let deadline = tokio::time::Instant::now() + p.timeout;
    let mut enc = Encoder {
        rt: rt.clone(),
        format: p.format,
        headers_sent: false,
    };
    let ns = p.namespace.as_deref();
    let requested: Option<u64> = match p.resource_version.as_deref() {
        None | Some("") | Some("0") => None,
        Some(s) => match s.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                let _ = tx
                    .send(error_line(&ApiError::bad_request(format!(
                        "invalid resource version: {s}"
                    ))))
                    .await;
                return;
            }
        },
    };
    let mut last: u64;
    if requested.is_none() || p.send_initial_events {
        let (items, rv) = state.store.list(&rt.table, ns, None);
        last = rv;
        for obj in items {
            if p.filter.matches(&rt, &obj) && tx.send(enc.line("ADDED", &obj)).await.is_err() {
                return;
            }
        }
        if p.send_initial_events && p.bookmarks && tx.send(enc.bookmark(rv, true)).await.is_err() {
            return;
        }
    } else {
        let n = requested.unwrap_or(0);
        let current = state.store.rv();
        if n > current {
            // A resourceVersion from the future: wait a little for it, then give up as the API server does.
            let wait_until = tokio::time::Instant::now() + Duration::from_secs(3);
            while state.store.rv() < n {
                if tokio::time::timeout_at(wait_until, notify.changed())
                    .await
                    .is_err()
                {
                    let err = ApiError::timeout(format!(
                        "Too large resource version: {n}, current: {}",
                        state.store.rv()
                    ));
                    let _ = tx.send(error_line(&err)).await;
                    return;
                }
            }
        }
        last = n;
    }
    let mut next_bookmark = tokio::time::Instant::now() + BOOKMARK_INTERVAL;
    loop {
        let current = state.store.rv();
        match state.store.events_after(&rt.table, ns, last) {
            Err(oldest) => {
                let err = ApiError::expired(format!("too old resource version: {last} ({oldest})"));
                let _ = tx.send(error_line(&err)).await;
                return;
            }
            Ok(events) => {
                for e in events {
                    let now_match = p.filter.matches(&rt, &e.object);
                    let was_match = e.prev.as_ref().is_some_and(|o| p.filter.matches(&rt, o));
                    let type_ = match e.kind {
                        EventType::Added => now_match.then_some("ADDED"),
                        EventType::Modified => match (was_match, now_match) {
                            (true, true) => Some("MODIFIED"),
                            (false, true) => Some("ADDED"),
                            (true, false) => Some("DELETED"),
                            (false, false) => None,
                        },
                        EventType::Deleted => (now_match || was_match).then_some("DELETED"),
                    };
                    if let Some(t) = type_
                        && tx.send(enc.line(t, &e.object)).await.is_err()
                    {
                        return;
                    }
                    last = last.max(e.rv);
                }
            }
        }
        last = last.max(current);
        tokio::select! {
            changed = notify.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                if p.bookmarks {
                    let _ = tx.send(enc.bookmark(last, false)).await;
                }
                return;
            }
            _ = tokio::time::sleep_until(next_bookmark) => {
                next_bookmark = tokio::time::Instant::now() + BOOKMARK_INTERVAL;
                if p.bookmarks && tx.send(enc.bookmark(last, false)).await.is_err() {
                    return;
                }
            }
            _ = drop_token.cancelled() => return,
            _ = shutdown.cancelled() => return,
            _ = tx.closed() => return,
        }
    }
}
