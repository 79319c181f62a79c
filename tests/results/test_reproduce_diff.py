"""reproduce and diff end to end: real Ray, a real catalog, a local store, the demo model (SmolLM2-135M-Instruct,
float32) on the HF engine.

One greedy forced_choice scan (2 pairs × 2 envelopes × 2 orderings = 8 cells) is shared by the module. Its
reproduction must match it exactly (every response and class); a run of the same grid at temperature > 0
must not, and diff says where per envelope; a changed pair file makes reproduce warn and run the cells
stored in the traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import new_database

PAIRS = "pair_id,word_a,word_b\ncat_dog,cat,dog\ntea_coffee,tea,coffee\n"
ENVELOPES = ["english_strict", "json_schema"]
REPO = Path(__file__).resolve().parents[2]


def write_experiment(folder: Path, **overrides) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pairs.csv").write_text(PAIRS)
    config = {"instrument": "forced_choice", "models": [{"model": "packaged:smollm2-135m-instruct", "dtype": "float32"}],
              "forced_choice": {"probe_set": "pairs.csv", "envelopes": ENVELOPES, "orderings": ["AB", "BA"]},
              "samples": 1, "temperature": 0.0, "max_tokens": 8, "seed": 11, "batch_size": 4, "actor_pool_size": 1,
              **overrides}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def scanned(tmp_path_factory, demo_dir, pg_dsn, ray_local):
    """The greedy scan and its reproduction (through the verb, which must exit 0 with --expect-exact)."""
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.jobs import reproduce
    from mirrorscan.jobs.scan import run_scan

    base, dsn = tmp_path_factory.mktemp("repro"), new_database(pg_dsn)
    store = str(base / "store")
    original = run_scan(str(write_experiment(base / "exps" / "repro_fc")), store=store, catalog_dsn=dsn, quiet=True)
    assert original.status == "complete" and original.counts["ok"] == 8
    code = reproduce.main([original.invocation_id, "--catalog-dsn", dsn, "--quiet", "--expect-exact"])
    with Catalog(dsn) as catalog:
        found = catalog.execute("SELECT invocation_id::text FROM scan_invocations WHERE reproduces = %s",
                                [original.invocation_id])
    assert len(found) == 1
    return {"base": base, "dsn": dsn, "store": store, "original": original.invocation_id, "copy": found[0][0],
            "code": code}


def test_a_greedy_float32_reproduction_matches_every_response_and_class(scanned):
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.results.diff import diff_targets

    assert scanned["code"] == 0   # the verb's own verdict: complete, and an exact match
    d = diff_targets(scanned["original"], scanned["copy"], dsn=scanned["dsn"])
    assert (d.cells_left, d.cells_right, d.shared) == (8, 8, 8)
    assert d.responses.rate == 1.0 and d.responses.compared == 8
    assert d.columns["class"].rate == 1.0 and d.columns["class"].compared == 8
    assert d.same_answer.rate == 1.0 and d.exact
    assert {e: m.rate for e, m in d.by["envelope"].items()} == {e: 1.0 for e in ENVELOPES}
    assert d.headlines["left"] == d.headlines["right"] and "smollm2-135m-instruct" in d.headlines["left"]
    assert d.fingerprints["smollm2-135m-instruct"]["hamming"] == 0
    timing = d.timing["smollm2-135m-instruct"]
    assert d.timing["source"] == "inference_log" and timing["ttft_ms"]["left"] > 0 and timing["decode_tok_s"]["right"] > 0
    assert d.settings_differences == []
    with Catalog(scanned["dsn"]) as catalog:
        a, b = catalog.get_invocation(scanned["original"]), catalog.get_invocation(scanned["copy"])
    assert b["reproduces"] == scanned["original"] and a["reproduces"] is None
    assert b["settings_hash"] == a["settings_hash"] and b["experiment"] == a["experiment"] == "repro_fc"
    assert b["settings"]["execution"]["reproduces"] == scanned["original"]
    identity = a["model_weights"]["smollm2-135m-instruct"]
    assert identity["kind"] == "sha256" and identity == b["model_weights"]["smollm2-135m-instruct"]


def test_the_diff_verb_prints_the_match(scanned):
    proc = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", "diff", scanned["original"], scanned["copy"],
                           "--catalog-dsn", scanned["dsn"], "--expect-exact"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "same answer (same response text and same class): 8/8 = 100.0%   EXACT MATCH" in proc.stdout
    assert "class, exact: 8/8 = 100.0%" in proc.stdout
    assert "by envelope: english_strict 4/4 = 100.0% · json_schema 4/4 = 100.0%" in proc.stdout


def test_a_run_at_temperature_above_zero_differs_and_diff_says_where(scanned, ray_local):
    from mirrorscan.jobs.scan import run_scan
    from mirrorscan.results.diff import diff_targets, format_diff

    hot = run_scan(str(write_experiment(scanned["base"] / "exps" / "repro_fc_hot", temperature=1.5)),
                   store=scanned["store"], catalog_dsn=scanned["dsn"], quiet=True)
    assert hot.status == "complete"
    d = diff_targets(scanned["original"], hot.invocation_id, dsn=scanned["dsn"])
    assert d.shared == 8 and not d.exact
    assert d.same_answer.rate < 1.0 and d.responses.rate < 1.0   # seeded sampling: the same cells every run
    assert set(d.by["envelope"]) == set(ENVELOPES) and all(m.compared == 4 for m in d.by["envelope"].values())
    assert sum(m.same for m in d.by["envelope"].values()) == d.same_answer.same
    assert "temperature" in d.settings_differences
    text = format_diff(d)
    assert "by envelope: english_strict" in text and "EXACT MATCH" not in text


def test_a_changed_item_file_makes_reproduce_warn_and_run_the_stored_cells(scanned, ray_local):
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.cluster.scan.records import Reproduction, ScanOptions
    from mirrorscan.cluster.scan.run import ScanRun
    from mirrorscan.results.reproduce import ITEMS_FROM_TRACES, plan

    pairs = scanned["base"] / "exps" / "repro_fc" / "pairs.csv"
    pairs.write_text(PAIRS + "sun_moon,sun,moon\n")
    p = plan(scanned["original"], dsn=scanned["dsn"])
    assert p.items_from == ITEMS_FROM_TRACES and p.n_cells == 8
    assert any("changed since the invocation was frozen" in w and "rebuilt from the coordinates stored in the traces"
               in w for w in p.warnings), p.warnings
    result = ScanRun(p.spec, ScanOptions(catalog_dsn=scanned["dsn"], quiet=True, reproduction=Reproduction(
        p.original.invocation_id, p.cells, p.submitted, p.model_sources))).execute()
    assert result.status == "complete" and result.counts["cells"] == 8
    store = open_store(scanned["store"])
    keys = lambda inv: sorted(zip(*(store.read("repro_fc", inv, columns=["probe_id", "sample"]).column(c).to_pylist()
                                    for c in ("probe_id", "sample"))))
    assert keys(result.invocation_id) == keys(scanned["original"])   # the original's cells, not the file's new pair
