"""The suite's own layout: modules that shut the shared local Ray down say so, so that they run last."""

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


def test_marked_modules_are_collected_last(request):
    """The collection hook in conftest.py sorts marked modules after the rest."""
    items = request.session.items
    marked = [item.get_closest_marker("own_ray") is not None for item in items]
    if any(marked):   # a run of some modules only may hold none of them
        assert marked == sorted(marked), "a module marked own_ray is followed by an unmarked one"
