"""browse reads an invocation of a plug-in instrument as analyze does: through the import path its frozen
settings name (``echo_instrument:ECHO``), not the short name its catalog row's ``instrument`` column holds
(``echo``), which no registry knows; a plug-in that is not importable is a ConfigError saying to make it so."""

from __future__ import annotations

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.settings import Settings
from mirrorscan.results.browse.source import instrument_of


def row(instrument_ref: str) -> dict:
    return {"instrument": "echo", "settings": Settings(instrument=instrument_ref).to_json()}


def test_a_plugin_invocation_resolves_through_its_settings():
    from echo_instrument import ECHO   # tests/plugin is on pytest's pythonpath, as PYTHONPATH puts it for browse

    assert instrument_of(row("echo_instrument:ECHO")) is ECHO
    assert instrument_of({"instrument": "forced_choice", "settings": None}).name == "forced_choice"


def test_a_plugin_that_is_not_importable_says_so():
    with pytest.raises(ConfigError) as caught:
        instrument_of(row("no_such_plugin_module:ECHO"))
    assert "PYTHONPATH" in str(caught.value) and "browse" in str(caught.value)
