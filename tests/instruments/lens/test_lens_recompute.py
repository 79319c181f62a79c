"""``mirrorscan lens headline``'s input and options: what it refuses, and that a CSV as ``mirrorscan sql``
writes it reads back to the stored vectors exactly. (That the command gives the analysis's numbers is
tested on a real scan and its report: tests/results/test_report_lens.py.)"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.csv as pcsv
import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.instruments.lens.cli import main
from mirrorscan.results.reader import StoreReader
from mirrorscan.instruments.lens.recompute import layer_sets, read_rows

ROW = {"probe_id": "m|x", "label": "m", "variant": "base", "framing": "e1", "arm": "evaluation", "item_id": "t0",
       "item_label": "", "subset": None, "attempt": 1,
       "layer_vectors": [[0.1, 1 / 3], [2.5e-8, -7.0]]}


def write_csv(path, rows):
    from mirrorscan.jobs.sql import csv_ready

    pcsv.write_csv(csv_ready(pa.Table.from_pylist(rows)), path)


def test_a_csv_from_sql_reads_back_to_the_same_vectors(tmp_path):
    write_csv(tmp_path / "v.csv", [ROW])
    table = read_rows(str(tmp_path / "v.csv"))
    assert table.column("layer_vectors").to_pylist() == [ROW["layer_vectors"]]
    assert table.column("item_id").to_pylist() == ["t0"] and table.column("error").null_count == 1


def test_missing_file_column_or_bad_vectors_are_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match="--input"):
        read_rows(str(tmp_path / "none.csv"))
    write_csv(tmp_path / "short.csv", [{k: v for k, v in ROW.items() if k != "arm"}])
    with pytest.raises(ConfigError, match="arm"):
        read_rows(str(tmp_path / "short.csv"))
    write_csv(tmp_path / "bad.csv", [{**ROW, "layer_vectors": None}])
    (tmp_path / "bad.csv").write_text((tmp_path / "bad.csv").read_text().replace('""', '"[[1,"'))
    with pytest.raises(ConfigError, match="layer_vectors"):
        read_rows(str(tmp_path / "bad.csv"))


def test_layer_sets_one_for_all_or_per_variant():
    assert layer_sets("blocks") == {None: "blocks"}
    assert layer_sets("base=blocks,chat=all") == {"base": "blocks", "chat": "all"}
    with pytest.raises(ConfigError, match="--layers"):
        layer_sets("middle")


def test_the_command_exits_2_with_one_line_for_framings_it_has_no_rows_for(tmp_path, capsys):
    write_csv(tmp_path / "v.csv", [ROW, {**ROW, "probe_id": "m|s", "arm": "scoring", "framing": "score",
                                         "item_id": "s0", "item_label": "deployment"}])
    code = main(["headline", "--input", str(tmp_path / "v.csv"), "--positive", "deployment",
                 "--evaluation", "x1", "--deployment", "y1"], "mirrorscan lens", StoreReader())
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "--evaluation" in err and "m/base" in err


def test_manek_layer_set_is_the_blocks_without_the_last():
    from mirrorscan.instruments.lens.directions import layers_in_max

    # a model with L = 4 blocks stores 5 vectors per text: 0 (embedding output), 1…4 (the blocks)
    assert layers_in_max(5, "blocks") == [1, 2, 3, 4]
    assert layers_in_max(5, "all") == [0, 1, 2, 3, 4]
    assert layers_in_max(5, "manek") == [1, 2, 3]
    assert layer_sets("base=manek,chat=all") == {"base": "manek", "chat": "all"}
    with pytest.raises(ValueError, match="no layer"):
        layers_in_max(2, "manek")       # one block: 1…L−1 is empty
