"""The base of instrument specs (``grid.frozen_spec``): a spec's identity is its frozen section's canonical JSON,
stable across a round trip; its typed fields are read by declaration; an input file changed since the run was
frozen is refused; and ``Instrument[SpecType]`` takes ``frozen``/``from_frozen`` from such a spec."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.frozen_spec import (FrozenInput, FrozenSpec, canonical_json, frozen_field, identity_only,
                                         read_record)
from mirrorscan.grid.instrument import REGISTRY, Instrument, SpecContext, resolve


@dataclass(frozen=True)
class Part:
    """A nested record, read by its field names."""

    name: str
    size: int | None = None


@dataclass(frozen=True, kw_only=True)
class ToySpec(FrozenSpec):
    """A spec of two keys, one renamed, one nested, one derived."""

    words: tuple[str, ...] = frozen_field("items", read=tuple)
    part: Part = frozen_field(read=lambda entry: read_record(Part, entry))
    count: int = frozen_field(read=int, default=3)
    total: int = frozen_field(derived=True)

    @classmethod
    def derived_fields(cls, frozen):
        return {"total": len(frozen["items"])}


FROZEN = {"part": {"name": "ü", "size": 2}, "items": ["b", "a"]}


def test_the_identity_is_the_canonical_frozen_json_and_stays_the_same_across_a_round_trip():
    spec = ToySpec.from_frozen(FROZEN)
    assert spec.frozen_json == canonical_json(FROZEN) == json.dumps(FROZEN, sort_keys=True, ensure_ascii=False)
    assert spec.words == ("b", "a") and spec.part == Part("ü", 2) and spec.count == 3 and spec.total == 2
    again = ToySpec.from_frozen(json.loads(spec.frozen_json))          # as a resume reads it from the catalog
    assert again == spec and hash(again) == hash(spec) and again.frozen_json == spec.frozen_json
    assert ToySpec.from_frozen(dict(reversed(list(FROZEN.items())))) == spec   # key order is not identity
    assert ToySpec.from_frozen({**FROZEN, "count": 4}) != spec
    assert spec.frozen == FROZEN and spec.frozen is not spec.frozen   # a fresh copy each time


def test_a_missing_key_without_a_default_is_an_error_and_a_null_is_not_converted():
    with pytest.raises(KeyError, match="part"):
        ToySpec.from_frozen({"items": []})
    assert read_record(Part, {"name": "x", "size": None}).size is None
    assert read_record(Part, {"name": "x", "extra": 1}) == Part("x")


def test_only_the_frozen_json_takes_part_in_a_registered_specs_equality():
    assert identity_only(ToySpec) == []
    for name in sorted(REGISTRY):
        instrument = resolve(name)
        assert issubclass(instrument.spec_type, FrozenSpec), name
        assert identity_only(instrument.spec_type) == [], name
        assert type(instrument).frozen is Instrument.frozen and type(instrument).from_frozen is Instrument.from_frozen


def test_an_input_changed_since_frozen_is_refused_with_the_fix():
    FrozenInput("corpus", "/data/c.json", "ab" * 32).check("ab" * 32)   # unchanged: nothing to say
    with pytest.raises(ConfigError, match="changed since the invocation was frozen") as info:
        FrozenInput("corpus", "/data/c.json", "ab" * 32).check("cd" * 32)
    assert info.value.file == "/data/c.json" and info.value.field == "corpus"
    assert "restore the file" in info.value.fix and "abababababab" in info.value.problem


def test_a_forced_choice_spec_whose_pair_file_changed_since_frozen_is_refused(tmp_path):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("pair_id,word_a,word_b\np1,tea,coffee\n", encoding="utf-8")
    instrument = resolve("forced_choice")
    spec = instrument.load_spec({"probe_set": "pairs.csv"}, SpecContext("config.json", "forced_choice", str(tmp_path)))
    assert len(spec.pairs()) == 1
    rebuilt = instrument.from_frozen(json.loads(spec.frozen_json))
    assert rebuilt == spec
    pairs.write_text("pair_id,word_a,word_b\np1,tea,milk\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="changed since the invocation was frozen") as info:
        rebuilt.pairs()
    assert info.value.field == "probe_set"


def test_a_flinch_spec_whose_corpus_changed_since_frozen_is_refused(tmp_path):
    corpus = {"version": "t", "axes": {"x": {"label": "X", "terms": [
        {"word": "tea", "carriers": ["I drink {BLANK} daily."]}]}}}
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(corpus), encoding="utf-8")
    spec = resolve("flinch").load_spec({"corpus": "corpus.json"}, SpecContext("config.json", "flinch", str(tmp_path)))
    assert spec.corpus().axis_keys == ("x",)
    corpus["axes"]["x"]["terms"][0]["word"] = "coffee"
    path.write_text(json.dumps(corpus), encoding="utf-8")
    with pytest.raises(ConfigError, match="changed since the invocation was frozen") as info:
        spec.corpus()
    assert info.value.field == "corpus"


def test_a_section_key_that_is_no_field_of_its_record_is_refused_with_the_closest_one():
    with pytest.raises(ConfigError, match="aggregaton") as info:
        resolve("flinch").load_spec({"aggregaton": "x"}, SpecContext("config.json", "flinch", "."))
    assert info.value.field == "flinch.aggregaton" and "aggregation" in info.value.fix


class Echoing(Instrument[ToySpec]):
    """An instrument whose spec type is a FrozenSpec: it writes neither frozen nor from_frozen."""

    name = "echoing"
    engine_kind = "generate"

    def load_spec(self, section, ctx):
        return ToySpec.from_frozen(section)

    def n_items(self, spec):
        return len(spec.words)

    def cells(self, spec, labels, samples):
        raise NotImplementedError

    def render(self, block, spec):
        return block

    def analyze(self, traces, settings, *, reannotate=False):
        raise NotImplementedError


class Untyped(Echoing):
    """The same members on a base without a spec type: frozen and from_frozen are its own to write."""

    spec_type = None


def test_an_instrument_generic_over_a_frozen_spec_gets_frozen_and_from_frozen_from_it():
    instrument = Echoing()
    assert instrument.spec_type is ToySpec and instrument.unimplemented() == []
    spec = instrument.load_spec(FROZEN, SpecContext("config.json", "echoing", "."))
    assert instrument.frozen(spec) == FROZEN and instrument.from_frozen(instrument.frozen(spec)) == spec
    assert Untyped().unimplemented() == ["frozen", "from_frozen"]
