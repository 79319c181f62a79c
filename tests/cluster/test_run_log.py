"""A scan's engine and Ray output goes to its log file; the terminal keeps what the user must read."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from mirrorscan.cluster.scan.log import RunLog, attach_ray_output

REPO = Path(__file__).resolve().parents[2]


def test_descriptor_level_output_goes_to_the_log_and_python_messages_to_the_terminal(tmp_path):
    """What Ray's C++ core writes to descriptor 2 (``core_worker.cc`` lines) lands in the log; a message printed
    to ``sys.stderr`` still reaches the terminal; both are restored when the log closes."""
    log = tmp_path / "inv" / "scan.log"
    script = textwrap.dedent(f"""
        import os, sys
        from mirrorscan.cluster.scan.log import RunLog
        with RunLog({str(log)!r}):
            os.write(2, b"[E core_worker.cc:2465] engine noise\\n")
            print("warning: the user must see this", file=sys.stderr)
        os.write(2, b"after: descriptor 2 is the terminal again\\n")
        print("after: sys.stderr too", file=sys.stderr)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "engine noise" not in done.stderr
    assert "warning: the user must see this" in done.stderr
    assert "after: descriptor 2 is the terminal again" in done.stderr and "after: sys.stderr too" in done.stderr
    text = log.read_text()
    assert "engine noise" in text and "user must see" not in text


def test_output_forwarded_from_ray_workers_lands_in_the_log(tmp_path, ray_local, capsys):
    import ray

    @ray.remote(num_cpus=0)
    def engine_start():
        print("loading weights: an engine's start-up line", file=sys.stderr, flush=True)
        return 1

    log = tmp_path / "scan.log"
    with RunLog(log):
        attach_ray_output()
        assert ray.get(engine_start.remote()) == 1
        deadline = time.monotonic() + 20
        while "engine's start-up line" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
    assert "engine's start-up line" in log.read_text()
    assert "engine's start-up line" not in capsys.readouterr().err
    from ray._private import worker as ray_worker

    names = [name for name, _ in ray_worker.global_worker_stdstream_dispatcher.handlers]
    assert "ray_print_logs" in names and "mirrorscan_run_log" not in names   # Ray's own printer is back


def test_lines_engine_actors_print_after_the_log_closed_land_in_it_too(tmp_path, ray_local, capsys):
    """An engine actor's teardown (vLLM's engine shutdown) prints after the scan's summary, when its log has
    closed: those lines are appended to that log, not shown on the terminal; the next scan's log takes over
    and restores Ray's own printer when it closes, not the earlier scan's handler."""
    import ray
    from ray._private import worker as ray_worker

    dispatcher = ray_worker.global_worker_stdstream_dispatcher
    ray_printer = dict(dispatcher.handlers)["ray_print_logs"]
    ray_printer = getattr(ray_printer, "original", ray_printer)   # an earlier test's scan may have left its own

    @ray.remote(num_cpus=0)
    def teardown():
        print("engine shutdown: a line after the summary", file=sys.stderr, flush=True)
        return 1

    first = tmp_path / "first.log"
    with RunLog(first):
        attach_ray_output()
    assert ray.get(teardown.remote()) == 1
    deadline = time.monotonic() + 20
    while "after the summary" not in first.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "after the summary" in first.read_text()
    assert "after the summary" not in capsys.readouterr().err
    with RunLog(tmp_path / "second.log"):
        attach_ray_output()
    late = dict(dispatcher.handlers)["ray_print_logs"]
    assert late.original is ray_printer
