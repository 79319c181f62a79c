-- 0001: scan_invocations — one row per `mirrorscan scan` run; its settings are frozen at insert.
--
-- Applied by cluster/catalog/client.py inside one transaction holding an advisory lock.
--
-- Production roles. The table owner (the role that runs migrations) can bypass the triggers
-- below by disabling them; the application must therefore connect as a different role:
--
--   CREATE ROLE mirrorscan_app LOGIN PASSWORD '...';
--   GRANT USAGE ON SCHEMA public TO mirrorscan_app;
--   GRANT SELECT ON schema_migrations TO mirrorscan_app;
--   GRANT SELECT, INSERT ON scan_invocations TO mirrorscan_app;
--   GRANT UPDATE (status, finished_at, counts) ON scan_invocations TO mirrorscan_app;
--
-- It gets no DELETE and no TRUNCATE: the column grant and the triggers refuse the same things
-- twice, so a mistake in either one does not unfreeze a run.

CREATE TABLE scan_invocations (
    invocation_id      uuid PRIMARY KEY,
    experiment         text NOT NULL,
    instrument         text NOT NULL,
    settings           jsonb NOT NULL,          -- the resolved spec, secrets removed
    settings_hash      text NOT NULL,           -- hash over what changes results
    git_sha            text,
    git_dirty          boolean,
    host               text,
    pid                integer,
    username           text,                    -- the OS user who ran it
    package_versions   jsonb,                   -- {"vllm": "0.32.0", ...}
    content_hashes     jsonb,                   -- probe-set and envelope content hashes
    store_uri          text,                    -- where the traces of this run land
    started_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    status             text NOT NULL
        CHECK (status IN ('running', 'complete', 'incomplete', 'failed', 'interrupted')),
    counts             jsonb NOT NULL DEFAULT '{}',  -- cells planned / done / failed, as the job reports
    reconstructed_from text                     -- for backfilled legacy runs: what it was rebuilt from
);

CREATE INDEX scan_invocations_experiment_started
    ON scan_invocations (experiment, started_at DESC);

-- Only status, finished_at and counts may change. The error names the columns attempted
-- (COLUMN field) and carries CONSTRAINT = 'scan_invocations_frozen' so clients can recognise it.
CREATE FUNCTION scan_invocations_refuse_frozen_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changed text;
BEGIN
    SELECT string_agg(new_row.key, ', ' ORDER BY new_row.key) INTO changed
      FROM jsonb_each(to_jsonb(NEW) - ARRAY['status', 'finished_at', 'counts']) AS new_row
     WHERE new_row.value IS DISTINCT FROM to_jsonb(OLD) -> new_row.key;
    IF changed IS NOT NULL THEN
        RAISE EXCEPTION 'scan_invocations: cannot change % of invocation %: settings of an invocation are frozen; start a new invocation instead',
                changed, OLD.invocation_id
            USING ERRCODE = 'integrity_constraint_violation',
                  TABLE = 'scan_invocations',
                  COLUMN = changed,
                  DETAIL = OLD.invocation_id::text,
                  CONSTRAINT = 'scan_invocations_frozen';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER scan_invocations_frozen
    BEFORE UPDATE ON scan_invocations
    FOR EACH ROW EXECUTE FUNCTION scan_invocations_refuse_frozen_update();

-- Statement-level, so even a DELETE that matches no row is refused, and TRUNCATE (which fires
-- no row triggers) is caught too. CONSTRAINT names the refused operation for clients.
CREATE FUNCTION scan_invocations_refuse_removal() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'scan_invocations: % refused: invocations are never removed; mark one failed or start a new invocation instead',
            TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              TABLE = 'scan_invocations',
              CONSTRAINT = 'scan_invocations_no_' || lower(TG_OP);
END
$$;

CREATE TRIGGER scan_invocations_no_delete
    BEFORE DELETE ON scan_invocations
    FOR EACH STATEMENT EXECUTE FUNCTION scan_invocations_refuse_removal();

CREATE TRIGGER scan_invocations_no_truncate
    BEFORE TRUNCATE ON scan_invocations
    FOR EACH STATEMENT EXECUTE FUNCTION scan_invocations_refuse_removal();

REVOKE DELETE, TRUNCATE ON scan_invocations FROM PUBLIC;
