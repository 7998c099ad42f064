//! Agent credentials checked against the store once a minute, not at every request.
//!
//! Every agent request presents its credential: with 5,000 clusters that is about 800 lookups a
//! second (heartbeats, long-polls, reports), each a query on the store's one writer thread on
//! SQLite. A valid credential's identity is kept here, by the digest of its token, for at most
//! [`TTL`]; what is unknown or revoked is never kept, so a new credential works at once and
//! guessed tokens fill nothing.
//!
//! A revocation takes effect at once:
//!
//! ```text
//!  this replica: revoke / rotate / delete ── commit ──► forget the cluster's entries
//!  other replicas: ◄── change feed: Credentials(c) or Cluster(c) ──► forget c's entries
//!                  ◄── feed lost or listened anew (changes may have been missed) ──► forget all
//!  any replica: an entry older than TTL ──► checked in the store again
//! ```
//!
//! A lookup that read the store before a revocation and keeps its answer after it would undo
//! the revocation: every forgetting moves a generation on, and an answer read under an older
//! generation is not kept.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::types::{AgentIdentity, FeedEvent, StoreChange};

/// How long a valid credential is taken without asking the store: the longest a revocation
/// takes on a replica whose change feed was lost without its noticing (it notices within 15 s
/// and then forgets everything).
pub const TTL: Duration = Duration::from_secs(60);

/// Most credentials kept: beyond, lookups go to the store (every valid credential of a fleet
/// of thousands of clusters fits many times over).
const MOST: usize = 50_000;

/// Valid credentials by the SHA-256 (hex) of their token, with when each was read.
#[derive(Debug)]
pub(super) struct CredentialCache {
    ttl: Duration,
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    /// Moves on with every forgetting; an answer read under an older one is not kept.
    generation: u64,
    entries: HashMap<String, (AgentIdentity, Instant)>,
}

impl Default for CredentialCache {
    fn default() -> Self {
        CredentialCache::new(TTL)
    }
}

impl CredentialCache {
    /// A cache whose entries are taken for `ttl`.
    pub(super) fn new(ttl: Duration) -> Self {
        CredentialCache {
            ttl,
            kept: Mutex::default(),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The identity of the token whose digest is `digest`, when it was found valid within the
    /// TTL.
    pub(super) fn get(&self, digest: &str) -> Option<AgentIdentity> {
        let mut kept = self.kept();
        match kept.entries.get(digest) {
            Some((identity, read)) if read.elapsed() < self.ttl => Some(identity.clone()),
            Some(_) => {
                kept.entries.remove(digest);
                None
            }
            None => None,
        }
    }

    /// The generation to give [`keep`](Self::keep), taken before reading the store.
    pub(super) fn generation(&self) -> u64 {
        self.kept().generation
    }

    /// Keeps `identity` for `digest`, read from the store after [`generation`](Self::generation)
    /// answered `read_under`, unless something was forgotten since.
    pub(super) fn keep(&self, digest: String, identity: AgentIdentity, read_under: u64) {
        let ttl = self.ttl;
        let mut kept = self.kept();
        if kept.generation != read_under {
            return;
        }
        if kept.entries.len() >= MOST {
            kept.entries.retain(|_, (_, read)| read.elapsed() < ttl);
            if kept.entries.len() >= MOST {
                return;
            }
        }
        kept.entries.insert(digest, (identity, Instant::now()));
    }

    /// Forgets `cluster`'s credentials (revoked, rotated, or the cluster removed).
    pub(super) fn forget_cluster(&self, cluster: &str) {
        let mut kept = self.kept();
        kept.generation += 1;
        kept.entries
            .retain(|_, (identity, _)| identity.cluster != cluster);
    }

    /// Forgets every credential (changes may have been missed).
    pub(super) fn forget_all(&self) {
        let mut kept = self.kept();
        kept.generation += 1;
        kept.entries.clear();
    }

    /// Forgets what another replica's write, heard on the change feed, may have revoked.
    pub(super) fn follow(&self, event: &FeedEvent) {
        match event {
            FeedEvent::Change(StoreChange::Credentials(cluster) | StoreChange::Cluster(cluster)) => {
                self.forget_cluster(cluster);
            }
            FeedEvent::Resync => self.forget_all(),
            FeedEvent::Change(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(id: i64, cluster: &str) -> AgentIdentity {
        AgentIdentity {
            credential_id: id,
            cluster: cluster.to_owned(),
        }
    }

    #[test]
    fn a_credential_is_forgotten_with_its_cluster_and_on_a_feed_that_may_have_missed_changes() {
        let cache = CredentialCache::default();
        for (digest, id, cluster) in [("d1", 1, "eu-1"), ("d2", 2, "eu-2"), ("d3", 3, "eu-3")] {
            cache.keep(digest.to_owned(), identity(id, cluster), cache.generation());
        }
        assert_eq!(cache.get("d1"), Some(identity(1, "eu-1")));
        assert_eq!(cache.get("unknown"), None);

        cache.forget_cluster("eu-1");
        assert_eq!(cache.get("d1"), None, "eu-1's credential after it was forgotten");
        assert_eq!(cache.get("d2"), Some(identity(2, "eu-2")), "eu-2 is not eu-1");

        cache.follow(&FeedEvent::Change(StoreChange::Credentials("eu-2".to_owned())));
        assert_eq!(
            cache.get("d2"),
            None,
            "another replica revoked eu-2's credentials"
        );
        cache.follow(&FeedEvent::Change(StoreChange::Heartbeat("eu-3".to_owned())));
        assert_eq!(
            cache.get("d3"),
            Some(identity(3, "eu-3")),
            "a heartbeat revokes nothing"
        );
        cache.follow(&FeedEvent::Change(StoreChange::Cluster("eu-3".to_owned())));
        assert_eq!(cache.get("d3"), None, "another replica removed eu-3");

        cache.keep("d1".to_owned(), identity(1, "eu-1"), cache.generation());
        cache.follow(&FeedEvent::Resync);
        assert_eq!(
            cache.get("d1"),
            None,
            "a feed that may have missed changes forgets all"
        );
    }

    #[test]
    fn an_answer_read_before_a_revocation_is_not_kept_after_it() {
        let cache = CredentialCache::default();
        // A lookup reads the store (valid), the credential is revoked and forgotten, then the
        // lookup would keep what it read.
        let read_under = cache.generation();
        cache.forget_cluster("eu-1");
        cache.keep("d1".to_owned(), identity(1, "eu-1"), read_under);
        assert_eq!(cache.get("d1"), None, "kept an answer read before the revocation");
        // Read after it: kept.
        cache.keep("d1".to_owned(), identity(1, "eu-1"), cache.generation());
        assert_eq!(cache.get("d1"), Some(identity(1, "eu-1")));
    }

    #[test]
    fn an_entry_is_asked_of_the_store_again_after_its_ttl() {
        let cache = CredentialCache::new(Duration::ZERO);
        cache.keep("d1".to_owned(), identity(1, "eu-1"), cache.generation());
        assert_eq!(cache.get("d1"), None, "an entry past its TTL was taken");
        assert!(
            cache.kept().entries.is_empty(),
            "an entry past its TTL stays held"
        );
    }

    #[test]
    fn no_more_than_the_most_are_held() {
        let cache = CredentialCache::default();
        for i in 0..MOST + 10 {
            let id = i64::try_from(i).unwrap();
            cache.keep(format!("d{i}"), identity(id, "eu-1"), cache.generation());
        }
        assert_eq!(cache.kept().entries.len(), MOST);
        assert_eq!(cache.get(&format!("d{}", MOST + 5)), None, "kept beyond the most");
    }
}
