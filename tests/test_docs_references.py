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
    """Paths into the package folders (``cluster/scan/pipeline.py``, ``results/browse/``), placeholders left out."""
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
    """``cluster/scan/pipeline.py``, ``results/browse/``, ``tests/plugin/echo_instrument.py``: each is in the tree."""
    missing = sorted(p for p in source_paths(code_text(page)) if not (REPO / p).exists())
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_module_and_attribute_a_page_names_imports(page):
    """``grid.records.ModelVariant``, ``mirrorscan.cluster.scan.pipeline.EXECUTOR_POLL_S``: importable as named."""
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


def verb_flags(text: str) -> dict[tuple[str, str | None], set[str]]:
    """(verb, the word after it or None) → the ``--flags`` written after ``mirrorscan <verb>`` on one command
    (a line cut at ``·``, ``;`` and ``#``)."""
    out: dict[tuple[str, str | None], set[str]] = {}
    for line in text.splitlines():
        for command in re.split(r" · |; |#", line):
            m = re.search(r"(?<![\w./-])mirrorscan ([a-z][\w-]*)(?: ([a-z][\w-]*))?(.*)", command)
            if m:
                out.setdefault((m.group(1), m.group(2)), set()).update(
                    re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m.group(3)))
    return out


def test_every_flag_a_page_writes_after_a_verb_is_in_its_help():
    """``mirrorscan scan … --dry-run``: the flag is in ``mirrorscan scan --help`` (or in the help of the
    subcommand written after the verb, as ``mirrorscan stats gstudy --facets``)."""
    import contextlib
    import io

    from mirrorscan.jobs.cli import main

    wanted: dict[tuple[str, str | None], set[str]] = {}
    for page in PAGES:
        for key, flags in verb_flags(code_text(page)).items():
            wanted.setdefault(key, set()).update(flags)
    helps: dict[tuple[str, ...], str] = {}

    def help_text(*words: str) -> str:
        if words not in helps:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                try:
                    code = main([*words, "--help"])
                except SystemExit as exit_:
                    code = exit_.code
            helps[words] = out.getvalue() if code in (0, None) else ""
        return helps[words]

    missing = []
    for (verb, sub), flags in sorted(wanted.items(), key=str):
        for flag in sorted(flags):
            if not re.search(rf"{flag}\b", help_text(verb)) and not (sub and re.search(rf"{flag}\b", help_text(verb, sub))):
                missing.append(f"mirrorscan {verb} {sub or ''} {flag}")
    assert wanted and not missing, f"flags the pages write that the command does not take: {missing}"


def test_flags_are_read_per_command():
    """Two commands on one line keep their own flags (``status`` takes no ``--follow``; ``logs`` does)."""
    flags = verb_flags("mirrorscan status [JOB_ID] · mirrorscan logs JOB_ID --follow   # --not-a-flag")
    assert flags == {("status", None): set(), ("logs", None): {"--follow"}}
