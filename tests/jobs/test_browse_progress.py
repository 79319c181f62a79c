"""``browse --prebuild``'s indexing progress: bars on a terminal, one line per indexed invocation elsewhere."""

from __future__ import annotations

from mirrorscan.jobs.browse import _progress


def test_indexing_in_a_pipe_prints_one_line_per_invocation_and_no_bar(capsys, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    report = _progress()   # pytest's captured stderr is no terminal
    for done in range(4):
        report("0123456789abcdef", done, 3)
    report("fedcba9876543210", 1, 1)
    assert capsys.readouterr().err == "indexed 01234567 (3 parts)\nindexed fedcba98 (1 part)\n"


def test_indexing_with_ci_set_draws_no_bar_even_where_a_bar_could_be_drawn(capsys, monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    report = _progress()
    report("0123456789abcdef", 2, 2)
    err = capsys.readouterr().err
    assert err == "indexed 01234567 (2 parts)\n", err
