"""What an analysis of a flinch invocation reads its axes and terms from: the corpus file while it is the one
the invocation froze, else the invocation's own stored rows.

An earlier invocation stays analysable after its corpus file was edited or removed: the numbers come from the
stored rows (each row carries its axis, term and carrier), under the corpus hash frozen with the invocation.
The file matters then only for labels and term order, taken from the current file where it still has the axis
(else the axis key and the terms in alphabetical order). A changed file matters for ``--resume`` (new cells
must come from the frozen corpus), never for ``analyze``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from mirrorscan.grid.errors import ConfigError
from mirrorscan.instruments.flinch.corpus import load_corpus


@dataclass(frozen=True)
class AnalysisAxes:
    """The axes an analysis scores, and where they came from."""

    axes: list[tuple[str, str, list[str]]]
    """(key, label, term words) of each axis of the frozen axis set, in its order."""
    source: str
    """``corpus file`` (the frozen file, unchanged) or ``stored rows`` (the file changed or is gone)."""
    note: str | None
    """Why the stored rows were read, for the analysis's notes (None when the file was read)."""
    extra: dict
    """The corpus file's descriptive keys (``Corpus.extra``; empty when the rows were read)."""
    warnings: tuple[str, ...]
    """The corpus file's warnings (``Corpus.warnings``; empty when the rows were read)."""
    unverified: dict[str, str]
    """Labels whose stored rows cover fewer carriers than the invocation froze (why): with the file changed,
    which terms are missing cannot be told, so those labels get no whole total."""


def analysis_axes(spec, traces: pa.Table) -> AnalysisAxes:
    """The axes of ``spec`` (a ``FlinchSpec``) for analysing ``traces``: from the corpus file when its SHA-256
    is still the frozen one, else from the stored rows (module docstring)."""
    try:
        corpus = spec.corpus()
    except ConfigError as err:
        reason = err.problem
    else:
        return AnalysisAxes([(a.key, a.label, [t.word for t in a.terms]) for a in corpus.axes], "corpus file",
                            None, dict(corpus.extra), tuple(corpus.warnings), {})
    try:
        current = {a.key: a for a in load_corpus(spec.corpus_path).axes}
    except ConfigError:
        current = {}
    cells = traces.select(["label", "axis", "term", "carrier_index"]).to_pylist()
    axes = []
    for key in spec.axes:
        words = sorted({r["term"] for r in cells if r["axis"] == key})
        order = [t.word for t in current[key].terms] if key in current else []
        words = [w for w in order if w in words] + [w for w in words if w not in order]
        axes.append((key, current[key].label if key in current else key, words))
    expected = spec.n_items or 0
    unverified = {}
    for label in dict.fromkeys(r["label"] for r in cells):
        have = len({(r["axis"], r["term"], r["carrier_index"]) for r in cells if r["label"] == label})
        if have < expected:
            unverified[label] = (f"its rows cover {have} of the {expected} carriers frozen, and the corpus file "
                                 "changed: which terms are missing cannot be told")
    note = (f"corpus {spec.corpus_path}: {reason}; analysed from the stored rows under the frozen corpus hash "
            f"{spec.corpus_sha256[:12]}… (labels and term order from the current file where it still has the axis)")
    return AnalysisAxes(axes, "stored rows", note, {}, (), unverified)

