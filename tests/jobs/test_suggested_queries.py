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
from mirrorscan.cluster.scan_records import ScanResult
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
