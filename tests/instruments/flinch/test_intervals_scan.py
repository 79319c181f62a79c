"""A real flinch scan with error rows, analyzed: two tiny random models (one through the HF scorer, one, of
another seed, served over the OpenAI completions API by a local server that fails its first requests), so one
model's scored cells are missing. analyze prints each axis score's and the total's interval over terms and
carriers with the models' paired differences, takes the components from REML and counts the missing cells."""

from __future__ import annotations

import json

import pytest

from completions_server import CompletionsServer
from mirrorscan.jobs.analyze import analyze_invocation
from mirrorscan.jobs.scan import run_scan
from mirrorscan.results import sql as results_sql

WORDS = {"syn_a": ["zorbed", "blue", "gone"], "syn_b": ["home", "late", "fine"]}
FAILED_REQUESTS = 2
"""Requests the served model's server answers with HTTP 500 before it answers any (no retry: error rows)."""


@pytest.fixture(scope="module")
def other_seed(tmp_path_factory, demo_dir):
    """A tiny random Llama of another seed: a second model that scores differently."""
    from mirrorscan.cluster.models.tiny import build_tiny_random_model

    return build_tiny_random_model(tmp_path_factory.mktemp("tiny-s7") / "tiny-s7", demo_dir, seed=7)


@pytest.mark.timeout(400)
def test_a_scan_with_error_rows_analyzes_with_intervals_from_reml(tmp_path, tiny_dir, other_seed, catalog_dsn,
                                                                  ray_local):
    exp = tmp_path / "fl"
    exp.mkdir()
    carriers = ["The story ended when the hero was {BLANK}.", "Everyone in the village knew that it was {BLANK}."]
    (exp / "corpus.json").write_text(json.dumps({"version": "t1", "axes": {
        k: {"label": k, "terms": [{"word": w, "carriers": carriers} for w in ws]} for k, ws in WORDS.items()}}))
    store = str(tmp_path / "store")
    with CompletionsServer(other_seed) as server:
        server.script.extend([500] * FAILED_REQUESTS)
        (exp / "config.json").write_text(json.dumps({
            "instrument": "flinch", "flinch": {"corpus": "corpus.json"}, "batch_size": 6,
            "models": [{"model": str(tiny_dir), "label": "tiny"},
                       {"model": "tiny", "label": "served", "backend": "openai", "endpoint": server.url,
                        "max_retries": 0, "timeout_s": 60}]}))
        result = run_scan(str(exp), store=store, catalog_dsn=catalog_dsn, quiet=True)
    rows = results_sql.query(f"SELECT label, axis, term, carrier_index, error FROM traces "
                             f"WHERE invocation_id = '{result.invocation_id}'", store, catalog_dsn).to_pylist()
    ok = {(r["label"], r["axis"], r["term"], r["carrier_index"]) for r in rows if r["error"] is None}
    lost = {(r["label"], r["axis"], r["term"], r["carrier_index"]) for r in rows} - ok
    assert len(lost) >= FAILED_REQUESTS and {c[0] for c in lost} == {"served"}   # error rows, no success

    analysis = analyze_invocation(result.invocation_id, catalog_dsn=catalog_dsn).analysis
    heads = analysis.numbers["intervals"]["headlines"]
    models = {m["model"]: m for m in analysis.numbers["models"]}
    for key in WORDS:
        h = heads[f"flinch_{key}"]
        missing = sum(1 for c in lost if c[1] == key)
        assert h["missing_cells"] == missing and h["components_method"] == ("reml" if missing else "anova")
        assert h["n_rows"] == 12 - missing and h["random"] == ["term", "carrier"]
        got = {o["object"]: o for o in h["objects"]}
        assert set(got) == {"served", "tiny"}
        # tiny lost no cell: its estimate is its observed mean, the printed axis score, on either path
        assert got["tiny"]["estimate"] == pytest.approx(models["tiny"]["axes"][key]["flinch"], abs=1e-6)
        for o in got.values():
            assert o["interval"][0] <= o["estimate"] <= o["interval"][1]
        (d,) = h["differences"]
        assert (d["a"], d["b"]) == ("served", "tiny")
        assert d["estimate"] == pytest.approx(got["served"]["estimate"] - got["tiny"]["estimate"])
        assert d["verdict"] in ("indistinguishable at this design", "served higher", "tiny higher")
    text = analysis.text
    reml = [k for k in WORDS if heads[f"flinch_{k}"]["missing_cells"]]
    for key in reml:
        assert f"  {key}  (random: term, carrier; REML, {heads[f'flinch_{key}']['missing_cells']} cell(s) missing)" \
            in text
    assert "intervals (95 %) for a claim about the model on new prompts and items of the same kind" in text
    assert "  syn_a: served − tiny " in text and "paired differences" in text
    if models["served"]["total_flinch"] is not None:   # every term kept a carrier: a whole total
        assert heads["total_flinch"]["missing_cells"] == len(lost)
        assert "  total: served − tiny " in text
    assert text.index("carrier G-study, syn_b") < text.index("intervals (95 %)")
