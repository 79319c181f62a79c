"""The log-probabilities a flinch scan stores, checked against plain transformers: the demo model scores one
axis of the starter corpus through scan (Ray, the catalog, the trace store), and every stored target token's
log-prob is recomputed here, outside mirrorscan, from the stored texts — one unpadded forward pass per carrier
of a freshly loaded model. They must agree to 1e-3 nats (batched float32 differs by ~1e-5)."""

from __future__ import annotations

import json

import pytest

from mirrorscan.results import sql as results_sql
from mirrorscan.jobs.scan import run_scan

AGREE_NATS = 1e-3


@pytest.mark.timeout(600)
def test_stored_logprobs_equal_a_plain_transformers_forward_pass(tmp_path, demo_dir, catalog_dsn, ray_local):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    exp = tmp_path / "held"
    exp.mkdir()
    (exp / "config.json").write_text(json.dumps({
        "instrument": "flinch", "models": [{"model": str(demo_dir), "label": "demo", "dtype": "float32"}],
        "flinch": {"corpus": "packaged:starter", "axes": ["violence"]}, "batch_size": 16}))
    store = str(tmp_path / "store")
    result = run_scan(str(exp), store=store, catalog_dsn=catalog_dsn, quiet=True)
    assert result.status == "complete" and result.counts["ok"] == result.counts["cells"] == 32
    rows = results_sql.query(f"SELECT probe_id, user_text, target_text, target_token_ids, target_logprobs, lp_mean "
                     f"FROM traces WHERE invocation_id = '{result.invocation_id}'", store, catalog_dsn).to_pylist()
    assert len(rows) == 32
    tok = AutoTokenizer.from_pretrained(demo_dir)
    model = AutoModelForCausalLM.from_pretrained(demo_dir, dtype=torch.float32).eval()
    worst = 0.0
    for r in rows:
        prefix = tok(r["user_text"], add_special_tokens=False)["input_ids"]   # the demo tokenizer adds no BOS
        target = tok(r["target_text"], add_special_tokens=False)["input_ids"]
        assert r["target_token_ids"] == target
        ids = prefix + target
        with torch.inference_mode():
            lps = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
        expected = [float(lps[len(prefix) - 1 + j, t]) for j, t in enumerate(target)]
        worst = max([worst] + [abs(a - b) for a, b in zip(r["target_logprobs"], expected)])
        assert r["lp_mean"] == pytest.approx(sum(expected) / len(expected), abs=AGREE_NATS)
    assert worst <= AGREE_NATS
    print(f"stored vs plain transformers: largest difference {worst:.2e} nats over {len(rows)} carriers")
