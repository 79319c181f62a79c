"""docs/instruments.md's worked example exists and runs as the page says.

The page shows an experiment folder's ``config.json``, the two commands that scan and analyze it, an abridged
copy of the plug-in's code, and what analyze writes. Each is checked against the repository: the config block
is ``experiments/echo_demo/config.json``; the commands run verbatim (their ``PYTHONPATH=…`` prefix as the
environment, from the repository root) on a real local Ray with the packaged demo model; every line of the
code block is a line of the plug-in's file; and the outputs the page names are the ones written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "instruments.md"
EXAMPLE = REPO / "experiments" / "echo_demo"
PLUGIN = REPO / "tests" / "plugin" / "echo_instrument.py"


def section(title: str) -> str:
    """The text of the page's ``## title`` section, up to the next ``## `` heading."""
    text = DOC.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of ``text`` in ``language`` ('' for a block without one), in order."""
    found, current, lang = [], None, None
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            if current is None:
                current, lang = [], line[3:].strip()
            else:
                if lang == language:
                    found.append("".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return found


EXAMPLE_SECTION = section("A worked example: `echo`, outside the package")


def commands() -> list[tuple[dict, list[str]]]:
    """(environment assignments, argv) of each command line in the example's plain code blocks."""
    out = []
    for block in blocks(EXAMPLE_SECTION, ""):
        for line in block.splitlines():
            words = shlex.split(line)
            env = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))
            argv = [w for w in words if not re.match(r"^[A-Z_]+=", w)]
            if argv and argv[0] == "mirrorscan":
                out.append((env, argv))
    return out


def test_the_pages_config_is_the_example_folders():
    """The JSON on the page is the folder's config.json, key for key; the page names that folder."""
    (shown,) = blocks(EXAMPLE_SECTION, "json")
    assert json.loads(shown) == json.loads((EXAMPLE / "config.json").read_text())
    assert [argv[2] for _, argv in commands()] == ["experiments/echo_demo/", "experiments/echo_demo/"]


def test_every_line_of_the_pages_code_is_in_the_plugin():
    """The abridged code is a copy: each line (its trailing ``# …`` comment aside; ``...`` marks a cut) is a line
    of tests/plugin/echo_instrument.py, so the page cannot show methods or bases the plug-in no longer has."""
    (code,) = blocks(EXAMPLE_SECTION, "python")
    source = {line.rstrip() for line in PLUGIN.read_text().splitlines()}
    shown = [re.sub(r"\s+# .*$", "", line).rstrip() for line in code.splitlines()]
    missing = [line for line in shown if line.strip() not in ("", "...") and line not in source]
    assert not missing, f"lines on the page that the plug-in does not have: {missing}"


@pytest.mark.slow
def test_the_example_runs_as_the_page_says(tmp_path, demo_dir, catalog_dsn):
    """``mirrorscan scan`` then ``mirrorscan analyze`` exactly as written: every cell answered, the plug-in's
    own columns stored, and analyze's line and files as the page describes them."""
    items = json.loads((EXAMPLE / "config.json").read_text())["echo"]["items"]
    store = tmp_path / "store"
    bin_dir = Path(sys.executable).parent
    results = []
    for env, argv in commands():
        run_env = {**os.environ, **env, "MIRRORSCAN_CATALOG_DSN": catalog_dsn, "MIRRORSCAN_STORE": str(store),
                   "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])}
        done = subprocess.run(argv, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        results.append(done.stdout)
    scanned, analyzed = results
    n = len(items)
    assert f"cells: {n} total · {n} ok · 0 error · 0 missing" in scanned, scanned

    from echo_instrument import ECHO

    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.grid.trace_schema import trace_schema

    (invocation,) = [p.name for p in (store / "echo_demo").iterdir() if p.is_dir()]
    rows = open_store(str(store)).read("echo_demo", invocation, schema=trace_schema(ECHO.columns))
    assert sorted(rows["echo_item"].to_pylist()) == sorted(items)
    assert set(rows["instrument"].to_pylist()) == {"echo"} and set(rows["label"].to_pylist()) == {"smollm2"}
    echoed = sum(1 for e in rows["echoed"].to_pylist() if e)
    assert rows["echoed"].null_count == 0   # the in-actor step ran on every answered row

    # the page: analyze prints "echo: <echoed> of <answered> answers repeat their item" and writes
    # summary.json and per_item.parquet
    assert f"echo: {echoed} of {n} answers repeat their item" in analyzed, analyzed
    (folder,) = list((store / "echo_demo" / invocation / "analysis" / "echo").iterdir())
    assert {"summary.json", "per_item.parquet"} <= {p.name for p in folder.iterdir()}
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["answered"] == n and summary["echoed"] == echoed and summary["instrument"] == "echo", summary
    assert pq.read_table(folder / "per_item.parquet").num_rows == n
