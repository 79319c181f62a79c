"""The driver side of ``cluster.scan.pipeline``: the wait of Ray Data's scheduling loop that ``run_model`` sets.

What the longer wait saves is a benchmark figure (``bench/scale.py --study sweep``, driver CPU); what is
tested here is that the setting reaches the loop of the Ray release installed, so a release that renames it
or stops reading it fails here instead of silently costing the driver its CPU again.
"""

from __future__ import annotations

from ray.data._internal.execution import streaming_executor_state as state

from mirrorscan.cluster.scan.pipeline import EXECUTOR_POLL_S, executor_poll


def test_the_scheduling_loop_reads_the_wait_that_executor_poll_sets():
    before = state.WAIT_FOR_TASK_COMPLETION_TIMEOUT_S
    try:
        executor_poll(0.37)
        assert state.WAIT_FOR_TASK_COMPLETION_TIMEOUT_S == 0.37
        # the loop's step looks the name up in its module on every call (a global, not a default argument)
        assert "WAIT_FOR_TASK_COMPLETION_TIMEOUT_S" in state.process_completed_tasks.__code__.co_names
        executor_poll()
        assert state.WAIT_FOR_TASK_COMPLETION_TIMEOUT_S == EXECUTOR_POLL_S > 0.1   # longer than Ray's own
    finally:
        state.WAIT_FOR_TASK_COMPLETION_TIMEOUT_S = before
