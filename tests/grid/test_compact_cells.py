"""A grid held compact (text columns dictionary-encoded, as the plan holds a 10^6-cell grid) has the same cells,
probe ids and key check as the plain grid the scan runs; the expected rows are built here cell by cell."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from mirrorscan.grid.cells import PROBE_ID_PARTS, _row_codes, plain, with_probe_ids
from mirrorscan.instruments.forced_choice.cells import expand_forced_choice

# two pairs share word_a and one pair repeats another's words: the pair set's dictionaries hold repeated values
PAIRS = pa.table({"pair_id": ["vw", "cd", "vg", "vw2"], "word_a": ["vodka", "cat", "vodka", "vodka"],
                  "word_b": ["whiskey", "dog", "gin", "whiskey"]})
LABELS, ENVELOPES, ORDERINGS, SAMPLES = ["m1", "m2"], ["english_strict", "json_schema", "english_casual"], ["AB", "BA"], 3


def by_hand() -> list[dict]:
    """The forced-choice grid, label-major, then pair, envelope, ordering, sample, with its probe ids."""
    pairs = PAIRS.to_pylist()
    return [{"label": label, "pair_id": p["pair_id"], "word_a": p["word_a"], "word_b": p["word_b"],
             "item_key": f"{p['word_a']}|{p['word_b']}", "envelope": envelope, "ordering": ordering, "sample": sample,
             "probe_id": f"{label}|{p['word_a']}|{p['word_b']}|{envelope}|{ordering}"}
            for label, p, envelope, ordering, sample in itertools.product(LABELS, pairs, ENVELOPES, ORDERINGS,
                                                                           range(SAMPLES))]


def test_a_compact_grid_holds_the_cells_and_probe_ids_of_the_plain_one():
    want = by_hand()
    compact = expand_forced_choice(LABELS, PAIRS, ENVELOPES, ORDERINGS, SAMPLES, compact=True)
    assert pa.types.is_dictionary(compact.schema.field("item_key").type)
    with pytest.raises(ValueError, match="36 cells share"):   # pairs vw and vw2 have the same words: 2 × 3 × 2 × 3 cells
        with_probe_ids(compact, compact=True)
    with pytest.raises(ValueError, match="36 cells share"):
        with_probe_ids(compact)
    distinct = PAIRS.slice(0, 3)
    want = [r for r in want if r["pair_id"] != "vw2"]
    compact = expand_forced_choice(LABELS, distinct, ENVELOPES, ORDERINGS, SAMPLES, compact=True)
    kept = with_probe_ids(compact, compact=True)
    scanned = with_probe_ids(compact)   # what the scan expands: plain columns
    assert pa.types.is_dictionary(kept.schema.field("probe_id").type)
    assert len(kept.column("probe_id").chunk(0).dictionary) == len(want) // SAMPLES   # each probe id held once
    assert not any(pa.types.is_dictionary(f.type) for f in scanned.schema)
    assert plain(kept).to_pylist() == scanned.to_pylist() == want
    assert expand_forced_choice(LABELS, distinct, ENVELOPES, ORDERINGS, SAMPLES).equals(plain(compact))


def test_compact_probe_ids_read_null_as_missing_and_check_keys_by_value():
    # dictionaries with repeated entries and nulls; "a|b" + "c" and "a" + "b|c" join to the same probe id
    label = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, 1], pa.int32()), pa.array(["m", "m"]))
    item = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, None], pa.int32()), pa.array(["a|b", "a", "q"]))
    envelope = pa.array(["c", "b|c", None, "e"])
    ordering = pa.DictionaryArray.from_arrays(pa.array([0, 0, 1, 0], pa.int32()), pa.array(["-", None]))
    table = pa.table({"label": label, "item_key": item, "envelope": envelope, "ordering": ordering,
                      "sample": pa.array([0, 1, 0, 0], pa.int32())})
    kept = with_probe_ids(table, compact=True)
    ids = ["m|a|b|c|-", "m|a|b|c|-", "m|q|-|-", "m|-|e|-"]
    assert kept.column("probe_id").to_pylist() == ids == with_probe_ids(table).column("probe_id").to_pylist()
    clash = table.set_column(4, "sample", pa.array([0, 0, 0, 0], pa.int32()))   # the first two now share a key
    for compact in (True, False):
        with pytest.raises(ValueError, match="1 cells share"):
            with_probe_ids(clash, compact=compact)
    # without nulls too: the separator in two parts
    split = pa.table({"label": pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array(["m"])),
                      "item_key": ["a|b", "a"], "envelope": ["c", "b|c"], "ordering": ["AB", "AB"],
                      "sample": pa.array([0, 0], pa.int32())})
    for compact in (True, False):
        with pytest.raises(ValueError, match="1 cells share"):
            with_probe_ids(split, compact=compact)
    # a null envelope reads as "-": it clashes with a "-" envelope of the same item and sample
    missing = pa.table({"label": pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array(["m"])),
                        "item_key": ["q", "q"], "envelope": ["-", None], "ordering": ["AB", "AB"],
                        "sample": pa.array([0, 0], pa.int32())})
    for compact in (True, False):
        with pytest.raises(ValueError, match="1 cells share"):
            with_probe_ids(missing, compact=compact)


def test_compact_probe_ids_of_many_distinct_parts_stay_exact():
    # four columns of 50,000 distinct values each: their codes' product passes 2^62 and is made dense again
    n = 50_000
    table = pa.table({name: pa.array([f"{name[0]}{(i * k) % n}" for i in range(n)])
                      for k, name in zip((1, 7, 11, 13), ("label", "item_key", "envelope", "ordering"))})
    table = table.append_column("sample", pa.array([0] * n, pa.int32()))
    codes = _row_codes(table, PROBE_ID_PARTS)   # one int64 per row, never past 2^62 (50,001^4 would be)
    assert codes.max() < 2 ** 62 and len(set(codes.tolist())) == n
    kept = with_probe_ids(table, compact=True)
    assert kept.column("probe_id").to_pylist() == with_probe_ids(table).column("probe_id").to_pylist()
    twice = pa.concat_tables([table, table.slice(n - 1)])
    with pytest.raises(ValueError, match="1 cells share"):
        with_probe_ids(twice, compact=True)
