"""The typed reader of a config's keys (``grid.config_keys.read_keys``): each field read once by its name, type
checked, a left-out key at its default, with the file and field in every error."""

from __future__ import annotations

import dataclasses

import pytest

from mirrorscan.grid.config_keys import TOP_LEVEL, TopLevel, read_keys
from mirrorscan.grid.errors import ConfigError


def test_a_config_reads_as_its_record_with_defaults_for_what_it_leaves_out():
    top = read_keys("config.json", {"instrument": "flinch", "models": [{"model": "m"}], "temperature": 1, "extra": 0},
                    TopLevel)
    assert (top.instrument, top.models, top.temperature) == ("flinch", [{"model": "m"}], 1)
    assert (top.samples, top.max_concurrent_models, top.store, top.limits) == (TOP_LEVEL["samples"][0], None, None, {})
    assert read_keys("c", {"instrument": "x", "models": []}, TopLevel).limits is not top.limits   # a fresh default
    with pytest.raises(dataclasses.FrozenInstanceError):
        top.samples = 2


def test_a_missing_key_or_a_value_of_another_type_names_the_file_and_the_field():
    with pytest.raises(ConfigError) as info:
        read_keys("config.json", {"instrument": "flinch"}, TopLevel)
    assert (info.value.file, info.value.field, info.value.problem, info.value.fix) == \
        ("config.json", "models", "missing", "add 'models'")
    with pytest.raises(ConfigError) as info:
        read_keys("config.json", {"instrument": "flinch", "models": [], "samples": True}, TopLevel, where="outer")
    assert (info.value.field, info.value.problem) == ("outer.samples", "is true, not an integer")


def test_the_key_table_is_the_records_fields_in_order():
    assert list(TOP_LEVEL) == [f.name for f in dataclasses.fields(TopLevel)]
    assert TOP_LEVEL["instrument"] == (None, (str,)) and TOP_LEVEL["limits"] == ({}, (dict,))
