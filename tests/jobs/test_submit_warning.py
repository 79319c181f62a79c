"""A head started with a plain ``ray start --head`` binds every interface with authentication off; ``submit`` to
it says so in one warning line, once: the job it submits joins the same cluster and its output streams to the
same terminal, so submit tells it the warning was said (it printed it twice). ``submit --help`` prints the
loopback command the warning's fix names. The job server and the cluster are stand-ins here: what is tested is
who prints the line (the real reading of a head's addresses: tests/jobs/test_submit.py, test_ray_exposure.py)."""

from __future__ import annotations

import json

from mirrorscan.cluster.runtime import job_launch, ray_session
from mirrorscan.cluster.runtime.ray_session import EXPOSURE_WARNED_ENV, LOOPBACK_HEAD_COMMAND, exposure_warning
from mirrorscan.jobs import submit as submit_module

ADDRESS = "http://127.0.0.1:8265"
NODE = "10.0.0.5"   # what a head bound to every interface reports as its node's address


class StandInClient:
    def get_address(self) -> str:
        return ADDRESS


def _experiment_and_stand_in_cluster(tmp_path, tiny_dir, monkeypatch, name: str) -> tuple:
    """A one-pair experiment, and submit pointed at a stand-in job server: returns (folder, the job it submits)."""
    exp = tmp_path / "experiments" / name
    exp.mkdir(parents=True)
    (exp / "pairs.csv").write_text("pair_id,word_a,word_b\ncd,cat,dog\n")
    (exp / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": str(tiny_dir), "label": "tiny", "max_tokens": 4}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": ["english_strict"]}}))
    submitted: dict = {}
    monkeypatch.setattr(job_launch, "connect", lambda address: StandInClient())
    monkeypatch.setattr(job_launch, "ship_package", lambda runtime_env, staging: None)
    monkeypatch.setattr(job_launch, "submit_when_ready", lambda client, **job: submitted.update(job))
    return exp, submitted


def test_submit_warns_once_and_the_job_it_submits_does_not_repeat_it(tmp_path, tiny_dir, monkeypatch, capsys):
    exp, submitted = _experiment_and_stand_in_cluster(tmp_path, tiny_dir, monkeypatch, "exposed")
    monkeypatch.setattr(ray_session, "job_server_facts", lambda address: (False, [address, NODE]))
    monkeypatch.delenv(EXPOSURE_WARNED_ENV, raising=False)

    assert submit_module.submit([str(exp), "--address", ADDRESS, "--no-wait", "--working-dir", str(tmp_path)]) == 0
    said = capsys.readouterr().err
    assert said.count("warning: the Ray cluster at") == 1 and NODE in said and LOOPBACK_HEAD_COMMAND in said
    job_env = submitted["runtime_env"]["env_vars"]
    assert job_env[EXPOSURE_WARNED_ENV] == "1"

    # the job joins the same cluster (cluster.runtime.ray_session.ensure_ray): with submit's env it stays silent
    monkeypatch.setattr(ray_session, "joined_cluster_warning",
                        lambda: exposure_warning("127.0.0.1:6379", [NODE], auth_on=False))
    for k, v in job_env.items():
        monkeypatch.setenv(k, v)
    ray_session.warn_joined_cluster()
    assert "warning:" not in capsys.readouterr().err
    monkeypatch.delenv(EXPOSURE_WARNED_ENV)   # a scan that joins by itself still warns
    ray_session.warn_joined_cluster()
    assert capsys.readouterr().err.count("warning: the Ray cluster at") == 1


def test_a_job_submit_did_not_warn_about_is_not_told_to_stay_silent(tmp_path, tiny_dir, monkeypatch, capsys):
    exp, submitted = _experiment_and_stand_in_cluster(tmp_path, tiny_dir, monkeypatch, "closed")
    monkeypatch.setattr(ray_session, "job_server_facts", lambda address: None)   # not readable: the job checks
    assert submit_module.submit([str(exp), "--address", ADDRESS, "--no-wait", "--working-dir", str(tmp_path)]) == 0
    assert "warning:" not in capsys.readouterr().err
    assert EXPOSURE_WARNED_ENV not in submitted["runtime_env"]["env_vars"]


def test_submit_help_prints_the_loopback_head_command(capsys):
    import pytest

    with pytest.raises(SystemExit):
        submit_module.submit(["--help"])
    assert f"  {LOOPBACK_HEAD_COMMAND}\n" in capsys.readouterr().out
    assert LOOPBACK_HEAD_COMMAND in ray_session.EXPOSURE_FIX
