"""``mirrorscan scan EXPERIMENT --dry-run``: what a scan would do, without doing any of it.

It validates config.json, resolves every model without loading it, and prints the cells per model, an
upper bound of generated tokens (cells × max_tokens: a bound, since most answers stop earlier), and what
``--resume`` would run. It starts neither Ray nor an engine, never starts the embedded catalog, and writes
nothing: the catalog is read only when it is already running (or named by a DSN), through a read-only
transaction, and the store only when it exists.
"""

from __future__ import annotations

import sys

import pyarrow as pa

from grid.errors import CatalogError
from grid.spec import API_BACKENDS, Spec


def model_source_note(spec: Spec, i: int) -> str:
    """Where model ``i`` would come from, found without loading (or converting) anything."""
    from cluster.models import DEMO_MODEL_ALIAS, demo_model_dir, resolve_model_source

    m = spec.models[i]
    if m.backend in API_BACKENDS:
        return f"API model {m.model!r} at {m.endpoint}"
    if m.model == DEMO_MODEL_ALIAS:
        folder = demo_model_dir()
        ready = (folder / "config.json").is_file()
        return f"packaged demo model ({folder}{'' if ready else '; converted at the first scan, ~45 s'})"
    return resolve_model_source(m.model, spec.config_path, f"models[{i}].model")


def running_catalog_dsn(flag: str | None, spec: Spec) -> str | None:
    """The catalog DSN when a catalog can be read without starting one: a DSN given by flag, config or
    environment, or the embedded server when it is already running; None otherwise."""
    from cluster import embedded_pg
    from jobs.preflight import resolve_catalog

    dsn = resolve_catalog(flag, spec)
    if dsn and dsn.strip() != "embedded":
        return dsn
    from cluster.home import locate_home

    return embedded_pg.running_dsn(locate_home() / "catalog")


def unfinished_invocation(dsn: str, experiment: str) -> dict | None:
    """The newest unfinished invocation of ``experiment``, read in a read-only transaction (no migration)."""
    import psycopg
    from psycopg.rows import dict_row

    try:
        with psycopg.connect(dsn, connect_timeout=5, row_factory=dict_row) as conn:
            conn.read_only = True
            exists = conn.execute("SELECT to_regclass('public.scan_invocations') IS NOT NULL AS ok").fetchone()
            if not exists["ok"]:
                return None
            return conn.execute("SELECT invocation_id, status, settings, store_uri, content_hashes FROM scan_invocations "
                                "WHERE experiment = %s AND status <> 'complete' ORDER BY started_at DESC LIMIT 1",
                                [experiment]).fetchone()
    except psycopg.Error as exc:
        from cluster.catalog import redact_dsn

        raise CatalogError(f"catalog: cannot read {redact_dsn(dsn)} ({str(exc).splitlines()[0]})") from None


def resume_plan(spec: Spec, settings: dict, inv: dict, max_attempts: int) -> tuple[int, int, list[str]]:
    """(cells a resume would run, cells it would give up, what blocks it: input files whose content changed,
    else shaping fields that differ)."""
    from cluster.store import open_store
    from grid.cells import plan_attempts
    from grid.settings import shaping_differences
    from jobs.scan import changed_inputs, changed_inputs_detail, grid_cells

    if changed_inputs(inv, spec):
        return 0, 0, [f"file content changed ({changed_inputs_detail(inv, spec)})"]
    diffs = shaping_differences(inv["settings"], settings)
    if diffs:
        return 0, 0, [f"{', '.join(diffs)} differ from the frozen settings"]
    store = open_store(inv["store_uri"] or settings["execution"]["store"])
    cells = grid_cells(settings)
    prior = store.read(spec.experiment, str(inv["invocation_id"]), columns=["probe_id", "sample", "error"]) \
        if store.list_parts(spec.experiment, str(inv["invocation_id"])) else pa.table(
            {"probe_id": pa.array([], pa.string()), "sample": pa.array([], pa.int32()),
             "error": pa.array([], pa.string())})
    todo, given_up = plan_attempts(cells, prior, max_attempts)
    return todo.num_rows, given_up.num_rows, []


def dry_run(experiment: str, *, store: str | None = None, catalog_dsn: str | None = None,
            max_attempts: int = 3, out=None) -> None:
    """Print what ``scan`` (and ``scan --resume``) would do; see the module docstring."""
    out = out or sys.stdout
    from grid.spec import load_spec
    from jobs.preflight import check_engines, check_template_overrides, resolve_store

    spec = load_spec(experiment)
    check_engines(spec)
    check_template_overrides(spec, prepare=False)
    spec.values["store"] = resolve_store(store, spec)
    settings = spec.settings()
    per_model = spec.instrument.n_items(spec.instrument_spec) * spec.values["samples"]
    print(f"experiment {spec.experiment}  instrument {spec.instrument.name}  (dry run: nothing started or written)",
          file=out)
    total_cells = total_tokens = 0
    for i, m in enumerate(spec.models):
        source = model_source_note(spec, i)
        bound = per_model * m.max_tokens
        total_cells, total_tokens = total_cells + per_model, total_tokens + bound
        print(f"  {m.label:<28} {per_model:>8} cells  ≤ {bound} generated tokens (bound)  {m.backend}: {source}",
              file=out)
    print(f"  {'all models':<28} {total_cells:>8} cells  ≤ {total_tokens} generated tokens (bound: cells × "
          f"max_tokens)", file=out)
    print(f"store: {spec.values['store']}", file=out)
    dsn = running_catalog_dsn(catalog_dsn, spec)
    if dsn is None:
        print("resume: the embedded catalog is not running, so what --resume would run is not known "
              "(a dry run never starts it)", file=out)
        return
    inv = unfinished_invocation(dsn, spec.experiment)
    if inv is None:
        print(f"resume: experiment {spec.experiment!r} has no unfinished invocation; scan starts a new one", file=out)
        return
    todo, given_up, diffs = resume_plan(spec, settings, inv, max_attempts)
    if diffs:
        print(f"resume: refused — {'; '.join(diffs)}; invocation {inv['invocation_id']} ({inv['status']})",
              file=out)
        return
    print(f"resume: invocation {inv['invocation_id']} ({inv['status']}) would run {todo} cell(s); "
          f"{given_up} given up after {max_attempts} attempts", file=out)

