"""``reproduce`` honours ``"batch_invariant": true``: the spec it rebuilds from the frozen settings gives the model
variant its engine actors are started with (``VLLM_BATCH_INVARIANT=1`` there) and the original's settings hash,
while the machine the original ran on (``execution.engines``: GPU name, vLLM version) is not carried over — the
reproduction's driver records its own."""

from __future__ import annotations

import json

from mirrorscan.cluster.runtime.provenance import engine_records
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.spec import load_spec
from mirrorscan.results.reproduce import spec_from_settings


def test_a_reproduction_runs_batch_invariant_and_records_its_own_machine(tmp_path):
    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"instrument": "lens", "models": [
        {"model": "packaged:tiny-random-llama", "backend": "vllm", "device": "cuda", "batch_invariant": True}]}))
    spec = load_spec(str(folder / "config.json"))
    original = spec.settings()
    original = original.with_execution(engines=engine_records(original.models, ("vllm", "0.32.0"),
                                                              ["NVIDIA H100 80GB HBM3"]))
    frozen = Settings.from_json(json.loads(json.dumps(original.to_json())))   # as the catalog gives it back

    again = spec_from_settings(frozen, str(folder / "config.json"), str(tmp_path / "store"))
    assert again.models[0].batch_invariant is True and again.models[0].device == "cuda"
    rebuilt = again.settings()
    assert rebuilt.model(again.models[0].label).batch_invariant is True   # what the engine actors are given
    assert rebuilt.settings_hash() == original.settings_hash()
    assert rebuilt.execution.engines is None   # the run records the machine it runs on, not the original's
