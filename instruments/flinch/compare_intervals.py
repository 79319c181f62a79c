"""Paired differences for ``flinch compare``: the models of one invocation, on the carrier rows they share, by the
code ``analyze`` uses (``intervals.flinch_intervals``), over exactly the axes compared.

A ``summary.json`` that ``analyze`` wrote sits in its analysis folder beside ``carriers.parquet``, every carrier row
of the invocation. For each such input with two or more of its models among the compared rows, every compared
axis score's interval over terms and carriers, the total's over the compared axes (for the models the comparison
gives a total), and every pair's paired difference with Holm p and a verdict are computed again from those rows:
the same numbers as analyze's where the compared axes are the run's own. Models of different inputs are not paired
here (another invocation is another draw of the engine's numerics and settings); an input whose carrier rows are
not beside it gets a note instead.
"""

from __future__ import annotations

import json
from pathlib import Path

CARRIERS = "carriers.parquet"
"""The table of carrier rows ``analyze`` writes beside ``summary.json``."""


def invocation_intervals(rows: list[dict], axes: list[str], aliases: dict[str, str]) -> tuple[list[dict], list[str]]:
    """([{file, models, intervals}], notes) for the inputs of the compared ``rows`` (``compare``'s rows: model,
    label, file, total) that hold two or more models; ``axes`` are the compared keys under the method's names,
    ``aliases`` maps older stored keys to them."""
    import pyarrow.parquet as pq

    from mirrorscan.instruments.flinch.intervals import flinch_intervals, grid_carriers

    groups: dict[str, list[dict]] = {}
    for r in rows:
        if not r["file"].startswith("reference:"):
            group = groups.setdefault(r["file"], [])
            if all(g["label"] != r["label"] for g in group):   # a file given twice: its models once
                group.append(r)
    out, notes = [], []
    for path, members in groups.items():
        if len(members) < 2:
            continue
        table_path = Path(path).resolve().parent / CARRIERS
        if not table_path.exists():
            notes.append(f"{path}: no {CARRIERS} beside it, so its models' paired differences are not computed "
                         "(compare the summary.json in its analysis folder)")
            continue
        labels = {r["label"] for r in members}
        carrier_rows = [{**c, "axis": aliases.get(c["axis"], c["axis"])}
                        for c in pq.read_table(table_path).to_pylist() if c["label"] in labels]
        terms: dict[str, dict[str, None]] = {}
        for c in carrier_rows:
            terms.setdefault(c["axis"], {})[c["term"]] = None
        picked = [(k, k, list(terms.get(k, {}))) for k in axes]
        aggregation = json.loads(Path(path).read_text(encoding="utf-8")).get("aggregation", "axis_lp_mean")
        whole = [r["label"] for r in members if r["total"] is not None]
        result = flinch_intervals([c for c in carrier_rows if c["axis"] in axes], picked,
                                  grid_carriers(carrier_rows), aggregation, whole)
        out.append({"file": path, "models": [r["label"] for r in members], "intervals": result})
    return out, notes


def intervals_text(groups: list[dict], width: int) -> list[str]:
    """Lines of each invocation's block: which file, then ``analysis.headline_intervals.format_intervals``."""
    from mirrorscan.analysis.headline_intervals import format_intervals
    from mirrorscan.instruments.flinch.intervals import TOTAL_NOTE

    lines = []
    for g in groups:
        lines.append(f"models of one invocation ({g['file']}): recomputed from its {CARRIERS} over the compared axes")
        lines.append(format_intervals(g["intervals"], width))
        if "total_flinch" in g["intervals"]["headlines"]:
            lines.append(TOTAL_NOTE)
    return lines
