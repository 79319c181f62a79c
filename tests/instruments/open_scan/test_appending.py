"""open_scan's appending rules without Ray: which earlier rows hold cells, changed probes, a new series."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.instrument import SpecContext, resolve

PROBES = "query_id,query\nq1,Tea or coffee?\nq2,Which season?\n"


def spec_of(tmp_path, probes: str = PROBES, **section):
    (tmp_path / "probes.csv").write_bytes(probes.encode())
    return resolve("open_scan").load_spec({"probes": "probes.csv", **section},
                                          SpecContext(str(tmp_path / "config.json"), "open_scan", str(tmp_path)))


def earlier(spec, series: str | None = None) -> pa.Table:
    """Rows an earlier invocation stored for every first-stage cell of ``spec`` (as ``earlier_rows`` reads them)."""
    cells = resolve("open_scan").cells(spec, ["m"], 1)
    from mirrorscan.grid.cells import with_probe_ids

    cells = with_probe_ids(cells, instrument="open_scan")
    if series is not None:
        cells = cells.set_column(cells.schema.get_field_index("series"), "series",
                                 pa.array([series] * cells.num_rows, pa.string()))
    return cells


def test_cells_are_held_only_within_their_series(tmp_path):
    instrument = resolve("open_scan")
    spec = spec_of(tmp_path)
    same = earlier(spec)
    assert instrument.held_cells(spec, same).num_rows == same.num_rows == 2 * 2   # answer + cold per probe
    other = spec_of(tmp_path, locale="en-GB")   # the locale shapes answers: another series
    assert other.series != spec.series
    assert instrument.held_cells(other, same).num_rows == 0
    notes = instrument.check_append(other, same, accept_changed=False)
    assert len(notes) == 1 and f"a new series {other.series} starts" in notes[0]
    assert instrument.check_append(spec, same, accept_changed=False) == []


def test_a_changed_probe_text_is_refused_unless_accepted(tmp_path):
    instrument = resolve("open_scan")
    before = earlier(spec_of(tmp_path))
    changed = spec_of(tmp_path, PROBES.replace("Which season?", "Which season and why?"))
    with pytest.raises(ConfigError, match=r"1 probe\(s\) changed text under the same id since the last scan: q2"):
        instrument.check_append(changed, before, accept_changed=False)
    notes = instrument.check_append(changed, before, accept_changed=True)
    assert notes == ["open_scan: 1 changed probe(s) accepted as new versions: q2"]
    held = instrument.held_cells(changed, before)
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



def spec_in(tmp_path, name: str, probes: str = PROBES):
    """A spec of ``probes`` in its own folder (a spec refuses a probe file changed since it was made)."""
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    return spec_of(folder, probes)


def uses_of(tmp_path, *probe_sets: str) -> list:
    """The earlier scans, as the engine hands them to the instrument, that used these probe files in turn
    (invocation ``inv-<i>`` started at ``i``)."""
    return [(f"inv-{i}", i, spec_in(tmp_path, f"use{i}", probes).frozen)
            for i, probes in enumerate(probe_sets)]


EDITED = PROBES.replace("Which season?", "Which season and why?")


def test_a_revert_to_an_earlier_text_is_a_recorded_change_whose_series_continues(tmp_path):
    """Text A, then B (accepted), then A again: refused like an edit unless accepted, recorded as a revert, and
    A's earlier cells count as held again (the id's series continues under A)."""
    instrument = resolve("open_scan")
    uses = uses_of(tmp_path, PROBES, EDITED)
    reverted = spec_in(tmp_path, "now")
    rows = pa.concat_tables([earlier(reverted), earlier(spec_in(tmp_path, "b", EDITED))])
    with pytest.raises(ConfigError, match=r"1 probe\(s\) returned to an earlier text: q2") as refused:
        instrument.check_append(reverted, rows, accept_changed=False, scans=uses)
    assert "--accept-changed-probes" in refused.value.fix
    (note,) = instrument.check_append(reverted, rows, accept_changed=True, scans=uses)
    assert note.startswith("open_scan: 1 probe(s) reverted to an earlier text, accepted") and "q2 → " in note \
        and "(used inv-0…inv-0)" in note
    held = {p.split("|")[1] for p in instrument.held_cells(reverted, rows).column("probe_id").to_pylist()}
    assert {c["item_key"] for c in instrument.cells(reverted, ["m"], 1).to_pylist()} <= held   # A's answers count
    # once the revert was scanned, A is the text last used: the same probe set is no change
    assert instrument.check_append(reverted, rows, accept_changed=False, scans=uses_of(tmp_path, PROBES, EDITED, PROBES)) == []


def test_the_history_keeps_every_text_with_its_first_and_last_use(tmp_path):
    from mirrorscan.instruments.open_scan.history import describe, probe_history, uses_of_scans

    versions, sequence = probe_history(uses_of_scans(uses_of(tmp_path, PROBES, PROBES, EDITED, EDITED, PROBES)))
    a, b = (spec_in(tmp_path, name, p).frozen["probes"]["items"][1][1] for name, p in (("a", PROBES), ("b", EDITED)))
    assert sequence["q2"] == [a, b, a] and len(sequence["q1"]) == 1
    assert [(v.query_hash, v.first_invocation, v.last_invocation) for v in versions["q2"]] == \
        [(a, "inv-0", "inv-4"), (b, "inv-2", "inv-3")]
    line = describe("q2", versions["q2"], sequence["q2"])
    assert line.startswith(f"q2: {a[:8]} (0…4) → {b[:8]} (2…3) → {a[:8]} (0…4): reverted to {a[:8]}")
    assert describe("q1", versions["q1"], sequence["q1"]) is None


def test_imported_rows_never_change_a_probes_text_or_a_labels_model(tmp_path):
    instrument = resolve("open_scan")
    spec = spec_in(tmp_path, "now")
    other = earlier(spec_in(tmp_path, "file", PROBES.replace("Which season?", "Another text")),
                    series="imported:0123456789ab")
    assert instrument.scanned_rows(other).num_rows == 0
    assert instrument.check_append(spec, other, accept_changed=False) == []
