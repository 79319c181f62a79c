"""reproduce and diff as verbs: importing them stays light, both explain themselves, bad targets are one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_importing_reproduce_and_diff_imports_neither_torch_nor_vllm():
    code = ("import sys, results.diff, results.reproduce, results.invocations, cluster.models.weights, jobs.reproduce, "
            "jobs.diff; bad = [m for m in ('torch', 'vllm', 'transformers') if m in sys.modules]; print(bad); "
            "sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("verb, expected", [("reproduce", "frozen settings"), ("diff", "cell by cell")])
def test_help_explains(verb, expected):
    proc = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", verb, "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and expected in proc.stdout, proc.stdout + proc.stderr


def test_an_unknown_invocation_is_one_line_and_exit_2(catalog_dsn):
    missing = "00000000-0000-4000-8000-000000000000"
    for argv in (["reproduce", missing, "--dry-run"], ["diff", missing, missing]):
        proc = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", *argv, "--catalog-dsn", catalog_dsn], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [f"error: invocation: no invocation {missing} in the catalog — fix: "
                                                    "list them with: mirrorscan sql \"SELECT invocation_id, experiment "
                                                    "FROM scan_invocations\""]
