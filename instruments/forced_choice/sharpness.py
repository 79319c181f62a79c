"""Sharpness of one model: per pair, how one-sided its definite picks are, whether or not the pair is committed.

Not pair-commit (``commit``): an unclear pair can be 0.9 sharp; and not the per-cell commit rate: UNCLEAR and
REF cells are in no sharpness.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from mirrorscan.instruments.forced_choice.cell_table import JSONRecord, by_pair, model_cells


@dataclass(frozen=True)
class PairSharpness(JSONRecord):
    pair_id: str
    word_a: str
    word_b: str
    n_a: int
    n_b: int
    sharpness: float | None
    """max(n_a, n_b) / (n_a + n_b); None with no definite pick; 0.5 on a tie."""
    winner: str | None
    """The more-picked word; None on a tie or with no definite pick."""


@dataclass(frozen=True)
class Sharpness(JSONRecord):
    """Sharpness: per pair, max(nA, nB) / (nA + nB) over its definite picks; per model, the mean.

    The mean runs over every pair with at least one definite pick (``n_pairs_with_picks``), committed or
    not; it is not restricted to committed pairs, and UNCLEAR/REF cells are not in it (per-cell commit rate
    counts those).
    """

    label: str
    invocation_id: str
    mean_sharpness: float | None
    """Mean pair sharpness; None when no pair has a definite pick."""
    n_pairs_with_picks: int
    n_pairs: int
    n_errors: int
    pairs: tuple


def sharpness(traces: pa.Table) -> Sharpness:
    """Sharpness of one model and invocation over all its answered cells (see Sharpness)."""
    label, inv, cells = model_cells(traces)
    out = []
    for pair_id, pcells in by_pair(cells).items():
        n_a = sum(c.error is None and c.cls == "A" for c in pcells)
        n_b = sum(c.error is None and c.cls == "B" for c in pcells)
        wa, wb = pcells[0].word_a, pcells[0].word_b
        sharp = max(n_a, n_b) / (n_a + n_b) if n_a + n_b else None
        winner = wa if n_a > n_b else wb if n_b > n_a else None
        out.append(PairSharpness(pair_id, wa, wb, n_a, n_b, sharp, winner))
    defined = [p.sharpness for p in out if p.sharpness is not None]
    return Sharpness(label, inv, sum(defined) / len(defined) if defined else None, len(defined), len(out),
                     sum(c.error is not None for c in cells), tuple(out))
