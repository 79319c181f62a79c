"""Readers for ../shared/reference-data (published answers the analysis tests reproduce). Test helper only.

The data live beside the repository, never inside it: ``<repo>/../shared/reference-data``.
"""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
REF = REPO.parent / "shared" / "reference-data"


def ref_path(*parts: str) -> Path:
    """A file under the reference data; fails loudly (never skips) when the folder is missing."""
    path = REF.joinpath(*parts)
    assert path.exists(), f"reference data missing: {path} (expected ../shared/reference-data beside the repo)"
    return path


def load_json(*parts: str, exact: bool = False):
    """JSON; with ``exact`` every float is a Decimal (the digits as printed)."""
    with open(ref_path(*parts)) as f:
        return json.load(f, parse_float=Decimal) if exact else json.load(f)


def load_columns(*parts: str) -> dict[str, list[str]]:
    """A CSV as a dict of string columns."""
    with open(ref_path(*parts), newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: [r[k] for r in rows] for k in rows[0]}


def last_digit_unit(printed: Decimal) -> Fraction:
    """One unit of the last printed digit of a decimal as printed: 0.74 → 0.01, 2.025 → 0.001."""
    return Fraction(1, 10 ** max(-printed.as_tuple().exponent, 0))


def within(value: float, printed: Decimal, tol: Fraction | Decimal | str) -> bool:
    """|value − printed| ≤ tol, decided in exact rational arithmetic (no float fuzz at the boundary)."""
    return abs(Fraction(value) - Fraction(printed)) <= Fraction(tol)


MANEK = ("sad_oversight_probe_scores_manek2026",)


def manek_models() -> list[str]:
    """The 11 model names of the Manek (2026) probe-score files."""
    return list(load_json(*MANEK, "recomputed_auroc_by_layer.json")["models"])


def manek_scores(model: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(items, layers) mean_score, (items,) SAD labels, layer names L1..L(n−1) for one model."""
    cols = load_columns(*MANEK, f"{model}.csv")
    layers = [k for k in cols if k.startswith("L") and k[1:].isdigit()]
    scores = np.array([[float(v) for v in cols[k]] for k in layers]).T
    return scores, np.array(cols["type"]), layers
