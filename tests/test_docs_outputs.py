"""Command output a page quotes cannot drift unnoticed: every fenced output block with numbers in README.md,
docs/*.md, experiments/*/README.md and instruments/*/README.md is either checked by a test that produces it
(``CHECKED``: the test reads the block from the page and compares what it shows), or is marked in the page,
in the paragraph just before it, as an illustration from a named version ("illustration, mirrorscan 0.1.0
output of 2026-12-06"), so a reader knows the numbers are of that version, not a promise of this one.

An output block is a fenced block without a language (or ``text``/``console``/``output``) that is not mostly
command lines and holds a number standing alone (``96``, ``0.192``, ``-1.20``, ``100.0%``); a block of that
shape that is no command output (a formula, a folder listing) is listed in ``NOT_OUTPUT`` with what it is.
A demo too slow for the suite is marked as an illustration; where the suite has its own small fixture the
block is checked on it.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "experiments").glob("*/README.md"),
                *(REPO / "instruments").glob("*/README.md")])
OUTPUT_LANGUAGES = ("", "text", "console", "output")
"""Fence languages that may hold a command's output (``json``, ``bash``, ``python``, … never do here)."""
NUMBER = re.compile(r"(?<![\w.\-/<…])[−+-]?\d+(?:\.\d+)?%?(?![\w/…-])")
"""A number standing alone: not part of an id, a word, a path or a placeholder."""
COMMAND = re.compile(r"\s*(\$ )?(mirrorscan|make|python|pip|ray|kubectl|curl|export|cd|git)\b")
MARK = re.compile(r"illustration,\s+mirrorscan\s+(\d+\.\d+\.\d+)\s+output", re.I)
"""How a page marks a block as an illustration of a named version (in the paragraph before the fence)."""

CHECKED = {
    ("README.md", "invocation f7dc89db-"): "tests/test_docs_outputs.py::test_the_readmes_scan_summary_is_what_scan_prints_for_the_demo",
    ("README.md", "invocation 1dd40c56-…"): "tests/test_docs_outputs.py::test_the_readmes_analyze_output_is_the_fixtures",
    ("instruments/lens/README.md", "manek-reference  <|im_start|>"):
        "tests/actors/test_activation_prompt.py::test_the_lens_readme_shows_what_each_manek_preset_sends",
}
"""(page, start of the block's first line) → the test that produces the block's output and compares it."""
NOT_OUTPUT = {
    ("docs/architecture.md", "experiments/<name>/config.json"): "a diagram of one experiment's path",
    ("docs/catalog.md", "catalog/pgdata/"): "a folder listing",
    ("instruments/lens/README.md", "direction[l]  = mean over"): "the formulas of a direction and its AUROC",
    ("instruments/lens/README.md", "pooled_norm = mean over"): "a formula",
    ("docs/statistics.md", "mirrorscan stats intervals --input FILE"): "the synopsis of two commands (defaults, not output)",
}
"""(page, start of the block's first line) → what the block is instead of a command's output."""


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: str
    """The page, relative to the repository."""
    line: int
    """The line of its opening fence (1-based)."""
    language: str
    lines: tuple[str, ...]
    lead: str
    """The paragraph just before the fence (blank lines between them skipped)."""

    @property
    def first(self) -> str:
        return self.lines[0] if self.lines else ""


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of ``page`` (or of ``text`` under that page's name), in order."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    name = page.relative_to(REPO).as_posix() if page.is_absolute() else str(page)
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, language, body = i, lines[i][3:].strip(), []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            lead, j = [], start - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            while j >= 0 and lines[j].strip() and not lines[j].startswith("```"):
                lead.insert(0, lines[j])
                j -= 1
            found.append(Block(name, start + 1, language, tuple(body), "\n".join(lead)))
        i += 1
    return found


def is_output_with_numbers(block: Block) -> bool:
    """Whether ``block`` has the shape of a command's output holding numbers (see the module docstring)."""
    if block.language not in OUTPUT_LANGUAGES:
        return False
    filled = [line for line in block.lines if line.strip()]
    commands = sum(1 for line in filled if COMMAND.match(line))
    return bool(filled) and commands * 2 < len(filled) and bool(NUMBER.search("\n".join(block.lines)))


def registered(block: Block, registry: dict) -> str | None:
    return next((v for (page, first), v in registry.items() if page == block.page and block.first.startswith(first)),
                None)


def unaccounted(pages) -> list[str]:
    """Output blocks with numbers that are neither checked, nor listed as no output, nor marked."""
    out = []
    for page in pages:
        for block in blocks(page):
            if is_output_with_numbers(block) and not registered(block, CHECKED) \
                    and not registered(block, NOT_OUTPUT) and not MARK.search(block.lead):
                out.append(f"{block.page}:{block.line} ({block.first[:60]!r})")
    return out


def test_the_pages_are_found():
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    assert {"README.md", "docs/results.md", "experiments/lens-demo/README.md",
            "instruments/flinch/README.md"} <= names


def test_every_output_block_with_numbers_is_checked_or_marked_as_an_illustration():
    missing = unaccounted(PAGES)
    assert not missing, ("output blocks with numbers that no test checks and that are not marked as an illustration "
                         f"of a named version (write 'illustration, mirrorscan X.Y.Z output of DATE' in the paragraph "
                         f"before the block, or register a test in CHECKED): {missing}")


def test_an_unmarked_output_block_is_caught():
    """The finder itself: a quoted output with numbers and no mark is reported; the mark, or a command block, is not."""
    page = REPO / "docs" / "example.md"
    output = "It printed:\n\n```\nmodel   total\nm       78.9\n```\n"
    marked = "It printed (illustration, mirrorscan 0.1.0 output of 2026-12-06):\n\n```\nmodel   total\nm       78.9\n```\n"
    commands = "Run:\n\n```\nmirrorscan scan experiments/demo/ --samples 3\n```\n"
    assert [is_output_with_numbers(b) for b in blocks(page, output)] == [True]
    assert [bool(MARK.search(b.lead)) for b in blocks(page, marked)] == [True]
    assert [is_output_with_numbers(b) for b in blocks(page, commands)] == [False]


def test_every_registered_block_exists_and_every_checking_test_does():
    """No stale entry: each (page, first line) names a block of that page, and each checking test is a function
    of its file that reads that page."""
    for registry in (CHECKED, NOT_OUTPUT):
        for (page, first) in registry:
            assert any(b.first.startswith(first) for b in blocks(REPO / page)), (page, first)
    for (page, _), test in CHECKED.items():
        path, name = test.split("::")
        source = (REPO / path).read_text(encoding="utf-8")
        assert f"def {name}(" in source, test
        assert page in source or Path(page).name in source, (test, "does not read", page)


def test_an_illustrations_version_is_this_one_or_earlier():
    from importlib.metadata import version

    current = tuple(int(x) for x in version("mirrorscan").split(".")[:3])
    for page in PAGES:
        for block in blocks(page):
            for named in MARK.findall(block.lead):
                assert tuple(int(x) for x in named.split(".")) <= current, (block.page, block.line, named)


def block_on(page: str, first: str) -> list[str]:
    """The lines of the block of ``page`` whose first line starts with ``first``."""
    (block,) = [b for b in blocks(REPO / page) if b.first.startswith(first)]
    return list(block.lines)


def test_the_readmes_scan_summary_is_what_scan_prints_for_the_demo(tmp_path, monkeypatch):
    """README.md's first block, the summary ``make demo``'s scan prints: the grid of experiments/demo has the
    cells the block counts (its dry run, no model run: the scan itself takes minutes), and the lines are what
    ``jobs.scan.print_summary`` — the scan's own printer — writes for a complete run of that many cells."""
    from mirrorscan.cluster.scan.records import ScanResult
    from mirrorscan.jobs.dry_run import dry_run
    from mirrorscan.jobs.scan import print_summary

    monkeypatch.setenv("MIRRORSCAN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MIRRORSCAN_CATALOG_DSN", raising=False)
    shown = block_on("README.md", "invocation f7dc89db-")
    planned = io.StringIO()
    dry_run(str(REPO / "experiments" / "demo"), store=str(tmp_path / "store"), out=planned)
    (cells,) = [int(m.group(1)) for m in re.finditer(r"^  all models\s+(\d+) cells", planned.getvalue(), re.M)]
    inv = shown[0].split()[1]
    folder = f"/…/.mirrorscan/store/demo/{inv}"
    printed = io.StringIO()
    print_summary(ScanResult(inv, "demo", "complete", f"{folder}/traces", {
        "cells": cells, "ok": cells, "error": 0, "missing": 0, "rows": cells, "error_rows": 0},
        log_path=f"{folder}/scan.log", instrument="forced_choice"), out=printed)
    expected = printed.getvalue().replace(f"'{inv}'", f"'{inv[:4]}…'").splitlines()
    assert shown == expected


def test_the_readmes_analyze_output_is_the_fixtures():
    """README.md's analyze block is ``mirrorscan analyze`` on the suite's legacy fixture (12 cells): line for
    line tests/fixtures/legacy_fc/expected_analyze.txt (``…`` standing for the part cut), which
    tests/jobs/test_legacy_fixture.py holds equal to what analyze prints on that fixture; the description line,
    the fixture's own, is left out on the page."""
    expected = (REPO / "tests" / "fixtures" / "legacy_fc" / "expected_analyze.txt").read_text().splitlines()
    assert "expected_analyze.txt" in (REPO / "tests" / "jobs" / "test_legacy_fixture.py").read_text()
    shown = block_on("README.md", "invocation 1dd40c56-…")
    at = 0
    for line in shown:
        pattern = re.compile(".*?".join(re.escape(part) for part in line.replace("<stamp>", "…").split("…")))
        while at < len(expected) and not pattern.fullmatch(expected[at]):
            at += 1
        assert at < len(expected), f"README.md's line is not in analyze's output (in order): {line!r}"
        at += 1

