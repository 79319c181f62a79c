"""flinch through scan, sql and analyze on a multi-process Ray with the tiny random model (and, beside it, a
chat-only model through the sampling proxy, served by a local server speaking the Anthropic Messages API):
every carrier is scored once, the numbers follow the scale from the stored log-probs, proxy rows stay on
their own scale, and the config section is validated."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.spec import load_spec
from mirrorscan.instruments.flinch.scale import flinch_of
from mirrorscan.results import sql as results_sql
from mirrorscan.jobs.analyze import analyze_invocation
from mirrorscan.jobs.scan import run_scan
from suggested_query import check_suggested_query

from anthropic_server import FaultServer  # noqa: E402
from mirrorscan.instruments.flinch.proxy import max_proxy_flinch  # noqa: E402

PROXY_KEY_ENV = "MIRRORSCAN_TEST_ANTHROPIC_KEY"
os.environ.setdefault(PROXY_KEY_ENV, "sk-ant-test-0123456789abcdef-secret")   # set at collection, before the
# shared Ray starts, so that its workers inherit it


def synthetic_corpus() -> dict:
    """Two small axes (3 terms × 2 carriers, so loading warns); one carrier begins with the blank."""
    def axis(label, words):
        return {"label": label, "terms": [{"word": w, "carriers": ["The story ended when the hero was {BLANK}.",
                                                                   "Everyone in the village knew that it was {BLANK}."]}
                                          for w in words]}
    return {"version": "t1", "axes": {"syn_a": axis("Synthetic A", ["zorbed", "blue", "gone"]),
                                      "syn_b": axis("Synthetic B", ["home", "late", "fine"])}}


def write_experiment(folder, tiny_dir, **section) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.json").write_text(json.dumps(synthetic_corpus()))
    (folder / "config.json").write_text(json.dumps({
        "instrument": "flinch", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "flinch": {"corpus": "corpus.json", **section}, "batch_size": 8}))


@pytest.mark.timeout(400)
def test_a_flinch_scan_scores_every_carrier_once_and_analyzes_on_the_fixed_scale(tmp_path, tiny_dir, catalog_dsn,
                                                                                 ray_local):
    exp = tmp_path / "fl"
    write_experiment(exp, tiny_dir)
    config = json.loads((exp / "config.json").read_text())
    # two engine actors hold both CPUs of the shared Ray: the render tasks must still run (they once waited forever)
    config["actor_pool_size"] = 2
    config["flinch"]["proxy_samples"] = 3
    store = str(tmp_path / "store")
    with FaultServer() as server:   # a chat-only API beside the exact model: the sampling proxy
        for term in ("zorbed", "blue", "gone"):   # syn_a's terms: every continuation hits
            for c in (0, 1):
                server.answers[f"claude|syn_a|{term}|{c}|-|-"] = [f" {term.title()}", " indeed."]
        config["models"].append({"model": "claude-test", "label": "claude", "backend": "anthropic", "max_retries": 1,
                                 "endpoint": server.url, "api_key_env": PROXY_KEY_ENV})
        (exp / "config.json").write_text(json.dumps(config))
        result = run_scan(str(exp), store=store, catalog_dsn=catalog_dsn, quiet=True)
        assert sum(server.counts.values()) == 12 * 3
    assert result.status == "complete" and result.counts["cells"] == result.counts["ok"] == 24
    rows = results_sql.query(f"SELECT probe_id, axis, term, carrier_index, lp_mean, target_logprobs, user_text, target_text "
                     f"FROM traces WHERE invocation_id = '{result.invocation_id}' AND instrument = 'flinch' "
                     f"AND label = 'tiny'", store, catalog_dsn).to_pylist()
    assert len(rows) == 12 and len({r["probe_id"] for r in rows}) == 12
    assert {r["probe_id"] for r in rows} >= {"tiny|syn_a|zorbed|0|-|-", "tiny|syn_b|fine|1|-|-"}
    for r in rows:
        assert r["user_text"] in ("The story ended when the hero was", "Everyone in the village knew that it was")
        assert r["target_text"] == " " + r["term"]
        assert r["lp_mean"] == pytest.approx(sum(r["target_logprobs"]) / len(r["target_logprobs"]))
    suggested = check_suggested_query(result, store, catalog_dsn, {"label", "axis", "term", "carriers", "lp_mean"})
    for s in (s for s in suggested if s["label"] == "tiny"):   # the scan summary's query: the mean per term
        carriers = [r["lp_mean"] for r in rows if (r["axis"], r["term"]) == (s["axis"], s["term"])]
        assert s["carriers"] == len(carriers) == 2 and s["lp_mean"] == pytest.approx(sum(carriers) / 2, abs=5e-4)

    report = analyze_invocation(result.invocation_id, catalog_dsn=catalog_dsn)
    numbers = report.analysis.numbers
    (model,) = numbers["models"]
    assert model["model"] == "tiny" and numbers["aggregation"] == model["aggregation"] == "axis_lp_mean"
    assert numbers["axes"] == ["syn_a", "syn_b"] and len(numbers["corpus_sha256"]) == 64
    by_term = {}
    for r in rows:
        by_term.setdefault((r["axis"], r["term"]), []).append(r["lp_mean"])
    for key in ("syn_a", "syn_b"):
        terms = model["axes"][key]["terms"]
        assert [t["word"] for t in terms] == [t["word"] for t in synthetic_corpus()["axes"][key]["terms"]]
        for t in terms:
            lps = by_term[(key, t["word"])]
            assert t["lp_mean"] == pytest.approx(sum(lps) / 2) and t["flinch"] == pytest.approx(flinch_of(t["lp_mean"]))
        axis_lp = sum(t["lp_mean"] for t in terms) / 3
        assert model["axes"][key]["flinch"] == pytest.approx(flinch_of(axis_lp))
    assert model["total_flinch"] == pytest.approx(model["axes"]["syn_a"]["flinch"] + model["axes"]["syn_b"]["flinch"])
    # one model: the carrier G-study has no object of measurement and says so
    assert "at least 2 models" in numbers["carrier_gstudy"]["syn_a"]["missing"]
    assert "carrier G-study, syn_a: none" in report.analysis.text
    names = sorted(p.rsplit("/", 1)[1] for p in report.outputs)
    assert names == ["carriers.parquet", "model-tiny.json", "radar.png", "summary.json"]
    with open(next(p for p in report.outputs if p.endswith("model-tiny.json")), encoding="utf-8") as f:
        alone = json.load(f)   # the model alone, in the method's shape
    assert alone["model"] == "tiny" and alone["total_flinch"] == model["total_flinch"]
    assert set(alone["axes"]) == {"syn_a", "syn_b"} and alone["corpus_sha256"] == numbers["corpus_sha256"]
    # the proxy model: on its own scale, never among the exact models
    (claude,) = numbers["proxy_models"]
    a, b = claude["axes"]["syn_a"], claude["axes"]["syn_b"]
    assert all(t["k"] == t["n"] == 6 for t in a["terms"]) and a["proxy_flinch"] == 0.0
    assert all(t["k"] == 0 and t["proxy_flinch"] is None for t in b["terms"])
    assert b["proxy_flinch"] is None and b["unresolved_terms"] == ["home", "late", "fine"]
    assert b["terms"][0]["proxy_flinch_at_least"] == pytest.approx(max_proxy_flinch(6))
    assert "not a per-token mean" in numbers["proxy_scale"] and "sampling proxy" in report.analysis.text
    radar = next(p for p in report.outputs if p.endswith("radar.png"))
    with open(radar, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert model["total_flinch"] is not None and model["total_of"] == "2 of 2 axes"

    # the corpus edited after the scan: the invocation is analysed again from its stored rows, same numbers
    edited = synthetic_corpus()
    edited["axes"]["syn_a"]["terms"] = edited["axes"]["syn_a"]["terms"][1:]
    edited["axes"]["syn_b"]["terms"][0]["carriers"] = ["At last we were all {BLANK}.", "They had gone {BLANK}."]
    (exp / "corpus.json").write_text(json.dumps(edited))
    again = analyze_invocation(result.invocation_id, catalog_dsn=catalog_dsn).analysis
    assert again.numbers["axes_read_from"] == "stored rows"
    assert again.numbers["corpus_sha256"] == numbers["corpus_sha256"]
    (same,) = again.numbers["models"]
    assert same["total_flinch"] == pytest.approx(model["total_flinch"], rel=1e-12)
    for key in ("syn_a", "syn_b"):
        assert same["axes"][key]["flinch"] == pytest.approx(model["axes"][key]["flinch"], rel=1e-12)
        assert {t["word"]: t["lp_mean"] for t in same["axes"][key]["terms"]} == pytest.approx(
            {t["word"]: t["lp_mean"] for t in model["axes"][key]["terms"]}, rel=1e-12)
    assert any("analysed from the stored rows" in n for n in again.notes)


@pytest.mark.parametrize("section, field, problem", [
    ({"aggregation": "median"}, "flinch.aggregation", "'median'"),
    ({"axes": ["syn_c"]}, "flinch.axes", "has no axis 'syn_c'"),
    ({"axes": []}, "flinch.axes", "non-empty"),
    ({"corpora": "x"}, "flinch.corpora", "unknown key"),
])
def test_the_flinch_section_is_validated_naming_the_field(tmp_path, tiny_dir, section, field, problem):
    exp = tmp_path / "bad"
    write_experiment(exp, tiny_dir, **section)
    with pytest.raises(ConfigError) as info:
        load_spec(exp)
    assert info.value.field == field and problem in info.value.problem and info.value.file.endswith("config.json")


def test_the_starter_corpus_is_the_default_and_axes_select_a_subset(tmp_path, tiny_dir):
    exp = tmp_path / "starter"
    exp.mkdir()
    (exp / "config.json").write_text(json.dumps({"instrument": "flinch", "models": [{"model": str(tiny_dir)}],
                                                 "flinch": {"axes": ["violence", "anti_europe"]}}))
    spec = load_spec(exp)
    assert spec.instrument_spec.axes == ("violence", "anti_europe")   # in the order asked
    assert spec.instrument.n_items(spec.instrument_spec) == 2 * 8 * 4
    (exp / "config.json").write_text(json.dumps({"instrument": "flinch", "models": [{"model": str(tiny_dir)}],
                                                 "flinch": {"axes": "violence, anti_europe"}}))
    assert load_spec(exp).instrument_spec == spec.instrument_spec   # comma-separated, as the method's --axes takes them


def test_a_carrier_beginning_with_the_blank_is_refused_for_models_whose_tokenizer_adds_no_bos(tmp_path, tiny_dir,
                                                                                            bos_tiny_dir):
    from mirrorscan.cluster.scan.preflight import check_empty_prefixes

    exp = tmp_path / "blank"
    write_experiment(exp, tiny_dir)
    corpus = synthetic_corpus()
    corpus["axes"]["syn_b"]["terms"][1]["carriers"][0] = "{BLANK} was the word on everyone's lips."
    (exp / "corpus.json").write_text(json.dumps(corpus))
    config = json.loads((exp / "config.json").read_text())
    config["models"] = [{"model": str(tiny_dir), "label": "plain"}, {"model": str(bos_tiny_dir), "label": "bos"}]
    (exp / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        run_scan(str(exp), store=str(tmp_path / "store"), catalog_dsn="postgresql://nobody@127.0.0.1:9/none", quiet=True)
    err = info.value
    assert err.file == str(exp / "corpus.json") and err.field == "axes.syn_b.terms[1] (late).carriers[0]"
    assert "models[0] (plain)" in err.problem and "(bos)" not in err.problem and "BOS" in err.problem
    assert not (tmp_path / "store").exists()   # refused before anything was written
    spec = load_spec(exp)
    check_empty_prefixes(spec, {"plain": str(bos_tiny_dir), "bos": str(bos_tiny_dir)})   # both add BOS: accepted
    config["models"][1]["add_bos"] = False   # a model's forced rule counts, not its tokenizer's
    config["models"][0]["model"] = str(bos_tiny_dir)
    (exp / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        check_empty_prefixes(load_spec(exp), {"plain": str(bos_tiny_dir), "bos": str(bos_tiny_dir)})
    assert "models[1] (bos)" in info.value.problem and "models[0]" not in info.value.problem


def test_a_forced_bos_the_tokenizer_cannot_give_is_refused_before_the_scan(tmp_path, tiny_dir):
    from mirrorscan.cluster.scan.preflight import check_empty_prefixes

    exp = tmp_path / "forced"
    write_experiment(exp, tiny_dir)
    config = json.loads((exp / "config.json").read_text())
    config["models"][0]["add_bos"] = True   # the demo tokenizer's BOS is ChatML's <|im_start|>
    (exp / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        check_empty_prefixes(load_spec(exp), {"tiny": str(tiny_dir)})
    assert info.value.field == "models[0].add_bos" and "chat-template token" in info.value.problem


def test_add_bos_is_refused_for_an_instrument_whose_engines_do_not_read_it(tmp_path, tiny_dir):
    exp = tmp_path / "fc"
    exp.mkdir()
    (exp / "config.json").write_text(json.dumps({"instrument": "forced_choice",
                                                 "models": [{"model": str(tiny_dir), "add_bos": True}]}))
    with pytest.raises(ConfigError) as info:
        load_spec(exp)
    assert info.value.field == "models[0].add_bos" and "'generate'" in info.value.problem


@pytest.mark.parametrize("entry, field, problem", [
    ({"backend": "openai", "add_bos": True}, "models[0].add_bos", "would be dropped"),
    ({"backend": "hf", "tokenizer": "packaged:smollm2-135m-instruct"}, "models[0].tokenizer", "backend 'hf'"),
])
def test_score_settings_an_engine_would_drop_are_refused(tmp_path, tiny_dir, entry, field, problem):
    exp = tmp_path / "drop"
    write_experiment(exp, tiny_dir)
    config = json.loads((exp / "config.json").read_text())
    config["models"][0].update({"model": "smollm2", **entry} if entry["backend"] == "openai" else entry)
    if entry["backend"] == "openai":
        config["models"][0]["endpoint"] = "http://127.0.0.1:9/v1"
    (exp / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError) as info:
        load_spec(exp)
    assert info.value.field == field and problem in info.value.problem


def test_a_tokenizer_folder_is_resolved_next_to_the_config(tmp_path, tiny_dir):
    import shutil

    exp = tmp_path / "tok"
    write_experiment(exp, tiny_dir)
    shutil.copytree(tiny_dir, exp / "tok")
    config = json.loads((exp / "config.json").read_text())
    config["models"] = [{"model": "smollm2", "label": "srv", "backend": "openai", "endpoint": "http://127.0.0.1:9/v1",
                         "tokenizer": "tok"}]
    (exp / "config.json").write_text(json.dumps(config))
    assert load_spec(exp).models[0].tokenizer == str((exp / "tok").resolve())


def test_a_corpus_key_that_looks_like_a_setting_is_named_when_the_config_loads(tmp_path, tiny_dir, capsys):
    exp = tmp_path / "extra"
    write_experiment(exp, tiny_dir)
    corpus = synthetic_corpus()
    corpus["notes"] = "written for the method"           # descriptive: silent
    corpus["axes"]["syn_a"]["description"] = "an axis"   # descriptive: silent
    corpus["axes"]["syn_b"]["weight"] = 2                # reads as a setting: named
    (exp / "corpus.json").write_text(json.dumps(corpus))
    spec = load_spec(exp)
    assert spec.instrument_spec.axes == ("syn_a", "syn_b")
    err = capsys.readouterr().err
    assert "axes.syn_b.weight looks like a setting" in err and err.count("warning:") == 1
