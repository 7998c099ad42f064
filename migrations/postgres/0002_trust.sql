-- Trust: the store's identity, cluster acceptance and single-use join tokens. Keep in step with
-- ../sqlite/0002_trust.sql.

-- The store's identity, created with the schema: agents compare it with the store their last
-- work set came from, so a new or replaced store is never mistaken for the one they followed.
CREATE TABLE store_identity (
    singleton     SMALLINT NOT NULL PRIMARY KEY CHECK (singleton = 1),
    id            TEXT     NOT NULL,
    created_at_ms BIGINT   NOT NULL
);
INSERT INTO store_identity (singleton, id, created_at_ms)
VALUES (1, replace(gen_random_uuid()::text, '-', ''),
        (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT);

-- Whether the hub places work on a cluster. Clusters that joined before acceptance existed
-- keep working (TRUE); the hub sets it for each new registration.
ALTER TABLE clusters ADD COLUMN accepted BOOLEAN NOT NULL DEFAULT TRUE;

-- Join tokens an admin issues for one cluster name: usable once, until they expire. Only the
-- SHA-256 of the secret part is stored; the id is the public part, shown in lists.
CREATE TABLE join_tokens (
    id            TEXT   NOT NULL PRIMARY KEY,
    cluster       TEXT   NOT NULL,
    secret_sha256 TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    used_at_ms    BIGINT
);
