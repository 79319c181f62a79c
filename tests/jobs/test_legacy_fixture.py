"""Invocations stored by the code before instruments became plug-ins (``tests/fixtures/legacy_fc``, settings
format 1, a catalog made by the old migrations) still analyze to the same output, and an interrupted one
resumes to completion."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.compute as pc
import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "legacy_fc"
FINISHED = "1dd40c56-1904-4178-a8ad-f8941f59374b"
INTERRUPTED = "e2afe5a8-0024-4618-a018-891091f6a406"


def normalised(text: str, root: Path) -> str:
    text = text.replace(str(root), "@ROOT@")
    return re.sub(r"analysis/forced_choice/\d{8}T\d{6}-[0-9a-f]{8}/", "analysis/forced_choice/@STAMP@/", text)


def test_a_finished_legacy_invocation_analyzes_to_the_same_output(legacy):
    from mirrorscan.jobs.analyze import analyze_invocation, format_report

    root, dsn = legacy
    report = analyze_invocation(FINISHED, catalog_dsn=dsn)
    assert normalised(format_report(report), root) + "\n" == (FIXTURE / "expected_analyze.txt").read_text()
    summary = json.loads(Path(next(p for p in report.outputs if p.endswith("summary.json"))).read_text())
    expected = json.loads((FIXTURE / "expected_summary.json").read_text())
    assert summary.pop("instrument") == "forced_choice"   # a key added since
    assert summary.pop("analysis_provenance")["fingerprint"]["invocation_id"] == FINISHED   # added since too
    assert set(summary.pop("intervals")["headlines"]) == {"per_cell_commit_rate", "position_bias_pp",
                                                          "mean_sharpness"}                   # added since too
    assert summary == with_typed_verdicts(expected)


def with_typed_verdicts(summary: dict) -> dict:
    """The old summary with fingerprint entries as they are written now: the verdict apart from the committed
    word (the old single ``value`` held the word, or the verdict when none was committed, so a word spelled
    like a verdict read as one)."""
    for model in summary["models"]:
        for entry in model["fingerprint"]["entries"]:
            value = entry.pop("value")
            verdict = {entry["word_a"]: "word_a", entry["word_b"]: "word_b"}.get(value, value)
            entry["verdict"], entry["committed_word"] = verdict, value if verdict in ("word_a", "word_b") else None
    return summary


def test_an_interrupted_legacy_invocation_resumes_to_completion(legacy, demo_dir, ray_local):
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.trace_schema import trace_schema
    from mirrorscan.instruments.forced_choice import COLUMNS
    from mirrorscan.jobs.scan import run_scan

    root, dsn = legacy
    store = open_store(str(root / "store"))
    before = store.read("legacy_fc", INTERRUPTED)
    assert 0 < before.num_rows < 12
    result = run_scan(str(root / "experiments" / "legacy_fc"), resume=True, catalog_dsn=dsn, quiet=True)
    assert result.invocation_id == INTERRUPTED and result.status == "complete"
    rows = store.read("legacy_fc", INTERRUPTED, schema=trace_schema(COLUMNS))
    ok = rows.filter(pc.is_null(rows.column("error")))
    keys = list(zip(ok["probe_id"].to_pylist(), ok["sample"].to_pylist()))
    assert len(keys) == len(set(keys)) == 12
    assert set(zip(before["probe_id"].to_pylist(), before["sample"].to_pylist())) <= set(keys)
    assert ok["class"].null_count == 0   # the new rows were classified in the actor, as the old ones were
    with Catalog(dsn) as catalog:
        inv = catalog.get_invocation(INTERRUPTED)
    assert inv["status"] == "complete" and inv["settings"]["format"] == 1   # frozen row never rewritten
