-- Work sets kept by object: one row per object of a cluster's set, with the revision that last
-- changed it, so a change writes only what it changes and an agent can fetch what changed since
-- the revision it holds. A removed object stays as a tombstone (`object` NULL) with the revision
-- that removed it, until `work.deltas_from` passes it. Keep in step with
-- ../sqlite/0005_work_objects.sql.
CREATE TABLE work_objects (
    cluster        TEXT   NOT NULL,
    key            TEXT   NOT NULL,
    revision       BIGINT NOT NULL CHECK (revision > 0),
    content_sha256 TEXT   NOT NULL,
    object         JSONB,
    PRIMARY KEY (cluster, key)
);
CREATE INDEX work_objects_since ON work_objects (cluster, revision);

-- The objects of the sets stored whole so far, each at its set's revision. Their digests are
-- left empty: the next write of each object replaces it (and bumps the revision once).
INSERT INTO work_objects (cluster, key, revision, content_sha256, object)
SELECT w.cluster,
       coalesce(o.value ->> 'kind', '') || '/' ||
       coalesce(o.value -> 'metadata' ->> 'namespace', '') || '/' ||
       coalesce(o.value -> 'metadata' ->> 'name', ''),
       w.revision, '', o.value
FROM work AS w, jsonb_array_elements(w.objects) AS o(value)
ON CONFLICT (cluster, key) DO NOTHING;

-- The oldest revision a delta can start from: what changed since a revision before it may
-- include removals whose tombstones are gone (here: the sets were stored whole until now).
ALTER TABLE work ADD COLUMN deltas_from BIGINT NOT NULL DEFAULT 0;
-- The fence (0004_leadership.sql) lets this migration write as the current term's writer.
SELECT set_config('nave.term', (SELECT term::text FROM leadership WHERE singleton = 1), true);
UPDATE work SET deltas_from = revision;
ALTER TABLE work DROP COLUMN objects;
ALTER TABLE work DROP COLUMN content_sha256;

-- Writes of objects are a leader's, as writes of the sets are (see 0004_leadership.sql).
CREATE TRIGGER nave_fence BEFORE INSERT OR UPDATE ON work_objects
    FOR EACH ROW EXECUTE FUNCTION nave_fence();
