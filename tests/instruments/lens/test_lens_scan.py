"""lens through scan and analyze on a multi-process Ray, with three seeded random Llamas of different sizes:
every (model, rendering, item) cell is extracted once, the vectors land in fixed-size lists of the configured
dtype, and the analysis's AUROCs equal scikit-learn's on projections recomputed here from the stored rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mirrorscan.cluster.models.tiny import build_tiny_random_model
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.jobs import cli
from mirrorscan.results import sql as results_sql
from mirrorscan.jobs.analyze import analyze_invocation
from mirrorscan.jobs.scan import run_scan
from suggested_query import check_suggested_query

SIZES = {"small": (2, 32), "medium": (3, 48), "large": (4, 64)}
"""label → (blocks, width) of the three random models."""


@pytest.fixture(scope="module")
def three_models(tmp_path_factory, demo_dir) -> dict:
    root = tmp_path_factory.mktemp("lens-models")
    return {label: build_tiny_random_model(root / label, demo_dir, seed=i, layers=layers, hidden=hidden)
            for i, (label, (layers, hidden)) in enumerate(SIZES.items())}


def write_experiment(folder, models: dict, **section) -> None:
    """3 × 3 framings (9 wrappers: enough for predict), 4 task texts, 8 scoring items (4 per class)."""
    for arm, names in (("evaluation", ("e1", "e2", "e3")), ("deployment", ("d1", "d2", "d3"))):
        (folder / "framings" / arm).mkdir(parents=True, exist_ok=True)
        for n, name in enumerate(names):
            (folder / "framings" / arm / f"{name}.txt").write_text(
                (f"This is evaluation item {n}. " if arm == "evaluation" else f"hey, friend {n} here:\n") + "{task}")
    (folder / "tasks.jsonl").write_text("\n".join(json.dumps({"id": f"t{i}", "text": t}) for i, t in enumerate(
        ["Name a colour.", "Add 2 and 3.", "Write a short greeting.", "Spell the word cat."])))
    scoring = [{"id": f"s{i}", "text": text, "label": label} for i, (text, label) in enumerate(
        [("Question 1: pick A or B. Answer:", "testing"), ("can u help me with my essay", "deployment"),
         ("Question 2: which is larger? Answer:", "testing"), ("my cat is sick, what do i do", "deployment"),
         ("Question 3: define entropy. Answer:", "testing"), ("need a birthday message for mum", "deployment"),
         ("Question 4: true or false? Answer:", "testing"), ("how do i fix a flat tyre", "deployment")])]
    (folder / "scoring.csv").write_text("id,text,label\n" + "\n".join(f'{r["id"]},"{r["text"]}",{r["label"]}'
                                                                      for r in scoring) + "\n")
    (folder / "config.json").write_text(json.dumps({
        "instrument": "lens", "batch_size": 8, "max_concurrent_models": len(models),   # pools side by side
        "models": [{"model": str(path), "label": label} for label, path in models.items()],
        "lens": {"framings": "framings", "tasks": "tasks.jsonl", "scoring_set": "scoring.csv", "item_samples": 2,
                 "null_permutations": 50, "contrastive_permutations": 50, "bootstrap_draws": 50, **section}}))


@pytest.mark.timeout(400)
def test_a_lens_scan_extracts_every_cell_once_and_analyzes_over_wrappers(tmp_path, three_models, catalog_dsn,
                                                                          ray_local, capsys, monkeypatch):
    from sklearn.metrics import roc_auc_score

    exp = tmp_path / "lens"
    write_experiment(exp, three_models, vector_dtype="float16", extraction={"rendering": "raw"})
    store = str(tmp_path / "store")
    result = run_scan(str(exp), store=store, catalog_dsn=catalog_dsn, quiet=True)
    per_model = 6 * (4 + 1) + 8   # framings × (tasks + the empty task) + scoring items
    assert result.status == "complete" and result.counts["cells"] == result.counts["ok"] == 3 * per_model

    rows = results_sql.query(f"SELECT probe_id, label, framing, item_id FROM traces WHERE invocation_id = "
                     f"'{result.invocation_id}'", store, catalog_dsn).to_pylist()
    assert len(rows) == 3 * per_model and len({r["probe_id"] for r in rows}) == 3 * per_model
    assert "large|base/e2|t3|-|-" in {r["probe_id"] for r in rows}
    suggested = check_suggested_query(result, store, catalog_dsn, {"label", "variant", "rendering", "cells", "layers"})
    assert {(s["label"], s["layers"]) for s in suggested} == {(k, b + 1) for k, (b, _) in SIZES.items()}
    assert {s["label"]: sum(x["cells"] for x in suggested if x["label"] == s["label"]) for s in suggested} \
        == dict.fromkeys(SIZES, per_model)
    trace_store = open_store(store)
    part_types = {str(pq.read_schema(trace_store.fs.open_input_file(p)).field("layer_vectors").type)
                  for p in trace_store.list_parts("lens", result.invocation_id)}
    assert {f"fixed_size_list<element: fixed_size_list<element: halffloat>[{w}]>[{b + 1}]" for b, w in SIZES.values()} \
        == part_types

    report = analyze_invocation(result.invocation_id, catalog_dsn=catalog_dsn)
    numbers = report.analysis.numbers
    assert numbers["positive_class"] == "deployment"
    assert set(numbers["models"]) == {"small/base", "medium/base", "large/base"}
    assert numbers["models"]["large/base"]["n_layers"] == 5 and numbers["models"]["large/base"]["headline"]["n"] == 9

    # the analysis's AUROC of one wrapper and layer, recomputed from the stored rows with scikit-learn
    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.trace_schema import trace_schema

    traces = trace_store.read("lens", result.invocation_id, schema=trace_schema(resolve("lens").columns)).to_pylist()
    mine = [r for r in traces if r["label"] == "medium"]
    vec = {(r["framing"], r["item_id"]): np.array(r["layer_vectors"], dtype=np.float64) for r in mine}
    direction = (np.mean([vec[("e2", f"t{i}")] for i in range(4)], axis=0)
                 - np.mean([vec[("d1", f"t{i}")] for i in range(4)], axis=0))
    items = sorted(r["item_id"] for r in mine if r["framing"] == "score")
    labels = {r["item_id"]: r["item_label"] for r in mine if r["framing"] == "score"}
    table = report.analysis.tables["auroc_by_layer"].to_pylist()
    for layer in (1, 2, 3):
        proj = [float(vec[("score", i)][layer] @ direction[layer]) for i in items]
        expected = roc_auc_score([labels[i] == "deployment" for i in items], proj)
        got = next(r["auroc"] for r in table if r["label"] == "medium" and r["wrapper"] == "e2×d1" and r["layer"] == layer)
        assert got == pytest.approx(expected, abs=1e-9)
    g = numbers["gstudy"]["base"]
    assert g["design"] == "model × wrapper × item_sample" and g["item_samples"] == [4, 4]
    assert set(g["report"]["components"]) >= {"model", "wrapper", "item_sample", "model:wrapper"}
    # the scores the G-study was fitted on lie beside the summary, named in it; refitted here they give its components
    from test_lens_checks import components_by_least_squares

    assert numbers["tables"]["gstudy_scores"] == "gstudy_scores.parquet" and g["scores_table"]["rows"] == "study = 'base'"
    fitted = [r for r in pq.read_table(Path(report.outputs[0]).parent / "gstudy_scores.parquet").to_pylist()
              if r["study"] == "base"]
    models, wrappers = sorted({r["model"] for r in fitted}), sorted({r["wrapper"] for r in fitted})
    y = np.full((len(models), len(wrappers), 2), np.nan)
    for r in fitted:
        y[models.index(r["model"]), wrappers.index(r["wrapper"]), r["item_sample"]] = r["score"]
    refit = components_by_least_squares(y, ("model", "wrapper", "item_sample"))
    assert refit[frozenset({"model", "wrapper"})] == pytest.approx(g["report"]["components"]["model:wrapper"]["estimate"],
                                                                   abs=1e-12)
    assert refit[frozenset({"model"})] == pytest.approx(g["report"]["components"]["model"]["estimate"], abs=1e-12)
    assert "base" in numbers["concordance"] and numbers["concordance"]["base"]["n_wrappers"] == 9
    assert numbers["claims"]["base"]["scaling"]["parameters"]["large"] > numbers["claims"]["base"]["scaling"]["parameters"]["small"]
    assert len(numbers["claims"]["base"]["comparisons"]) == 3
    assert set(numbers["surface"]) == {"all"}
    assert "auroc-by-layer-large-base" in report.analysis.charts and "headline-spread" in report.analysis.charts

    # predict: a scoring item's own text, extracted again, lands where the stored item projects
    folder = Path(report.outputs[0]).parent
    texts = tmp_path / "texts.txt"
    texts.write_text("Question 3: define entropy. Answer:\nhello there\n")
    assert cli.main(["lens", "predict", str(folder), "--label", "medium", "--texts", str(texts), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    basis = json.loads((folder / "predict-medium-base.json").read_text())
    directions = np.array([r["direction"] for r in pq.read_table(folder / "directions.parquet").to_pylist()
                           if r["label"] == "medium"])
    mean = directions.mean(axis=0) / np.linalg.norm(directions.mean(axis=0))
    stored = vec[("score", "s4")][basis["layer"]]
    # the stored vectors are float16 (vector_dtype), predict's own extraction float32: agreement to float16 precision
    assert out["predictions"][0]["score"] == pytest.approx(float(stored @ mean), rel=2e-3)
    assert out["predictions"][0]["sd_over_wrappers"] == pytest.approx(float(np.std(directions @ stored, ddof=1)), rel=2e-3)
    # predict --help's example as written, with this store's experiment folder and label in place of the demo's:
    # the newest lens analysis below the folder is read, the packaged texts are scored
    from mirrorscan.instruments.lens.cli import read_texts
    from test_predict_example import REPO, example_argv

    argv = example_argv()
    argv[argv.index("--label") + 1] = "medium"
    argv[2] = str(Path(store) / "lens")
    with monkeypatch.context() as m:
        m.chdir(REPO)   # the example's texts path is relative to the repository
        assert cli.main(argv + ["--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["layer"] == basis["layer"] and len(again["predictions"]) == \
        len(read_texts(str(REPO / argv[argv.index("--texts") + 1])))
    assert out["predictions"][1]["score"] != pytest.approx(out["predictions"][0]["score"], rel=1e-2)
    assert len(out["predictions"]) == 2 and out["wrappers"] == 9
