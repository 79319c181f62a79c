"""How a ``mirrorscan sql`` result is written out: an aligned text table, CSV or JSON lines, with repeated
column names made unique and control characters escaped (``grid.formatting.printable``).

The query side (views, the read-only rules, the time limit) is ``results/sql.py``; the command line that picks
a format and prints the notes is ``jobs/sql.py``. What each format does with timestamps, intervals, nested
values and control characters is described there, in the verb's help.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sys

import pyarrow as pa

from mirrorscan.grid.formatting import printable

TABLE_ROWS = 10_000
"""Rows the ``table`` format prints by default (``--limit``): a million-row result is for ``--format csv``, not
a terminal."""


def unique_names(names: list[str]) -> list[str]:
    """``names`` with each repeated name suffixed ``_2``, ``_3``, … (the first occurrence keeps its name;
    a suffix already used by another column is skipped)."""
    taken, out = set(names), []
    seen: set[str] = set()
    for name in names:
        new = name
        if name in seen:
            k = 2
            while f"{name}_{k}" in taken or f"{name}_{k}" in seen:
                k += 1
            new = f"{name}_{k}"
        seen.add(new)
        out.append(new)
    return out


def with_unique_names(table: pa.Table) -> tuple[pa.Table, list[tuple[str, str]]]:
    """The table with repeated column names made unique (``unique_names``) and the renames made, as
    (old, new) pairs in column order (empty when every name was unique)."""
    new = unique_names(table.column_names)
    renames = [(old, n) for old, n in zip(table.column_names, new) if old != n]
    return (table.rename_columns(new) if renames else table), renames


def format_interval(months: int, days: int, nanoseconds: int) -> str:
    """An interval as DuckDB words it (``1 year 2 months 3 days 04:05:06.5``, ``-1 day -01:30:00``, ``00:00:00``)."""
    parts = []
    years, rest = int(months / 12), months - int(months / 12) * 12   # both truncate toward zero, as DuckDB
    for n, unit in ((years, "year"), (rest, "month"), (days, "day")):
        if n:
            parts.append(f"{n} {unit}{'' if n in (1, -1) else 's'}")
    if nanoseconds or not parts:
        sign, ns = ("-" if nanoseconds < 0 else ""), abs(nanoseconds)
        seconds, frac = divmod(ns, 1_000_000_000)
        hours, seconds = divmod(seconds, 3600)
        minutes, seconds = divmod(seconds, 60)
        clock = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
        if frac:
            clock += "." + f"{frac:09d}".rstrip("0")
        parts.append(clock)
    return " ".join(parts)


def plain(value):
    """A result value as JSON-ready Python: timestamps, dates and times as ISO text, intervals and
    durations as ``format_interval`` text, lists/structs/maps recursively; other values unchanged."""
    if isinstance(value, pa.MonthDayNano):
        return format_interval(value.months, value.days, value.nanoseconds)
    if isinstance(value, dt.timedelta):
        return format_interval(0, value.days, (value.seconds * 1_000_000 + value.microseconds) * 1000)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def row_values(table: pa.Table) -> list[list]:
    """The table's rows as lists of ``plain`` values, by column position (so repeated names lose nothing)."""
    columns = [[plain(v) for v in col.to_pylist()] for col in table.columns]
    return [list(r) for r in zip(*columns)] if columns else [[] for _ in range(table.num_rows)]


def json_lines(table: pa.Table) -> list[str]:
    """One JSON object per row, keys in column order; repeated column names made unique (``unique_names``);
    control characters as JSON escapes (``printable``)."""
    names = unique_names(table.column_names)
    return [printable(json.dumps(dict(zip(names, r)), default=str, ensure_ascii=False), json_text=True)
            for r in row_values(table)]


def csv_ready(table: pa.Table) -> pa.Table:
    """The table with the columns CSV cannot hold as text: intervals/durations as ``format_interval``
    text, lists/structs/maps as JSON text; repeated names made unique."""
    table, _ = with_unique_names(table)
    for i, field in enumerate(table.schema):
        t = field.type
        if pa.types.is_interval(t) or pa.types.is_duration(t) or pa.types.is_nested(t):
            values = [None if v is None else v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)
                      for v in (plain(x) for x in table.column(i).to_pylist())]
            table = table.set_column(i, pa.field(field.name, pa.string()), pa.array(values, pa.string()))
    return table


def format_table(table: pa.Table, max_width: int = 60, total: int | None = None) -> str:
    """A plain aligned text rendering of a result (cells cut to ``max_width`` characters); ``total``: the rows
    of the whole result when ``table`` is its first rows only (the last line says so).

    NULL for null; strings, decimals, timestamps, dates, times (ISO) and intervals (``format_interval``) without
    quotes; numbers and booleans as JSON; lists and structs as JSON; control characters (a newline, an ESC)
    escaped (``printable``). Repeated column names are made unique (``unique_names``)."""
    def cell(v) -> str:
        s = ("NULL" if v is None else v if isinstance(v, str) else str(v) if isinstance(v, decimal.Decimal)
             else json.dumps(v, default=str, ensure_ascii=False))
        s = printable(s)
        return s if len(s) <= max_width else s[: max_width - 1] + "…"

    cols = [printable(c) for c in unique_names(table.column_names)]
    rows_ = [[cell(v) for v in r] for r in row_values(table)]
    widths = [max([len(c)] + [len(r[i]) for r in rows_]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows_]
    shown = f"{table.num_rows} of {total} rows" if total is not None and total != table.num_rows else \
        f"{table.num_rows} row{'s' if table.num_rows != 1 else ''}"
    lines.append(f"({shown})")
    return "\n".join(lines)


def limited(table: pa.Table, limit: int) -> pa.Table:
    """The first ``limit`` rows of ``table`` (all of them for 0)."""
    return table.slice(0, limit) if limit and table.num_rows > limit else table


def write_csv(table: pa.Table) -> None:
    """``table`` as CSV on stdout: verbatim into a pipe or file, with control characters but the line ends
    escaped (``printable``) on a terminal."""
    import io

    import pyarrow.csv as pacsv

    sys.stdout.flush()
    if not sys.stdout.isatty():
        pacsv.write_csv(table, sys.stdout.buffer)
        return
    text = io.BytesIO()
    pacsv.write_csv(table, text)
    sys.stdout.write(printable(text.getvalue().decode("utf-8"), keep="\n"))
