//! Core v1 Events written by the simulated controllers (shape of A.11), queued so that recording
//! never blocks a controller.

use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Queues Events for a writer task.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    tx: mpsc::UnboundedSender<Event>,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A reference to an object for `involvedObject`.
pub(crate) fn reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: obj.meta().name.clone(),
        namespace: obj.meta().namespace.clone(),
        uid: obj.meta().uid.clone(),
        resource_version: obj.meta().resource_version.clone(),
        field_path: None,
    }
}

impl Recorder {
    /// Starts the writer task.
    pub(crate) fn start(
        client: kube::Client,
        shutdown: CancellationToken,
    ) -> (Recorder, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel::<Event>();
        let task =
            tokio::spawn(async move {
                let stream = tokio_stream_from(rx);
                let writes = stream
                .map(|ev| {
                    let client = client.clone();
                    async move {
                        let ns = ev.metadata.namespace.clone().unwrap_or_else(|| "default".into());
                        let manager = ev.reporting_component.clone().unwrap_or_default();
                        let api: Api<Event> = Api::namespaced(client, &ns);
                        let pp = PostParams { field_manager: Some(manager), ..Default::default() };
                        if let Err(e) = api.create(&pp, &ev).await {
                            tracing::debug!(event = %ev.name_any(), error = %e, "recording an event failed");
                        }
                    }
                })
                .buffer_unordered(16);
                let mut writes = std::pin::pin!(writes);
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        next = writes.next() => if next.is_none() { return },
                    }
                }
            });
        (Recorder { tx }, task)
    }

    /// Records an event about `object` from `component` (also the field manager).
    pub(crate) fn record(
        &self,
        object: ObjectReference,
        type_: &str,
        reason: &str,
        message: String,
        component: &str,
    ) {
        let now = jiff::Timestamp::now();
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let nanos = now.as_nanosecond() as u64;
        let name = format!(
            "{}.{:x}",
            object.name.clone().unwrap_or_default(),
            nanos.wrapping_add(seq)
        );
        // Events about cluster-scoped objects (nodes) live in `default`, as upstream.
        let namespace = object
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let ts = Time(jiff::Timestamp::from_second(now.as_second()).unwrap_or(now));
        let ev = Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace),
                ..Default::default()
            },
            involved_object: object,
            reason: Some(reason.into()),
            message: Some(message),
            type_: Some(type_.into()),
            count: Some(1),
            source: Some(EventSource {
                component: Some(component.into()),
                host: None,
            }),
            first_timestamp: Some(ts.clone()),
            last_timestamp: Some(ts),
            event_time: None::<MicroTime>,
            reporting_component: Some(component.into()),
            reporting_instance: Some(String::new()),
            ..Default::default()
        };
        let _ = self.tx.send(ev);
    }
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
