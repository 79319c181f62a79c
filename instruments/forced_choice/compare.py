"""Two forced-choice fingerprints side by side: models, effort tiers or reruns.

Each side is an invocation's traces with its settings, and a model label where the invocation holds
several. The result: the Hamming distance over all pairs (pairs one side lacks read ``incomplete``), the
agreement (1 − hamming / all compared pairs; undefined when no pair is committed by either side, where it
would only count shared non-commitment), and the violent disagreement (both committed, opposite words;
undefined when no pair is committed by both). Fingerprints use rule ``unanimity`` unless
``per_envelope_majority`` is asked.
"""

from __future__ import annotations

import pyarrow as pa

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.instrument import Analysis
from mirrorscan.grid.settings import Settings
from mirrorscan.instruments.forced_choice.cell_table import by_model
from mirrorscan.instruments.forced_choice.commit import RULES
from mirrorscan.instruments.forced_choice.fingerprint import FingerprintComparison, compare_fingerprints, fingerprint
from mirrorscan.instruments.forced_choice.report import classified_cells, expected_cells


def _pick(traces: pa.Table, settings: Settings, label: str | None, side: str) -> tuple[pa.Table, str]:
    """The classified cells of one model label of an invocation (the only one when ``label`` is None)."""
    cells, _ = classified_cells(traces, settings, reclassify=False)
    groups = by_model(cells)
    labels = [lab for lab, _ in groups]
    invocation_id = traces.column("invocation_id")[0].as_py()
    if label is None:
        if len(labels) != 1:
            raise ConfigError("", f"--label-{side}", f"invocation {invocation_id} holds {len(labels)} models "
                              f"({', '.join(labels)})", f"name one with --label-{side}")
        label = labels[0]
    if label not in labels:
        raise ConfigError("", f"--label-{side}", f"no model {label!r} in invocation {invocation_id}",
                          f"use one of: {', '.join(labels)}")
    return groups[(label, invocation_id)], label


def compare_invocations(left: tuple[pa.Table, Settings], right: tuple[pa.Table, Settings], *,
                        label_a: str | None = None,
                        label_b: str | None = None, rule: str = "unanimity") -> Analysis:
    """The FingerprintComparison of two (invocation, label) fingerprints under ``rule``, as text and numbers."""
    if rule not in RULES:
        raise ConfigError("", "--rule", f"unknown rule {rule!r}", f"use one of: {', '.join(RULES)}")
    fps = []
    for (traces, settings), label, side in ((left, label_a, "a"), (right, label_b, "b")):
        table, _ = _pick(traces, settings, label, side)
        fps.append(fingerprint(table, expected_cells(settings), rule))
    result = compare_fingerprints(*fps)
    return Analysis(text=format_comparison(result), numbers=result.to_dict(), json_view=result.to_dict(),
                    detail=result)


def format_comparison(result: FingerprintComparison) -> str:
    """Two lines: the sides and rule; pairs, Hamming distance, agreement and violent disagreement, each with
    its denominator, and 'undefined (…)' where a number has none."""
    if result.n_pairs == 0:
        agreement = "undefined (no pair)"
    elif result.agreement is None:
        agreement = "undefined (no pair committed by either side)"
    else:
        agreement = (f"{result.agreement:.3f} ({result.n_pairs - result.hamming} of {result.n_pairs} pairs, "
                     f"{result.n_committed_either} committed by either side)")
    vd = "undefined (no pair committed by both)" if result.violent_disagreement is None else \
        f"{result.violent_disagreement:.3f} ({result.n_violent} of {result.n_co_committed} co-committed pairs)"
    return (f"{result.left}  vs  {result.right}   rule {result.rule}\n"
            f"pairs {result.n_pairs}   hamming {result.hamming}   agreement {agreement}   violent disagreement {vd}")
