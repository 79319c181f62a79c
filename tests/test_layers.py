"""The package's import graph, read from the AST of every module (statement imports at any depth, lazy imports
inside functions, and ``importlib.import_module("mirrorscan.…")`` with a constant name): no module imports
itself through others, and each part imports only the parts below it.

Layers (docs/architecture.md), lowest first: ``grid`` (specs, records, ids, the instrument parts) imports no
other part; ``analysis`` (statistics) imports grid; ``actors`` (engines) import grid; ``instruments`` import
grid and analysis; ``cluster`` (storage, runtime, the grid engine) imports grid, analysis and actors (an
instrument is reached through the registry, by name); ``results`` imports those and cluster; ``jobs`` (the
command line) imports every part but instruments. The graph is the one ``bench/architecture.py`` counts
cycles in (loaded by its path: bench/ is not part of the package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_architecture():
    spec = importlib.util.spec_from_file_location("mirrorscan_bench_architecture", REPO / "bench" / "architecture.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


architecture = _load_architecture()

ALLOWED: dict[str, frozenset[str]] = {
    "grid": frozenset(),
    "analysis": frozenset({"grid"}),
    "actors": frozenset({"grid"}),
    "instruments": frozenset({"grid", "analysis"}),
    "cluster": frozenset({"grid", "analysis", "actors"}),
    "results": frozenset({"grid", "analysis", "actors", "cluster"}),
    "jobs": frozenset({"grid", "analysis", "actors", "cluster", "results"}),
}
"""Part → the other parts its modules may import (the layer rule; a part always imports its own modules)."""

NO_RAY = ("grid", "analysis")
"""Parts that never import Ray: the statistics run without it, and their Ray drivers live in cluster/."""


def layer_violations(tree: Path, allowed: dict[str, frozenset[str]] = ALLOWED) -> list[str]:
    """``file:line: a.b imports c.d (a may import …)`` for every import of a part not in ``allowed``."""
    out = []
    for edge in architecture.imports(tree, tuple(allowed)):
        source, target = edge.source.split(".")[0], edge.target.split(".")[0]
        if source != target and target not in allowed[source]:
            may = ", ".join(sorted(allowed[source])) or "no other part"
            out.append(f"{edge.path.relative_to(tree)}:{edge.line}: {edge.source} imports {edge.target} "
                       f"({source} may import {may})")
    return out


def import_cycles(tree: Path) -> list[str]:
    """Each import cycle between the modules of ``tree`` as a chain ``a → b → a``."""
    return [architecture.chain_text(c) for c in architecture.cycles(architecture.graph(architecture.imports(tree)))]


def forbidden_imports(tree: Path, parts: tuple[str, ...], names: tuple[str, ...]) -> list[str]:
    """``file:line: module`` for every import (at any depth) of a top-level package in ``names`` by a module
    of ``parts``."""
    import ast

    out = []
    for part in parts:
        for path in sorted((tree / part).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                named = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
                out += [f"{path.relative_to(tree)}:{node.lineno}: {n}" for n in named if n.split(".")[0] in names]
    return out


def write(tree: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    return tree


PLANTED = {
    "grid/__init__.py": "",
    "grid/ids.py": "def make():\n    from mirrorscan.cluster.store import open_store   # lazy, upward\n",
    "grid/spec.py": "import mirrorscan.grid.ids\n",
    "cluster/__init__.py": "",
    "cluster/store.py": "from mirrorscan.grid import spec\n",
    "cluster/catalog.py": "from . import runs\n",
    "cluster/runs.py": "import importlib\nimportlib.import_module('mirrorscan.cluster.catalog')\n",
    "actors/__init__.py": "",
    "actors/vllm_env.py": "from cluster.store import open_store   # a bare name from a release before one package\n",
}


def test_the_checker_reports_a_planted_cycle_and_an_upward_import(tmp_path):
    tree = write(tmp_path, PLANTED)
    cycles = import_cycles(tree)
    assert "cluster.catalog → cluster.runs → cluster.catalog" in cycles   # relative import and import_module
    assert "cluster.store → grid.spec → grid.ids → cluster.store" in cycles   # through a lazy import
    assert len(cycles) == 2
    assert layer_violations(tree) == [
        "actors/vllm_env.py:1: actors.vllm_env imports cluster.store (actors may import grid)",
        "grid/ids.py:2: grid.ids imports cluster.store (grid may import no other part)"]


def test_the_checker_passes_a_tree_that_keeps_the_rule(tmp_path):
    tree = write(tmp_path, {"grid/__init__.py": "", "grid/ids.py": "import os\n", "cluster/__init__.py": "",
                            "cluster/store.py": "from mirrorscan.grid.ids import x\nimport mirrorscan.grid\n"})
    assert import_cycles(tree) == [] and layer_violations(tree) == []
    assert [str(e.target) for e in architecture.imports(tree)] == ["grid.ids", "grid"]


def test_no_module_imports_itself_through_others():
    found = import_cycles(REPO)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_each_part_imports_only_the_parts_below_it():
    found = layer_violations(REPO)
    assert not found, "imports against the layers:\n" + "\n".join(found)


@pytest.mark.parametrize("part", NO_RAY)
def test_the_statistics_and_the_core_never_import_ray(part):
    found = forbidden_imports(REPO, (part,), ("ray",))
    assert not found, "\n".join(found)


def test_benchmarks_import_nothing_from_the_tests():
    found = forbidden_imports(REPO, ("bench",), ("tests", "conftest"))
    assert not found, "\n".join(found)


CLUSTER_ORDER = ("home", "store", "catalog", "models", "runtime", "scan")
"""The subpackages of ``cluster`` (and its one root module, ``home``), lowest first (cluster/__init__.py): each
imports only those before it."""


def cluster_order_violations(tree: Path, order: tuple[str, ...] = CLUSTER_ORDER) -> list[str]:
    """``file:line: a imports b`` for every import inside ``cluster`` of a subpackage at or above the importer's
    place in ``order`` (a subpackage's own modules excepted)."""
    rank = {name: i for i, name in enumerate(order)}
    out = []
    for edge in architecture.imports(tree, ("cluster",)):
        source, target = edge.source.split("."), edge.target.split(".")
        if len(source) < 2 or len(target) < 2 or source[1] == target[1]:
            continue
        if rank.get(target[1], len(order)) >= rank.get(source[1], len(order)):
            out.append(f"{edge.path.relative_to(tree)}:{edge.line}: {edge.source} imports {edge.target} "
                       f"(order: {' < '.join(order)})")
    return out


def test_the_order_checker_reports_an_upward_import_inside_cluster(tmp_path):
    tree = write(tmp_path, {"cluster/__init__.py": "", "cluster/home.py": "",
                            "cluster/store/__init__.py": "", "cluster/store/traces.py": "import mirrorscan.cluster.home\n",
                            "cluster/catalog/__init__.py": "",
                            "cluster/catalog/client.py": "from mirrorscan.cluster.store import traces\n",
                            "cluster/scan/__init__.py": "",
                            "cluster/scan/run.py": "from mirrorscan.cluster.catalog.client import Catalog\n",
                            "cluster/store/s3.py": "def f():\n    from mirrorscan.cluster.scan import run\n"})
    assert cluster_order_violations(tree) == [
        "cluster/store/s3.py:2: cluster.store.s3 imports cluster.scan.run (order: home < store < catalog < models "
        "< runtime < scan)"]


def test_cluster_subpackages_import_only_those_below_them():
    assert sorted(p.name for p in (REPO / "cluster").iterdir() if (p / "__init__.py").exists()) == \
        sorted(CLUSTER_ORDER[1:])
    found = cluster_order_violations(REPO)
    assert not found, "imports against the order of cluster's subpackages:\n" + "\n".join(found)
