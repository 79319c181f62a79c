"""open_scan's appending rules without Ray: which earlier rows hold cells, changed probes, a new series."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from grid.errors import ConfigError
from grid.instrument import SpecContext, resolve

PROBES = "query_id,query\nq1,Tea or coffee?\nq2,Which season?\n"


def spec_of(tmp_path, probes: str = PROBES, **section):
    (tmp_path / "probes.csv").write_bytes(probes.encode())
    return resolve("open_scan").load_spec({"probes": "probes.csv", **section},
                                          SpecContext(str(tmp_path / "config.json"), "open_scan", str(tmp_path)))


def earlier(spec, series: str | None = None) -> pa.Table:
    """Rows an earlier invocation stored for every first-stage cell of ``spec`` (as ``earlier_rows`` reads them)."""
    cells = resolve("open_scan").cells(spec, ["m"], 1)
    from grid.cells import with_probe_ids

    cells = with_probe_ids(cells, instrument="open_scan")
    if series is not None:
        cells = cells.set_column(cells.schema.get_field_index("series"), "series",
                                 pa.array([series] * cells.num_rows, pa.string()))
    return cells


def test_cells_are_held_only_within_their_series(tmp_path):
    instrument = resolve("open_scan")
    spec = spec_of(tmp_path)
    same = earlier(spec)
    assert instrument.done_cells(spec, same).num_rows == same.num_rows == 2 * 2   # answer + cold per probe
    other = spec_of(tmp_path, locale="en-GB")   # the locale shapes answers: another series
    assert other.series != spec.series
    assert instrument.done_cells(other, same).num_rows == 0
    notes = instrument.check_append(other, same, accept_changed=False)
    assert len(notes) == 1 and f"a new series {other.series} starts" in notes[0]
    assert instrument.check_append(spec, same, accept_changed=False) == []


def test_a_changed_probe_text_is_refused_unless_accepted(tmp_path):
    instrument = resolve("open_scan")
    before = earlier(spec_of(tmp_path))
    changed = spec_of(tmp_path, PROBES.replace("Which season?", "Which season and why?"))
    with pytest.raises(ConfigError, match=r"1 probe\(s\) changed text under the same id since earlier invocations: q2"):
        instrument.check_append(changed, before, accept_changed=False)
    notes = instrument.check_append(changed, before, accept_changed=True)
    assert notes == ["open_scan: 1 changed probe(s) accepted as new versions: q2"]
    held = instrument.done_cells(changed, before)
    todo = {c["item_key"] for c in instrument.cells(changed, ["m"], 1).to_pylist()} - \
        {p.split("|")[1] for p in held.column("probe_id").to_pylist()}
    assert [k.split("@")[0] for k in todo] == ["q2"]   # only the new version runs


def test_sampling_and_templates_are_frozen_with_hashes(tmp_path):
    spec = spec_of(tmp_path, sampling={"temperature": 0.9})
    frozen = json.loads(json.dumps(resolve("open_scan").frozen(spec)))
    assert frozen["sampling"] == {"temperature": 0.9, "top_p": 0.95, "max_tokens": 768}
    assert set(resolve("open_scan").content_hashes(spec)) == {"probes", "template_system", "template_user",
                                                              "template_cold", "template_posthoc"}
    with pytest.raises(ConfigError, match=r"open_scan.sampling.tempreature.*did you mean temperature"):
        spec_of(tmp_path, sampling={"tempreature": 0.9})
