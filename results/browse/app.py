"""The browser as an ASGI application (Starlette): routes, security headers, GET only.

Every response carries ``Content-Security-Policy: default-src 'self'; script-src 'self'`` (no inline script,
no inline style, nothing from elsewhere; the pages use no script at all), ``X-Content-Type-Options: nosniff``,
``Referrer-Policy: no-referrer`` and ``X-Frame-Options: DENY``; a report file served as HTML gets the same
policy plus ``sandbox``, except that its own ``<style>`` elements (by SHA-256 hash: ``style-src``) and
``data:`` images (its charts: ``img-src``) are allowed, so a report looks as it does opened from its file;
still no script, nothing from elsewhere (``report_policy``). Only GET and HEAD are answered (anything else: 405): nothing in the app writes to the catalog or the
store. ``build_app(browser)`` makes the app; ``jobs/browse.py`` serves it with uvicorn on 127.0.0.1, or on
Ray Serve (``results.browse.serve``).
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from mirrorscan.grid.errors import CatalogError, ConfigError
from mirrorscan.results.browse import pages
from mirrorscan.results.browse.source import FILTERS, Browser, NotFound, timing

CSP = "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
"""The Content-Security-Policy of every page: only this origin, and no inline script or style."""
_STYLE_ELEMENT = re.compile(rb"<style\b[^>]*>(.*?)</style\s*>", re.IGNORECASE | re.DOTALL)


def report_policy(page: bytes) -> str:
    """The policy of a served HTML report: CSP with ``sandbox``, plus ``style-src`` allowing exactly the
    page's own ``<style>`` elements (each by the SHA-256 of its text; none: 'none') and ``img-src`` allowing
    ``data:`` URIs (the charts the report embeds). Inline style attributes, scripts, fonts, frames and
    anything from another origin stay refused."""
    hashes = sorted({"'sha256-" + base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode("ascii") + "'"
                     for m in _STYLE_ELEMENT.finditer(page)})
    return (f"{CSP}; style-src {' '.join(hashes) or chr(39) + 'none' + chr(39)}; img-src 'self' data:; "
            f"font-src 'none'; sandbox")


SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
FILE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".json": "application/json", ".txt": "text/plain",
              ".md": "text/plain", ".csv": "text/csv", ".html": "text/html", ".pdf": "application/pdf",
              ".jsonl": "text/plain", ".log": "text/plain"}
"""Report files served, by extension (others are listed but refused: 404)."""
MATRIX_COLUMNS = 40
"""Matrix columns per page."""


class SecurityHeaders:
    """ASGI middleware: refuses methods other than GET and HEAD, and adds SECURITY_HEADERS to every response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["method"] not in ("GET", "HEAD"):
            response = Response("read-only: only GET is answered\n", status_code=405,
                                headers={"Allow": "GET, HEAD", **SECURITY_HEADERS}, media_type="text/plain")
            return await response(scope, receive, send)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.decode().lower() for k, _ in headers}   # a stricter policy set by a route stays
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()
                            if k.lower() not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def _filters(request: Request) -> dict:
    return {k: request.query_params.get(k, "") for k in FILTERS if request.query_params.get(k)}


def _int(request: Request, name: str, default: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None and default is not None:
        return default
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise NotFound(f"{name} must be a whole number") from None


def build_app(browser: Browser) -> Starlette:
    """The ASGI app over ``browser`` (its data); pages are rendered in a worker thread each."""

    def html(render):
        async def endpoint(request: Request):
            try:
                return HTMLResponse(await run_in_threadpool(render, request))
            except NotFound as exc:
                return HTMLResponse(pages.error_page(404, str(exc)), status_code=404)
            except (ConfigError, CatalogError) as exc:
                return HTMLResponse(pages.error_page(503, str(exc)), status_code=503)
        return endpoint

    def experiments(request):
        return pages.experiments(browser.catalog.experiments())

    def experiment(request):
        name = request.path_params["name"]
        rows = browser.catalog.invocations(name)
        if not rows:
            raise NotFound(f"no experiment {name!r} in the catalog")
        return pages.invocations(name, rows)

    def invocation(request):
        inv = browser.indexed(request.path_params["id"])
        n = browser.query(inv, "SELECT count(*) AS n FROM idx").column("n")[0].as_py()
        return pages.invocation(inv, browser.labels(inv), browser.files(inv), n, served=FILE_TYPES)

    def matrix(request):
        inv = browser.indexed(request.path_params["id"])
        filters = _filters(request)
        data = browser.matrix(inv, filters, offset=max(0, _int(request, "offset", 0)), limit=MATRIX_COLUMNS)
        return pages.matrix(inv, data, browser.facets(inv), filters)

    def cell(request):
        inv = browser.indexed(request.path_params["id"])
        filters = _filters(request)
        mrow, mcol = request.query_params.get("r", ""), request.query_params.get("c", "")
        rows = browser.cell(inv, mrow, mcol, filters)
        described = None
        if rows:
            first = browser.trace(inv, rows[0]["probe_id"], rows[0]["sample"], rows[0]["attempt"])
            described = inv.instrument.describe_cell(first) or None
        return pages.cell(inv, mrow, mcol, rows, described, filters)

    def trace(request):
        inv = browser.indexed(request.path_params["id"])
        record = browser.trace(inv, request.query_params.get("probe_id", ""), _int(request, "sample"),
                               _int(request, "attempt", 1))
        described = inv.instrument.describe_cell(record) or None
        return pages.trace(inv, record, described)

    def inv_timing(request):
        inv = browser.indexed(request.path_params["id"])
        iid = inv.row["invocation_id"]
        return pages.timing(f"timing · {iid[:8]}", timing(browser, inv),
                            [(inv.row["experiment"], pages.url(f'/experiments/{quote(inv.row["experiment"], safe="")}')),
                             (iid[:8], pages.inv_path(iid)), ("timing", "")])

    def all_timing(request):
        return pages.timing("timing of every request in the catalog", timing(browser, None), [])

    def diff_page(request):
        q = request.query_params
        a, b = q.get("a", "").strip(), q.get("b", "").strip()
        if not a or not b:
            return pages.diff_page(pages.diff_form(a, "", b, "", [], []), None, None, "none", None)
        inv_a, inv_b = browser.indexed(a), browser.indexed(b)
        labels_a, labels_b = browser.labels(inv_a), browser.labels(inv_b)
        for key, labels in (("label_a", labels_a), ("label_b", labels_b)):   # never a silent stand-in
            if q.get(key) and q.get(key) not in labels:
                raise NotFound(f"{key} {q.get(key)!r} is not a model of that invocation; its models: "
                               f"{', '.join(labels) or '(none)'}")
        same = inv_a.row["invocation_id"] == inv_b.row["invocation_id"]
        label_a = q.get("label_a") or (labels_a[0] if labels_a else "")
        default_b = labels_b[1] if same and len(labels_b) > 1 else (labels_b[0] if labels_b else "")
        label_b = q.get("label_b") or default_b
        form = pages.diff_form(a, label_a, b, label_b, labels_a, labels_b)
        if inv_a.instrument is not inv_b.instrument:
            raise NotFound(f"A is {inv_a.instrument.name}, B is {inv_b.instrument.name}: compare one instrument's runs")
        result = browser.diff(inv_a, label_a, inv_b, label_b)
        own = browser.instrument_comparison(inv_a, label_a, inv_b, label_b)
        return pages.diff_page(form, ((a, label_a), (b, label_b)), result, inv_a.value.kind, own)

    async def report_file(request: Request):
        try:
            inv = await run_in_threadpool(browser.indexed, request.path_params["id"])
            rel = request.path_params["path"]   # decoded once by the router; only listed files are served
            kind = FILE_TYPES.get("." + rel.rsplit(".", 1)[-1].lower()) if "." in rel else None
            if kind is None:
                raise NotFound(f"{rel!r} is not a file type the browser shows")
            data = await run_in_threadpool(browser.read_file, inv, rel)
        except NotFound as exc:
            return HTMLResponse(pages.error_page(404, str(exc)), status_code=404)
        headers = {"Content-Security-Policy": report_policy(data)} if kind == "text/html" else {}
        return Response(data, media_type=kind, headers=headers)

    async def stylesheet(request: Request):
        css = (resources.files("mirrorscan.results.browse") / "static" / "browse.css").read_text(encoding="utf-8")
        return Response(css, media_type="text/css")

    async def favicon(request: Request):
        return Response(b"", status_code=204)

    routes = [
        Route("/", html(experiments)), Route("/experiments/{name}", html(experiment)),
        Route("/invocations/{id}", html(invocation)), Route("/invocations/{id}/matrix", html(matrix)),
        Route("/invocations/{id}/cell", html(cell)), Route("/invocations/{id}/trace", html(trace)),
        Route("/invocations/{id}/timing", html(inv_timing)), Route("/invocations/{id}/files/{path:path}", report_file),
        Route("/timing", html(all_timing)), Route("/compare", html(diff_page)),
        Route("/static/browse.css", stylesheet), Route("/favicon.ico", favicon),
    ]
    app = Starlette(routes=routes)

    async def not_found(request, exc):
        return HTMLResponse(pages.error_page(404, "no such page"), status_code=404)

    app.add_exception_handler(404, not_found)
    return SecurityHeaders(app)
