"""mirrorscan installs as one package: its parts import each other as ``mirrorscan.…`` and claim no other
top-level name, and nothing edits ``sys.path`` to find them."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from mirrorscan.cluster.runtime.package_upload import PARTS, package_folder, stage_package

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for part in ("mirrorscan", *PARTS) for p in (REPO / part).rglob("*.py"))


def bare_imports(source: str) -> list[str]:
    """The top-level part names (``grid``, ``cluster``, …) a module's source imports without ``mirrorscan.``,
    as statements or as ``importlib.resources.files("…")`` / ``import_module("…")`` strings."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in PARTS]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [node.module] if node.module.split(".")[0] in PARTS else []
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "files", "import_module") and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and node.args[0].value.split(".")[0] in PARTS:
            found.append(node.args[0].value)
    return found


def test_the_check_finds_each_kind_of_bare_import():
    source = ("import grid.spec\nfrom cluster import store\nfrom mirrorscan.jobs import scan\n"
              "resources.files('instruments.flinch')\nimportlib.import_module('actors.registry')\n"
              "from . import sibling\nimport numpy\n")
    assert bare_imports(source) == ["grid.spec", "cluster", "instruments.flinch", "actors.registry"]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_module_imports_its_siblings_through_mirrorscan(path):
    assert bare_imports(path.read_text(encoding="utf-8")) == []


def test_no_code_edits_sys_path():
    offenders = [str(p.relative_to(REPO)) for p in sorted(REPO.glob("*/**/*.py"))
                 if not p.is_relative_to(REPO / ".venv") and "sys.path" in p.read_text(encoding="utf-8")
                 and p != Path(__file__).resolve()]
    assert offenders == []


def test_the_installed_package_claims_no_other_top_level_name(tmp_path):
    """From a folder outside the checkout, the command line imports and the parts' bare names do not."""
    probe = ("import importlib.util, mirrorscan.jobs.cli, mirrorscan.instruments.lens.instrument\n"
             f"print([n for n in {PARTS!r} if importlib.util.find_spec(n) is not None])")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_staged_copy_a_job_ships_imports_on_its_own(tmp_path):
    """The folder ``submit`` hands Ray as ``py_modules`` holds every part and its data files, and imports
    from a Python that sees only it on PYTHONPATH, as Ray puts it there (``-S``: no site-packages, so no
    installed copy to fall back on)."""
    root = stage_package(tmp_path / "stage")
    for part in PARTS:
        assert (root / part / "__init__.py").is_file()
    assert (root / "instruments" / "flinch" / "data" / "corpus.json").is_file()
    assert (root / "cluster" / "catalog" / "migrations").is_dir() and not list(root.rglob("__pycache__"))
    out = subprocess.run([sys.executable, "-S", "-c", "import mirrorscan.grid.ids as ids; print(ids.__file__)"],
                         cwd=tmp_path, env={"PYTHONPATH": str(root.parent)}, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(root))
    assert package_folder("mirrorscan.grid") == REPO / "grid"


def test_no_two_test_modules_share_a_name():
    """The suite imports test modules by their file name (pytest's prepend mode, no __init__.py in tests/), so
    two modules with one name in different folders fail collection: each name appears once."""
    names = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        names.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}


def test_a_package_installed_as_one_folder_stages_too(tmp_path):
    """From a non-editable install (a wheel's layout: the parts inside ``mirrorscan/``) the staged copy is
    the same folder again. The staged copy is such a layout: staging from it must give every part once."""
    first = stage_package(tmp_path / "first")
    probe = ("import sys, pathlib; from mirrorscan.cluster.runtime.package_upload import stage_package; "
             "root = stage_package(pathlib.Path(sys.argv[1])); "
             "print(sorted(p.name for p in root.iterdir() if p.is_dir()))")
    out = subprocess.run([sys.executable, "-S", "-c", probe, str(tmp_path / "second")], cwd=tmp_path,
                         env={"PYTHONPATH": str(first.parent)}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sorted(PARTS))
    assert (tmp_path / "second" / "mirrorscan" / "grid" / "spec.py").read_bytes() == (REPO / "grid" / "spec.py").read_bytes()
