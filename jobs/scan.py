"""``mirrorscan scan`` / ``python -m mirrorscan.jobs.scan``: run an experiment's grid and store every cell.

Flow: validate config.json (exit 2 on any problem, nothing written) → record the invocation in the
catalog (settings frozen) → expand the grid, minus cells already stored → Ray Data over one actor pool
per model → Parquet parts in the store → final counts and status in the catalog.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.cluster.runs import pid_alive
from mirrorscan.grid.cells import add_seeds, plan_attempts, with_probe_ids
from mirrorscan.grid.errors import CatalogError, ConfigError
from mirrorscan.grid.names import check_experiment_name
from mirrorscan.grid.instrument import InstrumentRef
from mirrorscan.grid.records import ModelVariant, RunContext
from mirrorscan.grid.settings import execution, settings_hash, shaping_differences
from mirrorscan.grid.spec import API_BACKENDS, Spec, load_spec
from mirrorscan.jobs.errors import reports_user_errors
from mirrorscan.jobs.scan_inputs import (CONFIG_ORIGIN_ENV, changed_inputs, changed_inputs_detail, check_experiment_home,  # noqa: F401
                              config_origin, content_hashes, model_weights, submitted_config)
from mirrorscan.jobs.preflight import (check_context, check_empty_prefixes, check_engines, check_template_overrides,
                             resolve_catalog, resolve_store)

EXIT_OK, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 130
OUTCOME_WAIT_S = 120.0
"""How long a finished scan keeps reconnecting to a lost catalog to record its final status (seconds)."""
LOG_SETTLE_S = 45.0
"""How long a finished run waits for inference_log rows queued in engine actors to be written or spilled (s)."""

HELP = """\
Run the grid of one experiment (experiments/<name>/config.json) and store every cell.

Rerun semantics:
  scan DIR            a NEW invocation of the full grid; its traces sit beside those of earlier
                      invocations (nothing is overwritten, nothing is skipped).
  scan DIR --resume   finishes the newest unfinished invocation of this experiment, rebuilding the
                      grid from its FROZEN settings. If config.json now differs from them, it exits
                      with code 2 and lists the differing fields. Cells with a successful row are
                      skipped; cells whose rows are all errors are retried until they have had
                      --max-attempts attempts. After a crash (even kill -9) a resume leaves every cell
                      exactly once among the successful rows.

Where things go: traces to <store>/<experiment>/<invocation_id>/traces/*.parquet (store from --store,
config "store", $MIRRORSCAN_STORE, else $MIRRORSCAN_HOME/store); the invocation record to the catalog
(--catalog-dsn, config "catalog_dsn", $MIRRORSCAN_CATALOG_DSN, else an embedded PostgreSQL under
$MIRRORSCAN_HOME started on demand).

Exit codes: 0 every cell has a successful row; 1 some cells errored or are missing; 2 bad input
(config, probe set, envelopes, flags), nothing written; 130 interrupted.
"""


def build_parser(prog: str = "mirrorscan scan") -> argparse.ArgumentParser:
    """The scan command's argument parser (shared by ``mirrorscan scan`` and ``python -m mirrorscan.jobs.scan``)."""
    p = argparse.ArgumentParser(prog=prog, description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", help="experiment folder holding config.json (or the config.json itself)")
    p.add_argument("--resume", action="store_true", help="finish the newest unfinished invocation (see above)")
    p.add_argument("--max-attempts", type=int, default=3, metavar="N",
                   help="with --resume: attempts per cell before it is given up (default 3)")
    p.add_argument("--store", help="trace store URI (local folder or s3://bucket/prefix)")
    p.add_argument("--catalog-dsn", help="PostgreSQL DSN of the catalog (default: embedded)")
    p.add_argument("--ray-address", help="join this Ray cluster (default: $RAY_ADDRESS, else start Ray locally)")
    p.add_argument("--quiet", action="store_true", help="no progress bar, and no warning Ray itself raises")
    p.add_argument("--as", dest="as_name", metavar="NAME",
                   help="the experiment's name (default: the folder's name). A folder whose name already belongs "
                        "to another folder's runs is refused; --as names it explicitly")
    p.add_argument("--accept-changed-probes", action="store_true",
                   help="appending instruments (open_scan): accept probes whose text changed under the same id as new "
                        "versions (recorded in the invocation; older rows are kept and marked superseded)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate and print the cells per model, a bound on generated tokens and what --resume "
                        "would run; start nothing (no Ray, no engine, no catalog server) and write nothing")
    return p


@dataclass
class ScanResult:
    """What one scan did: the invocation, where its traces are and how many cells ended how (an appending
    instrument with nothing left to run makes no invocation: ``invocation_id`` is "")."""

    invocation_id: str
    experiment: str
    status: str
    traces_path: str
    counts: dict = field(default_factory=dict)
    log_path: str = ""
    """The file holding the run's engine and Ray output (``cluster.run_log``)."""
    instrument: str = ""
    """The instrument's registry name or import path (the summary prints its suggested query)."""


def cell_counts(store, experiment: str, invocation_id: str, n_cells: int) -> dict:
    """Cells by status from the stored rows: ok (≥1 successful row), error (only error rows), missing."""
    rows = store.read(experiment, invocation_id, columns=["probe_id", "sample", "error"])
    ok_keys = rows.filter(pc.is_null(rows.column("error"))).group_by(["probe_id", "sample"]).aggregate([])
    all_keys = rows.group_by(["probe_id", "sample"]).aggregate([])
    ok = ok_keys.num_rows
    return {"cells": n_cells, "ok": ok, "error": all_keys.num_rows - ok, "missing": n_cells - all_keys.num_rows,
            "rows": rows.num_rows,
            "error_rows": rows.num_rows - pc.sum(pc.is_null(rows.column("error")), min_count=0).as_py()}


def _resume_target(catalog, spec: Spec, settings: dict, invocation_id: str | None = None) -> dict:
    """The invocation a resume finishes: ``invocation_id``, else the experiment's newest unfinished one; refused
    when there is none, its inputs or result-shaping settings changed, or another process still runs it."""
    inv = catalog.newest_unfinished(spec.experiment) if invocation_id is None else catalog.get_invocation(invocation_id)
    if invocation_id is None and inv is None:
        raise ConfigError(spec.config_path, "--resume", f"experiment {spec.experiment!r} has no unfinished invocation",
                          "run scan without --resume to start a new invocation")
    if inv is None or inv["status"] == "complete":
        raise ConfigError(spec.config_path, "--resume", f"invocation {invocation_id} is "
                          f"{'complete' if inv else 'not in the catalog'}", "run without --resume to start a new one")
    changed = changed_inputs(inv, spec)
    if changed:
        raise ConfigError(spec.config_path, ", ".join(changed),
                          f"file content changed since invocation {inv['invocation_id']} started "
                          f"({changed_inputs_detail(inv, spec)})",
                          "put the file back as it was, or start a new invocation without --resume")
    diffs = shaping_differences(inv["settings"], settings)
    if diffs:
        raise ConfigError(spec.config_path, ", ".join(diffs),
                          f"differs from the frozen settings of invocation {inv['invocation_id']}",
                          "restore those fields in config.json, or start a new invocation without --resume")
    if inv["status"] == "running" and inv["host"] == socket.gethostname() and inv["pid"] != os.getpid() \
            and pid_alive(int(inv["pid"])) and not catalog.execute(   # an invocation from before driver runs
                "SELECT 1 FROM scan_runs WHERE invocation_id = %s", [inv["invocation_id"]]):
        raise ConfigError(spec.config_path, "--resume", f"invocation {inv['invocation_id']} is still running (pid {inv['pid']})",
                          "wait for it to finish or stop that process first")
    return inv


def run_scan(experiment: str, *, resume: bool = False, max_attempts: int = 3, store: str | None = None,
             catalog_dsn: str | None = None, ray_address: str | None = None, quiet: bool = False,
             as_name: str | None = None, accept_changed_probes: bool = False) -> ScanResult:
    """Run (or resume) an experiment's grid; return the invocation id, final status, counts and traces path.
    ``as_name`` names the experiment explicitly (default: its folder's name, which must not already belong
    to another folder's runs). ``accept_changed_probes``: an appending instrument (open_scan) takes probes whose
    text changed under their id as new versions instead of refusing them."""
    if max_attempts < 1:
        raise ConfigError("", "--max-attempts", f"is {max_attempts}", "use 1 or more")
    spec = load_spec(experiment)
    if as_name is not None:
        spec.experiment = check_experiment_name(as_name, "", "--as")
    return run_spec(spec, resume=resume, max_attempts=max_attempts, store=store, catalog_dsn=catalog_dsn,
                    ray_address=ray_address, quiet=quiet, check_home=as_name is None,
                    accept_changed_probes=accept_changed_probes)


@dataclass(frozen=True)
class Reproduction:
    """What makes a new invocation a reproduction of an earlier one (``mirrorscan reproduce``)."""

    of: str
    """The invocation id reproduced (catalog ``reproduces``; also in the manifest and ``execution``)."""
    cells: pa.Table | None = None
    """The first stage's cells when they cannot come from the item files (their hashes changed): rebuilt from
    the coordinates stored in the traces; None: the instrument expands them from the files."""
    submitted: dict = field(default_factory=dict)
    """What the driver run records as submitted (the original's config file where one is known)."""
    sources: dict | None = None
    """Label → resolved model source, resolved by the caller (None: resolved here, as a scan does)."""
    resumes: str | None = None
    """An unfinished reproduction of ``of`` to finish (``reproduce --resume``), its stored cells kept; None: a
    new invocation."""
    warnings: tuple[str, ...] = ()
    """What could not be restored (``results.reproduce.Plan.warnings``), recorded with the new invocation as
    ``settings.execution.reproduce_warnings`` (not hashed)."""


def run_spec(spec: Spec, *, resume: bool = False, max_attempts: int = 3, store: str | None = None,
             catalog_dsn: str | None = None, ray_address: str | None = None, quiet: bool = False,
             check_home: bool = True, accept_changed_probes: bool = False,
             reproduction: Reproduction | None = None) -> ScanResult:
    """Run (or resume) the grid of a validated ``spec`` (see ``run_scan``). ``check_home``: refuse an
    experiment name that belongs to another folder's runs. ``reproduction``: a new invocation that reruns an
    earlier one's full grid (no cell counts as held elsewhere, and it holds none for later scans), or with
    its ``resumes`` the resume of such an invocation."""
    from mirrorscan.cluster import runs
    from mirrorscan.cluster.catalog import Catalog, resolve_dsn
    from mirrorscan.cluster.models import resolve_model_source
    from mirrorscan.cluster.provenance import provenance
    from mirrorscan.cluster.run_log import RunLog, log_path
    from mirrorscan.cluster.store import open_store

    check_engines(spec)
    check_template_overrides(spec)
    spec.values["store"] = resolve_store(store, spec)
    settings = spec.settings()
    sources = dict(reproduction.sources) if reproduction is not None and reproduction.sources is not None else {
        m.label: m.model if m.backend in API_BACKENDS   # an API model is a name at its endpoint
        else resolve_model_source(m.model, spec.config_path, f"models[{i}].model")
        for i, m in enumerate(spec.models)}
    check_context(spec, sources)
    check_empty_prefixes(spec, sources, reproduction.cells if reproduction is not None else None)
    trace_store = open_store(spec.values["store"])
    trace_store.check_writable()   # before the catalog records anything
    if not (ray_address or os.environ.get("RAY_ADDRESS")) or not trace_store.is_local:
        from mirrorscan.cluster.home import check_home_writable

        check_home_writable()   # a local Ray keeps its token there, a remote store's run log goes there
    dsn = resolve_dsn(resolve_catalog(catalog_dsn, spec))
    with Catalog(dsn) as catalog:
        if check_home and reproduction is None:
            check_experiment_home(catalog, spec)
        resumes = reproduction.resumes if reproduction is not None else None
        resume = resume or resumes is not None
        if resume:
            inv = _resume_target(catalog, spec, settings, resumes)
            invocation_id = str(inv["invocation_id"])
            if inv.get("store_uri") and inv["store_uri"] != spec.values["store"]:
                if not quiet:
                    print(f"note: resuming in the invocation's own store {inv['store_uri']} "
                          f"(not {spec.values['store']})", file=sys.stderr)
                spec.values["store"] = inv["store_uri"]
                settings = spec.settings()
                trace_store = open_store(spec.values["store"])
            reproduces = (inv["settings"].get("execution") or {}).get("reproduces")
            if reproduces:   # a reproduction stays one: its full grid, holding no cells
                settings["execution"]["reproduces"] = reproduces
                if reproduction is not None and reproduction.warnings:
                    settings["execution"]["reproduce_warnings"] = list(reproduction.warnings)
            # before touching the store: refused while another driver runs it (or, appending, its experiment)
            with catalog.transaction():
                if appends(settings, reproduction):
                    runs.refuse_concurrent_append(catalog, spec.experiment, spec.config_path,
                                                  invocation_id=invocation_id)
                driver = runs.acquire(catalog, invocation_id, execution(settings), resumed=True,
                                      config_file=spec.config_path,
                                      submitted=reproduction.submitted if reproduction is not None else submitted_config(spec))
            removed, quarantined = trace_store.cleanup(spec.experiment, invocation_id)
            if not quiet and (removed or quarantined):
                print(f"resume: removed {len(removed)} stale temporary part(s), quarantined {len(quarantined)} unreadable part(s)",
                      file=sys.stderr)
            catalog.update_progress(invocation_id, "running", inv.get("counts") or {})
        else:
            notes, nothing_left = check_append(spec, settings, sources, trace_store, accept_changed_probes, catalog) \
                if reproduction is None else ([], False)   # a reproduction reruns the full grid
            for line in notes:
                print(line, file=sys.stderr)
            if nothing_left:
                return ScanResult("", spec.experiment, "complete", "", {"cells": 0, "ok": 0})
            if notes:
                settings["execution"]["append_notes"] = notes   # recorded with the invocation, not hashed
            if reproduction is not None:
                settings["execution"]["reproduces"] = reproduction.of   # not hashed; a resume reads it
                if reproduction.warnings:
                    settings["execution"]["reproduce_warnings"] = list(reproduction.warnings)
            invocation_id = str(uuid.uuid4())
            prov = provenance()
            weights = model_weights(spec, sources)
            n_cells = reproduction.cells.num_rows if reproduction is not None and reproduction.cells is not None \
                else spec.n_cells()
            with catalog.transaction():   # appending: refused while another scan of the experiment runs
                if appends(settings, reproduction):
                    runs.refuse_concurrent_append(catalog, spec.experiment, spec.config_path)
                catalog.create_invocation({
                    "invocation_id": invocation_id, "experiment": spec.experiment, "instrument": spec.instrument.name,
                    "settings": settings, "settings_hash": settings_hash(settings), **prov,
                    "content_hashes": content_hashes(spec), "model_weights": weights,
                    "reproduces": reproduction.of if reproduction is not None else None,
                    "store_uri": spec.values["store"], "status": "running", "counts": {"cells": n_cells}})
                trace_store.write_manifest(spec.experiment, invocation_id, {
                    "invocation_id": invocation_id, "settings": settings, "provenance": prov, "model_sources": sources,
                    "model_weights": weights, **({"reproduces": reproduction.of} if reproduction is not None else {})})
                driver = runs.acquire(catalog, invocation_id, execution(settings), resumed=False,
                                      config_file=spec.config_path,
                                      submitted=reproduction.submitted if reproduction is not None else submitted_config(spec))
        # one machine-readable line before any work, so a submitted job's log names its invocation at once
        print(f"mirrorscan-invocation: {invocation_id} experiment={spec.experiment} "
              f"{'resumed' if resume else 'new'}", file=sys.stderr, flush=True)
        if driver.took_over and not quiet:
            print(f"note: took over the stale lease of driver run {driver.took_over}", file=sys.stderr)
        driver.start_heartbeat()
        log = log_path(trace_store, spec.experiment, invocation_id)
        if not quiet:
            print(f"log: {log} (engine and Ray output)", file=sys.stderr, flush=True)
        try:
            with RunLog(log):
                result = _execute(spec, settings, sources, invocation_id, trace_store, catalog, max_attempts,
                                  ray_address, quiet, dsn, driver,
                                  first=reproduction.cells if reproduction is not None else None)
        finally:
            driver.end(catalog)
    result.log_path = str(log)
    return result


def appends(settings: dict, reproduction: Reproduction | None) -> bool:
    """Whether this run appends to its experiment (an instrument holding cells across invocations, not a
    reproduction): then one driver at a time may run the experiment (``cluster.runs.refuse_concurrent_append``)."""
    return reproduction is None and getattr(instrument_ref(settings).instrument, "done_cells", None) is not None


NO_INVOCATION = "00000000-0000-0000-0000-000000000000"
"""An invocation id no run has: what "this invocation" holds before it exists (nothing)."""


def earlier_scans(catalog, experiment: str) -> list[tuple[str, object, dict]]:
    """The experiment's scan invocations as (invocation id, start, frozen instrument settings), oldest first:
    neither imports nor reproductions. The instrument reads what it needs of them (open_scan: which text each
    probe had)."""
    rows = catalog.execute(
        "SELECT invocation_id::text, started_at, settings->'instrument_settings' FROM "
        "scan_invocations WHERE experiment = %s AND reproduces IS NULL AND reconstructed_from IS NULL AND "
        "settings->'execution'->>'reproduces' IS NULL ORDER BY started_at, invocation_id", [experiment])
    return [(i, t, s or {}) for i, t, s in rows]


def check_append(spec: Spec, settings: dict, sources: dict, trace_store, accept_changed: bool,
                 catalog=None) -> tuple[list[str], bool]:
    """Before a new invocation of an instrument that holds cells across invocations (``done_cells``): refuse a
    label that earlier invocations ran with another model, let the instrument check its items
    (``check_append``: open_scan's changed probes) and return (lines to print, whether nothing is left to
    run). Other instruments: ([], False)."""
    from mirrorscan.cluster.stages import earlier_rows, of_sources, stage_grids

    ref = instrument_ref(settings)
    if getattr(ref.instrument, "done_cells", None) is None:
        return [], False
    earlier = earlier_rows(trace_store, spec.experiment, NO_INVOCATION, ref)
    scanned = getattr(ref.instrument, "scanned_rows", None)   # imported rows name their models as their file did
    own = scanned(earlier) if scanned is not None else earlier
    if own.num_rows:
        pairs = own.group_by(["label", "model", "model_canonical"]).aggregate([]).to_pylist()
        for i, m in enumerate(spec.models):
            other = next((p for p in pairs if p["label"] == m.label and p["model_canonical"] != sources[m.label]), None)
            if other is not None:
                raise ConfigError(spec.config_path, f"models[{i}].label", f"label {m.label!r} already names "
                                  f"{other['model']!r} ({other['model_canonical']}) in experiment {spec.experiment!r}, "
                                  f"and now names {m.model!r} ({sources[m.label]})",
                                  "give this model its own label (two models never share one in an experiment)")
    check = getattr(ref.instrument, "check_append", None)
    notes = list(check(ref.spec, earlier, accept_changed, scans=earlier_scans(catalog, spec.experiment))
                 if catalog is not None else check(ref.spec, earlier, accept_changed)) if check is not None else []
    if notes:   # a recorded change (a changed or reverted probe, a new series) makes an invocation, cells or not
        return notes, False
    for stage in stage_grids(ref, grid_cells(settings), trace_store, spec.experiment, NO_INVOCATION, sources,
                             of_sources(earlier, sources)):
        if stage.cells.num_rows:
            return notes, False
    return notes + [f"nothing to do: every cell of experiment {spec.experiment!r} is already held by an earlier "
                    f"invocation in this series (no new invocation was made)"], True


def instrument_ref(settings: dict) -> InstrumentRef:
    """The instrument of (format 2) settings, as it travels to Ray workers."""
    return InstrumentRef(settings["instrument"], settings["instrument_settings"])


def grid_cells(settings: dict) -> pa.Table:
    """The full grid of (format 2) settings: the instrument's cells for every model label, with probe ids."""
    ref = instrument_ref(settings)
    labels = [m["label"] for m in settings["models"]]
    return with_probe_ids(ref.instrument.cells(ref.spec, labels, settings["samples"]), instrument=ref.name)


def _execute(spec, settings, sources, invocation_id, trace_store, catalog, max_attempts, ray_address, quiet,
             dsn: str | None = None, driver=None, first: pa.Table | None = None) -> ScanResult:
    """Expand the grid from frozen ``settings`` (or take ``first``, the first stage's cells with probe ids),
    run what is left stage by stage (``cluster.stages``), and record the outcome. A reproduction
    (``execution.reproduces``) runs its full grid: no cell counts as held by another invocation."""
    from mirrorscan.cluster.stages import stage_grids

    experiment = spec.experiment
    n_cells, given_up, held = 0, 0, 0
    status = "running"
    hold = not settings.get("execution", {}).get("reproduces")
    try:
        for stage in stage_grids(instrument_ref(settings), grid_cells(settings) if first is None else first,
                                 trace_store, experiment, invocation_id, sources, hold=hold):
            n_cells += stage.cells.num_rows
            held += stage.held_elsewhere
            prior = trace_store.read(experiment, invocation_id, columns=["probe_id", "sample", "error"])
            todo, gave_up = plan_attempts(stage.cells, prior, max_attempts)
            given_up += gave_up.num_rows
            if todo.num_rows:
                _run_stage(add_seeds(todo, settings["seed"]), settings, sources, invocation_id, trace_store,
                           catalog, quiet, ray_address, dsn, max_attempts, driver, stage.name)
        counts = cell_counts(trace_store, experiment, invocation_id, n_cells)
        counts["given_up"] = given_up
        if held:
            counts["held_elsewhere"] = held
        status = "complete" if counts["ok"] == counts["cells"] else "incomplete"
    except KeyboardInterrupt:
        status, counts = "interrupted", cell_counts(trace_store, experiment, invocation_id, n_cells)
        raise
    except BaseException:
        status, counts = "failed", cell_counts(trace_store, experiment, invocation_id, n_cells)
        raise
    finally:
        if status != "running":
            index_rows(trace_store, experiment, invocation_id, settings)
            record_outcome(catalog, trace_store, spec, invocation_id, status, counts,
                           raise_on_failure=status in ("complete", "incomplete"))
    return ScanResult(invocation_id, experiment, status,
                      trace_store.display(trace_store.traces_dir(experiment, invocation_id)), counts,
                      instrument=settings["instrument"])


def index_rows(trace_store, experiment: str, invocation_id: str, settings: dict) -> None:
    """For an instrument that holds cells across invocations: write the invocation's row index, which the next
    scan's plan reads instead of every part (``cluster.row_index``). A failure only costs that speed."""
    from mirrorscan.cluster.row_index import write_index
    from mirrorscan.cluster.stages import index_columns
    from mirrorscan.grid.trace_schema import trace_schema

    ref = instrument_ref(settings)
    if getattr(ref.instrument, "done_cells", None) is None:
        return
    try:
        write_index(trace_store, experiment, invocation_id, index_columns(ref), trace_schema(ref.instrument.columns))
    except Exception as exc:   # the parts are the data; the index is a cache
        print(f"warning: the row index of invocation {invocation_id} was not written ({type(exc).__name__}: {exc}); "
              f"the next scan reads its parts instead", file=sys.stderr)


def _run_stage(todo, settings, sources, invocation_id, trace_store, catalog, quiet, ray_address, dsn, max_attempts,
               driver, stage: str) -> None:
    """Run one stage's cells, then wait (bounded) for their inference_log rows."""
    experiment = settings["experiment"]
    before = (loggable_rows(trace_store, experiment, invocation_id),
              logged_rows(trace_store, catalog, experiment, invocation_id))
    _run_cells(todo, settings, sources, invocation_id, experiment, catalog, quiet, ray_address, dsn,
               max_attempts, driver, stage)
    missing = await_inference_log(trace_store, catalog, experiment, invocation_id, before)
    if missing:
        print(f"warning: {missing} inference_log row(s) of invocation {invocation_id} were neither in the "
              f"catalog nor spilled {LOG_SETTLE_S:.0f} s after the run; the engine actors keep trying "
              f"while they live", file=sys.stderr)


def loggable_rows(trace_store, experiment: str, invocation_id: str) -> int:
    """Trace rows of the invocation that should have an inference_log row: all but the error rows this
    driver writes for a died batch (``EngineActorDied``), which answered no request."""
    from mirrorscan.cluster.crash_journal import DIED

    errors = trace_store.read(experiment, invocation_id, columns=["error"]).column("error")
    died = pc.fill_null(pc.starts_with(errors, DIED), False).cast(pa.int64())
    return len(errors) - pc.sum(died, min_count=0).as_py()


def logged_rows(trace_store, catalog, experiment: str, invocation_id: str) -> int:
    """inference_log rows of the invocation, in the catalog plus spilled beside the traces (a row is never
    in both); while the catalog is unreachable only the spilled ones are counted."""
    from mirrorscan.cluster.inference_log import spill_dataset

    in_catalog = 0
    try:
        if not catalog.connected:
            catalog.reconnect()
        in_catalog = catalog.execute("SELECT count(*) FROM inference_log WHERE invocation_id = %s",
                                     [invocation_id])[0][0]
    except CatalogError:
        pass
    return in_catalog + spill_dataset(trace_store, experiment, invocation_id).count_rows()


def await_inference_log(trace_store, catalog, experiment: str, invocation_id: str, before: tuple[int, int],
                        timeout_s: float | None = None) -> int:
    """Wait at most ``timeout_s`` seconds (default LOG_SETTLE_S) until every trace row this run added has its
    inference_log row, in the catalog or spilled. ``before``: (``loggable_rows``, ``logged_rows``) taken
    before the run, so rows lost by an earlier crash are not waited for. Engine actors write log rows off
    the hot path: with a healthy catalog they are in before a batch is counted, but rows queued during a
    catalog outage are written or spilled in the background, and this process must not end (and take a
    local Ray's actors with it) before they land. Returns the number of this run's rows still unaccounted
    for (0: settled)."""
    timeout_s = LOG_SETTLE_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    added = loggable_rows(trace_store, experiment, invocation_id) - before[0]   # the traces are all in
    while True:
        missing = added - (logged_rows(trace_store, catalog, experiment, invocation_id) - before[1])
        if missing <= 0 or time.monotonic() >= deadline:
            return max(0, missing)
        time.sleep(0.5)


def record_outcome(catalog, trace_store, spec: Spec, invocation_id: str, status: str, counts: dict, *,
                   wait_s: float | None = None, raise_on_failure: bool = True) -> None:
    """Record an invocation's final status and counts in the catalog, reconnecting to a catalog that was
    lost (restarted or unreachable) for up to ``wait_s`` seconds (default $MIRRORSCAN_CATALOG_FINAL_WAIT_S,
    else OUTCOME_WAIT_S). If it stays unreachable, the outcome is kept beside the traces
    (``<invocation>/outcome/<time>.json``) and a CatalogError says so and how to record it later
    (``--resume``, which reruns nothing stored); with ``raise_on_failure`` False that is a warning only
    (the scan is already failing for another reason)."""
    wait_s = float(os.environ.get("MIRRORSCAN_CATALOG_FINAL_WAIT_S", OUTCOME_WAIT_S)) if wait_s is None else wait_s
    deadline, delay = time.monotonic() + wait_s, 0.5
    while True:
        try:
            if not catalog.connected:
                catalog.reconnect()
            catalog.update_progress(invocation_id, status, counts, finished=True)
            return
        except CatalogError as exc:
            if catalog.connected or time.monotonic() >= deadline:   # a refusal, or out of time
                problem = exc
                break
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 10.0)
    if catalog.connected:
        raise problem
    outcome = {"invocation_id": invocation_id, "experiment": spec.experiment, "status": status, "counts": counts,
               "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "catalog_error": str(problem)}
    path = f"{trace_store.invocation_dir(spec.experiment, invocation_id)}/outcome/" \
           f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.json"
    trace_store.objects.put(path, json.dumps(outcome, indent=2, default=str).encode())
    message = (f"the catalog stayed unreachable for {wait_s:.0f} s at the end of invocation {invocation_id}, so its "
               f"final status ({status}: {counts.get('ok', 0)}/{counts.get('cells', 0)} cells ok) is kept in "
               f"{trace_store.display(path)}; the traces are all stored. Once the catalog is back, "
               f"`mirrorscan scan {Path(spec.config_path).parent} --resume` records it (nothing stored is rerun)")
    if raise_on_failure:
        raise CatalogError(f"catalog: {message}") from None
    print(f"warning: {message}", file=sys.stderr)


def _run_cells(todo: pa.Table, settings: dict, sources: dict, invocation_id: str, experiment: str, catalog,
               quiet: bool, ray_address: str | None, dsn: str | None = None, max_attempts: int = 3,
               driver=None, stage: str = "") -> None:
    from tqdm import tqdm

    from mirrorscan.cluster.ray_session import ensure_ray
    from mirrorscan.cluster.run_log import attach_ray_output
    from mirrorscan.cluster.sweep import concurrent_models, run_grid
    from mirrorscan.jobs.progress import ModelProgress

    title = f"scan {experiment}" + (f" ({stage})" if stage else "")
    bar = tqdm(total=todo.num_rows, unit="cell", desc=f"{title} · starting Ray", disable=quiet, file=sys.stderr,
               dynamic_ncols=True, smoothing=0.1)   # the bar says what it waits for until cells land
    ensure_ray(ray_address)
    attach_ray_output()   # forwarded engine output goes to the run's log file
    if _SIGTERM_INTERRUPTS:
        signal.signal(signal.SIGTERM, _terminated)
    ref = instrument_ref(settings)
    wrapper_version = getattr(ref.instrument, "wrapper_version", None)
    run = RunContext(invocation_id=invocation_id, experiment=experiment, instrument=ref.instrument.name,
                     envelope_version=wrapper_version(ref.spec) if wrapper_version else None,
                     catalog_dsn=dsn, store_uri=settings["execution"]["store"])   # actors write inference_log rows there
    done = {"rows": 0, "errors": 0}
    last_update = [time.monotonic()]
    variants = [ModelVariant.from_settings(m) for m in settings["models"]]
    at_once = concurrent_models(settings["execution"].get("max_concurrent_models"), variants,
                                joined=bool(ray_address or os.environ.get("RAY_ADDRESS")))
    per_model = ModelProgress(todo, title)

    def on_model(variant: ModelVariant) -> None:
        per_model.loading(variant)
        bar.set_description(per_model.description(), refresh=True)

    def on_part(rows: int, errors: int, label: str) -> None:
        if driver is not None:
            driver.check()   # a driver whose lease lapsed stops: another may have taken the invocation over
        per_model.landed(label, rows)
        done["rows"] += rows
        done["errors"] += errors
        bar.set_description(per_model.description(), refresh=False)
        bar.update(rows)
        bar.set_postfix(errors=done["errors"], refresh=False)
        # progress in the catalog, at most every 5 s (a lost catalog: a reconnect try at most every 30 s)
        if time.monotonic() - last_update[0] > (5 if catalog.connected else 30):
            last_update[0] = time.monotonic()
            try:
                if not catalog.connected:
                    catalog.reconnect()
                catalog.update_progress(invocation_id, "running", {"cells_this_run": todo.num_rows, **done})
            except CatalogError:
                pass   # progress is advisory; the final status is written at the end (record_outcome)
    try:
        run_grid(todo, variants, sources, run, ref, store_uri=settings["execution"]["store"],
                 batch_size=settings["batch_size"], pool_size=settings["execution"]["actor_pool_size"],
                 on_part=on_part, max_attempts=max_attempts, on_model=on_model, max_concurrent_models=at_once)
    finally:
        bar.close()


def print_summary(result: ScanResult, out=sys.stdout) -> None:
    """Print the invocation id, cells by status and where the Parquet is."""
    c = result.counts
    if not result.invocation_id:   # an appending instrument with nothing left: no invocation was made
        print(f"experiment {result.experiment}: nothing to do, no new invocation", file=out)
        return
    print(f"invocation {result.invocation_id}  experiment {result.experiment}  status {result.status}", file=out)
    print(f"cells: {c.get('cells', 0)} total · {c.get('ok', 0)} ok · {c.get('error', 0)} error · "
          f"{c.get('missing', 0)} missing  ({c.get('rows', 0)} rows, {c.get('error_rows', 0)} error rows)"
          + (f" · {c['held_elsewhere']} held by earlier invocations" if c.get("held_elsewhere") else ""), file=out)
    print(f"traces: {result.traces_path}/", file=out)
    if result.log_path:
        print(f"log:    {result.log_path}", file=out)
    print(f"query:  mirrorscan sql \"{summary_query(result)}\"", file=out)


def summary_query(result: ScanResult) -> str:
    """The ``mirrorscan sql`` query the summary suggests for the result's invocation (its instrument's own,
    ``grid.instrument.suggested_query``), on one line."""
    from mirrorscan.grid.instrument import resolve, suggested_query

    instrument = resolve(result.instrument) if result.instrument else None
    return " ".join(suggested_query(instrument, result.invocation_id).split())


def quiet_ray_warnings() -> None:
    """For ``--quiet``: Ray's own advice to its users (a ``UserWarning`` such as Ray Data's "the operator only
    received 1 input(s)" when the grid has fewer blocks than the actor pool) is not printed; warnings of
    mirrorscan and of the engines still are."""
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module=r"ray(\.|$)")


_SIGTERM_INTERRUPTS = False
"""Set by the CLI: SIGTERM stops the scan as Ctrl-C does (re-armed after Ray starts, whose core worker
installs a SIGTERM handler of its own)."""


def _terminated(signum, frame) -> None:
    """SIGTERM handler: stop the scan the way Ctrl-C does (the catalog records ``interrupted``)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)   # a second SIGTERM ends the process at once
    raise KeyboardInterrupt(f"signal {signum}")


def stop_like_ctrl_c_on_sigterm() -> None:
    """For a CLI that runs scans (scan, reproduce): from now on SIGTERM stops a scan as Ctrl-C does, so a job
    stopped by its scheduler ends ``interrupted`` and resumable (re-armed after Ray starts)."""
    global _SIGTERM_INTERRUPTS
    _SIGTERM_INTERRUPTS = True
    signal.signal(signal.SIGTERM, _terminated)


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan scan") -> int:
    """CLI entry point; returns the exit code."""
    args = build_parser(prog).parse_args(argv)
    if args.dry_run:
        from mirrorscan.jobs.dry_run import dry_run

        dry_run(args.experiment, store=args.store, catalog_dsn=args.catalog_dsn, max_attempts=args.max_attempts)
        return EXIT_OK
    stop_like_ctrl_c_on_sigterm()
    if args.quiet:
        quiet_ray_warnings()
    try:
        result = run_scan(args.experiment, resume=args.resume, max_attempts=args.max_attempts, store=args.store,
                          catalog_dsn=args.catalog_dsn, ray_address=args.ray_address, quiet=args.quiet,
                          as_name=args.as_name, accept_changed_probes=args.accept_changed_probes)
    except KeyboardInterrupt:
        print("interrupted: finished parts are kept; run again with --resume to finish the grid", file=sys.stderr)
        return EXIT_INTERRUPTED
    print_summary(result)
    return EXIT_OK if result.status == "complete" else EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.scan"))
