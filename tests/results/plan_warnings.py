"""Reading back what ``mirrorscan reproduce`` said it could not restore."""

from __future__ import annotations


def printed_warnings(err: str) -> list[str]:
    """The warnings ``mirrorscan reproduce`` printed with its plan (``results.reproduce.describe``, on stderr):
    the ones it records with the reproduction."""
    return [line.removeprefix("  warning: ") for line in err.splitlines() if line.startswith("  warning: ")]


def same_but_git(left: list[str], right: list[str]) -> bool:
    """Whether two plans' warnings agree but for their ``git:`` lines. Those say where HEAD and the work tree
    are at the moment each plan is made, so two plans of one invocation made seconds apart differ when a
    commit lands (or the tree's state changes) in between."""
    return [w for w in left if not w.startswith("git: ")] == [w for w in right if not w.startswith("git: ")]
