-- The hub's store, Postgres flavour. Keep in step with ../sqlite/0001_store.sql: same tables,
-- columns and meaning; only the types differ.
--
-- Timestamps are BIGINT milliseconds since the Unix epoch (columns end in `_ms`), the encoding
-- both backends share; `to_timestamp(x / 1000.0)` shows one as a date. JSON is JSONB.

-- Workload clusters: descriptive fields as last seen, plus the latest heartbeat's capacity model.
CREATE TABLE clusters (
    name                 TEXT             NOT NULL PRIMARY KEY,
    labels               JSONB            NOT NULL DEFAULT '{}',
    region               TEXT,
    zone                 TEXT,
    latitude             DOUBLE PRECISION,
    longitude            DOUBLE PRECISION,
    registered_at_ms     BIGINT           NOT NULL,
    agent_version        TEXT,
    kubernetes_version   TEXT,
    last_heartbeat_at_ms BIGINT,
    capacity             JSONB,
    cordoned             BOOLEAN          NOT NULL DEFAULT FALSE,
    burst_only           BOOLEAN          NOT NULL DEFAULT FALSE,
    CHECK ((latitude IS NULL) = (longitude IS NULL))
);

-- Per-cluster agent credentials. Only the SHA-256 of a token is stored.
CREATE TABLE agent_credentials (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster       TEXT   NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    token_sha256  TEXT   NOT NULL UNIQUE,
    created_at_ms BIGINT NOT NULL,
    revoked_at_ms BIGINT
);
CREATE INDEX agent_credentials_by_cluster ON agent_credentials (cluster, id);

-- Every heartbeat as received, pruned by retention.
CREATE TABLE heartbeats (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster        TEXT   NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    received_at_ms BIGINT NOT NULL,
    payload        JSONB  NOT NULL
);
CREATE INDEX heartbeats_by_cluster_newest ON heartbeats (cluster, received_at_ms DESC, id DESC);

-- The current decision per MultiClusterDeployment. `decision_sha256` (of the canonical JSON)
-- tells whether a new decision differs from this one.
CREATE TABLE placements (
    namespace       TEXT   NOT NULL,
    name            TEXT   NOT NULL,
    uid             TEXT   NOT NULL,
    generation      BIGINT NOT NULL,
    decision        JSONB  NOT NULL,
    decision_sha256 TEXT   NOT NULL,
    updated_at_ms   BIGINT NOT NULL,
    PRIMARY KEY (namespace, name)
);

-- Every change of placement, with what caused it and why.
CREATE TABLE placement_history (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace  TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    uid        TEXT   NOT NULL,
    at_ms      BIGINT NOT NULL,
    generation BIGINT NOT NULL,
    trigger    TEXT   NOT NULL,
    reason     TEXT   NOT NULL,
    decision   JSONB  NOT NULL
);
CREATE INDEX placement_history_newest ON placement_history (at_ms DESC, id DESC);
CREATE INDEX placement_history_by_object ON placement_history (namespace, name, at_ms DESC, id DESC);

-- Each cluster's full desired object set at a revision that only goes up. No ON DELETE CASCADE:
-- forgetting a cluster's work would restart its revisions at 1, behind what its agent has seen.
CREATE TABLE work (
    cluster        TEXT   NOT NULL PRIMARY KEY REFERENCES clusters (name),
    revision       BIGINT NOT NULL CHECK (revision > 0),
    content_sha256 TEXT   NOT NULL,
    objects        JSONB  NOT NULL,
    updated_at_ms  BIGINT NOT NULL
);

-- The newest status report of each cluster's agent.
CREATE TABLE work_status (
    cluster          TEXT   NOT NULL PRIMARY KEY REFERENCES clusters (name) ON DELETE CASCADE,
    applied_revision BIGINT NOT NULL CHECK (applied_revision >= 0),
    objects          JSONB  NOT NULL,
    reported_at_ms   BIGINT NOT NULL
);
