-- 0005: what a run's weights were, and which run it reproduces.
--
-- model_weights  the identity of each model variant's weights as the run started (cluster/models/weights.py):
--                {label: {"kind": "hub_commit", "repo", "commit"} | {"kind": "sha256", "sha256", "files"}
--                | {"kind": "api", "model", "value": "unknown"}}; null for runs recorded before this column
--                (readers say "unknown").
-- reproduces     for a run made by `mirrorscan reproduce`: the invocation whose frozen settings it reran;
--                null otherwise. Such a run never holds cells for an appending instrument (open_scan), and
--                its own grid is the full grid.
--
-- Both are frozen like every other column: the trigger of 0001 lets only status, finished_at and counts
-- change, and the application role gets no UPDATE on them (its column grant stays
-- UPDATE (status, finished_at, counts)). Nothing here widens it.

ALTER TABLE scan_invocations ADD COLUMN model_weights jsonb;
ALTER TABLE scan_invocations ADD COLUMN reproduces uuid;

CREATE INDEX scan_invocations_reproduces ON scan_invocations (reproduces) WHERE reproduces IS NOT NULL;
