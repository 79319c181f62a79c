"""The browser's pages as HTML text: plain links and GET forms, no script, no inline style.

Every value that comes from a trace, the catalog or a file name goes through ``e`` (``html.escape`` with
quotes) before it is placed in the page, in text and in attributes alike; URLs are built with
``urllib.parse`` and escaped as attributes. Model output is shown verbatim inside ``<pre>``, so what a model
wrote is what a reader sees, and markup in it is only text. Styling is the app's own ``/static/browse.css``.
"""

from __future__ import annotations

import html
import json
from urllib.parse import quote, urlencode

from mirrorscan.grid.formatting import duration, fixed, percent
from mirrorscan.results.browse.timing import METRICS, chart

TITLE = "mirrorscan browse"


def e(value) -> str:
    """``value`` as HTML text, escaped (``&``, ``<``, ``>``, ``"``, ``'``); None as an em dash."""
    return "—" if value is None else html.escape(str(value), quote=True)


def url(path: str, **params) -> str:
    """``path`` with the non-empty ``params`` as its query string (escaped for an attribute)."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return e(path + ("?" + urlencode(kept) if kept else ""))


def inv_path(invocation_id: str, rest: str = "") -> str:
    """The path of an invocation's page (``rest``: ``matrix``, ``cell``, ``trace``, ``timing``, ``files/…``)."""
    return f"/invocations/{quote(invocation_id, safe='')}" + (f"/{rest}" if rest else "")


def page(title: str, body: str, crumbs: list[tuple[str, str]] = ()) -> str:
    """A whole page: head (the stylesheet), the navigation trail, the title and ``body``."""
    trail = " / ".join([f'<a href="/">experiments</a>', *[f'<a href="{href}">{e(text)}</a>' if href else e(text)
                                                          for text, href in crumbs]])
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{e(title)} · {TITLE}</title><link rel=\"stylesheet\" href=\"/static/browse.css\"></head>"
            f"<body><nav>{trail} · <a href=\"/timing\">timing</a> · <a href=\"/compare\">compare</a></nav>"
            f"<h1>{e(title)}</h1>{body}<footer>{TITLE} · read-only</footer></body></html>")


def table(headers: list[str], rows: list[list[str]], css: str = "") -> str:
    """A table; ``rows`` hold HTML already escaped by the caller."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    thead = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    return f'<table class="{e(css)}">{thead}<tbody>{body}</tbody></table>'


def when(value) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS`` (UTC), escaped."""
    return e(value.strftime("%Y-%m-%d %H:%M:%S") if hasattr(value, "strftime") else value)


def error_page(status: int, message: str) -> str:
    """The page of a refused or failed request."""
    return page(f"{status}", f'<p class="error">{e(message)}</p>')


# ---- experiments and invocations -------------------------------------------------------------------------

def experiments(rows: list[dict]) -> str:
    """Every experiment in the catalog with its instrument, invocations and newest start."""
    body = table(["experiment", "instrument", "invocations", "newest start (UTC)", "newest invocation"], [
        [f'<a href="/experiments/{e(quote(r["experiment"], safe=""))}">{e(r["experiment"])}</a>', e(r["instrument"]),
         e(r["invocations"]), when(r["newest"]),
         f'<a href="{inv_path(r["newest_id"])}">{e(r["newest_id"][:8])}</a>'] for r in rows])
    return page("experiments", body if rows else "<p>The catalog holds no invocation yet.</p>")


def invocations(experiment: str, rows: list[dict]) -> str:
    """An experiment's invocations, newest first."""
    body = table(["invocation", "status", "started (UTC)", "finished (UTC)", "counts", "git", "host"], [
        [f'<a href="{inv_path(r["invocation_id"])}">{e(r["invocation_id"])}</a>', e(r["status"]), when(r["started_at"]),
         when(r["finished_at"]), e(json.dumps(r["counts"], sort_keys=True) if r["counts"] else None),
         e(f'{(r["git_sha"] or "")[:10]}{" (dirty)" if r["git_dirty"] else ""}'), e(r["host"])] for r in rows])
    return page(experiment, body, [(experiment, "")])


def invocation(inv, labels: list[str], files: list[tuple[str, int]], n_rows: int, served=None) -> str:
    """One invocation: what it ran, links to its matrix and timing, its reports and analyses (a file whose
    extension is not in ``served`` is listed without a link; None: every file is linked)."""
    row = inv.row
    iid = row["invocation_id"]
    facts = table(["", ""], [[e(k), v] for k, v in (
        ("experiment", e(row["experiment"])), ("instrument", e(row["instrument"])), ("status", e(row["status"])),
        ("started (UTC)", when(row["started_at"])), ("finished (UTC)", when(row["finished_at"])),
        ("counts", e(json.dumps(row["counts"], sort_keys=True) if row["counts"] else None)),
        ("store", e(row["store_uri"])), ("git", e(f'{row["git_sha"]}{" (dirty)" if row["git_dirty"] else ""}')),
        ("host / user", e(f'{row["host"]} / {row["username"]}')), ("trace rows", e(f"{n_rows:,}")),
        ("models", e(", ".join(labels))))], "facts")
    links = (f'<p class="links"><a href="{inv_path(iid, "matrix")}">matrix</a> · '
             f'<a href="{inv_path(iid, "timing")}">timing</a> · '
             f'<a href="{url("/compare", a=iid, b=iid)}">compare two models</a></p>')
    reports = table(["report or analysis file", "bytes"], [
        [f'<a href="{e(inv_path(iid, "files/" + quote(rel)))}">{e(rel)}</a>'
         if served is None or "." + rel.rsplit(".", 1)[-1].lower() in served else e(rel), e(f"{size:,}")]
         for rel, size in files]) \
        if files else "<p>No report or analysis yet (mirrorscan analyze writes one).</p>"
    settings = json.dumps(row["settings"], indent=2, sort_keys=True, default=str)
    return page(f"invocation {iid[:8]}", f"{links}{facts}<h2>Reports</h2>{reports}"
                f"<h2>Frozen settings</h2><details><summary>settings</summary><pre>{e(settings)}</pre></details>",
                [(row["experiment"], f'/experiments/{e(quote(row["experiment"], safe=""))}'), (iid[:8], "")])


# ---- the matrix ------------------------------------------------------------------------------------------

def filter_form(action: str, facets: dict, filters: dict, kind: str) -> str:
    """The GET form of the matrix filters (a select per facet, the current choice selected)."""
    def select(name: str, label: str, values: list) -> str:
        options = "".join(f'<option value="{e(v)}"{" selected" if filters.get(name) == v else ""}>{e(v)}</option>'
                          for v in values)
        return (f'<label>{e(label)} <select name="{name}" id="f-{name}"><option value="">all</option>{options}'
                f'</select></label>')

    parts = [select("envelope", "envelope", facets["envelope"]), select("ordering", "ordering", facets["ordering"]),
             select("label", "model", facets["label"])]
    if kind == "class":
        parts.append(select("answer", "class", facets["answer"]))
    parts.append(select("status", "status", ["ok", "failed"]))
    return (f'<form method="get" action="{e(action)}" class="filters">{"".join(parts)} '
            f'<button type="submit" id="apply">apply</button> <a href="{e(action)}">clear</a></form>')


def _cell_html(cell: dict | None, kind: str) -> tuple[str, str]:
    """(text, css class) of one matrix cell."""
    if cell is None:
        return "", "empty"
    failed = f' <span class="failed">✗{cell["failed"]}</span>' if cell["failed"] else ""
    if kind == "class" and cell["answers"]:
        ranked = sorted(cell["answers"].items(), key=lambda kv: (-kv[1], kv[0]))
        top = ranked[0][0]
        text = " ".join(f"{e(k)}{'×' + str(n) if n > 1 else ''}" for k, n in ranked[:3])
        css = "v-" + "".join(ch if ch.isalnum() else "_" for ch in top)
        return text + failed, css
    if kind == "score" and cell["scored"]:
        return f'{fixed(cell["score"])} <span class="n">n={cell["scored"]}</span>{failed}', "score"
    return (f'<span class="n">{cell["ok"]} ok</span>' if cell["ok"] else "") + failed, "failed" if not cell["ok"] else "ok"


def matrix(inv, data: dict, facets: dict, filters: dict) -> str:
    """The model × item matrix of one invocation: a filter form, the page of columns, a link per cell."""
    iid = inv.row["invocation_id"]
    rname, cname = inv.coordinates
    kind = inv.value.kind
    head = "".join(f'<th class="col"><span>{e(c)}</span></th>' for c in data["cols"])
    body = []
    for r in data["rows"]:
        cells = []
        for c in data["cols"]:
            text, css = _cell_html(data["cells"].get((r, c)), kind)
            link = url(inv_path(iid, "cell"), r=r, c=c, **filters) if text else ""
            cells.append(f'<td class="{e(css)}">' + (f'<a href="{link}">{text}</a>' if text else "") + "</td>")
        body.append(f'<tr><th class="row">{e(r)}</th>{"".join(cells)}</tr>')
    off, lim, total = data["offset"], data["limit"], data["total_cols"]
    nav = [f'{e(cname)} {off + 1 if total else 0}–{min(off + lim, total)} of {total:,}']
    if off > 0:
        nav.append(f'<a href="{url(inv_path(iid, "matrix"), offset=max(0, off - lim), **filters)}" id="prev">previous</a>')
    if off + lim < total:
        nav.append(f'<a href="{url(inv_path(iid, "matrix"), offset=off + lim, **filters)}" id="next">next</a>')
    what = {"class": f"count of successful rows per {e(inv.value.column)} (most first)",
            "score": f"mean {e(inv.value.column)} over successful rows",
            "none": "successful rows"}[kind]
    defined = f' ({e(inv.value.doc)})' if inv.value.doc else ""
    legend = (f'<p class="legend">rows: {e(rname)} · columns: {e(cname)} · a cell: {what}{defined}; ✗n: failed '
              f'attempts</p>')
    grid = (f'<table class="matrix" id="matrix"><thead><tr><th>{e(rname)} \\ {e(cname)}</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>') if data["rows"] else '<p id="matrix">No row matches.</p>'
    return page(f"matrix · {inv.row['experiment']}", filter_form(inv_path(iid, "matrix"), facets, filters, kind)
                + legend + f'<p class="pager">{" · ".join(nav)}</p>' + grid,
                [(inv.row["experiment"], f'/experiments/{e(quote(inv.row["experiment"], safe=""))}'),
                 (iid[:8], inv_path(iid)), ("matrix", "")])


def cell(inv, mrow: str, mcol: str, rows: list[dict], described: str | None, filters: dict) -> str:
    """The traces of one matrix cell, each a link to its trace page."""
    iid = inv.row["invocation_id"]
    kind = inv.value.kind
    body = table(["envelope", "ordering", "sample", "attempt", inv.value.column or "answer", "ttft ms", "total ms",
                  "trace"], [
        [e(r["envelope"]), e(r["ordering"]), e(r["sample"]), e(r["attempt"]),
         '<span class="failed">failed</span>' if r["failed"] else
         e(r["answer_class"] if kind == "class" else (None if r["score"] is None else fixed(r["score"]))),
         e(None if r["ttft_ms"] is None else f'{r["ttft_ms"]:.1f}'),
         e(None if r["total_ms"] is None else f'{r["total_ms"]:.1f}'),
         f'<a class="trace-link" href="{url(inv_path(iid, "trace"), probe_id=r["probe_id"], sample=r["sample"], attempt=r["attempt"])}">'
         f'{e(r["probe_id"])}</a>'] for r in rows], "cell")
    title = f"{mrow} × {mcol}"
    return page(title, (f'<p class="described">{e(described)}</p>' if described else "") +
                f'<p>{len(rows)} trace row{"s" if len(rows) != 1 else ""}</p>{body}',
                [(inv.row["experiment"], f'/experiments/{e(quote(inv.row["experiment"], safe=""))}'),
                 (iid[:8], inv_path(iid)), ("matrix", url(inv_path(iid, "matrix"), **filters)), (title, "")])


VERBATIM = ("system_text", "user_text", "reasoning", "response")
"""Trace columns shown in full, as text blocks, in this order."""
TIMING = ("ttft_ms", "ttft_answer_ms", "total_ms", "prefill_ms", "decode_tok_s", "n_chunks", "timing_scope",
          "batch_size", "prompt_tokens", "completion_tokens", "finish_reason", "started_at", "created_at")
"""Trace columns shown as its timing table."""


def trace(inv, record: dict, described: str | None) -> str:
    """One trace row: what was asked, the verbatim prompts and answer, its class or score, timing, the rest."""
    iid = inv.row["invocation_id"]
    value = inv.value
    answer = (f'<p class="answer">{e(value.column)}: <strong id="answer-value">{e(record.get(value.column))}'
              f'</strong></p>') if value.column else ""
    blocks = "".join(f'<h2>{e(name)}</h2><pre class="verbatim" id="{name}">{e(record.get(name))}</pre>'
                     for name in VERBATIM if name in record and (name != "reasoning" or record.get(name)))
    error = f'<p class="error" id="trace-error">error: {e(record["error"])}</p>' if record.get("error") else ""
    intervals = record.get("intervals_ms")
    timing_rows = [[e(k), e(record.get(k))] for k in TIMING if k in record]
    if intervals:
        timing_rows.append([e("intervals_ms"), e(f"{len(intervals)} gaps, median {sorted(intervals)[len(intervals) // 2]:.1f}"
                                                 f" ms, max {max(intervals):.1f} ms")])
    shown = set(VERBATIM) | set(TIMING) | {"intervals_ms", "error", "_part"}
    rest = [[e(k), e(v)] for k, v in record.items() if k not in shown]
    return page(f"trace {record.get('probe_id')}", (f'<p class="described">{e(described)}</p>' if described else "")
                + answer + error + blocks + "<h2>timing</h2>" + table(["", ""], timing_rows, "facts")
                + "<h2>every other column</h2>" + table(["column", "value"], rest, "facts")
                + f'<p class="legend">stored in part {e(record.get("_part"))}</p>',
                [(inv.row["experiment"], f'/experiments/{e(quote(inv.row["experiment"], safe=""))}'),
                 (iid[:8], inv_path(iid)), ("matrix", inv_path(iid, "matrix")), ("trace", "")])


# ---- comparison and timing -------------------------------------------------------------------------------

def diff_form(a: str, label_a: str, b: str, label_b: str, labels_a: list[str], labels_b: list[str]) -> str:
    """The GET form choosing two (invocation, model) sides."""
    def select(name: str, values: list[str], chosen: str) -> str:
        return (f'<select name="{name}" id="f-{name}">' + "".join(
            f'<option value="{e(v)}"{" selected" if v == chosen else ""}>{e(v)}</option>' for v in values) + "</select>")

    return ('<form method="get" action="/compare" class="filters">'
            f'<label>A invocation <input name="a" id="f-a" value="{e(a)}" size="38"></label> '
            f'<label>model {select("label_a", labels_a, label_a)}</label> '
            f'<label>B invocation <input name="b" id="f-b" value="{e(b)}" size="38"></label> '
            f'<label>model {select("label_b", labels_b, label_b)}</label> '
            '<button type="submit" id="compare">compare</button></form>')


def diff_page(form: str, sides: tuple | None, result: dict | None, kind: str, instrument_text: str | None) -> str:
    """Two models' fingerprints side by side: matched cells, agreement, confusion, the items that differ most."""
    if result is None:
        return page("compare two models", form + "<p>Choose two invocations (the same one twice compares two of its "
                    "models) and a model of each.</p>")
    s = result["summary"]
    (ia, la), (ib, lb) = sides
    matched = s["matched"]
    if kind == "class":
        agree = f'{percent(s["same"] / matched)} ({s["same"]:,} of {matched:,} matched cells)' if matched else "undefined (no matched cell)"
        numbers = [["matched cells", e(f"{matched:,}")], ["only in A / only in B", e(f'{s["only_a"]:,} / {s["only_b"]:,}')],
                   ["same class", e(agree)]]
        classes = sorted({r["ca"] for r in result["confusion"]} | {r["cb"] for r in result["confusion"]}, key=str)
        counts = {(r["ca"], r["cb"]): r["n"] for r in result["confusion"]}
        confusion = "<h2>classes: A (rows) × B (columns)</h2>" + table(
            ["A \\ B", *classes],   # a cell without a class (None) reads — here as in the rows
            [[e(ca), *[e(counts.get((ca, cb), 0)) for cb in classes]] for ca in classes], "confusion")
        items = table(["item", "matched", "same class"], [
            [e(r["item"]), e(r["n"]), e(percent(r["same"] / r["n"]))] for r in result["items"]], "items")
    else:
        numbers = [["matched cells", e(f"{matched:,}")], ["only in A / only in B", e(f'{s["only_a"]:,} / {s["only_b"]:,}')],
                   ["mean |A − B|", e(None if s["mean_abs_diff"] is None else fixed(s["mean_abs_diff"]))],
                   ["Pearson r", e(None if s["corr"] is None else f'{s["corr"]:.3f}')]]
        confusion = ""
        items = table(["item", "matched", "mean |A − B|"], [
            [e(r["item"]), e(r["n"]), e(None if r["mean_abs_diff"] is None else fixed(r["mean_abs_diff"]))]
            for r in result["items"]], "items")
    own = f'<h2>the instrument\'s comparison</h2><pre id="instrument-compare">{e(instrument_text)}</pre>' \
        if instrument_text else ""
    body = (form + f'<p class="sides" id="sides">A: <a href="{inv_path(ia)}">{e(ia[:8])}</a> {e(la)} · '
            f'B: <a href="{inv_path(ib)}">{e(ib[:8])}</a> {e(lb)}</p>'
            + table(["", ""], numbers, "facts") + own + confusion
            + "<h2>items, least agreement first</h2>" + items
            + '<p class="legend">Cells are matched on item, envelope, ordering and sample; each side\'s last '
              'successful attempt counts; failed rows are left out.</p>')
    return page("compare two models", body)


def timing(title: str, endpoints: list, crumbs: list[tuple[str, str]]) -> str:
    """Per endpoint: overall quantiles and, per metric, its p10–p90 band and median over time."""
    if not endpoints:
        return page(title, "<p>The inference log holds no request for this view.</p>", crumbs)
    out = []
    for ep in endpoints:
        rows = [[e(name), e(unit), *[e(None if ep.overall[m] is None else fixed(v)) for v in (ep.overall[m] or (None,) * 3)]]
                for m, name, unit in METRICS]
        charts = "".join(f'<figure><figcaption>{e(name)} ({e(unit)}) per {duration(ep.slice_s)} slice: p10–p90 band, '
                         f'p50 line</figcaption>{chart(ep, m, unit)}</figure>'
                         for m, name, unit in METRICS if any(s.q.get(m) for s in ep.slices))
        out.append(f'<section class="endpoint"><h2>{e(ep.endpoint)}</h2><p>{ep.n:,} requests</p>'
                   + table(["metric", "unit", "p10", "p50", "p90"], rows, "facts") + charts + "</section>")
    return page(title, "".join(out), crumbs)
