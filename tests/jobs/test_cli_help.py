"""``mirrorscan --help`` lists the verbs without importing any of them: no Ray, torch, scipy, transformers,
pyarrow or instrument is loaded to print the list (each verb's modules load when that verb runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mirrorscan.jobs import cli

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "ray", "scipy", "transformers", "pyarrow", "instruments")

LIST_MODULES = """
import json, sys
from mirrorscan.jobs import cli
try:
    rc = cli.main(sys.argv[1:])
except SystemExit as exit:   # argparse's --help
    rc = exit.code
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _modules_after(*argv: str) -> tuple[int, str, list[str]]:
    """(exit code, stdout, the modules loaded) of ``mirrorscan ARGV…`` run in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", LIST_MODULES, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"PATH": str(Path(sys.executable).parent), "HOME": str(Path.home())})
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["rc"], done.stdout, report["modules"]


def test_help_imports_no_verb_module_and_no_heavy_library():
    rc, out, modules = _modules_after("--help")
    assert rc == 0
    assert "verbs:" in out and "  scan" in out and "  lens" in out and "  models" in out
    heavy = [m for m in modules if m.split(".")[0] in HEAVY]
    assert heavy == [], heavy
    verbs = sorted({module for module, _ in cli.VERBS.values()})
    assert [m for m in modules if m in verbs] == []


def test_an_unknown_verb_lists_the_verbs_without_importing_them_either():
    rc, out, modules = _modules_after("no-such-verb")
    assert rc == 2 and out == ""
    assert [m for m in modules if m.split(".")[0] in HEAVY] == []


def test_a_verb_imports_its_module_when_it_runs():
    # the check above could pass by never importing anything: a verb's own --help does load its module
    rc, out, modules = _modules_after("sql", "--help")
    assert rc == 0 and "mirrorscan.jobs.sql" in modules and "usage: mirrorscan sql" in out


def test_the_instrument_tools_listed_by_name_are_the_instruments_with_a_cli_hook():
    # the verb list names them without importing them; importing them all must find the same set, and each
    # instrument with tools overrides the cli hook (the line is written once, in its registry entry)
    from mirrorscan.grid.instrument import Instrument, resolve

    assert set(cli.instrument_tools()) == set(cli.instrument_verbs())
    for name, text in cli.instrument_tools().items():
        assert text.startswith(f"{name}'s own tools") and "\n" not in text
        assert type(resolve(name)).cli is not Instrument.cli and resolve(name).tools == text
