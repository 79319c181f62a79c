-- 0004: scan_runs.submitted_config — the experiment's config.json as this driver start read it.
--
-- The frozen settings (scan_invocations.settings) hold what was resolved; this column keeps what was
-- written, per driver start (a resume may run a config whose execution keys changed): the file's path and
-- its JSON exactly as parsed, with the password of a catalog_dsn removed. Other secrets never get this far:
-- the config validation refuses them. Null for runs recorded before this column existed.

ALTER TABLE scan_runs ADD COLUMN submitted_config jsonb;
