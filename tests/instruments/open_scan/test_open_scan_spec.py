"""open_scan's section as a typed record: built once from the frozen JSON, which it keeps byte for byte."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mirrorscan.grid.instrument import SpecContext, resolve
from mirrorscan.instruments.open_scan.spec import ImportedFile, ProbeSet, Sampling, spec_from_frozen

PROBES = "query_id,query\nq1,Tea or coffee?\nq2,Which season?\n"


def scanned(tmp_path, **section):
    (tmp_path / "probes.csv").write_bytes(PROBES.encode())
    return resolve("open_scan").load_spec({"probes": "probes.csv", **section},
                                          SpecContext(str(tmp_path / "config.json"), "open_scan", str(tmp_path)))


def test_a_scanned_section_reads_back_as_typed_fields_and_the_same_frozen_json(tmp_path):
    instrument = resolve("open_scan")
    spec = scanned(tmp_path, locale="en-GB", sampling={"max_tokens": 99}, report_max_tokens=7)
    stored = json.dumps(instrument.frozen(spec), sort_keys=True, ensure_ascii=False)
    again = instrument.from_frozen(json.loads(stored))
    assert again == spec and again.frozen_json == stored == spec.frozen_json
    assert again.locale == "en-GB" and again.report_max_tokens == 7 and again.imported is None
    assert again.sampling == Sampling(temperature=0.7, top_p=0.95, max_tokens=99)
    assert isinstance(again.probe_set, ProbeSet) and again.probe_set.n == 2
    assert [q for q, _ in again.probe_set.items] == ["q1", "q2"]
    assert again.probe_set.path == str(tmp_path / "probes.csv") and len(again.probe_set.sha256) == 64
    assert again.templates.version == instrument.envelope_version(again) and not again.is_import
    assert [p.query for p in again.probes()] == ["Tea or coffee?", "Which season?"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        again.locale = "en-AU"


def test_an_imported_section_holds_its_series_and_file_and_no_scan_settings():
    section = {"series": "imported:0123456789ab", "imported": {"file": "run.jsonl", "kept": 3,
                                                               "scales": {"cold": [1, 10], "posthoc": [0, 5]}}}
    spec = spec_from_frozen(section)
    assert spec.is_import and spec.series == "imported:0123456789ab"
    assert spec.probe_set is spec.templates is spec.sampling is spec.locale is None
    assert spec.imported == ImportedFile(file="run.jsonl", path=None, sha256=None, lines=None, kept=3, dropped=None,
                                         shape=None, importer_version=None, scales={"cold": (1, 10), "posthoc": (0, 5)},
                                         rating_disagreements=None)
    assert json.loads(spec.frozen_json) == section
    assert not spec_from_frozen({"series": "0123456789ab"}).is_import


def test_the_cells_of_an_imported_section_are_refused_with_a_message_not_a_traceback():
    """An imported file's section holds no probe set, templates or sampling: its cells cannot be counted, built
    or rendered, and asking is one ConfigError (its rows are analysed, never asked of a model)."""
    from mirrorscan.grid.errors import ConfigError

    instrument = resolve("open_scan")
    spec = spec_from_frozen({"series": "imported:0123456789ab", "imported": {"file": "run.jsonl"}})
    for ask in (lambda: instrument.n_items(spec), lambda: instrument.cells(spec, ["m"], 1),
                lambda: instrument.content_hashes(spec), lambda: spec.probes()):
        with pytest.raises(ConfigError, match="holds no probe set, templates"):
            ask()
