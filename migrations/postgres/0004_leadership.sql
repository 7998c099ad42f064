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
