"""``report`` reuses the newest analysis of the same code and inputs: a second report of an unchanged invocation
writes no analysis folder and says which one it read; a stored row more, another analysis setting or another
fingerprint (other code) gives a new analysis. The store and catalog are written as scans write them
(``tests/store_world.py``); the reports run in this process, with no Ray."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import new_database

import store_world as world  # noqa: E402

import browse_world  # noqa: E402
from report_page import numbers  # noqa: E402


@pytest.fixture
def made(tmp_path, pg_dsn):
    """One complete forced_choice invocation in a local store and a catalog naming it."""
    dsn = new_database(pg_dsn)
    return {**world.build(tmp_path, dsn), "dsn": dsn}


def folders(made) -> list[Path]:
    """The invocation's analysis folders, by name (oldest first, except among folders made in the same second)."""
    base = made["store_dir"] / world.EXPERIMENT / made["invocation_id"] / "analysis" / "forced_choice"
    return sorted(base.iterdir()) if base.exists() else []


def report(made, **kw) -> tuple[Path, list[str]]:
    """(page written, lines said) of one ``report`` of the invocation."""
    from mirrorscan.jobs.report import report_invocations

    said: list[str] = []
    (path,) = report_invocations(made["invocation_id"], catalog_dsn=made["dsn"], say=said.append,
                                 waiting=said.append, **kw)
    return Path(path), said


def test_a_second_report_reuses_the_analysis_and_says_so(made):
    first, said = report(made)
    (folder,) = folders(made)
    assert said == [f"analysing {made['invocation_id']}: no analysis of the same code and inputs yet"]
    second, said = report(made)
    assert folders(made) == [folder] and second != first
    assert said == [f"reusing analysis {folder} (same code and inputs)"]
    # the page built from the stored analysis shows what the computed one showed: numbers, text and charts
    a, b = first.read_text(encoding="utf-8"), second.read_text(encoding="utf-8")
    assert numbers(a) == numbers(b) and len(numbers(a)) == 2 * 4   # two models × four headline numbers
    for page in (a, b):
        assert f"<code>{folder}</code>" in page
    assert a.count("data:image/png;base64,") == b.count("data:image/png;base64,") == 4   # 3 charts, the intervals'
    assert a.count('<tr class="difference" ') == b.count('<tr class="difference" ') >= 1   # from the stored JSON too
    strip = [line for line in a.splitlines() if "generated" not in line]
    assert strip == [line for line in b.splitlines() if "generated" not in line]
    summary = json.loads((folder / "summary.json").read_text())
    stored = summary["analysis_provenance"]["fingerprint"]
    assert stored["invocation_id"] == made["invocation_id"] and stored["rows"] == len(browse_world.cell_rows(
        made["invocation_id"], datetime(2026, 1, 5, 10, tzinfo=timezone.utc)))
    assert stored["trace_parts"]["count"] == len(list((folder.parents[2] / "traces").glob("*.parquet")))
    assert stored["analysis_settings"] == {"reannotate": False}


def reported_anew(made, **kw) -> Path:
    """The one analysis folder a ``report`` that must not reuse wrote (found by difference: folders made in the
    same second do not sort by time)."""
    before = set(folders(made))
    _, said = report(made, **kw)
    (added,) = set(folders(made)) - before
    assert said == [f"analysing {made['invocation_id']}: no analysis of the same code and inputs yet"]
    return added


def test_a_row_more_another_setting_or_other_code_is_a_new_analysis(made):
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.instrument import resolve
    from mirrorscan.grid.trace_schema import to_trace_table, trace_schema

    report(made)
    # another analysis setting: a new analysis, then reused under that setting; the plain one is still there
    reannotated_folder = reported_anew(made, reannotate=True)
    _, said = report(made, reannotate=True)
    assert len(folders(made)) == 2 and said == [f"reusing analysis {reannotated_folder} (same code and inputs)"]
    reannotated = json.loads((reannotated_folder / "summary.json").read_text())["analysis_provenance"]
    assert reannotated["fingerprint"]["analysis_settings"] == {"reannotate": True}
    # one stored row more (a retried cell's failed attempt, appended as a resumed scan appends a part)
    row = {**browse_world.cell_rows(made["invocation_id"], datetime(2026, 1, 5, 10, tzinfo=timezone.utc))[0],
           "attempt": 7, "response": None, "class": None, "error": "RuntimeError: engine died"}
    store = open_store(str(made["store_dir"]))
    store.write_part(to_trace_table([row], trace_schema(resolve("forced_choice").columns)), world.EXPERIMENT,
                     made["invocation_id"], "w")
    longer = reported_anew(made)
    assert len(folders(made)) == 3
    newest = json.loads((longer / "summary.json").read_text())["analysis_provenance"]["fingerprint"]
    assert newest["rows"] == reannotated["fingerprint"]["rows"] + 1
    assert newest["trace_parts"]["count"] == reannotated["fingerprint"]["trace_parts"]["count"] + 1
    # other code: the only analysis of these inputs no longer matches (as after an edit of the analysis)
    summary_path = longer / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["analysis_provenance"]["fingerprint"]["code_sha256"] = "0" * 64
    summary_path.write_text(json.dumps(summary))
    reported_anew(made)
    assert len(folders(made)) == 4


def test_an_incomplete_or_foreign_folder_is_not_reused(made):
    report(made)
    (folder,) = folders(made)
    incomplete = folder.parent / "20991231T235959-ffffffff"     # newer, same fingerprint, but a chart missing
    shutil.copytree(folder, incomplete)
    next(incomplete.glob("*.png")).unlink()
    foreign = folder.parent / "20991231T235959-fffffffe"        # newer, a summary without a fingerprint
    foreign.mkdir()
    (foreign / "summary.json").write_text('{"n": 1}')
    _, said = report(made)
    assert said == [f"reusing analysis {folder} (same code and inputs)"] and len(folders(made)) == 3


def test_the_code_fingerprint_follows_every_file_of_the_analysis_code(tmp_path):
    from mirrorscan.results.analyses import tree_sha256

    for name in ("grid/a.py", "analysis/b.py", "instruments/x/data/t.csv", "results/analyses.py", "docs/d.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    before = tree_sha256(tmp_path)
    (tmp_path / "docs/d.md").write_text("other")                        # not analysis code
    (tmp_path / "grid/__pycache__").mkdir()
    (tmp_path / "grid/__pycache__/a.cpython-312.pyc").write_bytes(b"x")
    assert tree_sha256(tmp_path) == before
    for name in ("grid/a.py", "instruments/x/data/t.csv", "results/analyses.py"):
        (tmp_path / name).write_text(name + " changed")
        assert tree_sha256(tmp_path) != before, name
        (tmp_path / name).write_text(name)
        assert tree_sha256(tmp_path) == before
    (tmp_path / "analysis/new.py").write_text("")
    assert tree_sha256(tmp_path) != before


def test_the_command_says_it_analyses_only_on_a_terminal(made, capsys, monkeypatch):
    """Through ``main``: in a pipe (and CI) only the page's path; on a terminal also the line before the wait."""
    from mirrorscan.jobs import report as report_cli

    monkeypatch.setenv("MIRRORSCAN_CATALOG_DSN", made["dsn"])
    for terminal in (False, True):
        for folder in folders(made):   # no analysis to reuse: each run computes one
            shutil.rmtree(folder)
        monkeypatch.setattr("mirrorscan.cluster.scan.progress.bar_wanted", lambda requested, stream=None: terminal)
        assert report_cli.main([made["invocation_id"]]) == 0
        out, err = capsys.readouterr()
        assert out.startswith("report: ")
        said = f"analysing {made['invocation_id']}: no analysis of the same code and inputs yet\n"
        assert err == (said if terminal else ""), err
