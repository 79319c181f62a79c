"""``make typecheck`` cannot pass by checking nothing: mypy, with the project's configuration (pyproject.toml)
and the installed layout the Makefile links (.typecheck/mirrorscan), resolves a mirrorscan module, reports a
wrong type in code that uses it, and passes the same code typed right."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USES_PERCENT = "from mirrorscan.grid.formatting import percent\n"


def _mypy(code: str, cache: Path) -> subprocess.CompletedProcess:
    subprocess.run(["make", "-s", "typecheck-tree"], cwd=REPO, check=True, capture_output=True)
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), "-c", code], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_a_planted_wrong_type_fails_the_check(tmp_path):
    """``percent`` returns a str: assigning it to an int is an error only if its module was found and read."""
    run = _mypy(USES_PERCENT + "width: int = percent(0.5)\n", tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert 'expression has type "str", variable has type "int")  [assignment]' in run.stdout, run.stdout
    assert "import-not-found" not in run.stdout and "import-untyped" not in run.stdout, run.stdout


def test_the_same_code_typed_right_passes(tmp_path):
    run = _mypy(USES_PERCENT + "shown: str = percent(0.5)\n", tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def test_no_checked_module_is_exempted():
    """The check covers every module of its parts: no override turns errors off (``ignore_errors``) for one."""
    import tomllib

    overrides = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"].get("overrides", [])
    assert [o["module"] for o in overrides if o.get("ignore_errors")] == []
