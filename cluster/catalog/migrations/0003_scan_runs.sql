-- 0003: scan_runs — one row per driver start of an invocation (a first run or a resume), append-only.
--
-- What each driver start used to execute (execution settings: store, pool sizes, timeouts, retries —
-- the part of the settings that may change on a resume) and where it ran, plus its liveness lease:
-- a running driver renews heartbeat_at every few seconds. A resume is refused while another driver's
-- lease is fresh (heartbeat_at within lease_ttl_s of the server's now()); a stale lease is taken over,
-- and the new row names the run it took over (took_over). Clocks: every timestamp is the server's now().
--
-- Only heartbeat_at and ended_at of a row ever change (triggers below); DELETE and TRUNCATE are refused.
--
--   GRANT SELECT, INSERT, UPDATE (heartbeat_at, ended_at) ON scan_runs TO mirrorscan_app;

CREATE TABLE scan_runs (
    run_id         uuid PRIMARY KEY,
    invocation_id  uuid NOT NULL,                -- scan_invocations.invocation_id (no FK: it would turn the invocations' TRUNCATE refusal into an FK error)
    host           text NOT NULL,
    pid            integer NOT NULL,
    username       text,
    resumed        boolean NOT NULL,            -- false: the run that created the invocation
    took_over      uuid,                        -- the run whose stale lease this one took over
    execution      jsonb NOT NULL,              -- execution settings this driver used
    lease_ttl_s    double precision NOT NULL,   -- a lease not renewed for this long is stale
    started_at     timestamptz NOT NULL DEFAULT now(),
    heartbeat_at   timestamptz NOT NULL DEFAULT now(),
    ended_at       timestamptz                  -- null while running (or after a crash)
);

CREATE INDEX scan_runs_invocation ON scan_runs (invocation_id, started_at);

CREATE FUNCTION scan_runs_guard_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (to_jsonb(NEW) - 'heartbeat_at' - 'ended_at') IS DISTINCT FROM (to_jsonb(OLD) - 'heartbeat_at' - 'ended_at') THEN
        RAISE EXCEPTION 'scan_runs: only heartbeat_at and ended_at of run % may change', OLD.run_id
            USING ERRCODE = 'integrity_constraint_violation', TABLE = 'scan_runs',
                  CONSTRAINT = 'scan_runs_frozen';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER scan_runs_frozen BEFORE UPDATE ON scan_runs
    FOR EACH ROW EXECUTE FUNCTION scan_runs_guard_update();

CREATE FUNCTION scan_runs_refuse_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'scan_runs: % refused: driver runs are append-only', TG_OP
        USING ERRCODE = 'integrity_constraint_violation', TABLE = 'scan_runs',
              CONSTRAINT = 'scan_runs_no_' || lower(TG_OP);
END
$$;

CREATE TRIGGER scan_runs_no_delete BEFORE DELETE ON scan_runs
    FOR EACH STATEMENT EXECUTE FUNCTION scan_runs_refuse_delete();
CREATE TRIGGER scan_runs_no_truncate BEFORE TRUNCATE ON scan_runs
    FOR EACH STATEMENT EXECUTE FUNCTION scan_runs_refuse_delete();
