"""Texts a user reads: ``stats --help`` speaks to users (no module internals), and an article before a name
follows its sound ("an ATTACH statement", "an open_scan invocation")."""

from __future__ import annotations

import duckdb
import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.instruments.lens.report import direction_words
from mirrorscan.jobs import stats
from mirrorscan.results.sql import check_statement


def test_stats_help_is_written_for_users(capsys):
    with pytest.raises(SystemExit):
        stats.main(["--help"])
    text = capsys.readouterr().out
    assert "--help" in text and "mirrorscan sql --format csv" in text and "exit" in text
    for internal in (":mod:", "this module", "``", "400 lines", "parsers", "dataclasses"):
        assert internal not in text, internal


@pytest.mark.parametrize("statement, words", [("ATTACH 'x.db' AS x", "an ATTACH statement"),
                                               ("UPDATE t SET a = 1", "an UPDATE statement"),
                                               ("COPY (SELECT 1) TO 'x.csv'", "a COPY statement")])
def test_a_refused_statement_is_named_with_its_article(statement, words):
    with pytest.raises(ConfigError) as caught:
        check_statement(duckdb.connect(), statement)
    assert words in str(caught.value)


def test_lens_direction_words_take_the_article_of_the_class():
    text = direction_words("evaluation", "deployment")[0]
    assert "an evaluation item" in text and "a deployment item" in text
    assert "than an item of the other class" in direction_words("evaluation", None)[0]
