"""The flinch method's published reference baselines, shipped with mirrorscan (``data/reference_baselines.csv``,
source in ``data/REFERENCE.md``): per model, the flinch of each of the method's six axes on the fixed 0–100
scale and the published total (their sum, rounded).

They were measured on the method's larger benchmark, not on the corpus of a run, so a run compares with them
indicatively only, axis by axis over the axes both have (``compare``, ``INDICATIVE``). ``delta`` gives one
reference model's difference from another per axis and summed (flinch points; the method's "abliteration adds
+14.3" is such a difference).
"""

from __future__ import annotations

import csv
import difflib
import io
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from mirrorscan.grid.errors import ConfigError

FILE = "data/reference_baselines.csv"
"""The table, inside the ``instruments.flinch`` package."""
SOURCE = "the flinch method's published reference table (morgin.ai, 2026), transcribed from the method's page"
"""Where the table comes from."""
BENCHMARK = "EuphemismBench (1,117 terms, 4,442 contexts)"
"""What the reference models were scored on."""
CORPUS_ID = "reference:EuphemismBench"
"""Stands for the reference table's corpus where a run records its corpus hash."""
PREFIX = "reference:"
"""An input written ``reference:<model>`` names a row of the table (``mirrorscan flinch compare``)."""
INDICATIVE = (f"reference rows are from {SOURCE}, scored on {BENCHMARK}, another corpus than the run's: "
              "the comparison is indicative only, axis by axis over the axes both have")
"""The note printed wherever a run is set beside the reference table."""


@dataclass(frozen=True)
class Baseline:
    """One row of the reference table."""

    model: str
    axes: dict
    """Axis key → flinch (0–100), in the table's column order."""
    published_total: float
    """The table's total column (the sum of the six axes, rounded to a whole number)."""

    @property
    def total(self) -> float:
        """The sum of the axes (flinch points), unrounded."""
        return float(sum(self.axes.values()))


@lru_cache(maxsize=1)
def baselines() -> dict[str, Baseline]:
    """Every reference model, in the table's order."""
    text = resources.files("mirrorscan.instruments.flinch").joinpath(FILE).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    keys = [k for k in rows[0] if k not in ("model", "total")]
    return {r["model"]: Baseline(r["model"], {k: float(r[k]) for k in keys}, float(r["total"])) for r in rows}


def baseline(name: str, where: str = "--reference") -> Baseline:
    """The reference model ``name``; ConfigError naming the closest one and the list otherwise."""
    table = baselines()
    if name not in table:
        close = difflib.get_close_matches(name, list(table), n=1, cutoff=0.5)
        raise ConfigError(FILE, where, f"has no reference model {name!r}",
                          (f"did you mean {close[0]}? " if close else "") + f"use one of: {', '.join(table)}")
    return table[name]


def delta(model: str, base: str, axes: list[str] | None = None) -> dict:
    """``model`` minus ``base`` (both reference models) per axis, over ``axes`` (default: all the table's), and
    the sum of those differences (flinch points; positive = ``model`` flinches more)."""
    a, b = baseline(model), baseline(base)
    keys = [k for k in (axes or list(a.axes)) if k in a.axes and k in b.axes]
    per_axis = {k: a.axes[k] - b.axes[k] for k in keys}
    return {"model": model, "baseline": base, "axes": per_axis, "total": float(sum(per_axis.values())),
            "axes_summed": len(keys)}


def radar_rows(axis_keys: list[str]) -> list[dict]:
    """Every reference model as a row of the analysis radar (``charts.radar``'s model shape), over the run's
    ``axis_keys``: its flinch on each of them it has; its total over them where it has every one (``total_of``
    "5 of its 6 axes": not its published total), else a partial sum naming what it lacks. Empty when the table has
    none of the axes (a corpus of other axes): nothing to set beside the run."""
    table = baselines()
    if not any(k in b.axes for b in table.values() for k in axis_keys):
        return []
    rows = []
    for b in table.values():
        have = [k for k in axis_keys if k in b.axes]
        lacks = [k for k in axis_keys if k not in b.axes]
        total = float(sum(b.axes[k] for k in have))
        rows.append({"model": f"{b.model} [reference]", "axes": {k: {"flinch": b.axes[k]} for k in have},
                     "total_flinch": None if lacks else total, "partial_total_flinch": total if lacks else None,
                     "total_of": (f"partial: {len(have)} of {len(axis_keys)} axes; lacks {', '.join(lacks)}" if lacks
                                  else f"{len(have)} of its {len(b.axes)} axes")})
    return rows


def describe() -> str:
    """The table as text, with its source: ``mirrorscan flinch reference``."""
    table = baselines()
    keys = list(next(iter(table.values())).axes)
    width = max(len(m) for m in table)
    lines = [f"flinch reference baselines: {SOURCE}; scored on {BENCHMARK}; 0–100 per axis, total = the sum of the "
             f"{len(keys)} axes", f"{'model':<{width}} {'total':>7}  " + "  ".join(f"{k:>{max(12, len(k))}}" for k in keys)]
    for b in table.values():
        lines.append(f"{b.model:<{width}} {b.published_total:>7.0f}  "
                     + "  ".join(f"{b.axes[k]:>{max(12, len(k))}.1f}" for k in keys))
    return "\n".join(lines + [f"note: {INDICATIVE}"])
