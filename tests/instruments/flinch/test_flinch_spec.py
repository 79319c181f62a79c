"""flinch's frozen section as a typed record: built once from the frozen JSON, which it keeps byte for byte,
and read by the instrument through its fields."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from mirrorscan.grid.instrument import resolve
from mirrorscan.instruments.flinch.instrument import FlinchSpec
from mirrorscan.instruments.flinch.proxy import DEFAULT_SAMPLES

FROZEN = {"corpus": "/data/corpus – ünïcödé.json", "corpus_sha256": "ef" * 32, "corpus_version": "v3 ✓",
          "axes": ["violence", "slurs"], "aggregation": "axis_lp_mean", "proxy_samples": 12, "n_items": 41}


def test_the_record_holds_the_frozen_fields_and_gives_back_the_same_bytes():
    instrument = resolve("flinch")
    stored = json.dumps(FROZEN, sort_keys=True, ensure_ascii=False)
    expected = hashlib.sha256(stored.encode()).hexdigest()
    spec = instrument.from_frozen(json.loads(stored))
    assert isinstance(spec, FlinchSpec) and spec.frozen_json == stored
    again = json.dumps(instrument.frozen(spec), sort_keys=True, ensure_ascii=False)
    assert hashlib.sha256(again.encode()).hexdigest() == expected
    assert instrument.from_frozen(json.loads(again)) == spec
    assert (spec.corpus_path, spec.corpus_sha256, spec.corpus_version) == (FROZEN["corpus"], "ef" * 32, "v3 ✓")
    assert spec.axes == ("violence", "slurs") and spec.aggregation == "axis_lp_mean"
    assert (spec.proxy_samples, spec.n_items) == (12, 41)
    assert instrument.envelope_version(spec) == "v3 ✓" and instrument.n_items(spec) == 41
    assert instrument.content_hashes(spec) == {"corpus": "ef" * 32}


def test_a_section_frozen_before_the_optional_keys_reads_with_their_defaults_and_its_own_bytes():
    older = {k: v for k, v in FROZEN.items() if k not in ("corpus_version", "proxy_samples", "n_items")}
    stored = json.dumps(older, sort_keys=True, ensure_ascii=False)
    spec = resolve("flinch").from_frozen(json.loads(stored))
    assert spec.frozen_json == stored and "proxy_samples" not in spec.frozen
    assert (spec.corpus_version, spec.proxy_samples, spec.n_items) == (None, DEFAULT_SAMPLES, None)
    assert resolve("flinch").envelope_version(spec) == "-"


def test_a_field_of_the_record_cannot_be_written():
    spec = resolve("flinch").from_frozen(dict(FROZEN))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.proxy_samples = 50
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.axes = ("violence",)


def test_a_section_that_does_not_record_its_item_count_counts_the_corpus(tmp_path):
    """n_items of a section frozen without ``n_items``: the carriers of its axes, read from the corpus (whose
    hash is checked), as many as the section recorded when it did."""
    from mirrorscan.grid.instrument import SpecContext

    instrument = resolve("flinch")
    spec = instrument.load_spec({"corpus": "packaged:starter"}, SpecContext("config.json", "flinch", str(tmp_path)))
    older = {k: v for k, v in instrument.frozen(spec).items() if k != "n_items"}
    assert instrument.n_items(instrument.from_frozen(older)) == instrument.n_items(spec) == spec.n_items > 0
