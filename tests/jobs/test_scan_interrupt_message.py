"""What ``scan`` says when Ctrl-C stops it: before the invocation is recorded, that nothing was recorded and to run
the scan again (``--resume`` would find nothing to finish); once it is recorded, to finish it with ``--resume``.

The interrupt is raised where Ctrl-C lands (the model check before anything is recorded; the engines' run after
the invocation is recorded), with a real catalog and store and the tiny model; no Ray is started."""

from __future__ import annotations

import json

import pytest

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.scan.run import ScanRun
from mirrorscan.jobs import scan


def ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.fixture
def experiment(tmp_path, tiny_dir):
    folder = tmp_path / "exps" / "stopped"
    folder.mkdir(parents=True)
    (folder / "pairs.csv").write_text("pair_id,word_a,word_b\ncat_dog,cat,dog\n")
    (folder / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny"}], "max_tokens": 4,
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"]}}))
    return folder


def test_ctrl_c_before_the_invocation_is_recorded_says_nothing_was_recorded(experiment, tmp_path, catalog_dsn,
                                                                            monkeypatch, capsys):
    monkeypatch.setattr(ScanRun, "check", ctrl_c)
    argv = [str(experiment), "--store", str(tmp_path / "store"), "--catalog-dsn", catalog_dsn, "--quiet"]
    assert scan.main(argv) == scan.EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert err == (f"interrupted before the invocation was recorded: nothing was recorded, so there is nothing to "
                   f"resume; run mirrorscan scan {experiment} again\n")
    assert "--resume" not in err
    with Catalog(catalog_dsn) as catalog:
        assert catalog.execute("SELECT count(*) FROM scan_invocations")[0][0] == 0


def test_ctrl_c_once_the_invocation_is_recorded_says_resume(experiment, tmp_path, catalog_dsn, monkeypatch, capsys):
    monkeypatch.setattr(ScanRun, "run_cells", ctrl_c)
    argv = [str(experiment), "--store", str(tmp_path / "store"), "--catalog-dsn", catalog_dsn, "--quiet"]
    assert scan.main(argv) == scan.EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert "interrupted: finished parts are kept; run again with --resume to finish the grid" in err
    with Catalog(catalog_dsn) as catalog:
        assert [r[0] for r in catalog.execute("SELECT status FROM scan_invocations")] == ["interrupted"]
