"""A submitted scan shows its progress where submit follows it: on a terminal the job draws its bar (no
silent minute while the demo's engine loads and its cells run) and the follower redraws it in place, though
Ray's log reader hands every redraw over as a line of its own; a pipe gets the lines as they came, and a job
nobody follows (``--no-wait``) or a pipe draws none unless asked."""

from __future__ import annotations

import io
import os
import pty

from mirrorscan.cluster.runtime.job_submission import LogFollower
from mirrorscan.jobs.submit import job_progress

LOG = ("mirrorscan-invocation: 33ee experiment=demo new\n"
       "scan demo · starting Ray:   0%|          | 0/96 [00:00<?, ?cell/s]\n"
       "scan demo · loading smollm2 (transformers):   0%|          | 0/96 [00:01<?, ?cell/s]\n",
       "scan demo:  50%|█████     | 48/96 [00:57<00:54,  1.14s/cell, errors=0]\n"
       "scan demo: 100%|██████████| 96/96 [01:20<00:00,  1.14s/cell, errors=0]\n"
       "invocation 33ee  experiment demo  status complete\n")


def test_on_a_terminal_the_bar_redraws_in_place_between_the_jobs_lines():
    out = io.StringIO()
    follower = LogFollower(out, tty=True)
    for chunk in LOG:
        follower.write(chunk)
    follower.close()
    text = out.getvalue()
    lines = text.split("\n")
    assert lines[0] == "mirrorscan-invocation: 33ee experiment=demo new"
    assert lines[1].count("\r") == 4 and "96/96" in lines[1].rsplit("\r", 1)[1]   # four redraws of one line
    assert lines[2] == "invocation 33ee  experiment demo  status complete" and text.endswith("\n")


def test_elsewhere_every_line_is_written_as_it_came():
    out = io.StringIO()
    follower = LogFollower(out, tty=False)
    for chunk in LOG:
        follower.write(chunk)
    follower.close()
    assert out.getvalue() == "".join(LOG)


def test_the_job_draws_its_bar_when_a_terminal_follows_it(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    leader, follower = pty.openpty()
    try:
        with open(follower, "w", closefd=False) as terminal:
            assert job_progress(None, False, terminal) is True
            assert job_progress(None, True, terminal) is False    # --no-wait: nobody follows
            assert job_progress(False, False, terminal) is False  # --no-progress
    finally:
        os.close(leader)
        os.close(follower)
    assert job_progress(None, False, io.StringIO()) is False    # a pipe or a file
    assert job_progress(True, True, io.StringIO()) is True      # --progress: asked for


def test_packing_the_working_dir_prints_no_note_a_user_cannot_act_on(tmp_path, capfd, caplog):
    """Ray's own packing of a working_dir (the shipped runtime env's excludes) says nothing on submit's
    terminal: the default-exclude warning about .git and .venv, which the runtime env excludes already, and
    the INFO lines of the upload."""
    import logging

    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed
    from ray.util.debug import reset_log_once

    from mirrorscan.cluster.runtime.job_submission import load_runtime_env, quiet_upload_notes

    for folder in (".git", ".venv", "experiments"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "f.txt").write_text("x")
    (tmp_path / ".gitignore").write_text("*.log\n")
    runtime_env = {**load_runtime_env(), "working_dir": str(tmp_path)}
    quiet_upload_notes()
    reset_log_once()
    caplog.set_level(logging.INFO)
    upload_working_dir_if_needed(runtime_env, include_gitignore=True, upload_fn=lambda *a, **k: None)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("ray")]
    err = capfd.readouterr().err
    assert not said and "ignored by default" not in err and "Ignoring upload" not in err, (said, err)
