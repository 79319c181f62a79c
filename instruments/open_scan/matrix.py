"""The model × probe matrix of an open_scan experiment: which cells exist, which are missing, which superseded.

Its rows are the models (labels), its columns the probes of the current probe set (``query_id``, in file
order), for one series. A cell of the matrix is a (label, query_id): *answered* with n samples of the current
query version, *missing* when no answer of that version is stored (shown as missing, never as an empty
answer), or *failed* when only error rows exist. Answers of an older text of the same id stay stored and are
listed as *superseded*; they never count toward the current version.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from instruments.open_scan.numbers import triples

ANSWERED, MISSING, FAILED, SUPERSEDED = "answered", "missing", "failed", "superseded"


@dataclass(frozen=True)
class Matrix:
    """An experiment's matrix for one series."""

    series: str
    labels: tuple[str, ...]
    query_ids: tuple[str, ...]
    cells: pa.Table
    """Long form, one row per (label, query_id, query_hash, sample) stored or expected: status, answer, ratings."""
    coverage: pa.Table
    """Wide form: one row per label, one column per query_id holding answered samples ("3") or "missing"."""
    summaries: list[dict]
    """Per-model summaries of the current versions (``numbers.model_summary``)."""
    superseded: int
    """Answers of older probe texts kept in the store (not in any number)."""

    def counts(self) -> dict:
        """Matrix cells (label × probe) by status."""
        out = {ANSWERED: 0, MISSING: 0, FAILED: 0}
        for row in self.coverage.to_pylist():
            for q in self.query_ids:
                out[ANSWERED if row[q].isdigit() else row[q]] += 1
        return out


def build_matrix(rows: pa.Table, items: list[tuple[str, str]], labels: list[str], series: str,
                 samples: int = 1) -> Matrix:
    """The matrix of ``rows`` (an experiment's trace rows) for ``series``: ``items`` are the current
    (query_id, query_hash) pairs in file order, ``labels`` the models' labels; ``samples`` the samples a
    complete cell holds (missing samples are listed as missing)."""
    current = dict(items)
    in_series = rows.filter(pc.equal(rows.column("series"), series)) if rows.num_rows else rows
    all_triples = triples(in_series) if in_series.num_rows else []
    long, found = [], {}
    superseded = 0
    for t in all_triples:
        if current.get(t["query_id"]) != t["query_hash"]:
            superseded += 1
            status = SUPERSEDED
        else:
            status = ANSWERED if t["answer"] is not None else FAILED
            found.setdefault((t["run_label"], t["query_id"]), []).append(t)
        long.append({"label": t["run_label"], "query_id": t["query_id"], "query_hash": t["query_hash"],
                     "sample": t["sample"], "status": status, "answer": t["answer"], "cold_rating": t["cold_rating"],
                     "posthoc_rating": t["posthoc_rating"], "invocation_id": t["invocation_id"]})
    coverage = {"label": list(labels)}
    for query_id, query_hash in items:
        column = []
        for label in labels:
            got = found.get((label, query_id), [])
            answered = sorted(t["sample"] for t in got if t["answer"] is not None)
            column.append(str(len(answered)) if answered else (FAILED if got else MISSING))
            for sample in range(samples):
                if sample not in answered and not any(t["sample"] == sample for t in got):
                    long.append({"label": label, "query_id": query_id, "query_hash": query_hash, "sample": sample,
                                 "status": MISSING, "answer": None, "cold_rating": None, "posthoc_rating": None,
                                 "invocation_id": None})
        coverage[query_id] = column
    schema = pa.schema([("label", pa.string()), ("query_id", pa.string()), ("query_hash", pa.string()),
                        ("sample", pa.int32()), ("status", pa.string()), ("answer", pa.string()),
                        ("cold_rating", pa.int32()), ("posthoc_rating", pa.int32()), ("invocation_id", pa.string())])
    long.sort(key=lambda r: (r["label"], r["query_id"], r["query_hash"], r["sample"]))
    current_rows = [t for group in found.values() for t in group]
    summaries = model_summaries_of(current_rows, labels)
    return Matrix(series, tuple(labels), tuple(q for q, _ in items), pa.Table.from_pylist(long, schema=schema),
                  pa.table({k: pa.array(v, pa.string()) for k, v in coverage.items()}), summaries, superseded)


def model_summaries_of(current: list[dict], labels: list[str]) -> list[dict]:
    """Per-model summaries of already-built triples (labels without any left out)."""
    from instruments.open_scan.numbers import model_summary

    by_label: dict[str, list[dict]] = {}
    for t in current:
        by_label.setdefault(t["run_label"], []).append(t)
    return [model_summary(label, by_label[label]) for label in labels if label in by_label]


