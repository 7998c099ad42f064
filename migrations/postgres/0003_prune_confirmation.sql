-- An admin's confirmation that a cluster's agent may remove most of what it runs at once: the
-- newest work revision it covers. Keep in step with ../sqlite/0003_prune_confirmation.sql.
ALTER TABLE clusters ADD COLUMN prune_confirmed_revision BIGINT;
