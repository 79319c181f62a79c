"""forced_choice's frozen section as a typed record: built once from the frozen JSON, which it keeps byte for
byte, and read by the instrument through its fields."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from mirrorscan.grid.instrument import SpecContext, resolve
from mirrorscan.instruments.forced_choice.envelopes import PACKAGED, load_envelopes
from mirrorscan.instruments.forced_choice.spec import EnvelopeFile, ForcedChoiceSpec

FROZEN = {
    "probe_set": "/data/pairs – ünïcödé.csv", "probe_set_sha256": "ab" * 32, "n_items": 7,
    "envelopes_file": "/data/envelopes.json", "envelopes": ["plain", "json"], "orderings": ["BA", "AB"],
    "envelope_set": {"file": "/data/envelopes.json", "version": "2026-11 ✓", "sha256": "cd" * 32,
                     "texts": {"plain": {"system": "", "user": "{a} or {b}?", "idiom": "line", "language": "en"},
                               "json": {"system": "JSON only.", "user": 'Return {"choice": "{a}" or "{b}"}',
                                        "idiom": "json", "language": "de"}}},
}


def test_the_record_holds_the_frozen_fields_and_gives_back_the_same_bytes():
    instrument = resolve("forced_choice")
    stored = json.dumps(FROZEN, sort_keys=True, ensure_ascii=False)
    expected = hashlib.sha256(stored.encode()).hexdigest()
    spec = instrument.from_frozen(json.loads(stored))
    assert isinstance(spec, ForcedChoiceSpec) and spec.frozen_json == stored
    again = json.dumps(instrument.frozen(spec), sort_keys=True, ensure_ascii=False)
    assert hashlib.sha256(again.encode()).hexdigest() == expected
    assert instrument.from_frozen(json.loads(again)) == spec
    assert spec.envelope_ids == ("plain", "json") and spec.orderings == ("BA", "AB") and spec.n_pairs == 7
    assert spec.probe_set == FROZEN["probe_set"] and spec.probe_set_sha256 == "ab" * 32
    assert spec.envelopes_file == "/data/envelopes.json"
    assert spec.envelope_file == EnvelopeFile("/data/envelopes.json", "2026-11 ✓", "cd" * 32)
    assert spec.envelopes["json"].language == "de" and spec.envelopes["plain"].user == "{a} or {b}?"
    assert instrument.envelope_version(spec) == "2026-11 ✓"
    assert instrument.content_hashes(spec) == {"probe_set": "ab" * 32, "envelopes": "cd" * 32}
    assert instrument.n_items(spec) == 7 * 2 * 2


def test_a_field_of_the_record_cannot_be_written():
    spec = resolve("forced_choice").from_frozen(json.loads(json.dumps(FROZEN)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.n_pairs = 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.envelope_file.version = "other"
    with pytest.raises(TypeError):
        spec.envelopes["plain"] = spec.envelopes["json"]


def test_a_validated_section_reads_back_through_its_frozen_json(tmp_path):
    (tmp_path / "pairs.csv").write_text("pair_id,word_a,word_b\np1,tea,coffee\np2,cat,dog\np3,sea,sky\n")
    instrument = resolve("forced_choice")
    spec = instrument.load_spec({"probe_set": "pairs.csv", "orderings": ["AB"], "envelopes": "all"},
                                SpecContext(str(tmp_path / "config.json"), "forced_choice", str(tmp_path)))
    envelope_set = load_envelopes(PACKAGED)
    assert spec.n_pairs == 3 and spec.envelope_file.version == envelope_set.version
    assert spec.envelope_file.sha256 == envelope_set.sha256 and spec.envelope_ids == tuple(envelope_set.envelopes)
    stored = json.dumps(instrument.frozen(spec), sort_keys=True, ensure_ascii=False)
    assert stored == spec.frozen_json and instrument.from_frozen(json.loads(stored)).n_pairs == 3


def test_a_section_that_does_not_record_its_pair_count_counts_the_pair_csv(tmp_path):
    """n_items of a section frozen without ``n_items``: the pairs read from the pair CSV (its hash checked) ×
    envelopes × orderings, as for a section that records them; its envelope version may be absent too."""
    (tmp_path / "pairs.csv").write_text("pair_id,word_a,word_b\np1,tea,coffee\np2,cat,dog\np3,sea,sky\n")
    instrument = resolve("forced_choice")
    spec = instrument.load_spec({"probe_set": "pairs.csv", "orderings": ["AB", "BA"], "envelopes": "all"},
                                SpecContext(str(tmp_path / "config.json"), "forced_choice", str(tmp_path)))
    frozen = instrument.frozen(spec)
    older = {**{k: v for k, v in frozen.items() if k != "n_items"},
             "envelope_set": {k: v for k, v in frozen["envelope_set"].items() if k != "version"}}
    again = instrument.from_frozen(older)
    assert again.n_pairs is None and instrument.n_items(again) == instrument.n_items(spec) == 3 * len(spec.envelope_ids) * 2
    assert instrument.envelope_version(again) is None
