"""``reproduce``'s plan prints the sampling the reproduction's cells carry: an instrument that sets its own
(open_scan: answers at its section's sampling, the self-reports greedy at ``report_max_tokens``) is shown
with those values per stage, never the model entry's, which its cells do not use; a model-sampled
instrument shows the model's. Real PostgreSQL catalog; nothing runs."""

from __future__ import annotations

import dataclasses
import json
import uuid

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.spec import load_spec
from mirrorscan.jobs import reproduce
from mirrorscan.cluster.scan.inputs import content_hashes

PROBES = 'query_id,query\nq1,"Tea or coffee, and why?"\nq2,Which season do you like best?\n'


def frozen_invocation(spec, store: str, dsn: str) -> str:
    """A finished invocation of ``spec`` in the catalog (no rows: a dry run reads none), with its manifest naming
    the config file its input paths (``./…``) are relative to, as a scan writes it."""
    invocation_id = str(uuid.uuid4())
    spec = dataclasses.replace(spec, store=store)
    open_store(store).write_manifest(spec.experiment, invocation_id, {   # the store's rows: none, a dry run reads none
        "invocation_id": invocation_id, "settings": spec.settings().to_json(), "config_file": spec.config_path})
    with Catalog(dsn) as catalog:
        catalog.create_invocation({"invocation_id": invocation_id, "experiment": spec.experiment,
                                   "instrument": spec.instrument.name, "settings": spec.settings().to_json(),
                                   "settings_hash": "x", "store_uri": store, "content_hashes": content_hashes(spec),
                                   "status": "complete", "counts": {}})
    return invocation_id


def test_open_scan_reproduce_plan_shows_the_cells_own_sampling(tmp_path, tiny_dir, catalog_dsn, capsys):
    exp = tmp_path / "os_repro"
    exp.mkdir()
    (exp / "probes.csv").write_text(PROBES)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "open_scan", "samples": 3,
        "models": [{"model": str(tiny_dir), "label": "tiny", "temperature": 0.2, "top_p": 0.5, "max_tokens": 50}],
        "open_scan": {"probes": "probes.csv", "sampling": {"temperature": 0.9, "top_p": 0.8, "max_tokens": 6},
                      "report_max_tokens": 4}}))
    invocation_id = frozen_invocation(load_spec(exp), str(tmp_path / "store"), catalog_dsn)
    assert reproduce.main([invocation_id, "--dry-run", "--catalog-dsn", catalog_dsn]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    first = next(ln for ln in lines if ln.strip().startswith("first stage:"))
    post = next(ln for ln in lines if ln.strip().startswith("posthoc stage:"))
    # 2 probes × 3 samples answers + 2 cold reports; a post-hoc report per answer
    assert first.strip() == ("first stage: 8 cells; temperature 0, top_p 1, max_tokens 4 | "
                             "temperature 0.9, top_p 0.8, max_tokens 6")
    assert post.strip() == ("posthoc stage: 6 cells (if every earlier cell is answered); "
                            "temperature 0, top_p 1, max_tokens 4")
    plan = "\n".join(ln for ln in lines if "warning:" not in ln)
    assert "temperature 0.2" not in plan and "top_p 0.5" not in plan and "max_tokens 50" not in plan


def test_a_model_sampled_instrument_shows_the_model_sampling(tmp_path, tiny_dir, catalog_dsn, capsys):
    exp = tmp_path / "fc_repro"
    exp.mkdir()
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\ncd,cat,dog\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "samples": 5,
        "models": [{"model": str(tiny_dir), "label": "tiny", "temperature": 0.6, "top_p": 0.9, "max_tokens": 7}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"]}}))
    invocation_id = frozen_invocation(load_spec(exp), str(tmp_path / "store"), catalog_dsn)
    assert reproduce.main([invocation_id, "--dry-run", "--catalog-dsn", catalog_dsn]) == 0
    out = capsys.readouterr().out
    assert "    first stage: 10 cells; temperature 0.6, top_p 0.9, max_tokens 7" in out.splitlines()
