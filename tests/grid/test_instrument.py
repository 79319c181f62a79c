"""The instrument protocol's registry and resolution. The layering rule (the engine never imports an
instrument; the registry names them as strings) is tests/test_layers.py's."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.instrument import ENGINE_KINDS, REGISTRY, Instrument, InstrumentRef, SpecContext, resolve
from mirrorscan.grid.matrix import cell_value
from mirrorscan.grid.trace_schema import TRACE_COLUMNS, trace_schema


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registry_entry_loads_and_keeps_the_protocol(name):
    instrument = resolve(name)
    assert isinstance(instrument, Instrument) and instrument.name == name
    assert instrument.engine_kind in ENGINE_KINDS
    schema = trace_schema(instrument.columns)     # documented, and no core column redefined
    assert schema.names[:len(TRACE_COLUMNS)] == TRACE_COLUMNS
    assert set(instrument.coordinates) <= {f.name for f in instrument.columns}


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_instrument_gives_the_browser_a_cell_value_it_can_read(name):
    """A stored column of its rows, or a value derived from columns they have (never from a column they lack)."""
    instrument = resolve(name)
    value = cell_value(instrument)
    columns = set(trace_schema(instrument.columns).names)
    assert value.kind in ("class", "score")
    if value.derive is None:
        assert value.column in columns and not value.reads
    else:   # derived: named apart from the stored columns, defined for the legend
        assert set(value.reads) <= columns and value.column not in columns and value.doc


def test_a_cell_value_of_another_kind_or_derived_from_nothing_is_refused():
    from mirrorscan.grid.matrix import CellValue

    class Named:
        name = "x"

    for bad, problem in ((("class", "ranked"), "not 'class' or 'score'"),
                         (CellValue("n", "score", derive=lambda rows: rows.column(0)), "must name the columns")):
        thing = Named()
        thing.cell_value = bad
        with pytest.raises(ValueError, match=problem):
            cell_value(thing)


@pytest.mark.parametrize("name, problem", [
    ("telepathy", "unknown instrument"),
    ("no_such_module_xyz:THING", "cannot import"),
    ("mirrorscan.grid.ids:NOTHING", "has no attribute"),
    ("mirrorscan.grid.ids:SEP", "lacks"),
])
def test_an_instrument_that_cannot_be_resolved_is_a_config_error(name, problem):
    with pytest.raises(ConfigError, match=problem) as info:
        resolve(name)
    assert info.value.field == "instrument"


def test_an_import_path_written_before_the_package_moved_resolves_to_the_same_instrument():
    """Configs and frozen settings written when the parts were top-level packages name instruments as
    ``instruments.…:INSTRUMENT``: that path is read under ``mirrorscan.``, and only for the package's parts."""
    assert resolve("instruments.flinch.instrument:INSTRUMENT") is resolve("flinch")
    with pytest.raises(ConfigError, match="cannot import"):
        resolve("numpyx.instruments:INSTRUMENT")


def test_an_instrument_column_must_be_documented_and_new():
    with pytest.raises(ValueError, match="no doc"):
        trace_schema([pa.field("x", pa.string())])
    with pytest.raises(ValueError, match="core trace column"):
        trace_schema([pa.field("response", pa.string(), metadata={"doc": "again"})])


def test_an_instrument_ref_resolves_its_spec_once_per_process():
    ref = InstrumentRef("forced_choice", {"probe_set": "-", "probe_set_sha256": "-", "n_items": 0,
                                          "envelopes_file": "packaged", "envelopes": ["e"], "orderings": ["AB"],
                                          "envelope_set": {"file": "packaged", "version": "v", "sha256": "-",
                                                           "texts": {"e": {"system": "", "user": "{a} {b}"}}}})
    assert ref.spec is ref.spec and ref.instrument is resolve("forced_choice")


def test_a_named_object_that_is_not_an_instrument_instance_is_refused_with_the_fix():
    """The class in place of an instance, and an instance that leaves ``render`` to the bases: a ConfigError
    each, saying what to write."""
    with pytest.raises(ConfigError, match="names the class Echo") as info:
        resolve("broken_instruments:ECHO_CLASS")
    assert "ECHO_CLASS = Echo()" in info.value.fix
    with pytest.raises(ConfigError, match="lacks render of the Instrument parts"):
        resolve("broken_instruments:UNRENDERED")
    with pytest.raises(ConfigError, match="lacks the Instrument base class") as info:
        resolve("mirrorscan.grid.ids:cell_seed")
    assert "mirrorscan.grid.instrument.Instrument" in info.value.fix


def test_an_instrument_with_only_the_required_members_gets_every_default_from_its_parts():
    """What the engine calls on an instrument that defines nothing optional: nothing held across invocations,
    no later stage, rows unchanged in the actor, no envelope version, the default query and matrix, no
    comparison and no tools (each refused as a ConfigError, not an AttributeError)."""
    from mirrorscan.grid.instrument import DEFAULT_QUERY
    from mirrorscan.grid.matrix import CellValue

    minimal = resolve("broken_instruments:MINIMAL")
    spec = minimal.load_spec({"items": ["a", "b"]}, SpecContext("config.json", "echo", "."))
    cells = minimal.cells(spec, ["m"], 1)
    earlier = cells.append_column("probe_id", pa.array(["m|a|-|-", "m|b|-|-"]))
    assert not minimal.appends and minimal.stages == () and minimal.content_hashes(spec) == {}
    assert minimal.held_cells(spec, earlier).column_names == ["probe_id", "sample"]
    assert minimal.scanned_rows(earlier) is earlier and minimal.check_append(spec, earlier, False) == []
    assert minimal.annotate(cells, spec) is cells and minimal.envelope_version(spec) is None
    assert minimal.empty_prefix_items(spec) == ("", []) and not minimal.sampled
    assert minimal.suggested_query("x") == DEFAULT_QUERY.format(invocation="'x'")
    assert minimal.matrix_coordinates() == ("label", "item_key") and minimal.describe_cell({"probe_id": "p"}) == ""
    assert cell_value(minimal) == CellValue(None, "none") and minimal.headline_units == {}
    assert minimal.same_answer({"response": "a"}, {"response": "a"}) and not minimal.same_answer({"response": "a"}, {})
    assert minimal.headline(None) == {} and minimal.headline_sources(None, {}, "x") == ()
    assert not minimal.compares and minimal.tools == ""
    with pytest.raises(ConfigError, match="offers no comparison"):
        minimal.compare((cells, {}), (cells, {}))
    with pytest.raises(ConfigError, match="has no tools of its own"):
        minimal.cli([], "mirrorscan minimal", None)


def test_a_plugin_written_before_the_rename_keeps_its_held_cells():
    """An instrument class that still defines ``done_cells`` (the hook's name before ``held_cells``) has it
    called as ``held_cells``: its earlier cells stay held, not asked again."""
    from mirrorscan.grid.instrument import Instrument

    class Older(Instrument):
        def done_cells(self, spec, earlier):
            return earlier.select(["probe_id"])

    earlier = pa.table({"probe_id": ["p"], "sample": [0]})
    assert Older().held_cells(None, earlier).column_names == ["probe_id"]
    assert Instrument.held_cells(Older(), None, earlier).column_names == ["probe_id", "sample"]   # the default stays
