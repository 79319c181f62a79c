"""The browser's data and pages over a real store and catalog (no Ray): the read-side index, the matrix and
its filters, traces read verbatim and escaped, the comparison, timing, report files, and that it only reads.

Pages are fetched through the ASGI app itself (Starlette's test client); tests/results/test_browse_chromium.py
drives the same app in a real browser.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient

from mirrorscan.cluster.store.traces import open_store
from conftest import new_database
from mirrorscan.grid.errors import CatalogError
from mirrorscan.grid.instrument import resolve
from mirrorscan.grid.trace_schema import to_trace_table
from mirrorscan.results.browse import Browser, build_app
from mirrorscan.results.browse import index as idx
from mirrorscan.results.browse.app import CSP

import browse_world as world  # noqa: E402

MIRRORSCAN = str(Path(sys.executable).parent / "mirrorscan")


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def made(tmp_path_factory, pg_dsn):
    """The world's store and catalog, a browser over them and a client of its app."""
    base = tmp_path_factory.mktemp("browse")
    dsn = new_database(pg_dsn)
    built = world.build(base, dsn)
    store = open_store(built["store"])
    store.write_analysis(world.EXPERIMENT, built["invocation_id"], "forced_choice/run1/summary.json", b'{"n": 1}')
    store.write_analysis(world.EXPERIMENT, built["invocation_id"], "forced_choice/run1/page.html",
                         b"<p>report</p><script>document.title='x'</script>")
    browser = Browser(dsn, base / "index")
    client = TestClient(build_app(browser))
    yield {**built, "base": base, "dsn": dsn, "browser": browser, "client": client, "store_obj": store}
    browser.close()


def inv_url(made, rest: str = "") -> str:
    return f"/invocations/{made['invocation_id']}" + (f"/{rest}" if rest else "")


def test_the_index_lists_every_row_where_it_is_stored_and_only_grows(made, tmp_path):
    store, inv_id = made["store_obj"], made["invocation_id"]
    inv = made["browser"].indexed(inv_id)
    parts = store.list_parts(world.EXPERIMENT, inv_id)
    assert len(inv.files) == 1 and len(parts) > 1
    index = idx.dataset(inv.files).to_table()
    assert index.num_rows == len(made["rows"])
    assert set(index.column("part").to_pylist()) == {p.rsplit("/", 1)[1] for p in parts}
    for r in index.to_pylist()[:8]:   # every (part, row) holds the row the index says it does
        stored = store.read_bytes(f"{store.traces_dir(world.EXPERIMENT, inv_id)}/{r['part']}")
        got = pq.read_table(pa.BufferReader(stored)).slice(r["row"], 1).to_pylist()[0]
        assert (got["probe_id"], got["sample"], got["attempt"]) == (r["probe_id"], r["sample"], r["attempt"])
        assert got["class"] == r["answer_class"] and (got["error"] is not None) == r["failed"]

    # a copy of the store gains one part (a resume): one more index file, the first one untouched
    copy = open_store(str(tmp_path / "store"))
    for p in parts:
        copy.objects.put(f"{copy.traces_dir(world.EXPERIMENT, inv_id)}/{p.rsplit('/', 1)[1]}", store.read_bytes(p))
    folder = tmp_path / "index"
    first = idx.build(copy, world.EXPERIMENT, inv_id, resolve("forced_choice"), folder)
    first_bytes = first.read_bytes()
    assert idx.build(copy, world.EXPERIMENT, inv_id, resolve("forced_choice"), folder) is None
    extra = dict(made["rows"][0], attempt=9, probe_id="alpha|cat|dog|english_strict|AB", response="later")
    copy.write_part(to_trace_table([extra], made["schema"]), world.EXPERIMENT, inv_id, "resume")
    second = idx.build(copy, world.EXPERIMENT, inv_id, resolve("forced_choice"), folder)
    assert second is not None and first.read_bytes() == first_bytes
    assert idx.dataset(idx.index_files(folder)).count_rows() == len(made["rows"]) + 1


def test_the_matrix_counts_the_stored_answers_and_filters_narrow_it(made):
    browser = made["browser"]
    inv = browser.indexed(made["invocation_id"])
    traces = made["store_obj"].read(world.EXPERIMENT, made["invocation_id"])
    ok = traces.filter(pc.is_null(traces.column("error")))

    def expected(rows: pa.Table) -> dict:
        out: dict = {}
        for r in rows.select(["label", "item_key", "class"]).to_pylist():
            cell = out.setdefault((r["label"], r["item_key"]), {})
            cell[r["class"]] = cell.get(r["class"], 0) + 1
        return out

    data = browser.matrix(inv, {})
    assert data["rows"] == world.LABELS and data["total_cols"] == len(world.PAIRS)
    assert {k: v["answers"] for k, v in data["cells"].items()} == expected(ok)
    assert data["cells"][("alpha", "tea|coffee")]["failed"] == 1

    narrowed = browser.matrix(inv, {"envelope": "json_schema", "answer": "B"})
    subset = ok.filter(pc.and_(pc.equal(ok.column("envelope"), "json_schema"), pc.equal(ok.column("class"), "B")))
    assert {k: v["answers"] for k, v in narrowed["cells"].items()} == expected(subset)
    assert narrowed["rows"] == ["beta"]    # alpha never answers B

    for filters in ({}, {"envelope": "json_schema"}):   # from the index's metadata, and from one filtered pass
        paged = browser.matrix(inv, filters, offset=1, limit=2)
        assert paged["cols"] == sorted(f"{a}|{b}" for a, b in world.PAIRS)[1:3] and paged["total_cols"] == 4
        assert paged["rows"] == world.LABELS
        past = browser.matrix(inv, filters, offset=10, limit=2)
        assert past["cols"] == [] and past["total_cols"] == 4

    page = made["client"].get(inv_url(made, "matrix"), params={"envelope": "json_schema", "answer": "B"})
    assert page.status_code == 200 and '<th class="row">beta</th>' in page.text
    assert '<th class="row">alpha</th>' not in page.text


def test_a_trace_is_shown_verbatim_and_escaped_under_a_strict_policy(made):
    client = made["client"]
    probe = "beta|cat|dog|english_strict|AB"
    cell = client.get(inv_url(made, "cell"), params={"r": "beta", "c": "cat|dog"})
    assert cell.status_code == 200 and "cat vs dog in" in cell.text    # the instrument's describe_cell
    assert cell.text.count('class="trace-link"') == len(world.ENVELOPES) * len(world.ORDERINGS)
    page = client.get(inv_url(made, "trace"), params={"probe_id": probe, "sample": 0, "attempt": 1})
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CSP and "script-src 'self'" in CSP
    assert "'unsafe-inline'" not in CSP and page.headers["x-content-type-options"] == "nosniff"
    assert "<script" not in page.text.lower()
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in page.text
    assert "Which do you prefer, cat or dog?" in page.text and "UNCLEAR" in page.text
    missing = client.get(inv_url(made, "trace"), params={"probe_id": "nobody|x", "sample": 0, "attempt": 1})
    assert missing.status_code == 404


def test_it_answers_only_get_and_writes_nothing(made):
    client, base = made["client"], made["base"]
    store_before = snapshot(base / "store")
    for path in ("/", f"/experiments/{world.EXPERIMENT}", inv_url(made), inv_url(made, "matrix"),
                 inv_url(made, "timing"), "/timing", f"/compare?a={made['invocation_id']}&b={made['invocation_id']}"):
        assert client.get(path).status_code == 200, path
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert client.request(method, inv_url(made, "matrix")).status_code == 405
    assert snapshot(base / "store") == store_before
    with pytest.raises(CatalogError, match="read-only"):
        made["browser"].catalog.rows("UPDATE scan_invocations SET status = 'failed'")


def test_two_models_are_compared_cell_by_cell_and_by_their_fingerprints(made):
    browser = made["browser"]
    inv = browser.indexed(made["invocation_id"])
    result = browser.diff(inv, "alpha", inv, "beta")
    cells = [(p, env, o) for p in range(len(world.PAIRS)) for env in world.ENVELOPES for o in world.ORDERINGS]
    same = sum(world.answer_of("alpha", *c)[1] == world.answer_of("beta", *c)[1] for c in cells)
    s = result["summary"]
    assert (s["matched"], s["only_a"], s["only_b"], s["same"]) == (len(cells), 0, 0, same)
    assert {(r["ca"], r["cb"]): r["n"] for r in result["confusion"]}[("A", "B")] == 11
    page = made["client"].get("/compare", params={"a": made["invocation_id"], "label_a": "alpha",
                                                  "b": made["invocation_id"], "label_b": "beta"})
    assert page.status_code == 200 and f"{100 * same / len(cells):.1f}% ({same} of" in page.text   # as diff prints it
    assert "hamming" in page.text     # forced_choice's own fingerprint comparison


def test_timing_shows_each_endpoint_over_time(made):
    page = made["client"].get(inv_url(made, "timing"))
    assert page.status_code == 200
    for label in world.LABELS:
        assert f"engine://hf/org/{label}" in page.text
    assert page.text.count("<svg") == 2 * len(world.LABELS)   # ttft and decode rate per endpoint
    assert "17 requests" in page.text and "16 requests" in page.text   # alpha's failed attempt is logged too


def test_reports_are_linked_and_served_but_nothing_else(made):
    client = made["client"]
    page = client.get(inv_url(made))
    assert "forced_choice/run1/summary.json" in page.text and "forced_choice/run1/page.html" in page.text
    summary = client.get(inv_url(made, "files/analysis/forced_choice/run1/summary.json"))
    assert summary.status_code == 200 and summary.json() == {"n": 1}
    report = client.get(inv_url(made, "files/analysis/forced_choice/run1/page.html"))
    assert report.status_code == 200 and report.headers["content-security-policy"].endswith("; sandbox")
    part = made["store_obj"].list_parts(world.EXPERIMENT, made["invocation_id"])[0].rsplit("/", 1)[1]
    for rel in (f"traces/{part}", "../../../etc/passwd", "analysis/forced_choice/%2e%2e/%2e%2e/%2e%2e/invocation.json"):
        assert client.get(inv_url(made, f"files/{rel}")).status_code == 404, rel


def test_the_verb_explains_itself_and_binds_loopback_by_default():
    proc = subprocess.run([MIRRORSCAN, "browse", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "127.0.0.1" in proc.stdout and "--host" in proc.stdout
    from mirrorscan.jobs.browse import build_parser

    assert build_parser().parse_args([]).host == "127.0.0.1"
