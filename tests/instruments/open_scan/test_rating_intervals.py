"""open_scan's analyze gives the mean cold and post-hoc ratings an interval over probes (samples as replicates)
and every pair of models a paired difference, on imported invocations (PostgreSQL catalog, local store, no Ray,
no model): a complete file, whose estimates are the table's means exactly, and one with ratings not measured
and an answer missing, whose missing cells go to REML and are counted."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import numpy as np
import pytest

from mirrorscan.grid.formatting import fixed
from mirrorscan.instruments.open_scan import cli
from mirrorscan.instruments.open_scan.intervals import headline_scores, rating_intervals
from mirrorscan.jobs import cli as mirrorscan
from mirrorscan.results.reader import StoreReader

PROBES = [f"q{i}" for i in range(8)]
PROBE_EFFECT = [0, 1, 2, 0, 1, 2, 0, 1]
COLD = {"alpha": 6, "beta": 2, "gamma": 2}
NOISE = {"alpha": [0, 1, 0, -1, 0, 1, 0, -1], "beta": [1, 0, -1, 0, 1, 0, -1, 0], "gamma": [0, -1, 0, 1, 0, -1, 0, 1]}
"""beta and gamma have the same cold mean (their noise sums to 0): indistinguishable; alpha is 4 points higher."""


def cold(model: str, i: int) -> int:
    return COLD[model] + PROBE_EFFECT[i] + NOISE[model][i]


POSTHOC = {m: np.random.default_rng(seed).integers(1, 11, size=(8, 2)) for seed, m in enumerate(COLD)}
"""Post-hoc ratings per model, probe and sample: fixed pseudo-random integers on the 1–10 scale."""


def posthoc(model: str, i: int, sample: int) -> int:
    return int(POSTHOC[model][i, sample])


def line(model: str, i: int, sample: int, cold_raw, posthoc_raw, answer="An answer.") -> dict:
    return {"model": f"org/{model.capitalize()}", "query_id": PROBES[i], "sample": sample, "answer": answer,
            "cold": cold_raw, "posthoc": posthoc_raw, "query": f"Question {i}?"}


def imported(tmp_path: Path, dsn: str, lines: list[dict], capsys) -> tuple[str, str]:
    """(store, invocation id) of ``lines`` imported as a new experiment."""
    f, store = tmp_path / "ratings.jsonl", str(tmp_path / "store")
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert cli.main(["import", str(f), "--experiment", "rated", "--store", store, "--catalog-dsn", dsn],
                    "mirrorscan open_scan", StoreReader()) == 0
    return store, re.search(r"as invocation (\S+) of", capsys.readouterr().out).group(1)


def analyzed(store: str, inv: str, dsn: str, capsys) -> tuple[str, dict]:
    """(analyze's text, its summary.json)."""
    assert mirrorscan.main(["analyze", inv, "--store", store, "--catalog-dsn", dsn]) == 0
    out = capsys.readouterr().out
    folder = re.search(r"^outputs: (\S+)/ \(", out, re.M).group(1)
    return out, json.loads((Path(folder) / "summary.json").read_text())


def table_line(out: str, label: str) -> list[str]:
    return next(ln for ln in out.splitlines() if ln.startswith(label + " ")).split()


def block(out: str, title: str) -> list[str]:
    """The lines of one headline's intervals (its heading, then one per model)."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"  {title}  (random: "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
    return lines[start:end]


def test_a_complete_file_gives_each_rating_mean_an_interval_whose_estimate_is_the_printed_mean(tmp_path,
                                                                                            catalog_dsn, capsys):
    lines = [line(m, i, s, str(cold(m, i)), f"{posthoc(m, i, s)}/10") for m in COLD for i in range(8) for s in (0, 1)]
    store, inv = imported(tmp_path, catalog_dsn, lines, capsys)
    out, summary = analyzed(store, inv, catalog_dsn, capsys)
    assert "intervals (95 %)" in out
    heads = summary["intervals"]["headlines"]
    assert set(heads) == {"cold_mean", "posthoc_mean"}
    assert heads["cold_mean"]["random"] == ["probe"] and heads["cold_mean"]["missing_cells"] == 0
    assert block(out, "cold")[0] == "  cold  (random: probe; ANOVA)"    # one cold reply per probe: no replicates
    posthoc_head = block(out, "posthoc")[0]                               # two answers per probe: samples
    assert posthoc_head.startswith("  posthoc  (random: probe; ") and "samples" in posthoc_head, posthoc_head
    assert heads["posthoc_mean"]["replicates"] == "samples" and heads["posthoc_mean"]["missing_cells"] == 0
    for model in COLD:
        by_hand = {"cold": statistics.fmean(cold(model, i) for i in range(8)),
                   "posthoc": statistics.fmean(posthoc(model, i, s) for i in range(8) for s in (0, 1))}
        row = table_line(out, model)
        assert row[3] == f"{by_hand['cold']:.2f}" and row[5] == f"{by_hand['posthoc']:.2f}", row
        for name, title in (("cold_mean", "cold"), ("posthoc_mean", "posthoc")):
            (obj,) = [o for o in heads[name]["objects"] if o["object"] == model]
            mine = next(m for m in summary["models"] if m["label"] == model)
            assert obj["estimate"] == pytest.approx(by_hand[title], abs=1e-12) == mine[name]
            assert obj["table_mean"] == mine[name]
            lo, hi = obj["interval"]
            assert lo < obj["estimate"] < hi and obj["naive_interval"][0] < obj["estimate"]
            shown = next(ln for ln in block(out, title) if ln.split()[0] == model).split()
            assert shown[1] == fixed(by_hand[title]), shown                  # the printed mean, 3 decimals
    assert "estimate ≠ table mean" not in out
    diffs = {(d["a"], d["b"]): d for d in heads["cold_mean"]["differences"]}
    assert set(diffs) == {("alpha", "beta"), ("alpha", "gamma"), ("beta", "gamma")}
    assert diffs[("alpha", "beta")]["estimate"] == pytest.approx(4.0) and diffs[("alpha", "beta")]["verdict"] == "alpha higher"
    assert diffs[("beta", "gamma")]["estimate"] == pytest.approx(0.0, abs=1e-12)
    assert diffs[("beta", "gamma")]["verdict"] == "indistinguishable at this design"
    assert diffs[("alpha", "beta")]["p_holm"] >= diffs[("alpha", "beta")]["p_value"]
    assert "    cold: alpha − beta 4.000 [" in out and "Holm" in out
    assert "warning: probe has" not in out                               # 8 probes: enough levels


def test_unmeasured_ratings_and_a_missing_answer_are_missing_cells_fitted_by_reml(tmp_path, catalog_dsn, capsys):
    lines = []
    for m in COLD:
        for i in range(8):
            c = str(cold(m, i))
            if (m, i) in {("beta", 2), ("gamma", 5)}:
                c = "eleven"                                             # not measured: no integer in the scale
            if (m, i) == ("gamma", 0):
                lines.append(line(m, i, 0, c, None, answer=None))        # an answer missing: an error row
                continue
            lines.append(line(m, i, 0, c, "I cannot say" if (m, i) == ("alpha", 3) else str(posthoc(m, i, 0))))
    lines.append(line("delta", 0, 0, "no idea", "none"))                 # a model with no rating at all
    lines.append(line("delta", 1, 0, "no idea", "none"))
    store, inv = imported(tmp_path, catalog_dsn, lines, capsys)
    out, summary = analyzed(store, inv, catalog_dsn, capsys)
    heads = summary["intervals"]["headlines"]
    # cold: all 8 probes rated by someone; beta misses q2, gamma q5 (delta rated nothing: no row of the design)
    assert heads["cold_mean"]["missing_cells"] == 2 and heads["cold_mean"]["components_method"] == "reml"
    assert block(out, "cold")[0] == "  cold  (random: probe; REML, 2 cell(s) missing)"
    # posthoc: alpha misses q3, gamma q0 (its answer failed: no post-hoc)
    assert heads["posthoc_mean"]["missing_cells"] == 2
    assert "  note: cold: no measured rating for delta, so no interval" in out
    assert [o["object"] for o in heads["cold_mean"]["objects"]] == ["alpha", "beta", "gamma"]
    for name in ("cold_mean", "posthoc_mean"):
        for o in heads[name]["objects"]:
            mine = next(m for m in summary["models"] if m["label"] == o["object"])
            assert o["table_mean"] == mine[name]                         # what the table prints
    by_object = {o["object"]: o for o in heads["cold_mean"]["objects"]}
    assert by_object["alpha"]["estimate"] == pytest.approx(by_object["alpha"]["table_mean"], abs=1e-12)   # complete
    beta = by_object["beta"]
    assert beta["table_mean"] == pytest.approx(statistics.fmean(cold("beta", i) for i in range(8) if i != 2))
    assert beta["estimate"] != pytest.approx(beta["table_mean"], abs=1e-6)   # q2 at its fitted value instead
    assert f"beta {fixed(beta['estimate'])} (table {fixed(beta['table_mean'])})" in out
    assert beta["interval"][0] < beta["estimate"] < beta["interval"][1]
    assert table_line(out, "gamma")[1] == "7"                            # 7 answers stored, one failed
    post = {o["object"]: o for o in heads["posthoc_mean"]["objects"]}   # alpha misses q3, gamma q0; beta none
    assert post["alpha"]["table_mean"] == pytest.approx(statistics.fmean(posthoc("alpha", i, 0) for i in range(8)
                                                                         if i != 3))
    assert [name for name, o in post.items() if o["estimate"] != pytest.approx(o["table_mean"], abs=1e-9)] == \
        ["alpha", "gamma"]
    assert f"alpha {fixed(post['alpha']['estimate'])} (table {fixed(post['alpha']['table_mean'])})" in out
    assert len(heads["posthoc_mean"]["differences"]) == 3 and "    posthoc: alpha − beta " in out


def test_the_scores_are_the_tables_ratings_one_cold_per_probe_and_one_posthoc_per_answer():
    def t(q, sample, c, p, cold_sample=0):
        return {"query_id": q, "query_hash": "h" + q, "sample": sample, "cold_rating": c, "posthoc_rating": p,
                "cold_sample": cold_sample}
    groups = {"a": [t("q1", 0, 5, 6), t("q1", 1, 5, None), t("q2", 0, None, 3), t("q2", 1, None, 4)],
              "b": [t("q1", 0, 7, 2, 0), t("q1", 1, 9, 2, 1)]}         # b: an import's cold reply per sample
    cold_scores, posthoc_scores = headline_scores(groups)
    assert (cold_scores.columns["object"], cold_scores.columns["score"]) == (["a", "b", "b"], [5.0, 7.0, 9.0])
    assert cold_scores.replicates == "samples" and posthoc_scores.replicates == "samples"
    assert posthoc_scores.columns["probe"] == ["q1@hq1", "q2@hq2", "q2@hq2", "q1@hq1", "q1@hq1"]
    result = rating_intervals(groups)
    assert result["headlines"]["cold_mean"]["skipped"] and result["headlines"]["cold_mean"]["unrated"] == []



def test_the_matrix_prints_the_same_intervals_for_its_rows(tmp_path, catalog_dsn, capsys):
    lines = [line(m, i, 0, str(cold(m, i)), str(posthoc(m, i, 0))) for m in COLD for i in range(8)]
    _, inv = imported(tmp_path, catalog_dsn, lines, capsys)
    assert cli.main(["matrix", "rated", "--catalog-dsn", catalog_dsn], "mirrorscan open_scan", StoreReader()) == 0
    out = capsys.readouterr().out
    assert block(out, "cold")[0] == "  cold  (random: probe; ANOVA)"
    for model in COLD:                   # an imported file's row is named with its series and file, as in the table
        name = next(ln for ln in out.splitlines() if ln.startswith(f"{model} [imported:")).split("]")[0] + "]"
        assert name.endswith(" imported ratings.jsonl]")
        for title, mean in (("cold", statistics.fmean(cold(model, i) for i in range(8))),
                            ("posthoc", statistics.fmean(posthoc(model, i, 0) for i in range(8)))):
            (shown,) = [ln for ln in block(out, title)[1:] if ln.startswith(f"    {name} ")]
            assert shown[len(name) + 4:].split()[0] == fixed(mean), shown
    assert "    cold: alpha [imported:" in out and "Holm" in out
