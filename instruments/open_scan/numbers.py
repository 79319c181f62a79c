"""open_scan's numbers: stored rows → (model, probe, sample) triples → per-model summaries and the matrix.

A **triple** is one answer with the self-reports that belong to it: the answer row of (label, query version,
sample), the cold rating of (label, query version) and the post-hoc rating of that answer. It is the unit of
the method's JSONL and of the matrix. Rows come from any number of invocations of one experiment; a cell
answered twice (a reproduction) keeps its newest successful row.

Per model (``model_summaries``): answers stored, answer length in characters (mean, median), each
self-report's ratings (measured n, not measured n, mean, sd over answers; a null rating is "not measured" and
never enters a mean), and, where a cell has more than one sample, across-sample agreement: the share of
sample pairs whose answers are identical after whitespace is collapsed, and the mean within-cell sd of the
post-hoc ratings. One sample per cell cannot show variance, and the summary says so instead of a number.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.formatting import ABSENT, percent

ANSWER, COLD, POSTHOC = "answer", "cold", "posthoc"
ONE_SAMPLE_NOTE = "one sample per cell: across-sample agreement cannot be measured"


def latest_rows(rows: pa.Table) -> pa.Table:
    """One row per (series, probe_id, sample): the newest successful row, else the newest attempt."""
    if rows.num_rows == 0:
        return rows
    ok = pc.is_null(rows.column("error")).cast(pa.int8())
    order = rows.append_column("_ok", ok).append_column("_pos", pa.array(range(rows.num_rows), pa.int64()))
    order = order.sort_by([("_ok", "descending"), ("created_at", "descending"), ("_pos", "descending")])
    seen, keep = set(), []
    for i, key in enumerate(zip(order.column("series").to_pylist(), order.column("probe_id").to_pylist(),
                                order.column("sample").to_pylist())):
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return order.take(pa.array(keep, pa.int64())).sort_by("_pos").drop_columns(["_ok", "_pos"])


def triples(rows: pa.Table) -> list[dict]:
    """The (label, query version, sample) triples of ``rows`` (``latest_rows`` applied), in label, query and
    sample order: answer, cold and post-hoc text and rating, with the answer row's model, seed, locale,
    created_at, invocation and error."""
    rows = latest_rows(rows)
    cols = ["label", "model", "query_id", "query_hash", "envelope", "sample", "seed", "locale", "series", "response",
            "rating", "created_at", "invocation_id", "error"]
    records = rows.select(cols).to_pylist()
    cold = {(r["series"], r["label"], r["query_hash"], r["query_id"], r["sample"]): r
            for r in records if r["envelope"] == COLD}   # sample 0; an import may hold one per sample
    posthoc = {(r["series"], r["label"], r["query_hash"], r["query_id"], r["sample"]): r
               for r in records if r["envelope"] == POSTHOC}
    out = []
    for r in records:
        if r["envelope"] != ANSWER:
            continue
        key = (r["series"], r["label"], r["query_hash"], r["query_id"])
        cold_sample = r["sample"] if (*key, r["sample"]) in cold else 0
        c = cold.get((*key, cold_sample))
        p = posthoc.get((r["series"], r["label"], r["query_hash"], r["query_id"], r["sample"]))
        out.append({"run_label": r["label"], "model": r["model"], "query_id": r["query_id"],
                    "query_hash": r["query_hash"], "sample": r["sample"], "seed": r["seed"], "locale": r["locale"],
                    "answer": r["response"] if r["error"] is None else None,
                    "cold_raw": _ok_text(c), "cold_rating": _ok_rating(c), "cold_sample": cold_sample,
                    "posthoc_raw": _ok_text(p), "posthoc_rating": _ok_rating(p),
                    "created_at": r["created_at"], "series": r["series"], "invocation_id": r["invocation_id"],
                    "error": r["error"]})
    out.sort(key=lambda t: (t["run_label"], t["query_id"], t["query_hash"], t["sample"]))
    return out


def _ok_text(row: dict | None) -> str | None:
    return row["response"] if row is not None and row["error"] is None else None


def _ok_rating(row: dict | None) -> int | None:
    return row["rating"] if row is not None and row["error"] is None else None


def _ratings(values: list) -> dict:
    measured = [v for v in values if v is not None]
    return {"measured": len(measured), "not_measured": len(values) - len(measured),
            "mean": statistics.fmean(measured) if measured else None,
            "sd": statistics.stdev(measured) if len(measured) > 1 else None}


def _collapse(text: str) -> str:
    return " ".join(text.split())


def model_summary(label: str, items: list[dict]) -> dict:
    """The summary of one model's triples (module docstring); units: characters and rating points."""
    answers = [t["answer"] for t in items if t["answer"] is not None]
    lengths = [len(a) for a in answers]
    cold_by_query = {(t["query_id"], t["query_hash"], t.get("cold_sample", 0)): t["cold_rating"] for t in items}
    cells: dict[tuple, list[dict]] = {}
    for t in items:
        cells.setdefault((t["query_id"], t["query_hash"]), []).append(t)
    most = max((len(v) for v in cells.values()), default=0)
    summary: dict[str, Any] = {"label": label, "model": items[0]["model"] if items else None, "probes": len(cells),
               "answers": len(answers), "answer_errors": len(items) - len(answers),
               "answer_chars_mean": statistics.fmean(lengths) if lengths else None,
               "answer_chars_median": statistics.median(lengths) if lengths else None,
               "cold": _ratings(list(cold_by_query.values())), "posthoc": _ratings([t["posthoc_rating"] for t in items]),
               "samples_per_cell": most}
    summary["cold_mean"], summary["posthoc_mean"] = summary["cold"]["mean"], summary["posthoc"]["mean"]
    if most < 2:
        summary["agreement"] = {"note": ONE_SAMPLE_NOTE}
        return summary
    pairs, same, sds = 0, 0, []
    for group in cells.values():
        texts = [_collapse(t["answer"]) for t in group if t["answer"] is not None]
        for a, b in itertools.combinations(texts, 2):
            pairs, same = pairs + 1, same + (a == b)
        ratings = [t["posthoc_rating"] for t in group if t["posthoc_rating"] is not None]
        if len(ratings) > 1:
            sds.append(statistics.stdev(ratings))
    summary["agreement"] = {"answer_pairs": pairs, "identical_answer_share": same / pairs if pairs else None,
                            "posthoc_sd_within_cell_mean": statistics.fmean(sds) if sds else None,
                            "cells_with_posthoc_sd": len(sds)}
    return summary


def model_summaries(rows: pa.Table, labels: list[str] | None = None) -> list[dict]:
    """Per label (all labels in ``rows``, or exactly ``labels`` where given, in that order): its summary.
    A label with no rows is left out (the caller says so)."""
    by_label: dict[str, list[dict]] = {}
    for t in triples(rows):
        by_label.setdefault(t["run_label"], []).append(t)
    wanted = sorted(by_label) if labels is None else [label for label in labels if label in by_label]
    return [model_summary(label, by_label[label]) for label in wanted]


def _fmt(value, spec: str = ".2f") -> str:
    """A mean with the decimals the report shows it with (``headline_units``); absent as ``—``, as everywhere."""
    return ABSENT if value is None else format(value, spec)


def summary_text(summaries: list[dict], series: str) -> str:
    """The per-model table printed by ``analyze``, ``matrix`` and ``remeasure``."""
    lines = [f"open_scan (series {series}): answers, length in characters, self-reports (mean; n measured / not)",
             f"{'model':<28} {'answers':>7} {'chars':>7} {'cold':>6} {'n':>9} {'posthoc':>8} {'n':>9}  agreement"]
    for m in summaries:
        agree = m["agreement"]
        agreement = (agree["note"] if "note" in agree else
                     f"identical {percent(agree['identical_answer_share'])}, posthoc sd {_fmt(agree['posthoc_sd_within_cell_mean'])}")
        lines.append(f"{m.get('row', m['label']):<28} {m['answers']:>7} {_fmt(m['answer_chars_mean'], '.0f'):>7} "
                     f"{_fmt(m['cold']['mean']):>6} {m['cold']['measured']:>4}/{m['cold']['not_measured']:<4} "
                     f"{_fmt(m['posthoc']['mean']):>8} {m['posthoc']['measured']:>4}/{m['posthoc']['not_measured']:<4}  "
                     f"{agreement}")
    return "\n".join(lines)
