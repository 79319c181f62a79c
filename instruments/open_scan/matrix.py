"""The model × probe matrix of an open_scan experiment: which cells exist, which are missing, which superseded.

Its columns are the probes of the current probe set (``query_id``, in file order: the newest scan's). Its rows
are (series, label) pairs: the scanned models in the newest scan's series, then, side by side and labelled
with their file, the models of each imported file (an import is its own series, ``imported:<hash>``; its
answers are never merged into a scanned row, nor one file's into another's). A cell is *answered* with n
samples of the current query version, *missing* when no answer of that version is stored in the row's series
(shown as missing, never as an empty answer), or *failed* when only error rows exist. Answers of another text
of the same id (an older text, or a file's line whose query text differs) stay stored and are listed as
*superseded*; they never count toward the current version. After a revert (``history``) the current version
is the earlier text again, so its earlier answers count and the texts between are superseded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.instruments.open_scan.numbers import triples

ANSWERED, MISSING, FAILED, SUPERSEDED = "answered", "missing", "failed", "superseded"


@dataclass(frozen=True)
class Row:
    """One row of the matrix: a label in a series."""

    series: str
    """The series its answers come from (a scan's hash, or ``imported:<hash>``)."""
    label: str
    """The model's label."""
    source: str
    """What the series is, for the reader: ``scan`` or ``imported <file name>``."""

    @property
    def name(self) -> str:
        """How the row is printed: the label, with ``[<series> <source>]`` for a row that is not a scan's."""
        return self.label if self.source == "scan" else f"{self.label} [{self.series} {self.source}]"


@dataclass(frozen=True)
class Matrix:
    """An experiment's matrix: its rows (series, label), the current probes, cells, coverage, summaries."""

    series: str
    """The main series (the newest scan's, or the one asked for)."""
    rows: tuple[Row, ...]
    """The matrix's rows in order."""
    query_ids: tuple[str, ...]
    cells: pa.Table
    """Long form, one row per (series, label, query_id, query_hash, sample) stored or expected: status, answer,
    ratings (null: not measured)."""
    coverage: pa.Table
    """Wide form: one row per matrix row (label, series, source), one column per query_id holding answered
    samples ("3"), "missing" or "failed"."""
    summaries: list[dict]
    """Per matrix row, the summary of its current versions (``numbers.model_summary``; ``row``, ``series``)."""
    superseded: int
    """Answers of other probe texts kept in the store (not in any number)."""
    current: dict[str, list[dict]] = field(default_factory=dict, repr=False)
    """Per matrix row's printed name, the triples of its current versions: what its summary is of."""

    @property
    def labels(self) -> tuple[str, ...]:
        """The rows' printed names."""
        return tuple(r.name for r in self.rows)

    def counts(self) -> dict:
        """Matrix cells (row × probe) by status."""
        out = {ANSWERED: 0, MISSING: 0, FAILED: 0}
        for row in self.coverage.to_pylist():
            for q in self.query_ids:
                out[ANSWERED if row[q].isdigit() else row[q]] += 1
        return out


def build_matrix(rows: pa.Table, items: list[tuple[str, str]], groups: list[Row], series: str,
                 samples: int | dict[str, int] = 1) -> Matrix:
    """The matrix of ``rows`` (an experiment's trace rows): ``items`` the current (query_id, query_hash) pairs in
    file order, ``groups`` its rows (series, label), ``series`` the main one; ``samples`` the samples a
    complete cell holds (per series where a dict; missing samples are listed as missing)."""
    current = dict(items)
    wanted = {(g.series, g.label) for g in groups}
    in_series = rows.filter(pc.is_in(rows.column("series"), pa.array(sorted({g.series for g in groups}), pa.string()))) \
        if rows.num_rows else rows
    all_triples = [t for t in (triples(in_series) if in_series.num_rows else [])
                   if (t["series"], t["run_label"]) in wanted]
    long: list[dict] = []
    found: dict[tuple, list[dict]] = {}
    superseded = 0
    for t in all_triples:
        if current.get(t["query_id"]) != t["query_hash"]:
            superseded += 1
            status = SUPERSEDED
        else:
            status = ANSWERED if t["answer"] is not None else FAILED
            found.setdefault((t["series"], t["run_label"], t["query_id"]), []).append(t)
        long.append({"series": t["series"], "label": t["run_label"], "query_id": t["query_id"],
                     "query_hash": t["query_hash"], "sample": t["sample"], "status": status, "answer": t["answer"],
                     "cold_rating": t["cold_rating"], "posthoc_rating": t["posthoc_rating"],
                     "invocation_id": t["invocation_id"]})
    coverage = {"label": [g.label for g in groups], "series": [g.series for g in groups],
                "source": [g.source for g in groups]}
    for query_id, query_hash in items:
        column = []
        for g in groups:
            got = found.get((g.series, g.label, query_id), [])
            answered = sorted(t["sample"] for t in got if t["answer"] is not None)
            column.append(str(len(answered)) if answered else (FAILED if got else MISSING))
            expected = samples.get(g.series, 1) if isinstance(samples, dict) else samples
            for sample in range(expected):
                if sample not in answered and not any(t["sample"] == sample for t in got):
                    long.append({"series": g.series, "label": g.label, "query_id": query_id, "query_hash": query_hash,
                                 "sample": sample, "status": MISSING, "answer": None, "cold_rating": None,
                                 "posthoc_rating": None, "invocation_id": None})
        coverage[query_id] = column
    schema = pa.schema([("series", pa.string()), ("label", pa.string()), ("query_id", pa.string()),
                        ("query_hash", pa.string()), ("sample", pa.int32()), ("status", pa.string()),
                        ("answer", pa.string()), ("cold_rating", pa.int32()), ("posthoc_rating", pa.int32()),
                        ("invocation_id", pa.string())])
    long.sort(key=lambda r: (r["series"], r["label"], r["query_id"], r["query_hash"], r["sample"]))
    summaries: list[dict] = []
    current_triples: dict[str, list[dict]] = {}
    from mirrorscan.instruments.open_scan.numbers import model_summary

    for g in groups:
        mine = [t for (s, label, _), ts in found.items() if (s, label) == (g.series, g.label) for t in ts]
        if mine:
            summaries.append({**model_summary(g.label, mine), "series": g.series, "row": g.name})
            current_triples[g.name] = mine
    return Matrix(series, tuple(groups), tuple(q for q, _ in items), pa.Table.from_pylist(long, schema=schema),
                  pa.table({k: pa.array(v, pa.string()) for k, v in coverage.items()}), summaries, superseded,
                  current_triples)
