"""``mirrorscan scan EXPERIMENT --dry-run``: what a scan would do, without doing any of it.

It validates config.json, resolves every model without loading it, and prints the driver's own plan
(``jobs.plan.scan_plan``: the hooks the scan walks, stage by stage): per model and stage the cells, those
earlier invocations hold, the cells to run, the engine kind and the sampling the cells carry, the input
tokens (model's tokenizer, where a local one is found) and an upper bound of generated tokens (Σ of the
cells' own max_tokens: a bound, since most answers stop earlier; none for score or activations engines);
then what ``--resume`` would run of an unfinished invocation (cells it already holds left out). It starts
neither Ray nor an engine, never starts the embedded catalog, and writes nothing: the catalog is read only
when it is already running (or named by a DSN), through a read-only transaction, and the store only when
it exists.
"""

from __future__ import annotations

import sys

from mirrorscan.grid.errors import CatalogError
from mirrorscan.grid.spec import API_BACKENDS, Spec


def model_source_note(spec: Spec, i: int) -> str:
    """Where model ``i`` would come from, found without loading (or converting) anything."""
    from mirrorscan.cluster.models import DEMO_MODEL_ALIAS, demo_model_dir, resolve_model_source

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
    from mirrorscan.cluster import embedded_pg
    from mirrorscan.jobs.preflight import resolve_catalog

    dsn = resolve_catalog(flag, spec)
    if dsn and dsn.strip() != "embedded":
        return dsn
    from mirrorscan.cluster.home import locate_home

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
        from mirrorscan.cluster.catalog import redact_dsn

        raise CatalogError(f"catalog: cannot read {redact_dsn(dsn)} ({str(exc).splitlines()[0]})") from None


def resume_plan(spec: Spec, settings: dict, inv: dict, max_attempts: int, sources: dict | None = None
                ) -> tuple[int, int, list[str], list]:
    """(cells a resume would run, cells it would give up, what blocks it: input files whose content changed,
    else shaping fields that differ; the resume's ``StagePlan`` list)."""
    from mirrorscan.grid.settings import shaping_differences
    from mirrorscan.jobs.plan import scan_plan
    from mirrorscan.jobs.scan import changed_inputs, changed_inputs_detail

    if changed_inputs(inv, spec):
        return 0, 0, [f"file content changed ({changed_inputs_detail(inv, spec)})"], []
    diffs = shaping_differences(inv["settings"], settings)
    if diffs:
        return 0, 0, [f"{', '.join(diffs)} differ from the frozen settings"], []
    store = existing_store(inv["store_uri"] or settings["execution"]["store"])
    hold = not (inv["settings"].get("execution") or {}).get("reproduces")
    plans = scan_plan(settings, store=store, invocation_id=str(inv["invocation_id"]), sources=sources,
                      max_attempts=max_attempts, hold=hold)
    return sum(p.run for p in plans), sum(p.given_up for p in plans), [], plans


def existing_store(uri: str):
    """The trace store at ``uri`` when it exists (opened without creating anything), else None."""
    from mirrorscan.cluster.store import open_store
    from mirrorscan.grid.errors import ConfigError

    try:
        return open_store(uri, create=False)
    except ConfigError:
        return None


def plan_sources(spec: Spec) -> dict[str, str]:
    """Label → the canonical model source a scan would use, where it is known without converting or loading
    anything (an API model's name; a local folder; the demo model once converted)."""
    from mirrorscan.cluster.models import DEMO_MODEL_ALIAS, demo_model_dir, resolve_model_source

    sources = {}
    for i, m in enumerate(spec.models):
        if m.backend in API_BACKENDS:
            sources[m.label] = m.model
        elif m.model == DEMO_MODEL_ALIAS:
            if (demo_model_dir() / "config.json").is_file():
                sources[m.label] = str(demo_model_dir())
        else:
            sources[m.label] = resolve_model_source(m.model, spec.config_path, f"models[{i}].model")
    return sources


def print_plan(plans: list, out, indent: str = "    ") -> None:
    """One line per stage of a plan (``jobs.plan.StagePlan``)."""

    for p in plans:
        held = f", {p.held_elsewhere} held by earlier invocations" if p.held_elsewhere else ""
        here = f", {p.held_here} stored already" if p.held_here else ""
        gave = f", {p.given_up} given up" if p.given_up else ""
        tokens_in = ("input tokens unknown (no local tokenizer)" if p.tokens_in is None
                     else f"≥ {p.tokens_in} input tokens (earlier answers not counted)" if p.stage and p.run
                     else f"{p.tokens_in} input tokens")
        out_bound = ("generated tokens unknown" if p.tokens_out_bound is None
                     else f"≤ {p.tokens_out_bound} generated tokens" if p.kind == "generate" else "no generated tokens")
        print(f"{indent}{p.stage or 'first'} stage ({p.kind}): {p.cells} cells{held}{here}{gave}; {p.run} to run; "
              f"{p.sampling_text()}; {tokens_in}; {out_bound}", file=out)


def dry_run(experiment: str, *, store: str | None = None, catalog_dsn: str | None = None,
            max_attempts: int = 3, out=None) -> None:
    """Print what ``scan`` (and ``scan --resume``) would do; see the module docstring."""
    out = out or sys.stdout
    from mirrorscan.grid.spec import load_spec
    from mirrorscan.jobs.preflight import check_context, check_engines, check_template_overrides, resolve_store

    spec = load_spec(experiment)
    check_engines(spec)
    check_template_overrides(spec, prepare=False)
    spec.values["store"] = resolve_store(store, spec)
    settings = spec.settings()
    from mirrorscan.jobs.plan import scan_plan

    sources = plan_sources(spec)
    check_context(spec, sources)   # what scan refuses before it records anything, refused here the same way
    store_now = existing_store(spec.values["store"])
    plans = scan_plan(settings, store=store_now, sources=sources, max_attempts=max_attempts)
    print(f"experiment {spec.experiment}  instrument {spec.instrument.name}  (dry run: nothing started or written)",
          file=out)
    total_cells, total_tokens, unknown = 0, 0, False
    for i, m in enumerate(spec.models):
        mine = [p for p in plans if p.label == m.label]
        run = sum(p.run for p in mine)
        bounds = [p.tokens_out_bound for p in mine]
        bound = None if None in bounds else sum(bounds)
        total_cells += run
        unknown = unknown or bound is None
        total_tokens += bound or 0
        said = "generated tokens unknown" if bound is None else f"≤ {bound} generated tokens (bound)"
        print(f"  {m.label:<28} {run:>8} cells  {said}  {m.backend}: {model_source_note(spec, i)}", file=out)
        print_plan(mine, out)
    print(f"  {'all models':<28} {total_cells:>8} cells  ≤ {total_tokens} generated tokens (bound: Σ max_tokens "
          f"of the cells to run{'; some unknown' if unknown else ''})", file=out)
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
    todo, given_up, diffs, resumed = resume_plan(spec, settings, inv, max_attempts, sources)
    if diffs:
        print(f"resume: refused — {'; '.join(diffs)}; invocation {inv['invocation_id']} ({inv['status']})",
              file=out)
        return
    print(f"resume: invocation {inv['invocation_id']} ({inv['status']}) would run {todo} cell(s); "
          f"{given_up} given up after {max_attempts} attempts", file=out)
    for m in spec.models:
        print(f"  {m.label}", file=out)
        print_plan([p for p in resumed if p.label == m.label], out)
