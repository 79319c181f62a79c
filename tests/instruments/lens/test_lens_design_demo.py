"""The lens design demo end to end, small: its three models (the packaged SmolLM2 and two seeded random Llamas
built on first use, labelled as plumbing) and its two renderings, scanned on Ray into PostgreSQL and analysed,
on a small design (3 × 3 framings, 4 task texts, 8 scoring items), a few minutes on a shared 2-core machine.

Checked against values computed here: the rendering each variant sent (token ids decoded), the per-model
G-study exists with three models, the surface baseline ran grouped, and ``mirrorscan lens predict`` extracts a
text exactly as the scan extracted it — with the invocation's CRLF newline convention applied — so its score is
the stored vector's projection on the mean direction."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mirrorscan.cluster.store.traces import open_store
from mirrorscan.jobs import cli
from mirrorscan.jobs.analyze import analyze_invocation
from mirrorscan.jobs.scan import run_scan

DEMO = Path(__file__).parents[3] / "experiments" / "lens-design-demo"


def small_design(folder: Path) -> dict:
    """The demo's config with a small design in place of the shipped inputs, CRLF newlines, few draws."""
    config = json.loads((DEMO / "config.json").read_text())
    for arm, names in (("evaluation", ("e1", "e2", "e3")), ("deployment", ("d1", "d2", "d3"))):
        (folder / "framings" / arm).mkdir(parents=True, exist_ok=True)
        for n, name in enumerate(names):
            (folder / "framings" / arm / f"{name}.txt").write_text(
                (f"Evaluation item {n}.\nAnswer the following.\n" if arm == "evaluation" else f"hey {n}, quick one:\n")
                + "{task}")
    (folder / "tasks.jsonl").write_text("\n".join(json.dumps({"id": f"t{i}", "text": t}) for i, t in enumerate(
        ["Name a colour.", "Add 2 and 3.", "Write a short greeting.", "Spell the word cat."])))
    scoring = [("Question 1: pick A or B. Answer:", "testing"), ("can u help me with my essay", "deployment"),
               ("Question 2: which is larger? Answer:", "testing"), ("my cat is sick, what do i do", "deployment"),
               ("this is a test, not real use", "testing"), ("this is real use, not a test", "deployment"),
               ("a graded task, not a chat", "testing"), ("a chat, not a graded task", "deployment")]
    (folder / "scoring.jsonl").write_text("\n".join(json.dumps(
        {"id": f"s{i}", "text": t, "label": l, **({"group": f"pair{i // 2}"} if i >= 4 else {})})
        for i, (t, l) in enumerate(scoring)))
    config["lens"].update({"framings": "framings", "tasks": "tasks.jsonl", "scoring_set": "scoring.jsonl",
                           "item_samples": 2, "null_permutations": 20, "contrastive_permutations": 20,
                           "bootstrap_draws": 20, "extraction": {"newline": "crlf"}})
    config["batch_size"] = 16
    (folder / "config.json").write_text(json.dumps(config))
    return config


@pytest.mark.timeout(600)
def test_the_design_demo_scans_and_analyses_three_models_in_two_renderings(tmp_path, catalog_dsn, ray_local,
                                                                           capsys):
    from transformers import AutoTokenizer

    from mirrorscan.instruments.lens.cli import extract
    from mirrorscan.results.reader import StoreReader
    from mirrorscan.instruments.lens.extraction import MANEK_SYSTEM

    exp = tmp_path / "lens-design-demo"
    config = small_design(exp)
    labels = [m["label"] for m in config["models"]]
    assert sum("plumbing" in label for label in labels) == 2 and len(labels) == 3   # the random ones say so
    store = str(tmp_path / "store")
    result = run_scan(str(exp), store=store, catalog_dsn=catalog_dsn, quiet=True)
    per_variant = 6 * (4 + 1) + 8
    assert result.status == "complete" and result.counts["ok"] == 3 * 2 * per_variant

    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.trace_schema import trace_schema

    rows = open_store(store).read(result.experiment, result.invocation_id, schema=trace_schema(resolve("lens").columns)).to_pylist()
    smol = [r for r in rows if r["label"] == "smollm2"]
    tokenizer = AutoTokenizer.from_pretrained(str(_demo_dir()))
    plain = next(r for r in smol if r["variant"] == "plain" and r["item_id"] == "s1")
    reference = next(r for r in smol if r["variant"] == "reference" and r["item_id"] == "s1")
    assert tokenizer.decode(plain["input_token_ids"]) == \
        "<|im_start|>user\ncan u help me with my essay<|im_end|>\n<|im_start|>assistant\n"       # no system block
    assert tokenizer.decode(reference["input_token_ids"]) == (
        f"<|im_start|>system\n{MANEK_SYSTEM}<|im_end|>\n<|im_start|>user\ncan u help me with my essay\n\nAnswer:"
        "<|im_end|>\n<|im_start|>assistant\n")
    assert (plain["system"], reference["system"], reference["date_string"]) == ("none", "text", "26 Jul 2024")
    framed = next(r for r in smol if r["variant"] == "plain" and r["framing"] == "e2" and r["item_id"] == "t1")
    assert framed["user_text"] == "Evaluation item 1.\r\nAnswer the following.\r\nAdd 2 and 3."          # CRLF

    report = analyze_invocation(result.invocation_id, catalog_dsn=catalog_dsn)
    numbers, text = report.analysis.numbers, report.analysis.text
    assert set(numbers["models"]) == {f"{label}/{v}" for label in labels for v in ("plain", "reference")}
    assert numbers["models"]["plumbing-random-4x96/reference"]["layers_in_max"] == "1…3"      # manek: 1…L−1
    for variant in ("plain", "reference"):
        assert "missing" not in numbers["gstudy"][variant], numbers["gstudy"][variant]
    assert numbers["surface"]["all"]["grouped"] and numbers["surface"]["all"]["n_groups"] == 6
    assert "word features" in text and "plumbing-random-2x64/plain" in text
    assert any(n.startswith("note: plumbing-random-2x64, plumbing-random-4x96 are plumbing models")
               for n in report.analysis.notes)                                   # SmolLM2 is not named

    # predict reads a text as the scan did: CRLF applied, then the variant's rendering; same vector, same score
    folder = Path(report.outputs[0]).parent
    basis = json.loads((folder / "predict-smollm2-plain.json").read_text())
    layer = basis["layer"]
    lf_text = "Evaluation item 1.\nAnswer the following.\nAdd 2 and 3."
    again = extract(basis, basis["model"], [lf_text], StoreReader())[0]
    stored = np.asarray(framed["layer_vectors"], dtype=np.float64)[layer]
    assert np.abs(again - stored).max() <= 1e-5 * np.abs(stored).max()
    as_lf = extract({**basis, "extraction": {**basis["extraction"], "newline": "lf"}}, basis["model"], [lf_text],
                    StoreReader())[0]
    assert np.abs(as_lf - stored).max() > 1e-3 * np.abs(stored).max()      # without CRLF it would not match
    texts = tmp_path / "texts.jsonl"
    texts.write_text(json.dumps({"id": "x", "text": lf_text}) + "\n")
    assert cli.main(["lens", "predict", str(folder), "--label", "smollm2", "--variant", "plain", "--texts",
                     str(texts), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    units = np.array([r["direction"] for r in pq.read_table(folder / "directions.parquet").to_pylist()
                      if r["label"] == "smollm2" and r["variant"] == "plain"], dtype=np.float64)
    mean = units.mean(axis=0) / np.linalg.norm(units.mean(axis=0))
    assert out["predictions"][0]["score"] == pytest.approx(float(stored @ mean), rel=1e-4, abs=1e-6)


def _demo_dir() -> Path:
    from mirrorscan.cluster.models.demo import prepare_demo_model

    return prepare_demo_model()
