"""The scan summary's suggested query, run as a user would copy it: ``check_suggested_query``."""

from __future__ import annotations

import io
import shlex

from mirrorscan.results import sql as results_sql
from mirrorscan.cluster.scan.records import ScanResult
from mirrorscan.jobs.scan import print_summary


def check_suggested_query(result: ScanResult, store: str, catalog_dsn: str, columns: set[str]) -> list[dict]:
    """Run the query that ``result``'s summary prints (parsed out of its ``query:`` line as a shell would) through
    ``mirrorscan sql``; assert it returns rows with ``columns`` among their columns, and return them."""
    out = io.StringIO()
    print_summary(result, out=out)
    line = next(x for x in out.getvalue().splitlines() if x.startswith("query:"))
    argv = shlex.split(line.removeprefix("query:"))
    assert argv[:2] == ["mirrorscan", "sql"] and len(argv) == 3, line
    rows = results_sql.query(argv[2], store, catalog_dsn).to_pylist()
    assert rows and columns <= set(rows[0]), (argv[2], rows[:1])
    return rows
