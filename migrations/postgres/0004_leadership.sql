-- Leadership: the term of the hub replica that may write placements and work, checked in the
-- same transaction as every such write, so a replica that lost the lead (paused, partitioned)
-- cannot overwrite its successor's writes. `published_term` is the term whose leader has
-- published every workload's objects (work sets are complete when it equals `term`). Keep in
-- step with ../sqlite/0004_leadership.sql.
CREATE TABLE leadership (
    singleton      SMALLINT NOT NULL PRIMARY KEY CHECK (singleton = 1),
    term           BIGINT   NOT NULL,
    holder         TEXT     NOT NULL,
    published_term BIGINT   NOT NULL,
    changed_at_ms  BIGINT   NOT NULL
);
INSERT INTO leadership (singleton, term, holder, published_term, changed_at_ms) VALUES (1, 0, '', 0, 0);

-- The database checks the term too: a write of placements or work must name the current term
-- (`SET LOCAL nave.term`, which the hub does in the same transaction), so a writer that knows
-- nothing of terms (a hub of an older version during an upgrade) is refused as well. Removing a
-- cluster's work set is an admin's act, not a leader's, so deletions of work are not checked.
CREATE FUNCTION nave_fence() RETURNS trigger AS $$
BEGIN
    IF current_setting('nave.term', true) IS DISTINCT FROM
       (SELECT term::text FROM leadership WHERE singleton = 1) THEN
        RAISE EXCEPTION 'nave: % on % by a hub that does not hold the current term (%)',
            TG_OP, TG_TABLE_NAME, coalesce(current_setting('nave.term', true), 'none');
    END IF;
    RETURN COALESCE(NEW, OLD);
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER nave_fence BEFORE INSERT OR UPDATE OR DELETE ON placements
    FOR EACH ROW EXECUTE FUNCTION nave_fence();
CREATE TRIGGER nave_fence BEFORE INSERT OR UPDATE ON work
    FOR EACH ROW EXECUTE FUNCTION nave_fence();
