"""The report page: one HTML file that needs nothing else — styles inline, charts as ``data:`` URIs, no
script, no font, no link to anything outside the file.

Everything that comes from the catalog, the settings or the traces (model labels, responses, error
messages, descriptions, paths) is HTML-escaped here, in ``esc``, and nowhere else is text put into the page.
"""

from __future__ import annotations

import base64
import html
import json
import shlex

from mirrorscan.grid.formatting import ABSENT, fixed, headline
from mirrorscan.grid.instrument import headline_units
from mirrorscan.results import interval_text
from mirrorscan.results.report import HeadlineNumber, Report

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#1b1b1b}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;width:100%}th,td{border:1px solid #ddd;padding:.3em .5em;vertical-align:top;text-align:left}
th{background:#f4f4f4}td.value{font-family:ui-monospace,monospace;white-space:nowrap}
pre{background:#f7f7f7;border:1px solid #e2e2e2;padding:.5em;overflow-x:auto;white-space:pre-wrap;word-break:break-word;font-size:12px}
.muted{color:#666}.warn{color:#8a4b00}.sub{font-size:12px}img{max-width:100%;border:1px solid #eee}
figure{margin:1em 0}figcaption{color:#555;font-size:12px}details{margin:.4em 0}
"""


def esc(value) -> str:
    """Any value as HTML text, escaped (quotes too, so it is safe inside an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


def fmt(value) -> str:
    """A number as the report shows it: floats to 6 significant digits, None as "— (not measured)"."""
    if value is None:
        return "— (not measured)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def plain(value) -> str:
    """A recorded fact (provenance, counts) as the page shows it: numbers as ``grid.formatting.fixed`` writes
    them (never ``1e-05``), booleans in lower case, None as ``—`` (nothing recorded; not a measurement)."""
    if value is None:
        return ABSENT
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return fixed(value)
    return str(value)


def shown_value(n: HeadlineNumber, units: dict | None = None) -> str:
    """A headline number as ``analyze`` prints it (``grid.formatting.headline`` with the instrument's
    ``headline_units``: a rate as 15.6%, percentage points as +3.1 pp); the exact value is the cell's
    ``data-value`` and its tooltip. A null is "not measured", or "not applicable" where the number stands in for
    another that has a value (``HeadlineNumber.applicable``)."""
    if n.value is None and not n.applicable:
        return f"— (not applicable: {n.source.in_place_of} is given)"
    return "— (not measured)" if n.value is None else headline(n.name, n.value, units)



def shell_arg(sql: str) -> str:
    """A query as one shell argument: in double quotes when nothing in it is special there, else quoted by
    ``shlex``."""
    return f'"{sql}"' if not any(c in sql for c in '"$`\\!') else shlex.quote(sql)


def sql_command(sql: str, csv_to: str | None = None) -> str:
    """The ``mirrorscan sql`` command line running ``sql`` (with ``csv_to``: its CSV written to that file)."""
    if csv_to:
        return f"mirrorscan sql --format csv {shell_arg(sql)} > {shlex.quote(csv_to)}"
    return f"mirrorscan sql {shell_arg(sql)}"


def _kv_table(mapping: dict) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(plain(v) if not isinstance(v, (dict, list)) else json.dumps(v, ensure_ascii=False))}</td></tr>"
                   for k, v in mapping.items())
    return f"<table>{rows}</table>" if rows else '<p class="muted">none recorded</p>'


def _command(kind: str, text: str, number: HeadlineNumber, shown: dict) -> str:
    """One query of a number's "how" cell: printed in full the first time the page shows it, afterwards a link
    to that first one (a query returns every model's row, so each model's table would repeat it; the stats
    commands, short, stay in every row)."""
    if text in shown:
        anchor, where = shown[text]
        return (f'<div class="sub">the query shown at '
                f'<a class="same-query" data-kind="{kind}" href="#{anchor}">{esc(where)}</a> (one row per model)</div>')
    anchor = f"q{len(shown) + 1}"
    shown[text] = (anchor, f"{number.model} · {number.name}")
    return f'<a id="{anchor}"></a><pre class="{kind}">{esc(text)}</pre>'


def _how(number: HeadlineNumber, analysis_dir: str | None, shown: dict | None = None) -> str:
    """The "how to get it again" cell of one number (``shown``: the commands already on the page, each printed
    once)."""
    s = number.source
    shown = {} if shown is None else shown
    if s is None:
        return '<span class="muted">the instrument gives no query for this number</span>'
    def fill(text: str) -> str:
        return text.replace("{analysis}", analysis_dir or "<analysis folder>")

    parts = []
    if s.sql and s.stats:
        parts.append(_command("sql", sql_command(s.sql, s.input or "input.csv"), number, shown))
    elif s.sql:
        parts.append(_command("sql", sql_command(s.sql), number, shown))
    if s.stats:
        parts.append(f'<pre class="stats">{esc(fill(s.stats))}</pre>')
    if s.note:
        parts.append(f'<div class="sub{"" if s.exact else " warn"}">{esc(fill(s.note))}</div>')
    if not s.exact and not s.note:
        parts.append('<div class="sub warn">this command does not reproduce the value exactly</div>')
    return "".join(parts)


def _headline(report: Report) -> str:
    if not report.headline:
        return '<p class="muted">the instrument reports no headline numbers</p>'
    out = []
    shown: dict = {}
    models = list(dict.fromkeys(n.model for n in report.headline))
    units = headline_units(report.instrument)
    for model in models:
        rows = []
        for n in (n for n in report.headline if n.model == model):
            definition = esc(n.source.definition) if n.source else '<span class="muted">no definition given</span>'
            exact = fmt(n.value) if n.applicable else shown_value(n, units)   # null as the query returns it, said right
            rows.append(f'<tr class="number" data-model="{esc(n.model)}" data-number="{esc(n.name)}">'
                        f'<th>{esc(n.name)}</th><td class="value" data-value="{esc(exact)}" title="as the query returns it: '
                        f'{esc(exact)}">{esc(shown_value(n, units))}</td>'
                        f'<td class="definition">{definition}</td><td class="how">{_how(n, report.analysis_dir, shown)}</td></tr>')
        out.append(f'<h3>{esc(model)}</h3><table><tr><th>number</th><th>value</th><th>definition</th>'
                   f'<th>how to get it again</th></tr>{"".join(rows)}</table>')
    return "".join(out)


def _counts(report: Report) -> str:
    head = "<tr><th>model</th><th>rows</th><th>error rows</th><th>cells</th><th>ok cells</th><th>error cells</th></tr>"
    body = "".join(f'<tr class="counts" data-model="{esc(m["label"])}"><td>{esc(m["label"])}</td>'
                   + "".join(f'<td class="value">{m[k]}</td>' for k in ("rows", "error_rows", "cells", "ok_cells",
                                                                        "error_cells")) + "</tr>"
                   for m in report.per_model)
    errors = ("".join(f"<tr><td>{n}</td><td><pre>{esc(msg)}</pre></td></tr>" for msg, n in report.errors)
              if report.errors else "")
    return (f"<h3>recorded by the scan (catalog)</h3>{_kv_table(report.catalog_counts)}"
            f"<h3>in the stored rows</h3><table>{head}{body}</table>"
            f'<pre class="sql">{esc(sql_command(report.counts_sql))}</pre>'
            "<h3>errors</h3>"
            + (f"<table><tr><th>rows</th><th>message</th></tr>{errors}</table>" if errors
               else '<p class="muted">no error rows</p>')
            + f'<pre class="sql">{esc(sql_command(report.errors_sql))}</pre>')


def _samples(report: Report) -> str:
    if not report.samples:
        return ""
    rows = "".join(f'<tr class="sample"><td>{esc(asked)}</td><td><pre>{esc(answer)}</pre></td><td>{esc(cls)}</td></tr>'
                   for asked, answer, cls in report.samples)
    return (f"<h2>stored rows (the first {len(report.samples)}, verbatim)</h2>"
            f"<table><tr><th>what was asked</th><th>what came back</th><th>class</th></tr>{rows}</table>")


def _charts(report: Report) -> str:
    if not report.charts:
        return '<p class="muted">the analysis made no charts</p>'
    return "".join(f"<figure>{_img(name, png)}<figcaption>{esc(name)}.png</figcaption></figure>"
                   for name, png in report.charts.items())


def _img(name: str, png: bytes) -> str:
    return f'<img alt="{esc(name)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _df(df) -> str:
    return ABSENT if df is None else f"{float(df):.1f}"


def _intervals(report: Report) -> str:
    """The intervals section: what an interval means and how it was made; per headline each model's estimate,
    interval and naive interval, the paired differences with p, Holm p and verdict, or why there is none; the
    warnings once each; the error-bar chart. Empty when the analysis carries no intervals."""
    result = report.intervals
    if not result:
        return ""
    level = f"{100 * float(result.get('level', 0.95)):.0f} %"
    parts = [f'<h2>intervals over the random facets ({esc(level)})</h2>',
             f'<p class="sub meaning">Each interval is for a claim about the {esc(result.get("object", "model"))} on new '
             "levels of the random facets named under each number (new prompts and items of the same kind): those "
             "facets are treated as samples of their kind, the fixed ones as the whole of theirs. The naive interval "
             "treats every cell as independent; the ratio is how much wider the interval is. A paired difference is "
             "taken over the cells both models share, so shared prompts and items cancel; its p is adjusted over every "
             f"pair of models by Holm's step-down, and the verdict reads the Holm p at {esc(fixed(1 - float(result.get('level', 0.95))))}.</p>",
             f'<p class="sub method">method: {esc(interval_text.method_text(result))}</p>']
    warnings: list[str] = []
    for name, head in result.get("headlines", {}).items():
        unit = head.get("unit", "")
        parts.append(f'<h3 class="interval-headline" data-headline="{esc(name)}">{esc(head.get("title", name))} '
                     f'<span class="muted">({esc(name)})</span></h3>')
        if "skipped" in head:
            parts.append(f'<p class="muted skipped" data-headline="{esc(name)}">no interval: {esc(head["skipped"])}</p>')
            continue
        parts.append(f'<p class="sub design">{esc(interval_text.design_text(head))}</p>')
        rows = "".join(
            f'<tr class="interval" data-headline="{esc(name)}" data-model="{esc(o["object"])}"><td>{esc(o["object"])}</td>'
            f'<td class="value">{esc(interval_text.value(o["estimate"], unit))}</td>'
            f'<td class="value">{esc(interval_text.span(o["interval"], unit))}</td>'
            f'<td class="value">{esc(interval_text.span(o.get("naive_interval") or (None, None), unit))}</td>'
            f'<td class="value">{esc(plain(o.get("width_ratio")))}</td><td class="value">{esc(_df(o.get("df")))}</td>'
            f'<td class="value">{esc(plain(o.get("n_cells")))}</td></tr>' for o in head.get("objects", ()))
        parts.append("<table><tr><th>model</th><th>estimate</th><th>interval</th><th>naive interval</th>"
                     f"<th>width ratio</th><th>df</th><th>cells</th></tr>{rows}</table>")
        diff_unit = interval_text.difference_unit(unit)
        diffs = "".join(
            f'<tr class="difference" data-headline="{esc(name)}" data-a="{esc(d["a"])}" data-b="{esc(d["b"])}">'
            f'<td>{esc(d["a"])} − {esc(d["b"])}</td><td class="value">{esc(interval_text.value(d["estimate"], diff_unit))}</td>'
            f'<td class="value">{esc(interval_text.span(d["interval"], diff_unit))}</td>'
            f'<td class="value">{esc(plain(d["p_value"]))}</td><td class="value">{esc(plain(d["p_holm"]))}</td>'
            f'<td class="verdict">{esc(d["verdict"])}</td></tr>' for d in head.get("differences", ()))
        if diffs:
            parts.append("<table><tr><th>paired difference</th><th>estimate</th><th>interval</th><th>p</th>"
                         f"<th>Holm p</th><th>verdict</th></tr>{diffs}</table>")
        warnings += [w for w in head.get("warnings", ()) if w not in warnings]
    if warnings:
        parts.append('<ul class="interval-warnings">' + "".join(f'<li class="warn">{esc(w)}</li>' for w in warnings)
                     + "</ul>")
    if report.interval_chart:
        parts.append(f'<figure>{_img("intervals", report.interval_chart)}<figcaption>intervals: each model\'s '
                     f"estimate (point), its {esc(level)} interval over the random facets (thick bar) and the naive "
                     "interval (thin bar), one panel per number</figcaption></figure>")
    return "".join(parts)


def render(report: Report) -> str:
    """The whole page (UTF-8 text)."""
    notes = "".join(f'<p class="warn">{esc(n)}</p>' for n in report.notes)
    where = (f"<p>numbers and charts as written by the analysis in <code>{esc(report.analysis_dir)}</code></p>"
             if report.analysis_dir else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mirrorscan report · {esc(report.experiment)} · {esc(report.invocation_id)}</title>
<style>{STYLE}</style></head><body>
<h1>{esc(report.experiment)} <span class="muted">· {esc(report.instrument)}</span></h1>
<p>invocation <code>{esc(report.invocation_id)}</code> · status <b>{esc(report.status)}</b>
 · report generated {esc(report.generated_at)}</p>
{f"<p>{esc(report.description)}</p>" if report.description else ""}
{notes}
<h2>headline numbers</h2>
<p class="sub">Each number beside its definition and a command that computes it again from the stored rows:
the <code>mirrorscan sql</code> query that returns it (one row per model: <code>label</code>, <code>value</code>),
or for a statistic the query that selects its input and the <code>mirrorscan stats</code> command, with its seed.
Each query is printed once, where it first appears; other rows that use it link to it.</p>
{where}
{_headline(report)}
{_intervals(report)}
<h2>counts and errors</h2>
{_counts(report)}
<h2>charts</h2>
{_charts(report)}
<h2>analysis</h2>
<pre>{esc(report.analysis_text)}</pre>
{_samples(report)}
<h2>provenance</h2>
{_kv_table(report.provenance)}
<details><summary>package versions</summary>{_kv_table(report.package_versions)}</details>
<details><summary>content hashes (probe sets, templates, corpora)</summary>{_kv_table(report.content_hashes)}</details>
<details><summary>model sources</summary><pre>{esc(json.dumps(report.model_sources, indent=2, ensure_ascii=False, default=str))}</pre></details>
<h2>settings (frozen)</h2>
<pre>{esc(json.dumps(report.settings, indent=2, ensure_ascii=False, default=str))}</pre>
</body></html>
"""
