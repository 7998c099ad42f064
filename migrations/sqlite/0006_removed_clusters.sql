-- The names of clusters an admin removed, and when. The fleet's bootstrap token cannot register
-- such a name again; a join token issued for it can, and clears the row. Keep in step with
-- ../postgres/0006_removed_clusters.sql.
CREATE TABLE removed_clusters (
    name          TEXT    PRIMARY KEY NOT NULL,
    removed_at_ms INTEGER NOT NULL
) STRICT;
