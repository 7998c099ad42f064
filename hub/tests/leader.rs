//! Leader election on a simulated management cluster: one replica leads at a time, a leader that
//! shuts down hands over at once, one that dies is replaced once its Lease expires, and the term
//! each claims in the store only grows, even when the Lease itself is deleted and made again.

mod support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use nave_hub::leader::{Config, Elector, Kept};
use nave_hub::store::{self, Claim, Store};
use nave_testkit::wait_for;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "nave-system";

/// Where a candidate stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    Candidate,
    Leading { term: u64 },
}

/// Runs `elector` as the hub does: acquire, keep, and again after a loss, until shutdown.
async fn elect(
    mut elector: Elector,
    store: Arc<dyn Store>,
    standing: watch::Sender<Standing>,
    shutdown: CancellationToken,
) {
    while let Some(term) = elector.acquire(store.as_ref(), &shutdown).await {
        standing.send_replace(Standing::Leading { term });
        let kept = elector.keep(store.as_ref(), term, &shutdown).await;
        standing.send_replace(Standing::Candidate);
        if kept == Kept::Shutdown {
            return;
        }
    }
}

/// A candidate running the election on its own store handle.
struct Candidate {
    standing: watch::Receiver<Standing>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    store: Arc<dyn Store>,
}

impl Candidate {
    async fn start(client: &kube::Client, database_url: &str, identity: &str) -> Candidate {
        let store = store::connect(database_url).await.expect("the store opens");
        let mut config = Config::new(NAMESPACE, identity);
        config.lease_duration = Duration::from_secs(2);
        config.renew_deadline = Duration::from_millis(1500);
        config.retry_period = Duration::from_millis(200);
        let (tx, standing) = watch::channel(Standing::Candidate);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(elect(
            Elector::new(client.clone(), config),
            store.clone(),
            tx,
            shutdown.clone(),
        ));
        Candidate {
            standing,
            shutdown,
            task,
            store,
        }
    }

    fn standing(&self) -> Standing {
        *self.standing.borrow()
    }

    async fn leading(&self, within: Duration) -> u64 {
        wait_for("the candidate to lead", within, || async {
            match self.standing() {
                Standing::Leading { term } => Ok(term),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_leads_at_a_time_and_each_term_is_claimed_above_the_last() {
    let (management, client) = support::management_cluster().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}})).unwrap(),
        )
        .await
        .expect("the namespace");
    let dir = tempfile::tempdir().unwrap();
    let database_url = format!("sqlite://{}", dir.path().join("hub.db").display());

    let a = Candidate::start(&client, &database_url, "hub-a").await;
    let first = a.leading(Duration::from_secs(10)).await;
    let b = Candidate::start(&client, &database_url, "hub-b").await;
    // b stays a candidate while a renews, for as long as a renews the Lease three lease
    // durations past its first renewal seen here.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let renewed = |lease: &Lease| {
        lease
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0)
    };
    let first_renewal = renewed(&leases.get("nave-hub").await.expect("a's Lease"))
        .expect("a's Lease says when it was renewed");
    wait_for(
        "a to renew its Lease three lease durations on, b a candidate all along",
        Duration::from_secs(20),
        || async {
            assert_eq!(
                b.standing(),
                Standing::Candidate,
                "b must not lead while a renews"
            );
            assert!(matches!(a.standing(), Standing::Leading { .. }));
            let lease = leases.get("nave-hub").await.map_err(|e| e.to_string())?;
            match renewed(&lease) {
                Some(at) if at.duration_since(first_renewal).as_secs() >= 6 => Ok(()),
                seen => Err(format!("renewed at {seen:?}, first {first_renewal}")),
            }
        },
    )
    .await;
    assert_eq!(a.store.term(), Some(first), "a writes under the term it leads in");

    // a shuts down and releases the Lease: b takes over within a retry period or two, not a
    // lease duration.
    let released = std::time::Instant::now();
    a.shutdown.cancel();
    a.task.await.unwrap();
    let second = b.leading(Duration::from_secs(10)).await;
    let handover = released.elapsed();
    assert!(second > first, "term {second} after term {first}");
    assert!(
        handover < Duration::from_secs(2),
        "a released Lease is taken within a lease duration; took {handover:?}"
    );
    let leadership = b.store.leadership().await.unwrap();
    assert_eq!((leadership.term, leadership.holder.as_str()), (second, "hub-b"));

    // b dies without releasing (its task aborted): c waits for the Lease to expire.
    let c = Candidate::start(&client, &database_url, "hub-c").await;
    b.task.abort();
    let third = c.leading(Duration::from_secs(10)).await;
    assert!(third > second);
    // b's store handle (its process still around, say paused) can no longer write.
    let refused = b.store.mark_published().await.expect_err("b's term is over");
    assert!(matches!(refused, store::StoreError::Fenced { .. }), "{refused:?}");

    // Another replica claims a later term in the store while c holds the Lease (it took the
    // Lease from under a paused c, say, and c has not noticed): c stops leading, and, holding
    // the Lease still, leads again in a term above the store's, in the same process.
    let other = store::connect(&database_url).await.unwrap();
    let Claim::Claimed(claimed) = other.claim_term(Some(third + 10), "hub-x").await.unwrap() else {
        panic!("the later term is claimed")
    };
    let again = wait_for(
        "c to lead again in a later term",
        Duration::from_secs(10),
        || async {
            match c.standing() {
                Standing::Leading { term } if term > claimed => Ok(term),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(c.store.term(), Some(again));
    let third = again;

    // The Lease is deleted (by hand, or a namespace restored from an old backup): its count
    // starts over, but the next leader's term is above the store's anyway.
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    c.shutdown.cancel();
    c.task.await.unwrap();
    leases
        .delete("nave-hub", &DeleteParams::default())
        .await
        .expect("the Lease is deleted");
    let d = Candidate::start(&client, &database_url, "hub-d").await;
    let fourth = d.leading(Duration::from_secs(10)).await;
    assert!(
        fourth > third,
        "a recreated Lease's count is raised above the store's term: {fourth} after {third}"
    );
    let lease = leases.get("nave-hub").await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.lease_transitions),
        Some(i32::try_from(fourth).unwrap()),
        "the Lease counts the term it was raised to"
    );
    d.shutdown.cancel();
    d.task.await.unwrap();
    drop(management);
}
