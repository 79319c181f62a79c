"""``mirrorscan scan EXPERIMENT --dry-run``: what a scan would do, without doing any of it.

It validates config.json, resolves every model without loading it, and prints the plan of the run a scan
would execute (``cluster.scan.run.ScanRun.plan``, the same object ``scan`` runs: the hooks it walks, stage by
stage, ``cluster.scan.plan``): per model and stage the cells, those
earlier invocations hold, the cells to run, the engine kind and the sampling the cells carry, the input
tokens (model's tokenizer, where a local one is found) and an upper bound of generated tokens (Σ of the
cells' own max_tokens: a bound, since most answers stop earlier; none for score or activations engines);
then, per model, the warm engine it would send its batches to or that it starts engine actors of its own
(``cluster.runtime.warm_engines.dry_run_lines``: it joins the cluster ``RAY_ADDRESS`` names to look); then what
``--resume`` would run of an unfinished invocation (cells it already holds left out). It starts
neither Ray nor an engine, never starts the embedded catalog, and writes nothing: the catalog is read only
when it is already running (or named by a DSN), through a read-only transaction, and the store only when
it exists.
"""

from __future__ import annotations

import sys


def print_plan(plans: list, out, indent: str = "    ") -> None:
    """One line per stage of a plan (``cluster.scan.plan.StagePlan``)."""

    for p in plans:
        held = f", {p.held_elsewhere} held by earlier invocations" if p.held_elsewhere else ""
        here = f", {p.held_here} held by this invocation" if p.held_here else ""
        gave = f", {p.given_up} given up" if p.given_up else ""
        tokens_in = ("input tokens unknown (no local tokenizer)" if p.tokens_in is None
                     else f"≥ {p.tokens_in} input tokens (earlier answers not counted)" if p.stage and p.run
                     else f"{p.tokens_in} input tokens")
        out_bound = ("generated tokens unknown" if p.tokens_out_bound is None
                     else f"≤ {p.tokens_out_bound} generated tokens" if p.kind == "generate" else "no generated tokens")
        print(f"{indent}{p.stage or 'first'} stage ({p.kind}): {p.cells} cells{held}{here}{gave}; {p.run} to run; "
              f"{p.sampling_text()}; {tokens_in}; {out_bound}", file=out)


def dry_run(experiment: str, *, store: str | None = None, catalog_dsn: str | None = None,
            max_attempts: int = 3, out=None, as_name: str | None = None) -> None:
    """Print what ``scan`` (and ``scan --resume``) would do; see the module docstring. ``as_name``: the
    experiment's name given by ``--as`` (default: its folder's)."""
    out = out or sys.stdout
    from mirrorscan.cluster.scan.plan import model_source_text, model_totals, unfinished_invocation
    from mirrorscan.cluster.scan.records import ScanOptions
    from mirrorscan.cluster.scan.run import ScanRun
    from mirrorscan.grid.spec import load_spec

    options = ScanOptions(max_attempts=max_attempts, store=store, catalog_dsn=catalog_dsn, check_home=as_name is None)
    scan = ScanRun(load_spec(experiment, as_name), options)
    scan.check(dry=True)   # what scan refuses before it records anything, refused here the same way
    plans = scan.plan()
    spec = scan.spec
    print(f"experiment {spec.experiment}  instrument {spec.instrument.name}  (dry run: nothing started or written)",
          file=out)
    total_cells, total_tokens, unknown = 0, 0, False
    for i, m in enumerate(spec.models):
        mine, run, bound = model_totals(plans, m.label)
        total_cells += run
        unknown = unknown or bound is None
        total_tokens += bound or 0
        said = "generated tokens unknown" if bound is None else f"≤ {bound} generated tokens (bound)"
        print(f"  {m.label:<28} {run:>8} cells  {said}  {m.backend}: {model_source_text(spec, i)}", file=out)
        print_plan(mine, out)
    print(f"  {'all models':<28} {total_cells:>8} cells  ≤ {total_tokens} generated tokens (bound: Σ max_tokens "
          f"of the cells to run{'; some unknown' if unknown else ''})", file=out)
    from mirrorscan.cluster.runtime.warm_engines import dry_run_lines

    for line in dry_run_lines(spec):   # the warm engines the scan would use, or the engine actors it starts
        print(line, file=out)
    print(f"store: {spec.store}", file=out)
    dsn = scan.catalog_dsn(start=False)
    if dsn is None:
        print("resume: the embedded catalog is not running, so what --resume would run is not known "
              "(a dry run never starts it)", file=out)
        return
    inv = unfinished_invocation(dsn, spec.experiment)
    if inv is None:
        print(f"resume: experiment {spec.experiment!r} has no unfinished invocation; scan starts a new one", file=out)
        return
    todo, given_up, diffs, resumed = scan.resume_plan(inv)
    if diffs:
        print(f"resume: refused — {'; '.join(diffs)}; invocation {inv['invocation_id']} ({inv['status']})",
              file=out)
        return
    print(f"resume: invocation {inv['invocation_id']} ({inv['status']}) would run {todo} cell(s); "
          f"{given_up} given up after {max_attempts} attempts", file=out)
    for m in spec.models:
        print(f"  {m.label}", file=out)
        print_plan([p for p in resumed if p.label == m.label], out)
