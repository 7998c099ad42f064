//! Store conformance: every case runs against SQLite (a fresh temporary file) and Postgres (a
//! fresh schema in the database named by `NAVE_TEST_DATABASE_URL`), so both backends are held to
//! the same behaviour.
//!
//! Without `NAVE_TEST_DATABASE_URL` the Postgres cases print a `skipped:` line and pass, so the
//! test suite runs on a machine without Postgres. With it set, an unreachable server fails them.

use std::future::Future;
use std::io::Write as _;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use nave_hub::store::{
    self, Backend, Claim, ClusterRecord, ClusterUpsert, Coordinates, FeedEvent, HeartbeatRetention,
    HistoryQuery, HistoryRetention, NewHeartbeat, PgStore, PlacementUpdate, Store, StoreChange,
    StoreErrorKind, WorkStatus,
};
use serde_json::{Value, json};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Executor as _};

const PG_URL_VAR: &str = "NAVE_TEST_DATABASE_URL";

/// One test database that a case can open stores on, any number of times.
struct TestDb {
    target: Target,
}

enum Target {
    Sqlite { url: String, _dir: tempfile::TempDir },
    Postgres { url: String, schema: String },
}

impl TestDb {
    fn backend(&self) -> Backend {
        match self.target {
            Target::Sqlite { .. } => Backend::Sqlite,
            Target::Postgres { .. } => Backend::Postgres,
        }
    }

    /// Opens a new store (its own pool) on this database, running the migrations, and claims
    /// the next term with it: the newest store opened writes placements and work.
    async fn open(&self) -> Arc<dyn Store> {
        let store = self.open_following().await;
        store
            .claim_term(None, "conformance")
            .await
            .expect("claiming a term");
        store
    }

    /// Opens a new store (its own pool) on this database without claiming a term, as a hub
    /// replica that follows does.
    async fn open_following(&self) -> Arc<dyn Store> {
        match &self.target {
            Target::Sqlite { url, .. } => store::connect(url)
                .await
                .unwrap_or_else(|e| panic!("opening the SQLite store at {url}: {e:?}")),
            Target::Postgres { url, schema } => {
                let options = PgConnectOptions::from_str(url).expect("NAVE_TEST_DATABASE_URL parses");
                let set_path = format!("SET search_path TO \"{schema}\"");
                let pool = PgStore::pool_options()
                    .max_connections(4)
                    .after_connect(move |conn, _meta| {
                        let set_path = set_path.clone();
                        Box::pin(async move {
                            conn.execute(AssertSqlSafe(set_path)).await?;
                            Ok(())
                        })
                    });
                let store = PgStore::connect_with(pool, options)
                    .await
                    .unwrap_or_else(|e| panic!("opening the Postgres store in schema {schema}: {e:?}"));
                Arc::new(store)
            }
        }
    }

    /// A URL that [`store::connect`] opens on this database (for Postgres, the schema is chosen
    /// through the `options` parameter rather than a hook).
    fn url(&self) -> String {
        match &self.target {
            Target::Sqlite { url, .. } => url.clone(),
            Target::Postgres { url, schema } => {
                let separator = if url.contains('?') { '&' } else { '?' };
                format!("{url}{separator}options=-c%20search_path%3D{schema}")
            }
        }
    }
}

async fn run_sqlite<F, Fut>(case: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("nave.db").display());
    case(TestDb {
        target: Target::Sqlite { url, _dir: dir },
    })
    .await;
}

async fn run_postgres<F, Fut>(case: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let url = match std::env::var(PG_URL_VAR) {
        Ok(url) if !url.is_empty() => url,
        _ => {
            // Straight to stderr: the harness captures `println!` of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {PG_URL_VAR} is not set (Postgres store conformance)"
            );
            return;
        }
    };
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{PG_URL_VAR} is set ({}) but the Postgres server is unreachable: {e}",
                redact(&url)
            )
        });
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let schema = format!(
        "nave_test_{}_{}_{}",
        std::process::id(),
        Timestamp::now().as_millisecond(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    admin
        .execute(AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .await
        .unwrap_or_else(|e| panic!("creating schema {schema}: {e}"));
    // Run the case as its own task so that a failing case still drops its schema.
    let outcome = tokio::spawn(case(TestDb {
        target: Target::Postgres {
            url,
            schema: schema.clone(),
        },
    }))
    .await;
    admin
        .execute(AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE")))
        .await
        .unwrap_or_else(|e| panic!("dropping schema {schema}: {e}"));
    admin.close().await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Runs each case against both backends: `sqlite::<case>` and `postgres::<case>`.
macro_rules! conformance {
    ($($case:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::run_sqlite(crate::cases::$case).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::run_postgres(crate::cases::$case).await;
                }
            )+
        }
    };
}

conformance!(
    cluster_upsert_get_and_list,
    credential_issue_then_lookup_gives_scoped_cluster,
    revoked_and_rotated_credentials_are_not_found,
    token_of_one_cluster_never_resolves_to_another,
    heartbeats_are_recorded_and_pruned,
    heartbeats_recorded_together_are_each_recorded_or_none_is,
    placement_put_get_and_history_newest_first_with_filters_and_pages,
    history_is_pruned_per_workload_keeping_the_newest,
    work_revision_bumps_only_on_change_and_survives_reconnect,
    work_status_round_trips,
    work_changes_write_only_what_changed_and_deltas_tell_what_changed_since,
    sets_stored_whole_by_an_older_hub_are_kept_by_object_after_the_upgrade,
    concurrent_put_work_yields_distinct_increasing_revisions,
    concurrent_rotations_leave_exactly_one_valid_credential,
    a_credential_taken_before_is_refused_at_once_after_revoke_rotate_or_removal,
    migrations_are_idempotent,
    connect_url_picks_the_backend,
    identity_is_created_with_the_store_and_kept,
    join_tokens_register_one_name_once_before_they_expire,
    acceptance_is_stored_and_a_removed_cluster_leaves_nothing,
    secret_payloads_are_sealed_at_rest_and_read_back_in_clear,
    a_replica_of_an_older_term_writes_no_placement_or_work,
    a_claim_waits_for_writes_in_flight_and_no_older_write_lands_after_it,
    work_sets_are_complete_once_the_current_term_published,
    other_replicas_hear_every_change_but_their_own,
    a_stalled_writer_delays_a_claim_seconds_not_hours_and_a_writer_without_a_term_is_refused,
);

// Fixtures.

/// A cluster in `eu-west`, zone `a`, with one label; change fields with struct update syntax.
fn mk_cluster(name: &str) -> ClusterUpsert {
    ClusterUpsert {
        name: name.to_owned(),
        labels: [("tier".to_owned(), "gold".to_owned())].into(),
        region: Some("eu-west".to_owned()),
        zone: Some("a".to_owned()),
        coordinates: Some(Coordinates {
            latitude: 53.35,
            longitude: -6.26,
        }),
        agent_version: Some("0.1.0".to_owned()),
        kubernetes_version: Some("v1.34.1".to_owned()),
        cordoned: false,
        burst_only: false,
        accepted: true,
    }
}

fn heartbeat(cluster: &str, at: Timestamp, cpu: u32) -> NewHeartbeat {
    NewHeartbeat {
        cluster: cluster.to_owned(),
        received_at: at,
        payload: json!({"capacity": {"cpu": cpu}, "pendingPods": [], "latency": {"eu-2": 12}}),
        capacity: Some(json!({"cpu": cpu})),
        agent_version: None,
        kubernetes_version: None,
    }
}

fn placement(namespace: &str, name: &str, at: Timestamp, decision: Value) -> PlacementUpdate {
    PlacementUpdate {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: format!("uid-{namespace}-{name}"),
        generation: 1,
        decision,
        trigger: "spec".to_owned(),
        reason: "spec changed".to_owned(),
        at,
    }
}

fn deployment(name: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas},
    })
}

/// A fixed instant plus `seconds`, at millisecond precision like the store.
fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_763_700_000).expect("valid") + SignedDuration::from_secs(seconds)
}

/// Registers the named clusters with default fields.
async fn register(store: &dyn Store, names: &[&str]) {
    for name in names {
        store
            .upsert_cluster(&mk_cluster(name))
            .await
            .unwrap_or_else(|e| panic!("registering {name}: {e:?}"));
    }
}

mod cases {
    use super::*;

    pub async fn secret_payloads_are_sealed_at_rest_and_read_back_in_clear(db: TestDb) {
        let sealer = store::sealed::Sealer::new(&[42u8; 32]).expect("a key");
        let sealed = store::connect_sealed(&db.url(), Some(Arc::new(sealer)))
            .await
            .expect("a sealed store");
        sealed
            .claim_term(None, "conformance")
            .await
            .expect("claiming a term");
        register(&*sealed, &["eu-1"]).await;
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "shop"},
            "data": {"password": "aHVudGVyMg=="}
        });
        let objects = vec![deployment("web", 2), secret];
        let first = sealed.put_work("eu-1", &objects).await.expect("put");
        let again = sealed.put_work("eu-1", &objects).await.expect("put again");
        assert_eq!(
            (again.revision, again.changed),
            (first.revision, false),
            "sealing is stable"
        );
        let read = sealed.get_work("eu-1").await.expect("get").expect("a set");
        assert_eq!(read.objects, objects, "read back in clear");
        // What lies in the database: no Secret data in clear, and a store without the key
        // refuses to hand out what it cannot open.
        let plain = db.open().await;
        let error = plain.get_work("eu-1").await.expect_err("no key");
        assert!(error.to_string().contains("sealed"), "{error}");
        let raw = match db.backend() {
            Backend::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&db.url()).await.expect("raw SQLite");
                let text: String = sqlx::query_scalar(
                    "SELECT group_concat(object, ',') FROM work_objects WHERE cluster = 'eu-1'",
                )
                .fetch_one(&pool)
                .await
                .expect("the rows");
                text
            }
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&db.url()).await.expect("raw Postgres");
                let text: String = sqlx::query_scalar(
                    "SELECT string_agg(object::text, ',') FROM work_objects WHERE cluster = 'eu-1'",
                )
                .fetch_one(&pool)
                .await
                .expect("the rows");
                text
            }
        };
        assert!(
            !raw.contains("aHVudGVyMg=="),
            "no Secret data in clear at rest: {raw}"
        );
        assert!(raw.contains(store::sealed::SEALED_FIELD), "{raw}");
    }

    pub async fn join_tokens_register_one_name_once_before_they_expire(db: TestDb) {
        let store = db.open().await;
        let now = Timestamp::now();
        let issued = store
            .create_join_token("eu-1", now + SignedDuration::from_secs(3600))
            .await
            .expect("issuing a join token");
        let token = issued.token.expose().to_owned();
        assert!(token.starts_with(store::JOIN_TOKEN_PREFIX), "{}", issued.id);
        let found = store.find_join_token(&token, now).await.expect("finding it");
        assert_eq!(
            found.map(|t| (t.cluster, t.used_at)),
            Some(("eu-1".to_owned(), None))
        );
        let wrong_secret = format!("{}x", &token[..token.len() - 1]);
        assert!(
            store
                .find_join_token(&wrong_secret, now)
                .await
                .expect("lookup")
                .is_none()
        );
        assert!(
            !store
                .redeem_join_token(&token, "us-1", now)
                .await
                .expect("redeem"),
            "a token does not register another name"
        );
        // Two redemptions race; exactly one wins.
        let (a, b) = tokio::join!(
            store.redeem_join_token(&token, "eu-1", now),
            store.redeem_join_token(&token, "eu-1", now)
        );
        assert_eq!(
            [a.expect("first"), b.expect("second")]
                .iter()
                .filter(|won| **won)
                .count(),
            1,
            "one of two concurrent redemptions succeeds"
        );
        assert!(
            store
                .find_join_token(&token, now)
                .await
                .expect("lookup")
                .is_none(),
            "used"
        );

        let short = store
            .create_join_token("eu-2", now + SignedDuration::from_secs(60))
            .await
            .expect("issuing another");
        let later = now + SignedDuration::from_secs(61);
        assert!(
            store
                .find_join_token(short.token.expose(), later)
                .await
                .expect("lookup")
                .is_none()
        );
        assert!(
            !store
                .redeem_join_token(short.token.expose(), "eu-2", later)
                .await
                .expect("redeem")
        );
        let listed = store.list_join_tokens().await.expect("listing");
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(
            listed.iter().any(|t| t.id == issued.id && t.used_at.is_some()),
            "{listed:?}"
        );
        assert!(
            !store
                .redeem_join_token("nave-join-zz.secret", "eu-1", now)
                .await
                .expect("junk")
        );
    }

    pub async fn a_replica_of_an_older_term_writes_no_placement_or_work(db: TestDb) {
        let old = db.open_following().await;
        register(&*old, &["eu-1"]).await;
        let unclaimed = old.put_work("eu-1", &[]).await.expect_err("no term claimed");
        assert!(
            matches!(
                unclaimed,
                store::StoreError::Fenced {
                    term: None,
                    current: 0,
                    ..
                }
            ),
            "{unclaimed:?}"
        );
        assert_eq!(
            old.claim_term(None, "replica-a").await.unwrap(),
            Claim::Claimed(1)
        );
        old.put_work("eu-1", &[deployment("web", 1)])
            .await
            .expect("the leader writes");
        assert!(!old.fenced().is_cancelled());

        // Another replica takes over (a later lease term) while the first is paused.
        let new = db.open_following().await;
        assert_eq!(
            new.claim_term(Some(5), "replica-b").await.unwrap(),
            Claim::Claimed(5)
        );
        let refused = old
            .put_work("eu-1", &[deployment("web", 9)])
            .await
            .expect_err("the paused leader's write after its successor claimed");
        assert!(
            matches!(
                refused,
                store::StoreError::Fenced {
                    term: Some(1),
                    current: 5,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(refused.kind(), StoreErrorKind::Unavailable);
        assert!(
            old.fenced().is_cancelled(),
            "the refused replica hears it no longer leads"
        );
        let placement = PlacementUpdate {
            namespace: "shop".to_owned(),
            name: "web".to_owned(),
            uid: "uid-1".to_owned(),
            generation: 1,
            decision: json!({"assignment": {"eu-1": 9}}),
            trigger: "spec".to_owned(),
            reason: "old".to_owned(),
            at: Timestamp::now(),
        };
        assert!(old.put_placement(&placement).await.is_err(), "nor a placement");
        assert!(
            old.delete_placement("shop", "web").await.is_err(),
            "nor a deletion"
        );
        assert!(old.mark_published().await.is_err(), "nor a publication");
        assert_eq!(
            new.get_work("eu-1").await.unwrap().map(|w| w.objects),
            Some(vec![deployment("web", 1)]),
            "what the store holds is the last write of the old term"
        );
        new.put_work("eu-1", &[deployment("web", 2)])
            .await
            .expect("the new leader writes");
        // An older term cannot be claimed back, not even by the replica that held it.
        assert_eq!(
            old.claim_term(Some(4), "replica-a").await.unwrap(),
            Claim::Stale { current: 5 }
        );
        let leadership = new.leadership().await.unwrap();
        assert_eq!((leadership.term, leadership.holder.as_str()), (5, "replica-b"));
    }

    pub async fn a_claim_waits_for_writes_in_flight_and_no_older_write_lands_after_it(db: TestDb) {
        let old = db.open().await;
        register(&*old, &["eu-1"]).await;
        if db.backend() == Backend::Postgres {
            // Each write of a work set takes a while, so that the claim below always meets one
            // in flight (on SQLite, `BEGIN IMMEDIATE` queues every write anyway).
            let pool = sqlx::PgPool::connect(&db.url()).await.expect("raw Postgres");
            for statement in [
                "CREATE FUNCTION slow_work() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep(0.2); RETURN NEW; END $$ LANGUAGE plpgsql",
                "CREATE TRIGGER slow_work BEFORE INSERT OR UPDATE ON work FOR EACH ROW EXECUTE FUNCTION slow_work()",
            ] {
                sqlx::query(statement)
                    .execute(&pool)
                    .await
                    .expect("a slow work table");
            }
        }
        let writer = {
            let old = old.clone();
            tokio::spawn(async move {
                let mut written = 0u32;
                for i in 0..10_000u32 {
                    match old.put_work("eu-1", &[deployment("web", i)]).await {
                        Ok(_) => written += 1,
                        Err(store::StoreError::Fenced { .. }) => return written,
                        Err(e) => panic!("an unexpected error: {e:?}"),
                    }
                }
                panic!("10,000 writes and never fenced")
            })
        };
        // Let some writes land, then claim while the writer keeps going.
        nave_testkit::wait_for("the old leader's writes", nave_testkit::DEADLINE, || async {
            match old.get_work("eu-1").await.unwrap() {
                Some(work) if work.revision >= 2 => Ok(()),
                seen => Err(format!("{:?}", seen.map(|w| w.revision))),
            }
        })
        .await;
        let new = db.open_following().await;
        let Claim::Claimed(_) = new.claim_term(None, "replica-b").await.unwrap() else {
            panic!("the claim of the next term is refused")
        };
        let at_claim = new.get_work("eu-1").await.unwrap().expect("a set").revision;
        let written = writer.await.expect("the writer ends fenced");
        let after = new.get_work("eu-1").await.unwrap().expect("a set").revision;
        assert_eq!(
            after, at_claim,
            "no write of the old term lands after the claim ({written} landed before it)"
        );
    }

    pub async fn work_sets_are_complete_once_the_current_term_published(db: TestDb) {
        let first = db.open().await;
        assert!(!first.leadership().await.unwrap().published());
        first.mark_published().await.expect("publishing");
        assert!(first.leadership().await.unwrap().published());
        let second = db.open().await;
        let leadership = second.leadership().await.unwrap();
        assert!(
            !leadership.published(),
            "a new term has not published yet: {leadership:?}"
        );
        second.mark_published().await.expect("publishing");
        assert!(second.leadership().await.unwrap().published());
    }

    pub async fn other_replicas_hear_every_change_but_their_own(db: TestDb) {
        let leader = db.open().await;
        let follower = db.open_following().await;
        let Some(mut feed) = follower.changes().await.expect("listening") else {
            assert_eq!(db.backend(), Backend::Sqlite, "only SQLite announces nothing");
            return;
        };
        let Some(mut own) = leader.changes().await.expect("listening") else {
            panic!("Postgres announces changes")
        };
        register(&*leader, &["eu-1"]).await;
        leader.put_work("eu-1", &[deployment("web", 1)]).await.unwrap();
        leader
            .record_heartbeat(&heartbeat("eu-1", Timestamp::now(), 2))
            .await
            .unwrap();
        leader.mark_published().await.unwrap();
        let mut heard = Vec::new();
        while heard.len() < 4 {
            let event = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut feed))
                .await
                .unwrap_or_else(|_| panic!("heard only {heard:?}"))
                .expect("the feed goes on");
            heard.push(event);
        }
        assert_eq!(
            heard,
            vec![
                FeedEvent::Change(StoreChange::Cluster("eu-1".to_owned())),
                FeedEvent::Change(StoreChange::Work {
                    cluster: "eu-1".to_owned(),
                    revision: 1
                }),
                FeedEvent::Change(StoreChange::Heartbeat("eu-1".to_owned())),
                FeedEvent::Change(StoreChange::Leadership),
            ]
        );
        // The leader hears nothing of its own: the follower's write is the first it hears.
        follower.set_accepted("eu-1", false).await.unwrap();
        let first = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut own))
            .await
            .expect("the follower's change is heard")
            .expect("the feed goes on");
        assert_eq!(first, FeedEvent::Change(StoreChange::Cluster("eu-1".to_owned())));
    }

    pub async fn a_stalled_writer_delays_a_claim_seconds_not_hours_and_a_writer_without_a_term_is_refused(
        db: TestDb,
    ) {
        if db.backend() != Backend::Postgres {
            // SQLite: one hub per file; its writers queue on BEGIN IMMEDIATE's busy timeout.
            return;
        }
        let leader = db.open().await;
        register(&*leader, &["eu-1"]).await;
        leader.put_work("eu-1", &[deployment("web", 1)]).await.unwrap();
        let pool = sqlx::PgPool::connect(&db.url()).await.expect("raw Postgres");
        // A hub of an older version, which knows nothing of terms: the database refuses it.
        let refused = sqlx::query("UPDATE work SET revision = revision + 1 WHERE cluster = 'eu-1'")
            .execute(&pool)
            .await
            .expect_err("a write without a term");
        assert!(refused.to_string().contains("current term"), "{refused}");
        // A writer stopped in the middle of its transaction, holding the term's row.
        let mut stalled = pool.begin().await.unwrap();
        sqlx::query("SELECT term FROM leadership WHERE singleton = 1 FOR SHARE")
            .execute(&mut *stalled)
            .await
            .unwrap();
        let next = db.open_following().await;
        let started = std::time::Instant::now();
        let error = next
            .claim_term(None, "replica-b")
            .await
            .expect_err("the claim cannot lock the row while the writer holds it");
        assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the claim gave up after {:?}, not after the writer",
            started.elapsed()
        );
        stalled.rollback().await.unwrap();
        assert!(matches!(
            next.claim_term(None, "replica-b").await.unwrap(),
            Claim::Claimed(_)
        ));
    }

    pub async fn acceptance_is_stored_and_a_removed_cluster_leaves_nothing(db: TestDb) {
        let store = db.open().await;
        let waiting = store
            .upsert_cluster(&ClusterUpsert {
                accepted: false,
                ..mk_cluster("eu-1")
            })
            .await
            .expect("registering");
        assert!(!waiting.accepted);
        let accepted = store.set_accepted("eu-1", true).await.expect("accepting");
        assert_eq!(accepted.map(|c| c.accepted), Some(true));
        assert!(
            store
                .set_accepted("nowhere", true)
                .await
                .expect("unknown")
                .is_none()
        );
        let confirmed = store.confirm_prune("eu-1", 7).await.expect("confirming a prune");
        assert_eq!(confirmed.map(|c| c.prune_confirmed), Some(Some(7)));
        let upserted = store
            .upsert_cluster(&mk_cluster("eu-1"))
            .await
            .expect("registering again");
        assert_eq!(
            upserted.prune_confirmed,
            Some(7),
            "a registration keeps the admin's confirmation"
        );
        assert!(
            store
                .confirm_prune("nowhere", 1)
                .await
                .expect("unknown")
                .is_none()
        );

        store.issue_credential("eu-1").await.expect("a credential");
        store
            .record_heartbeat(&heartbeat("eu-1", Timestamp::now(), 4))
            .await
            .expect("a heartbeat");
        store
            .put_work("eu-1", &[deployment("web", 2)])
            .await
            .expect("work");
        store
            .put_work_status(&WorkStatus {
                cluster: "eu-1".to_owned(),
                applied_revision: 1,
                objects: json!([]),
                reported_at: Timestamp::now(),
            })
            .await
            .expect("a status");
        assert!(store.delete_cluster("eu-1").await.expect("removing"));
        assert!(store.get_cluster("eu-1").await.expect("get").is_none());
        assert!(store.get_work("eu-1").await.expect("work").is_none());
        assert!(store.get_work_status("eu-1").await.expect("status").is_none());
        assert!(
            store
                .list_credentials("eu-1")
                .await
                .expect("credentials")
                .is_empty()
        );
        assert!(
            store
                .list_heartbeats("eu-1", 10)
                .await
                .expect("heartbeats")
                .is_empty()
        );
        assert!(
            !store.delete_cluster("eu-1").await.expect("again"),
            "gone already"
        );
        let removed = store.removed_at("eu-1").await.expect("removed_at");
        assert!(
            removed.is_some_and(|at| at.as_second().abs_diff(Timestamp::now().as_second()) < 60),
            "expected the removal remembered with its time, saw {removed:?}"
        );
        assert_eq!(
            store.removed_at("eu-2").await.expect("removed_at"),
            None,
            "a name never removed"
        );
        // The name can join again from scratch, and is no longer a removed name.
        register(&*store, &["eu-1"]).await;
        assert_eq!(
            store.removed_at("eu-1").await.expect("removed_at"),
            None,
            "registered again"
        );
    }

    pub async fn identity_is_created_with_the_store_and_kept(db: TestDb) {
        let store = db.open().await;
        let first = store.identity().await.expect("reading the store identity");
        assert!(
            first.len() == 32 && first.chars().all(|c| c.is_ascii_hexdigit()),
            "expected 32 hex digits as the store identity, got {first:?}"
        );
        store.close().await.expect("closing");
        let again = db.open().await;
        let second = again.identity().await.expect("reading the identity again");
        assert_eq!(second, first, "a reopened store keeps its identity");
    }

    pub async fn cluster_upsert_get_and_list(db: TestDb) {
        let store = db.open().await;
        let before = Timestamp::now();
        let first = store
            .upsert_cluster(&mk_cluster("eu-1"))
            .await
            .expect("upsert eu-1");
        let expected = ClusterRecord {
            name: "eu-1".to_owned(),
            labels: [("tier".to_owned(), "gold".to_owned())].into(),
            region: Some("eu-west".to_owned()),
            zone: Some("a".to_owned()),
            coordinates: Some(Coordinates {
                latitude: 53.35,
                longitude: -6.26,
            }),
            registered_at: first.registered_at,
            agent_version: Some("0.1.0".to_owned()),
            kubernetes_version: Some("v1.34.1".to_owned()),
            last_heartbeat_at: None,
            capacity: None,
            cordoned: false,
            burst_only: false,
            accepted: true,
            prune_confirmed: None,
        };
        assert_eq!(first, expected, "upsert returns the stored row");
        assert!(
            first.registered_at >= before - SignedDuration::from_millis(1),
            "registered_at: expected at or after {before}, seen {}",
            first.registered_at
        );
        let got = store.get_cluster("eu-1").await.expect("get eu-1");
        assert_eq!(got.as_ref(), Some(&expected), "get after insert");

        // A later upsert replaces the descriptive fields, keeps registered_at, and keeps the
        // versions it does not carry.
        let update = ClusterUpsert {
            labels: [
                ("tier".to_owned(), "silver".to_owned()),
                ("gpu".to_owned(), "true".to_owned()),
            ]
            .into(),
            region: Some("eu-north".to_owned()),
            zone: None,
            coordinates: None,
            agent_version: None,
            kubernetes_version: Some("v1.35.0".to_owned()),
            cordoned: true,
            burst_only: true,
            accepted: true,
            ..mk_cluster("eu-1")
        };
        let updated = store.upsert_cluster(&update).await.expect("upsert eu-1 again");
        let expected = ClusterRecord {
            labels: update.labels.clone(),
            region: Some("eu-north".to_owned()),
            zone: None,
            coordinates: None,
            kubernetes_version: Some("v1.35.0".to_owned()),
            cordoned: true,
            burst_only: true,
            accepted: true,
            ..expected
        };
        assert_eq!(updated, expected, "upsert of an existing cluster");
        assert_eq!(
            store.get_cluster("eu-1").await.expect("get eu-1").as_ref(),
            Some(&expected)
        );

        register(&*store, &["us-1", "ap-1"]).await;
        let names: Vec<String> = store
            .list_clusters()
            .await
            .expect("list")
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["ap-1", "eu-1", "us-1"], "list is sorted by name");
        assert_eq!(store.get_cluster("nowhere").await.expect("get unknown"), None);
        store.close().await.expect("close");
    }

    pub async fn credential_issue_then_lookup_gives_scoped_cluster(db: TestDb) {
        let store = db.open().await;
        register(&*store, &["eu-1"]).await;
        let issued = store.issue_credential("eu-1").await.expect("issue");
        assert_eq!(issued.cluster, "eu-1");
        let identity = store
            .authenticate_agent(issued.token.expose())
            .await
            .expect("lookup");
        let identity = identity.expect("expected the issued token to resolve, seen None");
        assert_eq!(
            (identity.credential_id, identity.cluster.as_str()),
            (issued.id, "eu-1")
        );

        let listed = store.list_credentials("eu-1").await.expect("list credentials");
        assert_eq!(listed.len(), 1, "credentials of eu-1: {listed:?}");
        assert_eq!((listed[0].id, listed[0].revoked_at), (issued.id, None));
        assert_eq!(
            listed[0].created_at, issued.created_at,
            "created_at as issued vs as listed"
        );

        // A second credential for the same cluster does not replace the first.
        let second = store.issue_credential("eu-1").await.expect("issue a second");
        assert_ne!(second.token, issued.token);
        for token in [&issued.token, &second.token] {
            let seen = store.authenticate_agent(token.expose()).await.expect("lookup");
            assert_eq!(seen.map(|i| i.cluster), Some("eu-1".to_owned()));
        }

        assert_eq!(
            store
                .authenticate_agent("nave_unknown")
                .await
                .expect("lookup unknown"),
            None
        );
        assert_eq!(store.authenticate_agent("").await.expect("lookup empty"), None);

        let error = store
            .issue_credential("nowhere")
            .await
            .expect_err("issuing for an unregistered cluster");
        assert_eq!(error.kind(), StoreErrorKind::UnknownCluster, "error: {error:?}");
        assert_eq!(error.client_message(), "cluster \"nowhere\" is not registered");
        store.close().await.expect("close");
    }

    pub async fn revoked_and_rotated_credentials_are_not_found(db: TestDb) {
        let store = db.open().await;
        register(&*store, &["eu-1"]).await;
        let old = store.issue_credential("eu-1").await.expect("issue");
        assert!(
            store.revoke_credential(old.id).await.expect("revoke"),
            "first revoke: expected true"
        );
        assert!(
            !store.revoke_credential(old.id).await.expect("revoke again"),
            "second revoke: expected false"
        );
        assert!(
            !store
                .revoke_credential(old.id + 1000)
                .await
                .expect("revoke unknown")
        );
        assert_eq!(
            store
                .authenticate_agent(old.token.expose())
                .await
                .expect("lookup revoked"),
            None
        );

        let a = store.issue_credential("eu-1").await.expect("issue a");
        let b = store.issue_credential("eu-1").await.expect("issue b");
        let rotated = store.rotate_credential("eu-1").await.expect("rotate");
        for (label, token) in [("a", &a.token), ("b", &b.token)] {
            let seen = store.authenticate_agent(token.expose()).await.expect("lookup");
            assert_eq!(seen, None, "credential {label} after rotation: expected None");
        }
        let seen = store
            .authenticate_agent(rotated.token.expose())
            .await
            .expect("lookup rotated");
        assert_eq!(seen.map(|i| i.credential_id), Some(rotated.id));

        let listed = store.list_credentials("eu-1").await.expect("list");
        let state: Vec<(i64, bool)> = listed.iter().map(|c| (c.id, c.revoked_at.is_some())).collect();
        assert_eq!(
            state,
            [(old.id, true), (a.id, true), (b.id, true), (rotated.id, false)]
        );

        let error = store
            .rotate_credential("nowhere")
            .await
            .expect_err("rotating for an unregistered cluster");
        assert_eq!(error.kind(), StoreErrorKind::UnknownCluster, "error: {error:?}");
        store.close().await.expect("close");
    }

    /// A store keeps the credentials it found valid for a while (agents present theirs at every
    /// request); a revocation must not wait for that, on the handle that made it or on another
    /// replica's, which hears of it on its change feed.
    pub async fn a_credential_taken_before_is_refused_at_once_after_revoke_rotate_or_removal(db: TestDb) {
        let store = db.open().await;
        let replica = db.open_following().await;
        // Each handle follows its feed as a hub replica does; SQLite announces nothing (one
        // hub per file), so there only the handle that revokes is checked.
        let mut following = Vec::new();
        for handle in [&store, &replica] {
            match handle.changes().await.expect("listening") {
                Some(feed) => following.push(tokio::spawn(futures::StreamExt::for_each(feed, |_| async {}))),
                None => assert_eq!(db.backend(), Backend::Sqlite, "only SQLite announces nothing"),
            }
        }
        let replicas = !following.is_empty();
        register(&*store, &["eu-1", "eu-2", "eu-3"]).await;
        let one = store.issue_credential("eu-1").await.expect("issue");
        let two = store.issue_credential("eu-2").await.expect("issue");
        let three = store.issue_credential("eu-3").await.expect("issue");
        let handles: Vec<(&str, &Arc<dyn Store>)> = if replicas {
            vec![
                ("the handle that writes", &store),
                ("another replica's", &replica),
            ]
        } else {
            vec![("the handle that writes", &store)]
        };
        let taken_everywhere = |what: &'static str, token: String, id: i64| {
            let handles = handles.clone();
            async move {
                for (label, handle) in handles {
                    let seen = handle.authenticate_agent(&token).await.expect("lookup");
                    assert_eq!(seen.map(|i| i.credential_id), Some(id), "{label}: {what}");
                }
            }
        };
        // Taken (and so kept) by every handle first.
        for credential in [&one, &two, &three] {
            taken_everywhere(
                "a credential just issued",
                credential.token.expose().to_owned(),
                credential.id,
            )
            .await;
        }
        // The handle that wrote refuses at once, with no waiting; the others once their feed
        // passed the change on.
        let refused_everywhere = |writer: &Arc<dyn Store>, what: &'static str, token: String| {
            let (writer, handles) = (writer.clone(), handles.clone());
            async move {
                let seen = writer.authenticate_agent(&token).await.expect("lookup");
                assert_eq!(seen, None, "the handle that wrote: {what}, taken still");
                for (label, handle) in handles {
                    nave_testkit::wait_for(
                        &format!("{label} to refuse {what}"),
                        Duration::from_secs(10),
                        || async {
                            match handle.authenticate_agent(&token).await {
                                Ok(None) => Ok(()),
                                Ok(Some(identity)) => Err(format!("still taken, as {identity:?}")),
                                Err(error) => Err(error.to_string()),
                            }
                        },
                    )
                    .await;
                }
            }
        };
        assert!(store.revoke_credential(one.id).await.expect("revoke"));
        refused_everywhere(&store, "a revoked credential", one.token.expose().to_owned()).await;

        let rotated = store.rotate_credential("eu-2").await.expect("rotate");
        refused_everywhere(&store, "a credential rotated away", two.token.expose().to_owned()).await;
        taken_everywhere(
            "the rotated credential",
            rotated.token.expose().to_owned(),
            rotated.id,
        )
        .await;

        assert!(store.delete_cluster("eu-3").await.expect("delete"));
        refused_everywhere(
            &store,
            "the credential of a removed cluster",
            three.token.expose().to_owned(),
        )
        .await;

        // And the other way: what the replica revokes, the first handle refuses.
        if replicas {
            assert!(replica.revoke_credential(rotated.id).await.expect("revoke"));
            refused_everywhere(
                &replica,
                "a credential the other replica revoked",
                rotated.token.expose().to_owned(),
            )
            .await;
        }
        for task in following {
            task.abort();
        }
    }

    pub async fn token_of_one_cluster_never_resolves_to_another(db: TestDb) {
        let store = db.open().await;
        register(&*store, &["a", "b"]).await;
        let mut issued = Vec::new();
        for _ in 0..3 {
            for cluster in ["a", "b"] {
                issued.push(store.issue_credential(cluster).await.expect("issue"));
            }
        }
        for credential in &issued {
            let seen = store
                .authenticate_agent(credential.token.expose())
                .await
                .expect("lookup");
            assert_eq!(
                seen.as_ref().map(|i| i.cluster.as_str()),
                Some(credential.cluster.as_str()),
                "token issued for {} resolved to {seen:?}",
                credential.cluster
            );
        }
        // Near misses of a valid token resolve to nothing.
        let token = issued[0].token.expose();
        let mut flipped = token.to_owned();
        let last = flipped.pop().expect("non-empty token");
        flipped.push(if last == 'A' { 'B' } else { 'A' });
        let near_misses = [
            flipped,
            token.to_uppercase(),
            format!("{token} "),
            format!(" {token}"),
            token[..token.len() - 1].to_owned(),
        ];
        for candidate in near_misses {
            let seen = store.authenticate_agent(&candidate).await.expect("lookup");
            assert_eq!(seen, None, "near miss {candidate:?}: expected None");
        }
        store.close().await.expect("close");
    }

    pub async fn heartbeats_recorded_together_are_each_recorded_or_none_is(db: TestDb) {
        let store = db.open().await;
        register(&*store, &["a", "b"]).await;
        let together = [
            heartbeat("a", t(10), 1),
            heartbeat("b", t(10), 2),
            heartbeat("a", t(20), 3),
            // Out of order: history, not the latest state.
            heartbeat("a", t(15), 4),
        ];
        let ids = store.record_heartbeats(&together).await.expect("four heartbeats");
        assert_eq!(ids.len(), 4, "an id for each heartbeat: {ids:?}");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids in order: {ids:?}");
        let a = store.list_heartbeats("a", 10).await.expect("list a");
        let times: Vec<Timestamp> = a.iter().map(|h| h.received_at).collect();
        assert_eq!(times, [t(20), t(15), t(10)], "a's heartbeats, newest first");
        let cluster = store
            .get_cluster("a")
            .await
            .expect("get a")
            .expect("a registered");
        assert_eq!(
            (cluster.last_heartbeat_at, cluster.capacity.as_deref()),
            (Some(t(20)), Some(&json!({"cpu": 3}))),
            "a's latest state from its newest heartbeat, not the last written"
        );
        assert_eq!(
            store.record_heartbeats(&[]).await.expect("none"),
            Vec::<i64>::new()
        );

        // One heartbeat of a cluster that is not registered fails them all: nothing is written.
        let failing = [heartbeat("b", t(30), 5), heartbeat("gone", t(30), 6)];
        let error = store
            .record_heartbeats(&failing)
            .await
            .expect_err("a heartbeat of an unknown cluster");
        assert_eq!(error.kind(), StoreErrorKind::UnknownCluster, "{error}");
        let b = store.list_heartbeats("b", 10).await.expect("list b");
        assert_eq!(
            b.len(),
            1,
            "b's heartbeat of the failed batch was not kept: {b:?}"
        );
        let cluster = store
            .get_cluster("b")
            .await
            .expect("get b")
            .expect("b registered");
        assert_eq!(
            cluster.last_heartbeat_at,
            Some(t(10)),
            "b's latest state unchanged"
        );
        store.close().await.expect("close");
    }

    pub async fn heartbeats_are_recorded_and_pruned(db: TestDb) {
        let store = db.open().await;
        register(&*store, &["a", "b"]).await;
        for i in 0..5 {
            store
                .record_heartbeat(&heartbeat("a", t(i * 10), 100 + i as u32))
                .await
                .expect("heartbeat a");
        }
        for i in 0..3 {
            store
                .record_heartbeat(&heartbeat("b", t(i * 10), 200))
                .await
                .expect("heartbeat b");
        }
        let a = store.list_heartbeats("a", 100).await.expect("list a");
        let times: Vec<Timestamp> = a.iter().map(|h| h.received_at).collect();
        assert_eq!(
            times,
            [t(40), t(30), t(20), t(10), t(0)],
            "heartbeats of a, newest first"
        );
        assert_eq!(
            a[0].payload,
            heartbeat("a", t(40), 104).payload,
            "payload stored verbatim"
        );
        assert_eq!(
            store.list_heartbeats("a", 2).await.expect("list a, 2").len(),
            2,
            "limit"
        );

        let cluster = store
            .get_cluster("a")
            .await
            .expect("get a")
            .expect("a registered");
        assert_eq!(cluster.last_heartbeat_at, Some(t(40)));
        assert_eq!(
            cluster.capacity.as_deref(),
            Some(&json!({"cpu": 104})),
            "capacity from the newest heartbeat"
        );
        assert_eq!(
            cluster.agent_version.as_deref(),
            Some("0.1.0"),
            "a heartbeat without versions keeps them"
        );

        // A late heartbeat is history, not the latest state; versions come from the newest one.
        store
            .record_heartbeat(&heartbeat("a", t(5), 1))
            .await
            .expect("late heartbeat");
        let newest = NewHeartbeat {
            agent_version: Some("0.2.0".to_owned()),
            ..heartbeat("a", t(50), 105)
        };
        store.record_heartbeat(&newest).await.expect("newest heartbeat");
        let cluster = store
            .get_cluster("a")
            .await
            .expect("get a")
            .expect("a registered");
        assert_eq!(
            (
                cluster.last_heartbeat_at,
                cluster.capacity.as_deref(),
                cluster.agent_version.as_deref()
            ),
            (Some(t(50)), Some(&json!({"cpu": 105})), Some("0.2.0"))
        );

        // a: 0, 5, 10, 20, 30, 40, 50; b: 0, 10, 20. Keep the newest 2 of each, or from t(30) on.
        let deleted = store
            .prune_heartbeats(HeartbeatRetention {
                keep_last: 2,
                keep_newer_than: Some(t(30)),
            })
            .await
            .expect("prune");
        assert_eq!(deleted, 4 + 1, "deleted: expected a's 0, 5, 10, 20 and b's 0");
        let kept_a: Vec<Timestamp> = store
            .list_heartbeats("a", 100)
            .await
            .expect("list a")
            .iter()
            .map(|h| h.received_at)
            .collect();
        assert_eq!(kept_a, [t(50), t(40), t(30)]);
        let kept_b: Vec<Timestamp> = store
            .list_heartbeats("b", 100)
            .await
            .expect("list b")
            .iter()
            .map(|h| h.received_at)
            .collect();
        assert_eq!(kept_b, [t(20), t(10)]);

        // By count alone.
        let deleted = store
            .prune_heartbeats(HeartbeatRetention {
                keep_last: 1,
                keep_newer_than: None,
            })
            .await
            .expect("prune by count");
        assert_eq!(deleted, 2 + 1);
        assert_eq!(
            store.list_heartbeats("a", 100).await.expect("list a")[0].received_at,
            t(50)
        );

        let error = store
            .record_heartbeat(&heartbeat("nowhere", t(0), 1))
            .await
            .expect_err("unknown cluster");
        assert_eq!(error.kind(), StoreErrorKind::UnknownCluster, "error: {error:?}");
        store.close().await.expect("close");
    }

    pub async fn history_is_pruned_per_workload_keeping_the_newest(db: TestDb) {
        let store = db.open().await;
        // web changes at 0, 10, ..., 50; api at 0 and 10.
        for i in 0..6 {
            let decision = json!({"assignment": {"eu-1": i + 1}});
            store
                .put_placement(&placement("default", "web", t(i * 10), decision))
                .await
                .expect("put web");
        }
        for i in 0..2 {
            let decision = json!({"assignment": {"eu-1": i + 1}});
            store
                .put_placement(&placement("default", "api", t(i * 10), decision))
                .await
                .expect("put api");
        }
        let history = |name: &'static str| {
            let store = store.clone();
            async move {
                store
                    .placement_history(&HistoryQuery {
                        namespace: Some("default".to_owned()),
                        name: Some(name.to_owned()),
                        limit: 100,
                        ..HistoryQuery::default()
                    })
                    .await
                    .expect("history")
                    .entries
                    .iter()
                    .map(|e| e.at)
                    .collect::<Vec<Timestamp>>()
            }
        };
        // Keep each workload's newest 2, or anything from t(30) on.
        let deleted = store
            .prune_history(HistoryRetention {
                keep_last: 2,
                keep_newer_than: Some(t(30)),
            })
            .await
            .expect("prune");
        assert_eq!(deleted, 3, "web's 0, 10 and 20 go; api keeps both");
        assert_eq!(history("web").await, [t(50), t(40), t(30)]);
        assert_eq!(history("api").await, [t(10), t(0)]);
        let deleted = store
            .prune_history(HistoryRetention {
                keep_last: 1,
                keep_newer_than: None,
            })
            .await
            .expect("prune by count");
        assert_eq!(deleted, 2 + 1);
        assert_eq!(history("web").await, [t(50)]);
        assert!(
            store
                .get_placement("default", "web")
                .await
                .expect("get")
                .is_some(),
            "the current placement is not history: it stays"
        );
        store.close().await.expect("close");
    }

    pub async fn placement_put_get_and_history_newest_first_with_filters_and_pages(db: TestDb) {
        let store = db.open().await;
        let one = json!({"assignment": {"eu-1": 3}, "clusters": {"eu-1": "most room"}});
        let two = json!({"assignment": {"eu-1": 2, "eu-2": 1},
                         "clusters": {"eu-1": "most room", "eu-2": "overflow"}});

        let write = store
            .put_placement(&placement("default", "web", t(0), one.clone()))
            .await
            .expect("put");
        assert!(
            write.changed && write.history_id.is_some(),
            "first put: {write:?}"
        );

        // The same decision, built with its keys in another order, is not a change.
        let reordered: Value =
            serde_json::from_str(r#"{"clusters":{"eu-1":"most room"},"assignment":{"eu-1":3}}"#)
                .expect("json");
        let again = PlacementUpdate {
            generation: 2,
            ..placement("default", "web", t(10), reordered)
        };
        let write = store.put_placement(&again).await.expect("put same");
        assert_eq!(
            (write.changed, write.history_id),
            (false, None),
            "same decision: expected no change"
        );
        let current = store
            .get_placement("default", "web")
            .await
            .expect("get")
            .expect("placement of web");
        assert_eq!(
            (current.generation, current.updated_at, &current.decision),
            (2, t(10), &one)
        );

        // Only the explanations differ (fresher numbers): the current placement shows them, but
        // it is not a new decision and writes no history.
        let explained = json!({"assignment": {"eu-1": 3}, "clusters": {"eu-1": "most room (12 left)"},
                               "explanation": "3 of 3 placed"});
        let write = store
            .put_placement(&placement("default", "web", t(15), explained.clone()))
            .await
            .expect("put re-explained");
        assert_eq!(
            (write.changed, write.history_id),
            (false, None),
            "explanations alone: expected no change"
        );
        let current = store
            .get_placement("default", "web")
            .await
            .expect("get")
            .expect("placement of web");
        assert_eq!(
            &current.decision, &explained,
            "the current placement has the fresh explanation"
        );

        let mut scale = placement("default", "web", t(20), two.clone());
        scale.trigger = "capacity".to_owned();
        scale.reason = "eu-1 is full".to_owned();
        assert!(
            store.put_placement(&scale).await.expect("put two").changed,
            "new decision: expected a change"
        );
        // A re-created MCD (new uid) with the same decision starts a new history.
        let recreated = PlacementUpdate {
            uid: "uid-new".to_owned(),
            ..placement("default", "web", t(30), two.clone())
        };
        assert!(
            store
                .put_placement(&recreated)
                .await
                .expect("put recreated")
                .changed,
            "new uid: expected a change"
        );
        store
            .put_placement(&placement("default", "api", t(25), one.clone()))
            .await
            .expect("put api");
        store
            .put_placement(&placement("shop", "web", t(40), one.clone()))
            .await
            .expect("put shop/web");

        let current = store
            .get_placement("default", "web")
            .await
            .expect("get")
            .expect("placement of web");
        assert_eq!(
            (current.uid.as_str(), &current.decision, current.updated_at),
            ("uid-new", &two, t(30))
        );
        assert_eq!(
            store.get_placement("default", "nope").await.expect("get unknown"),
            None
        );
        let all: Vec<(String, String)> = store
            .list_placements(None)
            .await
            .expect("list")
            .into_iter()
            .map(|p| (p.namespace, p.name))
            .collect();
        let pairs = |items: &[(&str, &str)]| -> Vec<(String, String)> {
            items
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect()
        };
        assert_eq!(
            all,
            pairs(&[("default", "api"), ("default", "web"), ("shop", "web")])
        );
        let shop = store.list_placements(Some("shop")).await.expect("list shop");
        assert_eq!(shop.len(), 1, "placements in shop: {shop:?}");

        // History: everything, newest first.
        let page = store
            .placement_history(&HistoryQuery::default())
            .await
            .expect("history");
        let seen: Vec<(String, Timestamp)> = page.entries.iter().map(|e| (e.name.clone(), e.at)).collect();
        let expected: Vec<(String, Timestamp)> = [
            ("web", t(40)),
            ("web", t(30)),
            ("api", t(25)),
            ("web", t(20)),
            ("web", t(0)),
        ]
        .iter()
        .map(|(n, at)| ((*n).to_owned(), *at))
        .collect();
        assert_eq!(seen, expected, "history newest first");
        assert_eq!(page.next, None, "one page holds everything");
        let scaled = &page.entries[3];
        assert_eq!(
            (
                scaled.trigger.as_str(),
                scaled.reason.as_str(),
                &scaled.decision,
                scaled.generation
            ),
            ("capacity", "eu-1 is full", &two, 1)
        );

        // Filters.
        let by = |query: HistoryQuery| {
            let store = store.clone();
            async move {
                let page = store.placement_history(&query).await.expect("history");
                page.entries.iter().map(|e| e.at).collect::<Vec<_>>()
            }
        };
        let default_web = HistoryQuery {
            namespace: Some("default".to_owned()),
            name: Some("web".to_owned()),
            ..HistoryQuery::default()
        };
        assert_eq!(by(default_web.clone()).await, [t(30), t(20), t(0)], "default/web");
        assert_eq!(
            by(HistoryQuery {
                name: Some("web".to_owned()),
                ..HistoryQuery::default()
            })
            .await,
            [t(40), t(30), t(20), t(0)]
        );
        assert_eq!(
            by(HistoryQuery {
                trigger: Some("capacity".to_owned()),
                ..HistoryQuery::default()
            })
            .await,
            [t(20)]
        );
        assert_eq!(
            by(HistoryQuery {
                uid: Some("uid-new".to_owned()),
                ..HistoryQuery::default()
            })
            .await,
            [t(30)]
        );
        assert_eq!(
            by(HistoryQuery {
                since: Some(t(20)),
                until: Some(t(30)),
                ..HistoryQuery::default()
            })
            .await,
            [t(25), t(20)],
            "since is inclusive, until exclusive"
        );

        // Pages of two: no entry repeats or goes missing, even with an entry written between pages.
        let mut query = HistoryQuery {
            limit: 2,
            ..HistoryQuery::default()
        };
        let mut paged = Vec::new();
        let mut pages = 0;
        loop {
            let page = store.placement_history(&query).await.expect("history page");
            assert!(
                page.entries.len() <= 2,
                "page of {}: expected at most 2",
                page.entries.len()
            );
            paged.extend(page.entries.iter().map(|e| e.at));
            pages += 1;
            if pages == 1 {
                store
                    .put_placement(&placement("late", "job", t(99), one.clone()))
                    .await
                    .expect("put late");
            }
            match page.next {
                Some(next) => {
                    // The cursor survives a round trip through its text form, as in an API query.
                    query.after = Some(next.to_string().parse().expect("cursor parses"));
                }
                None => break,
            }
        }
        assert_eq!(paged, [t(40), t(30), t(25), t(20), t(0)], "paged history");
        assert_eq!(pages, 3);

        assert!(
            store.delete_placement("default", "web").await.expect("delete"),
            "delete: expected true"
        );
        assert!(
            !store
                .delete_placement("default", "web")
                .await
                .expect("delete again")
        );
        assert_eq!(
            store.get_placement("default", "web").await.expect("get deleted"),
            None
        );
        assert_eq!(by(default_web).await.len(), 3, "history outlives the placement");
        store.close().await.expect("close");
    }

    pub async fn work_revision_bumps_only_on_change_and_survives_reconnect(db: TestDb) {
        let store = db.open().await;
        register(&*store, &["a", "b"]).await;
        assert_eq!(store.get_work("a").await.expect("get before any"), None);

        let v1 = [deployment("web", 2), deployment("api", 1)];
        let write = store.put_work("a", &v1).await.expect("put v1");
        assert_eq!((write.revision, write.changed), (1, true), "first put");
        let reordered = [deployment("api", 1), deployment("web", 2)];
        let write = store.put_work("a", &reordered).await.expect("put v1 reordered");
        assert_eq!(
            (write.revision, write.changed),
            (1, false),
            "same set in another order"
        );
        let v2 = [deployment("web", 3), deployment("api", 1)];
        let write = store.put_work("a", &v2).await.expect("put v2");
        assert_eq!((write.revision, write.changed), (2, true), "changed set");
        let work = store.get_work("a").await.expect("get").expect("work of a");
        assert_eq!(
            (work.cluster.as_str(), work.revision, &work.objects[..]),
            ("a", 2, &[v2[1].clone(), v2[0].clone()][..]),
            "the set, in key order"
        );

        // Clusters count separately; an empty set is a set like any other.
        assert_eq!(store.put_work("b", &[]).await.expect("put b").revision, 1);
        assert_eq!(store.put_work("b", &[]).await.expect("put b again").revision, 1);

        store.close().await.expect("close");
        let store = db.open().await;
        let work = store
            .get_work("a")
            .await
            .expect("get after reconnect")
            .expect("work of a");
        assert_eq!(work.revision, 2, "revision after reconnect");
        let write = store.put_work("a", &v2).await.expect("put v2 after reconnect");
        assert_eq!(
            (write.revision, write.changed),
            (2, false),
            "same set after reconnect"
        );
        let write = store.put_work("a", &v1).await.expect("put v1 after reconnect");
        assert_eq!(
            (write.revision, write.changed),
            (3, true),
            "going back to an older set is a new revision"
        );
        assert_eq!(store.put_work("a", &[]).await.expect("put empty").revision, 4);

        let error = store
            .put_work("nowhere", &v1)
            .await
            .expect_err("work for an unregistered cluster");
        assert_eq!(error.kind(), StoreErrorKind::UnknownCluster, "error: {error:?}");
        assert_eq!(store.get_work("nowhere").await.expect("get unknown"), None);
        store.close().await.expect("close");
    }

    pub async fn work_changes_write_only_what_changed_and_deltas_tell_what_changed_since(db: TestDb) {
        let store = db.open().await;
        register(&*store, &["a"]).await;
        let none: &[String] = &[];
        // A change creates the set when there is none.
        let write = store
            .change_work("a", &[deployment("web", 1), deployment("api", 1)], none)
            .await
            .expect("first change");
        assert_eq!((write.revision, write.changed), (1, true), "first change");
        let write = store
            .change_work("a", &[deployment("web", 1)], none)
            .await
            .expect("the same object again");
        assert_eq!((write.revision, write.changed), (1, false), "nothing changed");
        let write = store
            .change_work(
                "a",
                &[deployment("web", 2)],
                &["Deployment/default/api".to_owned()],
            )
            .await
            .expect("a change and a removal");
        assert_eq!((write.revision, write.changed), (2, true));
        let write = store
            .change_work("a", &[], &["Deployment/default/gone".to_owned()])
            .await
            .expect("removing what is not there");
        assert_eq!(
            (write.revision, write.changed),
            (2, false),
            "removing nothing changes nothing"
        );
        let work = store.get_work("a").await.expect("get").expect("work of a");
        assert_eq!((work.revision, work.objects), (2, vec![deployment("web", 2)]));

        // What changed since each revision.
        let delta = store
            .get_work_since("a", 1)
            .await
            .expect("since 1")
            .expect("a delta");
        assert_eq!(
            (delta.revision, delta.since, &delta.changed, &delta.removed),
            (
                2,
                1,
                &vec![deployment("web", 2)],
                &vec!["Deployment/default/api".to_owned()]
            )
        );
        let delta = store
            .get_work_since("a", 0)
            .await
            .expect("since 0")
            .expect("a delta");
        assert_eq!(
            (delta.changed.len(), delta.removed.len()),
            (1, 1),
            "since the beginning: the set and what was removed: {delta:?}"
        );
        let delta = store
            .get_work_since("a", 2)
            .await
            .expect("since 2")
            .expect("a delta");
        assert!(
            delta.changed.is_empty() && delta.removed.is_empty(),
            "nothing since the current revision: {delta:?}"
        );
        assert_eq!(
            store.get_work_since("a", 3).await.expect("since 3"),
            None,
            "a revision ahead of the store's has no delta"
        );
        assert_eq!(store.get_work_since("b", 0).await.expect("no set"), None);

        // An object removed and put back is a change like any other.
        store
            .change_work("a", &[deployment("api", 5)], none)
            .await
            .expect("put back");
        let delta = store
            .get_work_since("a", 2)
            .await
            .expect("since 2")
            .expect("a delta");
        assert_eq!(
            (delta.revision, delta.changed, delta.removed),
            (3, vec![deployment("api", 5)], vec![])
        );

        // A whole-set put removes what it leaves out, as a delta shows.
        let write = store.put_work("a", &[deployment("api", 5)]).await.expect("put");
        assert_eq!((write.revision, write.changed), (4, true));
        let delta = store
            .get_work_since("a", 3)
            .await
            .expect("since 3")
            .expect("a delta");
        assert_eq!(
            (delta.changed, delta.removed),
            (vec![], vec!["Deployment/default/web".to_owned()])
        );

        // Removals are remembered for a while, then a delta from before them is refused.
        for i in 0..store::TOMBSTONE_REVISIONS + 100 {
            let name = format!("w{i}");
            store
                .change_work(
                    "a",
                    &[deployment(&name, 1)],
                    &[format!("Deployment/default/w{}", i - 1)],
                )
                .await
                .expect("churn");
        }
        let current = store.get_work("a").await.expect("get").expect("work").revision;
        assert_eq!(
            store.get_work_since("a", 3).await.expect("since 3"),
            None,
            "removals from that long ago are forgotten: the whole set must be read"
        );
        let recent = store
            .get_work_since("a", current - 10)
            .await
            .expect("recent")
            .expect("a delta from a recent revision");
        // Each step added one object and removed the one before: of the ten added since, only
        // the last remains; the ten removed are the nine others and the one before them.
        assert_eq!(
            (recent.changed.len(), recent.removed.len()),
            (1, 10),
            "{recent:?}"
        );
        store.close().await.expect("close");
    }

    pub async fn sets_stored_whole_by_an_older_hub_are_kept_by_object_after_the_upgrade(db: TestDb) {
        // The schema as the previous version left it, with one cluster's whole set in a row.
        let directory = match db.backend() {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        };
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../migrations")
            .join(directory);
        let mut before = sqlx::migrate::Migrator::new(path).await.expect("the migrations");
        before.migrations = before
            .migrations
            .iter()
            .filter(|m| m.version < 5)
            .cloned()
            .collect::<Vec<_>>()
            .into();
        let objects = json!([deployment("web", 2), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}]);
        let statements = [
            "INSERT INTO clusters (name, registered_at_ms) VALUES ('a', 1)".to_owned(),
            format!(
                "INSERT INTO work (cluster, revision, content_sha256, objects, updated_at_ms) \
                 VALUES ('a', 7, 'x', '{objects}', 1)"
            ),
        ];
        match db.backend() {
            Backend::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&format!("{}?mode=rwc", db.url()))
                    .await
                    .expect("raw SQLite");
                before.run(&pool).await.expect("migrations up to 4");
                for statement in &statements {
                    pool.execute(AssertSqlSafe(statement.clone()))
                        .await
                        .expect("an old row");
                }
                pool.close().await;
            }
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&db.url()).await.expect("raw Postgres");
                before.run(&pool).await.expect("migrations up to 4");
                for statement in &statements {
                    // The old row is written as the term's writer, as the old hub did.
                    let mut tx = pool.begin().await.expect("a transaction");
                    tx.execute("SELECT set_config('nave.term', '0', true)")
                        .await
                        .expect("term");
                    tx.execute(AssertSqlSafe(statement.clone()))
                        .await
                        .expect("an old row");
                    tx.commit().await.expect("commit");
                }
                pool.close().await;
            }
        }
        let store = db.open().await;
        let work = store.get_work("a").await.expect("get").expect("the old set");
        assert_eq!(
            (work.revision, work.objects.len()),
            (7, 2),
            "the set and its revision survive the upgrade: {work:?}"
        );
        assert_eq!(
            store.get_work_since("a", 6).await.expect("since 6"),
            None,
            "what changed before the upgrade is not known by object"
        );
        let delta = store
            .get_work_since("a", 7)
            .await
            .expect("since 7")
            .expect("a delta");
        assert!(delta.changed.is_empty() && delta.removed.is_empty(), "{delta:?}");
        let write = store
            .change_work("a", &[deployment("api", 1)], &[])
            .await
            .expect("a change after the upgrade");
        assert_eq!((write.revision, write.changed), (8, true));
        let delta = store
            .get_work_since("a", 7)
            .await
            .expect("since 7")
            .expect("a delta");
        assert_eq!(
            (delta.changed, delta.removed),
            (vec![deployment("api", 1)], vec![])
        );
        store.close().await.expect("close");
    }

    pub async fn work_status_round_trips(db: TestDb) {
        let store = db.open().await;
        register(&*store, &["a"]).await;
        assert_eq!(store.get_work_status("a").await.expect("get before any"), None);
        let status = WorkStatus {
            cluster: "a".to_owned(),
            applied_revision: 3,
            objects: json!([{"kind": "Deployment", "name": "web", "ready": 2, "pending": [
                {"pod": "web-1", "reason": "Insufficient cpu"}]}]),
            reported_at: t(10),
        };
        store.put_work_status(&status).await.expect("put status");
        assert_eq!(
            store.get_work_status("a").await.expect("get").as_ref(),
            Some(&status)
        );
        let newer = WorkStatus {
            applied_revision: 4,
            objects: json!([]),
            reported_at: t(20),
            ..status.clone()
        };
        store.put_work_status(&newer).await.expect("put newer status");
        assert_eq!(
            store.get_work_status("a").await.expect("get").as_ref(),
            Some(&newer),
            "replaced"
        );

        let unknown = WorkStatus {
            cluster: "nowhere".to_owned(),
            ..status.clone()
        };
        let error = store
            .put_work_status(&unknown)
            .await
            .expect_err("status of an unregistered cluster");
        assert_eq!(error.kind(), StoreErrorKind::UnknownCluster, "error: {error:?}");
        let huge = WorkStatus {
            applied_revision: u64::MAX,
            ..status
        };
        let error = store
            .put_work_status(&huge)
            .await
            .expect_err("revision beyond i64");
        assert_eq!(error.kind(), StoreErrorKind::InvalidInput, "error: {error:?}");
        assert_eq!(
            store.get_work_status("a").await.expect("get").as_ref(),
            Some(&newer),
            "unchanged"
        );
        store.close().await.expect("close");
    }

    pub async fn concurrent_put_work_yields_distinct_increasing_revisions(db: TestDb) {
        const TASKS: usize = 6;
        const PUTS: usize = 5;
        let store = db.open().await;
        register(&*store, &["a"]).await;
        let mut handles = Vec::new();
        for task in 0..TASKS {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let mut revisions = Vec::new();
                for put in 0..PUTS {
                    let objects = [json!({"task": task, "put": put})];
                    let write = store.put_work("a", &objects).await.expect("concurrent put");
                    assert!(
                        write.changed,
                        "task {task} put {put}: expected a change, seen {write:?}"
                    );
                    revisions.push(write.revision);
                }
                revisions
            }));
        }
        let mut all = Vec::new();
        for (task, handle) in handles.into_iter().enumerate() {
            let revisions = handle.await.expect("task finished");
            assert!(
                revisions.windows(2).all(|w| w[0] < w[1]),
                "task {task}: expected increasing, seen {revisions:?}"
            );
            all.extend(revisions);
        }
        all.sort_unstable();
        let expected: Vec<u64> = (1..=(TASKS * PUTS) as u64).collect();
        assert_eq!(all, expected, "every put got its own revision, none skipped");
        let work = store.get_work("a").await.expect("get").expect("work of a");
        assert_eq!(work.revision, (TASKS * PUTS) as u64, "final revision");
        store.close().await.expect("close");
    }

    pub async fn concurrent_rotations_leave_exactly_one_valid_credential(db: TestDb) {
        const ROUNDS: usize = 10;
        const TASKS: usize = 4;
        let store = db.open().await;
        register(&*store, &["a"]).await;
        store.issue_credential("a").await.expect("issue");
        for round in 0..ROUNDS {
            let mut handles = Vec::new();
            for _ in 0..TASKS {
                let store = store.clone();
                handles.push(tokio::spawn(async move {
                    store.rotate_credential("a").await.expect("concurrent rotate")
                }));
            }
            let mut rotated = Vec::new();
            for handle in handles {
                rotated.push(handle.await.expect("task finished"));
            }
            // Rotations of one cluster happen one after another, so the last one revoked all
            // the others: whichever order they ran in, one credential is left.
            let valid: Vec<i64> = store
                .list_credentials("a")
                .await
                .expect("list")
                .iter()
                .filter(|c| c.revoked_at.is_none())
                .map(|c| c.id)
                .collect();
            assert_eq!(
                valid.len(),
                1,
                "round {round}: expected one valid credential, seen {valid:?}"
            );
            let mut resolving = Vec::new();
            for issued in &rotated {
                if store
                    .authenticate_agent(issued.token.expose())
                    .await
                    .expect("lookup")
                    .is_some()
                {
                    resolving.push(issued.id);
                }
            }
            assert_eq!(
                resolving, valid,
                "round {round}: tokens of this round's rotations that still resolve"
            );
        }
        store.close().await.expect("close");
    }

    pub async fn migrations_are_idempotent(db: TestDb) {
        let first = db.open().await;
        register(&*first, &["a"]).await;
        first.put_work("a", &[deployment("web", 1)]).await.expect("put");
        // A second store on the same database while the first is open, then a third after both close.
        let second = db.open().await;
        assert!(
            second.get_cluster("a").await.expect("get").is_some(),
            "data written before the second connect"
        );
        first.close().await.expect("close first");
        second.close().await.expect("close second");
        let third = db.open().await;
        assert_eq!(
            third.get_work("a").await.expect("get").map(|w| w.revision),
            Some(1)
        );
        assert_eq!(third.backend(), db.backend());
        third.close().await.expect("close third");
    }

    pub async fn connect_url_picks_the_backend(db: TestDb) {
        let url = db.url();
        let store = store::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect: {e:?}"));
        assert_eq!(store.backend(), db.backend(), "backend picked for the URL");
        register(&*store, &["a"]).await;
        store.close().await.expect("close");
        let other = db.open().await;
        assert!(
            other.get_cluster("a").await.expect("get").is_some(),
            "the URL opened the same database"
        );
        other.close().await.expect("close");
    }
}

#[tokio::test]
async fn unsupported_url_scheme_is_rejected() {
    let error = store::connect("mysql://root:secret@localhost/nave")
        .await
        .expect_err("mysql URL");
    let message = error.to_string();
    assert!(
        message.contains("\"mysql\""),
        "message names the scheme: {message}"
    );
    assert!(
        !message.contains("secret"),
        "message leaks the password: {message}"
    );
}

#[tokio::test]
async fn every_new_store_gets_its_own_identity() {
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..3 {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("nave.db").display());
        let store = store::connect(&url).await.expect("opening a fresh SQLite store");
        let identity = store.identity().await.expect("reading its identity");
        assert!(
            seen.insert(identity.clone()),
            "identity {identity} seen twice in {seen:?}"
        );
    }
}

#[test]
fn redact_hides_the_password() {
    assert_eq!(redact("postgres://u:pw@h:5432/db"), "postgres://u:***@h:5432/db");
    assert_eq!(
        redact("postgres://postgres@127.0.0.1:5432/test"),
        "postgres://postgres@127.0.0.1:5432/test"
    );
}
