"""The suite's own layout: modules that shut the shared local Ray down say so, so that they run last (first,
as one group, under pytest-xdist)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_module_that_takes_ray_for_itself_is_marked_own_ray():
    """``own_ray()`` shuts the shared Ray down; an unmarked caller in the middle of the run would make every
    later module start it again (4–9 s each)."""
    callers = {p for p in TESTS.rglob("test_*.py") if re.search(r"\bown_ray\(\)", p.read_text())}
    marked = {p for p in callers if "pytest.mark.own_ray" in p.read_text()}
    assert callers, "the shared-Ray fixtures moved: update this test"
    assert callers == marked, f"call own_ray() without the own_ray mark: {sorted(str(p) for p in callers - marked)}"


def test_marked_modules_are_collected_last_or_first_in_parallel(request):
    """The collection hook in conftest.py sorts marked modules after the rest in one process, and first under
    xdist (where they are one group)."""
    from conftest import in_parallel

    items = request.session.items
    marked = [item.get_closest_marker("own_ray") is not None for item in items]
    if any(marked):   # a run of some modules only may hold none of them
        assert marked == sorted(marked, reverse=in_parallel(request.config)), "own_ray modules out of place"


def test_modules_are_grouped_by_what_they_share():
    """``suite_group``: an own_ray module → ``own-ray``, a vLLM-server user → ``vllm-server``, else its path."""
    from conftest import suite_group

    assert suite_group("tests/cluster/test_multinode.py") == "own-ray"
    assert suite_group("tests/actors/test_http_openai.py") == "vllm-server"
    assert suite_group("tests/grid/test_files.py") == "tests/grid/test_files.py"
