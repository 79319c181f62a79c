"""End to end through the command line with the packaged demo model (SmolLM2-135M-Instruct):
``python -m mirrorscan.jobs.scan`` then ``mirrorscan sql`` with the method's join of a trace to its settings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MIRRORSCAN = str(Path(sys.executable).parent / "mirrorscan")


@pytest.mark.slow
def test_demo_model_scan_then_sql(tmp_path, catalog_dsn, demo_dir):
    exp = tmp_path / "demo_small"
    exp.mkdir()
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\nvodka_whiskey,vodka,whiskey\ncat_dog,cat,dog\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": "packaged:smollm2-135m-instruct"}],
        "probe_set": "pairs.csv", "envelopes": ["english_strict", "json_schema"], "max_tokens": 12,
        "batch_size": 8}))
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": catalog_dsn, "MIRRORSCAN_STORE": str(tmp_path / "store")}
    scan = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.scan", str(exp), "--quiet"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert scan.returncode == 0, scan.stderr[-3000:]
    invocation = re.search(r"invocation ([0-9a-f-]{36})", scan.stdout).group(1)
    assert "8 total · 8 ok · 0 error · 0 missing" in scan.stdout
    assert f"traces: {tmp_path / 'store' / 'demo_small' / invocation / 'traces'}/" in scan.stdout

    probe = "smollm2-135m-instruct|vodka|whiskey|english_strict|AB"
    query = ("SELECT si.settings->>'max_tokens' AS max_tokens, t.response, t.model_canonical "
             "FROM traces t JOIN scan_invocations si ON si.invocation_id::text = t.experiment_version "
             f"WHERE t.probe_id = '{probe}'")
    out = subprocess.run([MIRRORSCAN, "sql", query, "--format", "json"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == 1 and rows[0]["max_tokens"] == "12"
    assert rows[0]["response"] and rows[0]["model_canonical"] == str(demo_dir)

    bad = subprocess.run([MIRRORSCAN, "sql", "SELECT nope FROM traces"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nope" in bad.stderr and "Traceback" not in bad.stderr
