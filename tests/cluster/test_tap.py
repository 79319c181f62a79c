"""The tap (cluster/runtime/tap.py) in front of vLLM's real OpenAI-compatible server, with real Ray Serve and a real catalog.

The upstream is vLLM's own server (CPU build, float32, the demo model as "smollm2", greedy), the session
``vllm_server``, which requires an API key, so that forwarding of the Authorization header is observable. Every request carries the key, as a real client's would.
Nothing here asserts a duration: the timing checks are the invariants of ``actors.streaming`` and
the nesting of the tap's interval inside the client's (the tap sends after and receives before the
client, on the same monotonic clock).

The spill test runs first, on a tap of its own (one tap per Ray cluster: it stops before the module's
``tap`` starts) in front of a small stand-in upstream (``stub_upstream``: no model needed, since it is
about the catalog, not the relay) and a catalog server of its own, which it stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from mirrorscan.actors.streaming import timing_problems
from mirrorscan.cluster.catalog import embedded_pg
from conftest import free_port

API_KEY = os.environ.setdefault("MIRRORSCAN_TEST_VLLM_KEY", f"sk-test-{uuid.uuid4().hex}")
"""The session ``vllm_server``'s key (tests/conftest.py reads the same variable before it starts the server)."""
AUTH = {"Authorization": f"Bearer {API_KEY}"}
CHAT = {"model": "smollm2", "temperature": 0, "max_tokens": 12,
        "messages": [{"role": "user", "content": "Name a colour."}]}
STREAM = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
PER_REQUEST = re.compile(rb'("id":\s*")[^"]*(")|("created":\s*)\d+')
"""The only fields vLLM legitimately changes between two identical requests: the response id and its creation second."""


def normalised(body: bytes) -> bytes:
    """``body`` with only the values of ``id`` and ``created`` blanked (everything else byte for byte)."""
    return PER_REQUEST.sub(lambda m: (m.group(1) + b"_" + m.group(2)) if m.group(1) else m.group(3) + b"0", body)


def events(body: bytes) -> list[dict]:
    """The JSON payloads of an SSE body, parsed independently of the tap's own parser ([DONE] dropped)."""
    out = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:"))
        if data and data != b"[DONE]":
            out.append(json.loads(data))
    return out


def content_chunks(evs: list[dict]) -> list[dict]:
    """The events carrying generated text or reasoning (what StreamClock counts)."""
    return [e for e in evs if any((c.get("delta") or {}).get("content") or (c.get("delta") or {}).get("reasoning")
                                  for c in e.get("choices") or ())]


def streamed(url: str, body: dict, headers: dict) -> tuple[httpx.Response, bytes, float | None, float]:
    """POST a streamed request; (response, raw body, client ttft ms, client total ms) on the monotonic clock."""
    t0 = time.monotonic()
    first = None
    raw = b""
    with httpx.stream("POST", url, json=body, headers=headers, timeout=120) as r:
        for piece in r.iter_raw():
            raw += piece
            if first is None and content_chunks(events(raw[:raw.rfind(b"\n\n") + 2])):
                first = (time.monotonic() - t0) * 1000
    return r, raw, first, (time.monotonic() - t0) * 1000


@pytest.fixture(scope="module")
def tap_db(pg_dsn):
    """A fresh catalog database for this module's tap (the catalog_dsn fixture is per test; the tap lives longer)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(pg_dsn, dbname=name)


class Tap(NamedTuple):
    url: str
    """The clients' base URL (http://127.0.0.1:PORT/v1)."""
    dsn: str
    """The catalog the tap writes to."""


@pytest.fixture(scope="module")
def tap(ray_local, vllm_server, tap_db, tmp_path_factory):
    """The tap on Ray Serve in front of ``vllm_server``; Serve is shut down after the module."""
    from mirrorscan.cluster.runtime.tap import start_tap, stop_tap

    store = str(tmp_path_factory.mktemp("tap-store"))
    yield Tap(start_tap(vllm_server, port=free_port(), catalog_dsn=tap_db, store=store), tap_db)
    stop_tap()


def rows_for(dsn: str, probe_ids: list[str]) -> list[dict]:
    """The tap's inference_log rows for ``probe_ids`` (after making the tap write what it holds)."""
    from mirrorscan.cluster.runtime.tap import flush_tap

    assert flush_tap(60.0)
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute("SELECT * FROM inference_log WHERE probe_id = ANY(%s) AND source = 'tap'",
                            (probe_ids,)).fetchall()


# ---- rows while the catalog is down (a tap, an upstream and a catalog server of the test's own) ------

STUB_WORDS = ("one", " two", " three")
"""What the stand-in upstream streams: one content chunk per word, then usage (prompt 5, completion 3)."""


class _StubHandler(BaseHTTPRequestHandler):
    """Answers every POST with a streamed chat completion (HTTP/1.0: the body ends when the connection does)."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
        chunks += [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in STUB_WORDS]
        chunks += [{"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": len(STUB_WORDS)}}]
        for chunk in chunks:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(0.005)
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def stub_upstream():
    """A stand-in OpenAI upstream on 127.0.0.1 (a thread of this process); yields its base URL (…/v1)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StubHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_rows_logged_while_the_catalog_is_down_are_spilled_at_shutdown(ray_local, own_catalog_server, tmp_path):
    """The tap's catalog goes down; four requests pass the tap (two with X-Invocation-Id, two without) and
    the tap is stopped right after, with their rows still queued. When ``stop_tap`` returns, every one of
    the four rows is in the tap's store, once, under _tap/<invocation or tap id>/inference_log/ (spilled
    while the replica shut down: at the writer's retry limit or its close deadline, whichever came first),
    and ``mirrorscan sql`` shows them (stored_in 'spill') beside the row the catalog took while it was up.
    Without a spill store the writer drops such rows at shutdown ("row(s) lost")."""
    from mirrorscan.cluster.catalog.inference_view import spill_dataset, spill_parts
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.cluster.runtime.tap import TAP_EXPERIMENT, flush_tap, start_tap, stop_tap
    from mirrorscan.results import sql as results_sql

    root, dsn = own_catalog_server
    store_uri, tap_id, invocation = str(tmp_path / "store"), str(uuid.uuid4()), str(uuid.uuid4())
    up_id = f"stub|up|-|-|{uuid.uuid4().hex[:6]}"
    down_ids = [f"stub|down{i}|-|-|{uuid.uuid4().hex[:6]}" for i in range(4)]
    with stub_upstream() as upstream:
        url = start_tap(upstream, port=free_port(), catalog_dsn=dsn, store=store_uri, tap_id=tap_id)
        try:
            r = httpx.post(f"{url}/chat/completions", json=STREAM, headers={"X-Probe-Id": up_id}, timeout=60)
            assert r.status_code == 200 and flush_tap(30.0)   # the catalog takes rows while it is up
            embedded_pg.stop(root)
            for i, probe_id in enumerate(down_ids):
                keys = {"X-Probe-Id": probe_id, "X-Probe-Sample": str(i)}
                if i % 2:
                    keys["X-Invocation-Id"] = invocation
                r = httpx.post(f"{url}/chat/completions", json=STREAM, headers=keys, timeout=60)
                assert r.status_code == 200 and events(r.content)
        finally:
            started = time.monotonic()
            stop_tap()
            stop_s = time.monotonic() - started
            print(f"\nstop_tap with the catalog down: {stop_s:.1f} s")
    assert stop_s < 45.0, stop_s   # Serve's graceful shutdown (30 s) bounds it; the writer spills at ~7.5 s
    store = open_store(store_uri)
    rows = spill_dataset(store).to_table().to_pylist()
    assert sorted(r["probe_id"] for r in rows) == sorted(down_ids)   # none lost, none twice, not the up row
    assert len({r["row_uid"] for r in rows}) == len(down_ids)
    for row in rows:
        assert row["source"] == "tap" and row["status"] == "http_200" and row["error"] is None
        assert row["n_chunks"] == len(STUB_WORDS) == row["completion_tokens"] and timing_problems(row) == []
        keyed = down_ids.index(row["probe_id"]) % 2 == 1
        assert row["invocation_id"] == (invocation if keyed else None)
    folders = sorted({p.rsplit("/", 3)[-3] for p in spill_parts(store)})
    assert folders == sorted([invocation, tap_id])
    assert all(p.startswith(f"{store.root}/{TAP_EXPERIMENT}/") for p in spill_parts(store))
    assert embedded_pg.ensure_running(root, durable=False) == dsn   # back up, for mirrorscan sql's catalog side
    seen = results_sql.query("SELECT probe_id, stored_in FROM inference_log WHERE source = 'tap'", store_uri, dsn).to_pylist()
    assert sorted((r["probe_id"], r["stored_in"]) for r in seen) == sorted(
        [(up_id, "catalog")] + [(p, "spill") for p in down_ids])


RELAY_PAIRS = 5
"""Most (direct, tapped) request pairs ``test_stream_relayed_byte_for_byte`` sends to find two that vLLM chunked alike."""


def test_stream_relayed_byte_for_byte(tap, vllm_server):
    """A streamed chat completion through the tap equals the same request sent directly.

    Compared exactly, in every pair: status, response headers (but date and server), the decoded text, the
    finish reason and the usage. Compared as raw bytes: the whole body after blanking only the values of
    ``id`` and ``created``, which vLLM makes new for every request. vLLM's server sends the tokens that are
    ready as one chunk when its output loop or its reader falls behind (a busy machine), so two identical requests may
    arrive in different numbers of chunks whatever sits between; the byte comparison is made on the first
    pair that vLLM chunked alike (same content-chunk count), and up to ``RELAY_PAIRS`` pairs are sent for it.
    """
    text = lambda evs: "".join((c.get("delta") or {}).get("content") or "" for e in evs for c in e.get("choices") or ())
    finish = lambda evs: [c["finish_reason"] for e in evs for c in e.get("choices") or () if c.get("finish_reason")]
    counts = []
    for _ in range(RELAY_PAIRS):
        direct, direct_raw, _, _ = streamed(f"{vllm_server}/chat/completions", STREAM, AUTH)
        tapped, tapped_raw, _, _ = streamed(f"{tap.url}/chat/completions", STREAM,
                                            {**AUTH, "X-Probe-Id": "m|bytes|-|-"})
        assert tapped.status_code == direct.status_code == 200
        for name in direct.headers.keys():  # every upstream header arrives (date/server: the tap's own)
            assert name in ("date", "server") or tapped.headers.get_list(name) == direct.headers.get_list(name), name
        d, t = events(direct_raw), events(tapped_raw)
        assert text(t) == text(d) and text(d)
        assert finish(t) == finish(d) and finish(d)
        assert [e["usage"] for e in t if e.get("usage")] == [e["usage"] for e in d if e.get("usage")]
        assert tapped_raw.endswith(b"data: [DONE]\n\n")
        counts.append((len(content_chunks(d)), len(content_chunks(t))))
        if counts[-1][0] == counts[-1][1]:
            assert counts[-1][0] > 1
            assert normalised(tapped_raw) == normalised(direct_raw)
            return
    pytest.fail(f"vLLM chunked no (direct, tapped) pair alike in {RELAY_PAIRS} tries: content chunks {counts}")


def test_one_row_per_request_with_valid_timing(tap):
    """Five streamed requests with distinct X-Probe-Ids → exactly five rows, keyed by their headers, whose
    timing obeys the StreamClock invariants and counts the same content chunks the client counted."""
    invocation = str(uuid.uuid4())
    sent = {}
    for i in range(5):
        probe_id = f"smollm2|w{i}|x{i}|strict|AB-{uuid.uuid4().hex[:6]}"
        body = {**STREAM, "messages": [{"role": "user", "content": f"Count to {i + 2}."}]}
        headers = {**AUTH, "X-Probe-Id": probe_id, "X-Probe-Sample": str(i), "X-Probe-Attempt": "1",
                   "X-Invocation-Id": invocation}
        r, raw, ttft, total = streamed(f"{tap.url}/chat/completions", body, headers)
        assert r.status_code == 200
        evs = events(raw)
        usage = [e["usage"] for e in evs if e.get("usage")][-1]
        sent[probe_id] = dict(sample=i, n=len(content_chunks(evs)), usage=usage, ttft=ttft, total=total)
    rows = rows_for(tap.dsn, list(sent))
    assert sorted(r["probe_id"] for r in rows) == sorted(sent)
    for row in rows:
        mine = sent[row["probe_id"]]
        assert timing_problems(row) == [], row
        assert row["n_chunks"] == mine["n"] == len(row["intervals_ms"]) + 1
        assert (row["sample"], row["attempt"], str(row["invocation_id"])) == (mine["sample"], 1, invocation)
        assert row["completion_tokens"] == mine["usage"]["completion_tokens"]
        assert row["prompt_tokens"] == mine["usage"]["prompt_tokens"]
        assert row["status"] == "http_200" and row["error"] is None and row["timing_scope"] == "request"
        assert row["label"] == "smollm2" and row["endpoint"].endswith("/v1/chat/completions")
        assert row["decode_tok_s"] is not None and row["decode_tok_s"] > 0
        # the tap sends after the client and receives before it (one monotonic clock on one machine)
        assert row["ttft_ms"] < mine["ttft"] and row["total_ms"] < mine["total"]


def test_non_streamed_and_other_paths_pass_through(tap, vllm_server):
    """A non-streamed completion and GET /v1/models come back as they do directly; the completion gets a row
    with total_ms and tokens but no streaming fields (not measured, so null, never 0)."""
    direct = httpx.post(f"{vllm_server}/chat/completions", json=CHAT, headers=AUTH, timeout=120)
    probe_id = f"smollm2|plain|-|-|{uuid.uuid4().hex[:6]}"
    tapped = httpx.post(f"{tap.url}/chat/completions", json=CHAT, headers={**AUTH, "X-Probe-Id": probe_id}, timeout=120)
    assert tapped.status_code == direct.status_code == 200
    assert tapped.headers["content-type"] == direct.headers["content-type"]
    assert normalised(tapped.content) == normalised(direct.content)
    assert int(tapped.headers["content-length"]) == len(tapped.content)
    models_direct = httpx.get(f"{vllm_server}/models", headers=AUTH, timeout=30)
    models_tapped = httpx.get(f"{tap.url}/models", headers=AUTH, timeout=30)
    assert models_tapped.status_code == 200 and normalised(models_tapped.content) == normalised(models_direct.content)
    (row,) = rows_for(tap.dsn, [probe_id])
    usage = direct.json()["usage"]
    assert (row["prompt_tokens"], row["completion_tokens"]) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert row["total_ms"] > 0 and row["status"] == "http_200"
    assert (row["ttft_ms"], row["intervals_ms"], row["n_chunks"], row["decode_tok_s"]) == (None, None, None, None)


def test_auth_forwarded_never_logged(tap, vllm_server):
    """The key reaches the upstream (which refuses requests without it: 401 relayed as is) and no credential
    (Authorization, X-Api-Key, Cookie) appears anywhere in the rows."""
    ok_id, refused_id = (f"smollm2|auth-{k}|-|-|{uuid.uuid4().hex[:6]}" for k in ("ok", "no"))
    secrets = {"X-Api-Key": "xkey-" + uuid.uuid4().hex, "Cookie": "session=" + uuid.uuid4().hex}
    ok = httpx.post(f"{tap.url}/chat/completions", json=CHAT, headers={**AUTH, **secrets, "X-Probe-Id": ok_id}, timeout=120)
    refused = httpx.post(f"{tap.url}/chat/completions", json=CHAT, headers={"X-Probe-Id": refused_id}, timeout=120)
    direct_refused = httpx.post(f"{vllm_server}/chat/completions", json=CHAT, timeout=120)
    assert ok.status_code == 200
    assert refused.status_code == direct_refused.status_code == 401
    assert refused.content == direct_refused.content
    rows = {r["probe_id"]: r for r in rows_for(tap.dsn, [ok_id, refused_id])}
    assert rows[ok_id]["status"] == "http_200" and rows[refused_id]["status"] == "http_401"
    assert rows[refused_id]["error"]
    for row in rows.values():
        headers = {k.lower() for k in row["request_headers"]}
        assert headers.isdisjoint({"authorization", "x-api-key", "cookie"}) and "x-probe-id" in headers
        everything = json.dumps(row, default=str)
        assert API_KEY not in everything and all(v not in everything for v in secrets.values())


# ---- the pure parts (no servers) ----------------------------------------------------------------

def test_sse_parser_is_independent_of_read_boundaries():
    """Events split across reads at every byte (CRLF line ends, multi-line data, comments) parse the same."""
    from mirrorscan.cluster.runtime.tap import SSEParser

    body = (b': keep-alive\r\n\r\ndata: {"a": 1}\r\n\r\ndata: {"b":\ndata: 2}\n\nevent: x\ndata: [DONE]\n\n')
    whole = SSEParser().feed(body)
    assert whole == ['{"a": 1}', '{"b":\n2}', "[DONE]"]
    for cut in range(1, len(body)):
        parser = SSEParser()
        assert parser.feed(body[:cut]) + parser.feed(body[cut:]) == whole
    bytewise = SSEParser()
    assert [e for i in range(len(body)) for e in bytewise.feed(body[i:i + 1])] == whole


def test_event_content_counts_text_and_reasoning_only():
    """Role-only, empty, usage-only chunks and [DONE] carry nothing; chat, completions and Responses deltas do."""
    from mirrorscan.cluster.runtime.tap import event_content, usage_tokens

    assert event_content('{"choices":[{"delta":{"role":"assistant","content":""}}]}') == (None, None, None)
    assert event_content("[DONE]") == (None, None, None)
    assert event_content('{"choices":[{"delta":{"content":"Hi"}}]}') == ("Hi", None, None)
    assert event_content('{"choices":[{"delta":{"reasoning":"hm"}}]}') == (None, "hm", None)
    assert event_content('{"choices":[{"delta":{"reasoning_content":"hm"}}]}') == (None, "hm", None)
    assert event_content('{"choices":[{"text":"x","index":0}]}') == ("x", None, None)
    assert event_content('{"type":"response.output_text.delta","delta":"y"}') == ("y", None, None)
    text, reasoning, usage = event_content('{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}')
    assert (text, reasoning, usage_tokens(usage)) == (None, None, (5, 7))
    done = '{"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":4}}}'
    assert usage_tokens(event_content(done)[2]) == (3, 4)


def test_upstream_url_mapping():
    """/v1/<rest> goes to the upstream's OpenAI base (given with or without /v1); other paths to its root."""
    from mirrorscan.cluster.runtime.tap import upstream_url, upstream_urls
    from mirrorscan.grid.errors import ConfigError

    for given, base in [("http://h:8000", "http://h:8000/v1"), ("http://h:8000/v1/", "http://h:8000/v1"),
                        ("https://api.x.com/openai/v1", "https://api.x.com/openai/v1"),
                        ("https://g.com/v1beta/openai", "https://g.com/v1beta/openai")]:
        api_base, root = upstream_urls(given)
        assert api_base == base
        assert upstream_url("/v1/chat/completions", "", api_base, root) == base + "/chat/completions"
        assert upstream_url("/health", "a=1", api_base, root) == root + "/health?a=1"
    with pytest.raises(ConfigError, match="--upstream"):
        upstream_urls("127.0.0.1:8000")


def test_exchange_times_content_chunks_only():
    """Fed a stream cut at odd places, an Exchange counts only content-bearing events, takes tokens from the
    usage chunk, keeps an in-stream error event, and its row obeys the timing invariants."""
    from mirrorscan.cluster.runtime.tap import Exchange

    ex = Exchange([("X-Probe-Id", "m|a|b|-|AB"), ("X-Probe-Sample", "3"), ("Authorization", "Bearer k")],
                  "http://u/v1/chat/completions", None)
    ex.start()
    ex.response(200, [("content-type", "text/event-stream")])
    stream = (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
              b'data: {"choices":[{"delta":{"content":"A"}}]}\n\ndata: {"choices":[{"delta":{"content":"B"}}]}\n\n'
              b'data: {"choices":[{"delta":{"content":"C"},"finish_reason":"stop"}]}\n\n'
              b'data: {"error":{"message":"late"}}\n\n'
              b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3}}\n\ndata: [DONE]\n\n')
    for piece in (stream[:70], stream[70:150], stream[150:151], stream[151:]):
        time.sleep(0.01)
        ex.data(piece)
    row = ex.finish()
    assert row["n_chunks"] == 3 and timing_problems(row) == []
    assert (row["prompt_tokens"], row["completion_tokens"], row["sample"], row["label"]) == (9, 3, 3, "m")
    assert row["decode_tok_s"] > 0 and "late" in row["error"] and row["status"] == "http_200"
    assert "authorization" not in row["request_headers"]
