"""What the docs name exists: every source path, module and attribute, every ``python -m`` module and every
``mirrorscan`` verb that README.md, docs/*.md and the experiments' READMEs mention in code spans or blocks.

A page that still names a module after it moved, or a verb that was renamed, fails here rather than in a
reader's terminal."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "experiments").glob("*/README.md")])
PACKAGES = ("grid", "cluster", "jobs", "actors", "analysis", "results", "instruments")
"""The folders that install as ``mirrorscan.<folder>``."""


def code_text(page: Path) -> str:
    """The page's inline code spans and fenced blocks, joined (prose left out)."""
    text = page.read_text()
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M))
    return "\n".join(blocks + spans)


def source_paths(text: str) -> set[str]:
    """Paths into the package folders (``cluster/pipeline.py``, ``results/browse/``), placeholders left out."""
    found = re.findall(rf"(?<![\w./<-])((?:{'|'.join(PACKAGES)}|tests|bench|experiments|docs)/[\w./-]*)", text)
    return {p.rstrip(".") for p in found if "<" not in p and "*" not in p and "…" not in p}


def dotted_names(text: str) -> set[str]:
    """Dotted names of modules or their attributes: ``mirrorscan.grid.records.ModelVariant``, or the same without
    the ``mirrorscan.`` prefix (``grid.records.ModelVariant``); file names (``cluster.yaml``) left out."""
    found = re.findall(rf"(?<![\w./-])((?:mirrorscan\.)?(?:{'|'.join(PACKAGES)})\.[A-Za-z_][\w.]*)", text)
    return {n.rstrip(".") for n in found if not re.search(r"\.(ya?ml|json|md|txt|csv|py)$", n)}


def resolves(name: str) -> bool:
    """Whether ``name`` (with or without ``mirrorscan.``) is a module, or an attribute of one."""
    name = name if name.startswith("mirrorscan.") else f"mirrorscan.{name}"
    parts = name.split(".")
    for cut in range(len(parts), 1, -1):
        module = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:   # the module exists and fails to import: say so, not "not named"
                raise
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_pages_are_found():
    """The walk reads the pages it means to (a moved docs folder would make every check below vacuous)."""
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    assert {"README.md", "docs/architecture.md", "docs/instruments.md", "docs/experiments.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_source_path_a_page_names_exists(page):
    """``cluster/pipeline.py``, ``results/browse/``, ``tests/plugin/echo_instrument.py``: each is in the tree."""
    missing = sorted(p for p in source_paths(code_text(page)) if not (REPO / p).exists())
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_module_and_attribute_a_page_names_imports(page):
    """``grid.records.ModelVariant``, ``mirrorscan.cluster.pipeline.EXECUTOR_POLL_S``: importable as named."""
    missing = sorted(n for n in dotted_names(code_text(page)) if not resolves(n))
    assert not missing, f"{page.name} names modules or attributes that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_python_dash_m_module_and_mirrorscan_verb_exists(page):
    """``python -m mirrorscan.jobs.scan`` names a module; ``mirrorscan <verb>`` a verb of the CLI or an
    instrument's own tools (``mirrorscan flinch compare``)."""
    from mirrorscan.grid.instrument import REGISTRY
    from mirrorscan.jobs.cli import INSTRUMENT_ALIASES, VERBS

    text = code_text(page)
    modules = set(re.findall(r"python3? -m ([\w.]+)", text)) - {"pytest", "cProfile", "pip", "venv", "http.server"}
    bad_modules = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    verbs = set(re.findall(r"(?<![\w./-])mirrorscan ([a-z][\w-]*)", text))
    known = set(VERBS) | set(INSTRUMENT_ALIASES) | set(REGISTRY)
    bad_verbs = sorted(verbs - known)
    assert not bad_modules and not bad_verbs, f"{page.name}: modules {bad_modules}, verbs {bad_verbs}"


def test_a_moved_name_is_caught():
    """The checks fail on what they exist to catch: a path, a module and an attribute that are not there."""
    text = "see `cluster/no_such_module.py`, `grid.no_such_module` and `grid.records.NoSuchRecord`"
    assert "cluster/no_such_module.py" in source_paths(text)
    assert not (REPO / "cluster/no_such_module.py").exists()
    assert not resolves("grid.no_such_module") and not resolves("grid.records.NoSuchRecord")
    assert resolves("grid.records") and resolves("mirrorscan.grid.trace_schema.trace_schema")
