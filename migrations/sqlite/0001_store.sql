-- The hub's store, SQLite flavour. Keep in step with ../postgres/0001_store.sql: same tables,
-- columns and meaning; only the types differ.
--
-- Timestamps are INTEGER milliseconds since the Unix epoch (columns end in `_ms`), JSON is TEXT,
-- booleans are INTEGER 0/1. STRICT tables make SQLite reject a value of the wrong type instead of
-- storing it, as Postgres would.

-- Workload clusters: descriptive fields as last seen, plus the latest heartbeat's capacity model.
CREATE TABLE clusters (
    name                 TEXT    NOT NULL PRIMARY KEY,
    labels               TEXT    NOT NULL DEFAULT '{}',
    region               TEXT,
    zone                 TEXT,
    latitude             REAL,
    longitude            REAL,
    registered_at_ms     INTEGER NOT NULL,
    agent_version        TEXT,
    kubernetes_version   TEXT,
    last_heartbeat_at_ms INTEGER,
    capacity             TEXT,
    cordoned             INTEGER NOT NULL DEFAULT 0 CHECK (cordoned IN (0, 1)),
    burst_only           INTEGER NOT NULL DEFAULT 0 CHECK (burst_only IN (0, 1)),
    CHECK ((latitude IS NULL) = (longitude IS NULL))
) STRICT;

-- Per-cluster agent credentials. Only the SHA-256 of a token is stored. AUTOINCREMENT so that
-- the id of a deleted credential is never handed out again.
CREATE TABLE agent_credentials (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster       TEXT    NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    token_sha256  TEXT    NOT NULL UNIQUE,
    created_at_ms INTEGER NOT NULL,
    revoked_at_ms INTEGER
) STRICT;
CREATE INDEX agent_credentials_by_cluster ON agent_credentials (cluster, id);

-- Every heartbeat as received, pruned by retention.
CREATE TABLE heartbeats (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster        TEXT    NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    received_at_ms INTEGER NOT NULL,
    payload        TEXT    NOT NULL
) STRICT;
CREATE INDEX heartbeats_by_cluster_newest ON heartbeats (cluster, received_at_ms DESC, id DESC);

-- The current decision per MultiClusterDeployment. `decision_sha256` (of the canonical JSON)
-- tells whether a new decision differs from this one.
CREATE TABLE placements (
    namespace       TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    uid             TEXT    NOT NULL,
    generation      INTEGER NOT NULL,
    decision        TEXT    NOT NULL,
    decision_sha256 TEXT    NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
) STRICT;

-- Every change of placement, with what caused it and why.
CREATE TABLE placement_history (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    uid        TEXT    NOT NULL,
    at_ms      INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    trigger    TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    decision   TEXT    NOT NULL
) STRICT;
CREATE INDEX placement_history_newest ON placement_history (at_ms DESC, id DESC);
CREATE INDEX placement_history_by_object ON placement_history (namespace, name, at_ms DESC, id DESC);

-- Each cluster's full desired object set at a revision that only goes up. No ON DELETE CASCADE:
-- forgetting a cluster's work would restart its revisions at 1, behind what its agent has seen.
CREATE TABLE work (
    cluster        TEXT    NOT NULL PRIMARY KEY REFERENCES clusters (name),
    revision       INTEGER NOT NULL CHECK (revision > 0),
    content_sha256 TEXT    NOT NULL,
    objects        TEXT    NOT NULL,
    updated_at_ms  INTEGER NOT NULL
) STRICT;

-- The newest status report of each cluster's agent.
CREATE TABLE work_status (
    cluster          TEXT    NOT NULL PRIMARY KEY REFERENCES clusters (name) ON DELETE CASCADE,
    applied_revision INTEGER NOT NULL CHECK (applied_revision >= 0),
    objects          TEXT    NOT NULL,
    reported_at_ms   INTEGER NOT NULL
) STRICT;
