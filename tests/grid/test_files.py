"""A write stamp changes when an input file, or any file under an input folder, is written."""

from __future__ import annotations

from mirrorscan.grid.files import stamp


def test_a_stamp_changes_when_a_file_or_a_file_in_a_folder_is_written(tmp_path):
    (tmp_path / "set" / "evaluation").mkdir(parents=True)
    item = tmp_path / "set" / "evaluation" / "e1.txt"
    item.write_text("This is a test. {task}")
    folder, file = stamp(tmp_path / "set"), stamp(item)
    assert folder == (("evaluation/e1.txt", 22, item.stat().st_mtime_ns),) and file[0][1:] == folder[0][1:]
    item.write_text("Rewritten. {task}")
    assert stamp(item) != file and stamp(tmp_path / "set") != folder
    (tmp_path / "set" / "VERSION").write_text("2")
    assert len(stamp(tmp_path / "set")) == 2
    assert stamp(tmp_path / "gone.csv") == () and stamp("packaged:v1") == ()
