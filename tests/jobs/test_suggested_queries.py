"""The scan summary's suggested ``mirrorscan sql`` query: each instrument's own, and it runs.

The flinch, lens and open_scan queries run on the invocations their scan tests store
(tests/instruments/*/test_*_scan.py call ``tests/suggested_query.py``); forced_choice's runs here on the legacy
fixture's finished invocation, through the ``mirrorscan sql`` command line.
"""

from __future__ import annotations

import io
import json
import shlex

from mirrorscan.grid.instrument import DEFAULT_QUERY, REGISTRY, Presenter, resolve
from mirrorscan.jobs import sql
from mirrorscan.cluster.scan.records import ScanResult
from mirrorscan.jobs.scan import print_summary
from suggested_query import check_suggested_query

FINISHED = "1dd40c56-1904-4178-a8ad-f8941f59374b"   # the legacy fixture's finished forced-choice invocation


def test_every_registered_instrument_suggests_its_own_query_naming_the_invocation():
    invocation = "0000-it's"
    default = DEFAULT_QUERY.format(invocation="'0000-it''s'")
    for name in REGISTRY:
        text = resolve(name).suggested_query(invocation)
        assert text != default and f"traces_{name}" in text and "'0000-it''s'" in text
        assert '"' not in text and "$" not in text   # it is printed inside double quotes for a shell
    assert Presenter().suggested_query(invocation) == default


def test_the_forced_choice_query_of_a_scan_summary_runs_through_mirrorscan_sql(legacy, capsys):
    root, dsn = legacy
    result = ScanResult(FINISHED, "legacy_fc", "complete", str(root / "store"), {}, instrument="forced_choice")
    rows = check_suggested_query(result, str(root / "store"), dsn, {"label", "pair_id", "class", "response"})
    assert {r["class"] for r in rows} <= {"A", "B", "UNCLEAR", "REF"} and len(rows) == 10

    out = io.StringIO()
    print_summary(result, out=out)
    text = out.getvalue().splitlines()[-1].removeprefix("query:  mirrorscan sql ")
    assert sql.main(["--store", str(root / "store"), "--catalog-dsn", dsn, "--format", "json",
                     shlex.split(text)[0]]) == 0
    assert [json.loads(x)["class"] for x in capsys.readouterr().out.splitlines()] == [r["class"] for r in rows]


def test_every_suggested_query_is_short_enough_to_read_on_one_line():
    """open_scan's was about 1,100 characters (a newest-row step and two joins) in the summary's one line."""
    invocation = "f7dc89db-9f85-49d7-a268-520ae430a401"
    for name in REGISTRY:
        text = " ".join(resolve(name).suggested_query(invocation).split())
        assert len(text) <= 400, (name, len(text))


def test_the_open_scan_query_sets_each_answer_beside_its_cold_and_posthoc_rating(tmp_path, catalog_dsn, capsys):
    """On an imported invocation (no grid run): two samples of one probe, a second probe, and a line of another
    text under the first id (an import keeps it as that text's own version)."""
    from mirrorscan.instruments.open_scan import cli as open_scan_cli
    from mirrorscan.results.reader import StoreReader

    lines = [("q1", 0, "Tea?", "Tea.", "7", "4"), ("q1", 1, "Tea?", "Coffee.", "7", "rating: 2"),
             ("q2", 0, "Sea?", "Yes.", "no idea", "9"), ("q1", 0, "Tea, really?", "Both.", "5", "6")]
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps({"model": "org/Tiny", "query_id": q, "sample": s, "query": text,
                                        "answer": answer, "cold": cold, "posthoc": posthoc}) + "\n"
                            for q, s, text, answer, cold, posthoc in lines))
    store = str(tmp_path / "store")
    assert open_scan_cli.main(["import", str(path), "--experiment", "imp", "--store", store, "--catalog-dsn",
                               catalog_dsn], "mirrorscan open_scan", StoreReader()) == 0
    invocation = capsys.readouterr().out.split("as invocation ")[1].split()[0]
    result = ScanResult(invocation, "imp", "complete", store, {}, instrument="open_scan")
    rows = check_suggested_query(result, store, catalog_dsn, {"label", "query_id", "sample", "cold_rating",
                                                              "posthoc_rating", "response"})
    got = sorted((r["query_id"], r["sample"], r["response"], r["cold_rating"], r["posthoc_rating"]) for r in rows)
    assert got == [("q1", 0, "Both.", 5, 6), ("q1", 0, "Tea.", 7, 4), ("q1", 1, "Coffee.", 7, 2),
                   ("q2", 0, "Yes.", None, 9)]
