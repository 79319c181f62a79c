-- 0002: inference_log — one row per engine (or tap) request, append-only.
--
-- Written in batches by cluster/catalog/inference_writer.py (InferenceLogWriter): INSERT … ON CONFLICT (row_uid)
-- DO NOTHING, so re-sending a batch whose commit was in doubt never duplicates a row. Rows the
-- catalog could not take in time are spilled to Parquet beside the traces
-- (<store>/<experiment>/<invocation_id>/inference_log/) with the same columns; `mirrorscan sql`'s
-- inference_log view unions both and keeps one copy per row_uid.
--
-- Clocks: started_at is the engine's wall clock (UTC); logged_at is the server's now() at insert;
-- every *_ms is the engine's monotonic clock, as in the trace row.
--
-- Production roles: the application role gets SELECT and INSERT only (plus the sequence):
--
--   GRANT SELECT, INSERT ON inference_log TO mirrorscan_app;
--   GRANT USAGE ON SEQUENCE inference_log_id_seq TO mirrorscan_app;
--
-- UPDATE, DELETE and TRUNCATE are refused by the triggers below, whoever asks.

CREATE TABLE inference_log (
    id                 bigserial PRIMARY KEY,
    row_uid            uuid NOT NULL,            -- given by the writer when the row was added; dedup key
    probe_id           text,                     -- label|item_key|envelope|ordering (null: tap without X-Probe-Id)
    sample             integer,
    attempt            integer,
    invocation_id      uuid,                     -- scan_invocations.invocation_id (no FK: the tap may log first)
    label              text,
    endpoint           text,                     -- http(s) URL, or engine://<backend>/<model> in-process
    source             text NOT NULL CHECK (source IN ('engine', 'tap')),
    started_at         timestamptz,              -- wall clock when the request (or batch) was sent
    ttft_ms            double precision,         -- monotonic ms: request start → first content chunk
    ttft_answer_ms     double precision,         -- monotonic ms: request start → first answer chunk
    intervals_ms       double precision[],       -- monotonic ms between consecutive content chunks
    n_chunks           integer,
    total_ms           double precision,         -- monotonic ms: request start → last chunk
    decode_tok_s       double precision,         -- (completion_tokens - 1) / (total - ttft), tokens/s
    timing_scope       text,                     -- batch | request
    prompt_tokens      integer,
    completion_tokens  integer,
    status             text NOT NULL,            -- ok | error (engine); http_<code> (tap)
    error              text,
    request_headers    jsonb,                    -- X-Probe-Id …; never auth headers
    logged_at          timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX inference_log_row_uid ON inference_log (row_uid);
CREATE INDEX inference_log_probe_id ON inference_log (probe_id);
CREATE INDEX inference_log_invocation_id ON inference_log (invocation_id);

-- Append-only: UPDATE, DELETE and TRUNCATE are refused (statement-level, so even a statement that
-- matches no row is refused). CONSTRAINT names the refused operation for clients.
CREATE FUNCTION inference_log_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'inference_log: % refused: the inference log is append-only', TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              TABLE = 'inference_log',
              CONSTRAINT = 'inference_log_no_' || lower(TG_OP);
END
$$;

CREATE TRIGGER inference_log_no_update
    BEFORE UPDATE ON inference_log
    FOR EACH STATEMENT EXECUTE FUNCTION inference_log_refuse_change();

CREATE TRIGGER inference_log_no_delete
    BEFORE DELETE ON inference_log
    FOR EACH STATEMENT EXECUTE FUNCTION inference_log_refuse_change();

CREATE TRIGGER inference_log_no_truncate
    BEFORE TRUNCATE ON inference_log
    FOR EACH STATEMENT EXECUTE FUNCTION inference_log_refuse_change();

REVOKE UPDATE, DELETE, TRUNCATE ON inference_log FROM PUBLIC;
