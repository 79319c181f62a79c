"""Position bias of one model: how much more often word_a is picked when named first than when named second.

Not a preference: it compares the two orderings of the same pairs, overall, per envelope and per pair.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa

from mirrorscan.instruments.forced_choice.cell_table import Cell, JSONRecord, by_pair, model_cells


@dataclass(frozen=True)
class OrderingShares(JSONRecord):
    """pct_a_when_AB / pct_a_when_BA and their difference, for one scope (a model, an envelope, a pair)."""

    scope: str
    """'all', an envelope id or a pair id."""
    n_ab: int
    """Answered AB cells (UNCLEAR and REF included): the denominator of pct_a_when_AB."""
    n_ba: int
    pct_a_when_AB: float | None
    """Share of AB cells classed A (word_a, named first there)."""
    pct_a_when_BA: float | None
    """Share of BA cells classed A (word_a, named second there)."""
    position_bias_pp: float | None
    """100 × (pct_a_when_AB − pct_a_when_BA), percentage points; positive favours the first-named word."""
    symmetric_pick_rate_a: float | None
    """(pct_a_when_AB + pct_a_when_BA) / 2: word_a's pick rate with position averaged out."""


def _shares(scope: str, cells: list[Cell]) -> OrderingShares:
    ab = [c.cls for c in cells if c.error is None and c.ordering == "AB"]
    ba = [c.cls for c in cells if c.error is None and c.ordering == "BA"]
    p_ab = ab.count("A") / len(ab) if ab else None
    p_ba = ba.count("A") / len(ba) if ba else None
    bias = symmetric = None
    if p_ab is not None and p_ba is not None:
        bias, symmetric = 100 * (p_ab - p_ba), (p_ab + p_ba) / 2
    return OrderingShares(scope, len(ab), len(ba), p_ab, p_ba, bias, symmetric)


@dataclass(frozen=True)
class PositionBias(JSONRecord):
    """Position bias: does the model favour the word named first, whatever the word?

    Not a preference: a model that always picks word_a has zero bias (1.0, 1.0, 0 pp); one that always
    names the first word has +100 pp (1.0, 0.0). Denominators are all answered cells of each ordering.
    """

    label: str
    invocation_id: str
    overall: OrderingShares
    n_first_named: int
    """Definite picks of the word named first (AB classed A, BA classed B)."""
    n_second_named: int
    """Definite picks of the word named second (AB classed B, BA classed A)."""
    position_ratio: float | None
    """n_first_named / n_second_named; None when no second-named pick (see the counts)."""
    n_errors: int
    per_envelope: tuple
    """OrderingShares per envelope, by envelope id."""
    per_pair: tuple
    """OrderingShares per pair (symmetric_pick_rate_a is the pair's order-balanced word_a rate)."""


def position_bias(traces: pa.Table) -> PositionBias:
    """Position bias of one model and invocation (see PositionBias)."""
    label, inv, cells = model_cells(traces)
    answered = [c for c in cells if c.error is None]
    first = sum((c.ordering, c.cls) in {("AB", "A"), ("BA", "B")} for c in answered)
    second = sum((c.ordering, c.cls) in {("AB", "B"), ("BA", "A")} for c in answered)
    envs: dict = defaultdict(list)
    for c in cells:
        envs[c.envelope].append(c)
    return PositionBias(label, inv, _shares("all", cells), first, second, first / second if second else None,
                        len(cells) - len(answered),
                        tuple(_shares(e, cs) for e, cs in sorted(envs.items())),
                        tuple(_shares(p, cs) for p, cs in by_pair(cells).items()))
