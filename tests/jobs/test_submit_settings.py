"""A scan and a submitted job of one experiment freeze the same settings: the job runs from Ray's uploaded copy
of the working dir (``…/runtime_resources/working_dir_files/_ray_pkg_…/``), so an input file recorded by its
absolute path made the two settings hashes differ (``diff``: "settings that differ:
instrument_settings.probe_set"). Input files are recorded relative to the experiment folder, with their content
hash; and the job records the submitter's git commit and dirty state, which submit passes to it (the copy holds
no git repository). The job's entrypoint runs here as Ray runs it: from the copied folder, with the environment
submit gives it. Real tiny model, real Ray, real PostgreSQL."""

from __future__ import annotations

import json
import shutil

import pytest

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.runtime.provenance import SUBMITTED_GIT_ENV, git_state_text, submitted_git_state
from mirrorscan.grid.spec import load_spec
from mirrorscan.jobs import scan
from mirrorscan.jobs.submit import job_scan_env

PAIRS = "pair_id,word_a,word_b\ncd,cat,dog\n"


def invocations(dsn: str) -> list[dict]:
    with Catalog(dsn) as catalog:
        rows = catalog.execute("SELECT invocation_id::text, settings, settings_hash, git_sha, git_dirty "
                               "FROM scan_invocations ORDER BY started_at")
    return [dict(zip(("id", "settings", "hash", "git_sha", "git_dirty"), r)) for r in rows]


@pytest.mark.timeout(900)
def test_a_scan_and_the_submitted_job_of_one_experiment_have_equal_settings_hashes(tmp_path, tiny_dir, catalog_dsn,
                                                                                    ray_local, monkeypatch):
    checkout = tmp_path / "checkout"
    exp = checkout / "experiments" / "my-prefs"
    exp.mkdir(parents=True)
    (exp / "pairs.csv").write_text(PAIRS)
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny", "max_tokens": 4}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"], "orderings": ["AB"]}}))
    store = str(tmp_path / "store")
    common = ["--store", store, "--catalog-dsn", catalog_dsn, "--quiet"]
    assert scan.main([str(exp), *common]) == 0

    # what Ray runs for submit: the entrypoint in its copy of the working dir, with the env submit set
    copy = tmp_path / "session_x" / "runtime_resources" / "working_dir_files" / "_ray_pkg_0123abcd"
    shutil.copytree(checkout, copy)
    env = job_scan_env(load_spec(exp))
    env[SUBMITTED_GIT_ENV] = "0123abc dirty"   # the submitter's checkout, whatever this one is
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(copy)
    assert scan.main(["experiments/my-prefs", "--max-attempts", "3", *common]) == 0

    scanned, submitted = invocations(catalog_dsn)
    assert scanned["hash"] == submitted["hash"]
    for row in (scanned, submitted):
        section = row["settings"]["instrument_settings"]
        assert section["probe_set"] == "./pairs.csv" and len(section["probe_set_sha256"]) == 64
        text = json.dumps({k: v for k, v in row["settings"].items() if k != "execution"})   # the store is a place
        assert str(checkout) not in text and str(copy) not in text   # no absolute path of either folder
    assert (submitted["git_sha"], submitted["git_dirty"]) == ("0123abc", True)
    # readers (analyze, report) find the file where the submitter's config.json is
    from mirrorscan.results.invocations import load

    for row in (scanned, submitted):
        read = load(row["id"], dsn=catalog_dsn).settings.instrument_settings
        assert read["probe_set"] == str((exp / "pairs.csv").resolve())


def test_submit_passes_the_commit_and_dirty_state_of_this_checkout(tmp_path):
    from types import SimpleNamespace

    config = tmp_path / "e" / "config.json"
    env = job_scan_env(SimpleNamespace(config_path=str(config)))
    assert env["MIRRORSCAN_CONFIG_ORIGIN"] == str(config.resolve())
    assert env.get(SUBMITTED_GIT_ENV) == git_state_text() and git_state_text() is not None   # this is a git checkout
    sha, dirty = submitted_git_state(env[SUBMITTED_GIT_ENV])
    assert len(sha) == 40 and isinstance(dirty, bool)
    assert submitted_git_state("not a state") is None and submitted_git_state("") is None
