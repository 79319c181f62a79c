"""The forced-choice analysis of one invocation: its numbers, the per-pair table, three charts and the
terminal table, computed from stored traces and frozen settings with no I/O (``analyze`` writes them).

Classes are the ones written at scan time. They are classified again from the stored text (rows in the
store are never touched) when asked (``reannotate``) or when an answered row has none.

The report's classifier version is the one stored on the counted rows (their ``classifier_version``
column), or CLASSIFIER_VERSION when the classes were computed now; it is no longer stamped with the current
constant whatever the rows hold. Counted rows of several versions are refused (AnalysisError naming the
versions) unless re-classified, since their classes would not be one classifier's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.analysis.errors import AnalysisError
from mirrorscan.analysis.headline_intervals import format_intervals, headline_intervals
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.formatting import percent, points
from mirrorscan.grid.instrument import Analysis
from mirrorscan.grid.settings import Settings
from mirrorscan.instruments.forced_choice import charts
from mirrorscan.instruments.forced_choice.classify import CLASSIFIER_VERSION, with_classes
from mirrorscan.instruments.forced_choice.intervals import headline_scores
from mirrorscan.instruments.forced_choice.cell_table import ExpectedCells, latest_rows
from mirrorscan.instruments.forced_choice.numbers import ModelSummary, summarize
from mirrorscan.instruments.forced_choice.pairs import load_pairs
from mirrorscan.instruments.forced_choice.spec import from_frozen

DEMO_MODEL = "packaged:smollm2-135m-instruct"
"""The packaged demo model's alias in config.json."""
PLUMBING_NOTE = ("note: the demo model (SmolLM2-135M-Instruct) is a plumbing model: it mostly answers "
                 "UNCLEAR, so these numbers test the pipeline, not a preference.")


@dataclass(frozen=True)
class ForcedChoiceReport:
    """The forced-choice numbers of one invocation, per model label."""

    invocation_id: str
    experiment: str
    description: str
    """The settings' description ("" when none)."""
    classifier_version: str | None
    """Version of the classifier whose classes were counted: the ``classifier_version`` stored on the
    counted rows (answered rows, one per cell), or CLASSIFIER_VERSION when re-classified now. Never a mix
    (refused). None when the counted rows carry no version (classes stored without one) or no row was
    answered."""
    reclassified: bool
    """True when the classes were computed now from the stored text, not read from the rows."""
    summaries: tuple[ModelSummary, ...]
    """The numbers per (label, invocation_id)."""
    demo_model: bool = False
    """True when a model of the invocation is the packaged plumbing model."""
    intervals: dict | None = None
    """Commit rate, position bias and sharpness per model with intervals over envelopes and pairs, and every
    pair of models' differences (analysis.headline_intervals JSON)."""


def expected_cells(settings: Settings) -> ExpectedCells:
    """The cells every pair should have under the invocation's frozen settings."""
    spec = from_frozen(settings.instrument_settings)
    pair_ids = None
    try:
        pairs = load_pairs(spec.probe_set)
        if pairs.sha256 == spec.probe_set_sha256:
            pair_ids = tuple(pairs.table.column("pair_id").to_pylist())
    except ConfigError:
        pass   # probe set moved or changed: fall back to the pairs seen in the traces
    return ExpectedCells(envelopes=spec.envelope_ids, orderings=spec.orderings,
                         samples=tuple(range(settings.samples)), pair_ids=pair_ids)


def classified_cells(traces: pa.Table, settings: Settings, reclassify: bool) -> tuple[pa.Table, bool]:
    """One row per cell with classes: the stored ones, or fresh ones when asked or when any is missing."""
    cells = latest_rows(traces)
    answered = pc.is_null(cells.column("error"))
    missing = pc.sum(pc.and_(answered, pc.is_null(cells.column("class"))).cast(pa.int64())).as_py() or 0
    if reclassify or missing:
        return with_classes(cells, from_frozen(settings.instrument_settings).envelopes), True
    return cells, False


def counted_classifier_version(cells: pa.Table, invocation_id: str) -> str | None:
    """The one ``classifier_version`` stored on the answered rows of ``cells`` (one row per cell): the
    classes the numbers count. None when those rows carry none (or there is no answered row).

    AnalysisError when they carry several (a class stored without a version counts as one more,
    'unrecorded'): the fix is to re-classify them all under the current classifier.
    """
    answered = cells.filter(pc.is_null(cells.column("error")))
    if "classifier_version" not in answered.column_names:
        return None
    counts = Counter(answered.column("classifier_version").to_pylist())
    if len(counts) <= 1:
        return next(iter(counts), None)
    ordered = sorted(counts.items(), key=lambda kv: kv[0] or "")
    shown = ", ".join(f"{v or 'unrecorded'} ({n} rows)" for v, n in ordered)
    raise AnalysisError("classifier_version", f"the counted rows carry {len(counts)} classifier versions: {shown}",
                        f"count them under one classifier ({CLASSIFIER_VERSION}): "
                        f"mirrorscan analyze {invocation_id} --reclassify")


def pair_rows(summaries) -> pa.Table:
    """Per model and pair: verdicts under both rules, sharpness and the symmetric pick rate.

    ``unanimity`` and ``per_envelope_majority`` hold the verdict (one of VERDICTS: word_a, word_b, unclear,
    incomplete), never a word; ``unanimity_word`` and ``per_envelope_majority_word`` hold the committed
    word (null unless the verdict is word_a or word_b).
    """
    rows = []
    for s in summaries:
        majority = {p.pair_id: p for p in s.pair_commit_per_envelope_majority.pairs}
        sharp = {p.pair_id: p for p in s.sharpness.pairs}
        sym = {p.scope: p for p in s.position_bias.per_pair}
        for p in s.pair_commit_unanimity.pairs:
            m = majority.get(p.pair_id)
            rows.append({"label": s.label, "invocation_id": s.invocation_id, "pair_id": p.pair_id,
                         "word_a": p.word_a, "word_b": p.word_b, "unanimity": p.verdict,
                         "per_envelope_majority": m.verdict if m else None,
                         "unanimity_word": p.committed_word,
                         "per_envelope_majority_word": m.committed_word if m else None,
                         "n_a": sharp[p.pair_id].n_a if p.pair_id in sharp else None,
                         "n_b": sharp[p.pair_id].n_b if p.pair_id in sharp else None,
                         "sharpness": sharp[p.pair_id].sharpness if p.pair_id in sharp else None,
                         "symmetric_pick_rate_a": sym[p.pair_id].symmetric_pick_rate_a if p.pair_id in sym else None})
    return pa.Table.from_pylist(rows)


def report(traces: pa.Table, settings: Settings, invocation_id: str, experiment: str, *,
           reclassify: bool = False) -> ForcedChoiceReport:
    """The forced-choice numbers of an invocation's traces (one row per attempt) under its settings.

    The classifier version is the counted rows' stored one (AnalysisError when they mix several, unless
    ``reclassify``), or CLASSIFIER_VERSION when the classes are computed now.
    """
    cells, reclassified = classified_cells(traces, settings, reclassify)
    version = CLASSIFIER_VERSION if reclassified else counted_classifier_version(cells, invocation_id)
    summaries = summarize(cells, expected_cells(settings))
    return ForcedChoiceReport(invocation_id, experiment, settings.description, version,
                              reclassified, summaries,
                              demo_model=any(m.model == DEMO_MODEL for m in settings.models),
                              intervals=headline_intervals(headline_scores(cells)))


def _classifier(rep: ForcedChoiceReport) -> str:
    """The version counted; said to be the stored one when it is not the current classifier."""
    if rep.reclassified:
        return f"{rep.classifier_version}  (re-classified now)"
    if rep.classifier_version == CLASSIFIER_VERSION:
        return rep.classifier_version
    return (f"{rep.classifier_version or 'unrecorded'}  (as stored; current {CLASSIFIER_VERSION}: "
            "--reclassify to count under it)")


def format_report(rep: ForcedChoiceReport) -> str:
    """The readable terminal table of a report; its first line names the classifier version counted."""
    lines = [f"invocation {rep.invocation_id}  experiment {rep.experiment}  classifier {_classifier(rep)}"]
    if rep.description:
        lines.append(rep.description)
    width = max([26] + [len(s.label) for s in rep.summaries])
    header = f"{'model':<{width}} {'cells':>6} {'errors':>6} {'commit/cell':>11}  " \
             f"{'pair-commit unanimity a/b/unclear (incomplete)':<46} {'per-envelope majority a/b/unclear':<33} " \
             f"{'sharpness (pairs)':<18} {'position bias':>13} {'cycles':>6}"   # each column as wide as its header
    lines += [header, "-" * len(header)]
    for s in rep.summaries:
        u, m = s.pair_commit_unanimity, s.pair_commit_per_envelope_majority
        bias = s.position_bias.overall.position_bias_pp
        sharp = "—" if s.sharpness.mean_sharpness is None else f"{s.sharpness.mean_sharpness:.3f}"
        lines.append(f"{s.label:<{width}} {s.commit_rate.n_answered:>6} {s.commit_rate.n_errors:>6} "
                     f"{percent(s.commit_rate.per_cell_commit_rate):>11}  {u.split + f'  ({u.n_incomplete})':<46} "
                     f"{m.split:<33} {sharp + f' ({s.sharpness.n_pairs_with_picks})':<18} "
                     f"{points(bias):>13} {len(s.cycles):>6}")
        for c in s.cycles:
            lines.append(f"    3-cycle: {c.to_dict()}")
    if rep.intervals:
        lines.append(format_intervals(rep.intervals, width))
    return "\n".join(lines)


def analysis(rep: ForcedChoiceReport) -> Analysis:
    """The report as what ``analyze`` writes: summary.json numbers, pairs.parquet and three PNG charts."""
    numbers = {"classifier_version": rep.classifier_version, "reclassified": rep.reclassified,
               "models": [s.to_dict() for s in rep.summaries], "intervals": rep.intervals}
    return Analysis(text=format_report(rep), numbers=numbers, tables={"pairs": pair_rows(rep.summaries)},
                    charts={"pair_commit_split": charts.pair_commit_split(rep.summaries),
                            "position_bias_by_envelope": charts.position_bias_by_envelope(rep.summaries),
                            "fingerprint_agreement": charts.fingerprint_agreement(rep.summaries)},
                    notes=(PLUMBING_NOTE,) if rep.demo_model else (), json_view=numbers["models"], detail=rep)
