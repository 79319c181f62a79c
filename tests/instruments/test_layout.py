"""Every instrument is laid out alike and ships what it reads: a registry entry naming ``<name>.instrument``, a
``spec.py`` and an ``instrument.py``, and each of its data files in the package build (pyproject.toml's
``packages`` and ``package-data``), so an installed mirrorscan finds its packaged inputs. Read from the source
tree and pyproject.toml, without building a wheel."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

from mirrorscan.grid.instrument_registry import REGISTRY

REPO = Path(__file__).resolve().parents[2]
INSTRUMENTS = REPO / "instruments"
FOLDERS = sorted(p.name for p in INSTRUMENTS.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def _build() -> tuple[set[str], dict[str, list[str]]]:
    """(packages, package-data patterns per package) of pyproject.toml's setuptools table."""
    table = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return set(table["packages"]), table.get("package-data", {})


def test_every_instrument_folder_is_registered_and_every_entry_names_its_folder():
    assert FOLDERS == sorted(REGISTRY)
    for name, entry in REGISTRY.items():
        assert entry.ref == f"mirrorscan.instruments.{name}.instrument:INSTRUMENT"


@pytest.mark.parametrize("name", FOLDERS)
def test_every_instrument_has_a_spec_and_an_instrument_module(name):
    assert (INSTRUMENTS / name / "spec.py").is_file() and (INSTRUMENTS / name / "instrument.py").is_file()


@pytest.mark.parametrize("name", FOLDERS)
def test_every_data_file_of_an_instrument_is_in_the_package_build(name):
    """A file under ``instruments/<name>/data`` lies in a listed package, matched by one of its patterns; a
    folder left out of ``packages`` or a file type left out of ``package-data`` fails here, not in a user's
    installed copy."""
    packages, data = _build()
    assert f"mirrorscan.instruments.{name}" in packages
    files = [f for f in (INSTRUMENTS / name / "data").rglob("*")
             if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"]
    missing = []
    for file in files:
        package = ".".join(("mirrorscan", *file.parent.relative_to(REPO).parts))
        if package not in packages:
            missing.append(f"{file.relative_to(REPO)}: its folder {package} is not in [tool.setuptools] packages")
        elif not any(fnmatch.fnmatch(file.name, pattern) for pattern in data.get(package, [])):
            missing.append(f"{file.relative_to(REPO)}: no pattern of package-data {package!r} matches it")
    assert missing == []


def test_the_check_finds_a_data_folder_left_out_of_the_build(tmp_path, monkeypatch):
    """The check itself: a data file in a folder that pyproject.toml does not list is reported."""
    import sys

    packages, data = _build()
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "_build", lambda: (packages - {"mirrorscan.instruments.flinch.data"}, data))
    with pytest.raises(AssertionError, match="flinch.data is not in"):
        test_every_data_file_of_an_instrument_is_in_the_package_build("flinch")


@pytest.mark.parametrize("name", FOLDERS)
def test_every_instrument_answers_its_headline_sources_and_summary_query_from_its_sources_module(name):
    """One place per instrument for its headline numbers' queries and the scan summary's query: the module its
    ``sources`` names, beside its spec and instrument modules; no instrument writes the two hooks again."""
    import importlib

    from mirrorscan.grid.instrument import Presenter, resolve

    instrument = resolve(name)
    assert instrument.sources == f"mirrorscan.instruments.{name}.sources"
    module = importlib.import_module(instrument.sources)
    assert callable(module.headline_sources) and callable(module.suggested_sql)
    assert type(instrument).headline_sources is Presenter.headline_sources
    assert type(instrument).suggested_query is Presenter.suggested_query
    assert instrument.suggested_query("x") == module.suggested_sql("x")
