"""``mirrorscan scan --quiet`` through the command line: its stderr holds no warning, Ray's included (Ray Data
warns when a grid has fewer blocks than the actor pool: here one cell and a pool of two)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_quiet_scan_prints_no_warning(tmp_path, tiny_dir, catalog_dsn):
    exp = tmp_path / "quiet"
    exp.mkdir()
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\ntea_coffee,tea,coffee\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny"}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"], "orderings": ["AB"]},
        "samples": 1, "temperature": 0.0, "max_tokens": 4, "seed": 1, "batch_size": 4, "actor_pool_size": 2}))
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": catalog_dsn, "MIRRORSCAN_STORE": str(tmp_path / "store"),
           "MIRRORSCAN_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "RAY_ADDRESS": ""}
    scan = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", "scan", "--quiet", str(exp)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert scan.returncode == 0, scan.stderr[-3000:]
    assert "1 total · 1 ok" in scan.stdout
    assert "Warning" not in scan.stderr and "warn" not in scan.stderr.lower(), scan.stderr
    assert re.fullmatch(r"(mirrorscan-invocation: [0-9a-f-]{36} experiment=quiet new\n)?", scan.stderr), scan.stderr
