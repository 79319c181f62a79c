"""The reports of ``mirrorscan report``, written: for each invocation a target names, its analysis (the stored one
of the same code and inputs where there is one, else computed and written), the page built from it
(``results.report``), rendered (``results.report_html``) and stored as a new file beside the invocation."""

from __future__ import annotations

from mirrorscan.results.report import build, write_report
from mirrorscan.results.report_html import render


def report_invocations(target: str, *, store: str | None = None, catalog_dsn: str | None = None,
                       every: bool = False, reannotate: bool = False, progress=None, say=None,
                       waiting=None) -> list[str]:
    """Write the report of each invocation ``target`` names (an invocation id, or an experiment: its newest
    invocation, or with ``every`` each of them, oldest first), its analysis reused where the newest one of the
    same code and inputs is stored, else computed and written (``mirrorscan report``); returns the paths
    written, in order. ``progress(i, n, invocation_id)`` is called before each one, ``say(line)`` with the
    analysis each one reuses, ``waiting(line)`` before one is computed (seconds with nothing else to show)."""
    from mirrorscan.results.analyses import analyze, read_analysis, reusable, write_analysis
    from mirrorscan.results.invocations import load, resolve_rows

    rows = resolve_rows(target, dsn=catalog_dsn, every=every)
    paths = []
    for i, row in enumerate(rows):
        if progress is not None:
            progress(i, len(rows), str(row["invocation_id"]))
        inv = load(row, store=store)
        found = reusable(inv, reannotate=reannotate)
        if found is not None:
            analysis, folder = read_analysis(inv, found), inv.store.display(found)
            if say is not None:
                say(f"reusing analysis {folder} (same code and inputs)")
        else:
            if waiting is not None:   # before the wait: an analysis takes seconds (lens: its nulls)
                waiting(f"analysing {row['invocation_id']}: no analysis of the same code and inputs yet")
            analysis = analyze(inv, reannotate=reannotate)
            outputs = write_analysis(inv, analysis, reannotate=reannotate)
            folder = outputs[0].rsplit("/", 1)[0] if outputs else None
        paths.append(write_report(inv, render(build(inv, analysis, folder))))
    return paths
