"""The inference-log tap: a Ray Serve deployment between any scan client and an OpenAI-compatible backend.

The tap relays every request and response unchanged and, for inference requests, writes one
``inference_log`` row (``source = 'tap'``) with the same timing a sampler measures. It lets a
client the project does not control (another harness, a notebook, ``curl``) be timed exactly like
mirrorscan's own samplers, and lets our samplers' client-side timings be checked against the wire.

URLs. ``--upstream`` is the backend's OpenAI base URL, with or without its ``/v1``
(``http://h:8000``, ``http://h:8000/v1`` and ``https://api.x.com/openai/v1`` all work). Clients use
``http://HOST:PORT/v1`` as their base URL: ``/v1/<rest>`` goes to ``<upstream base>/<rest>``, where
the upstream base is the URL as given when it ends in ``/v1`` or has another path, and ``URL/v1``
when it is a bare host. Any other path (``/health``, ``/metrics``) goes to the upstream's root.

What passes unchanged: method, path, query, body bytes and request headers (minus hop-by-hop ones;
``Authorization`` and ``X-Api-Key`` go upstream); the status code, response headers (minus
hop-by-hop ones, ``date`` and ``server``, which the tap's HTTP server sets itself) and the response
body, relayed read by read as it arrives from upstream (compressed bodies stay compressed). One
addition is Ray Serve's: every request gets an ``X-Request-Id`` (the client's own when it sent one),
which goes upstream too and comes back on the response. The
tap never adds ``stream_options``: a client that does not ask for usage gets no usage chunk, and
its row has no token counts and no ``decode_tok_s``.

Timing (``actors.streaming.StreamClock``, monotonic, 0 = just before the request is sent upstream):
each read from upstream is split into server-sent events; the events it completes are parsed and
timed, and then the read is passed on, so bytes wait only for that parse (microseconds; nothing is
buffered). Content-bearing events are OpenAI chat chunks with ``delta.content`` or
``delta.reasoning``/``reasoning_content``, completions chunks with ``text``, and Responses API
``*_text.delta`` events; role-only, empty, usage-only chunks and ``[DONE]`` are not counted. Token
counts come from the last ``usage`` seen; an ``error`` event inside a 200 stream goes to ``error``. A non-streamed (JSON) answer has ``total_ms`` = last body
byte, token counts from its ``usage``, and null ``ttft_ms``/``intervals_ms``/``n_chunks``
(not measured, not zero).

Rows: only POSTs to ``…/chat/completions``, ``…/completions`` and ``…/responses`` are logged (other
paths pass through unlogged). Keys come from request headers: ``X-Probe-Id``, ``X-Probe-Sample``,
``X-Probe-Attempt``, ``X-Invocation-Id`` (null when absent); ``label`` is the tap's ``--label``,
else the part of the probe id before its first ``|``. ``request_headers`` holds the request's
headers with secrets removed (``SECRET_HEADERS``). ``status`` is ``http_<code>``, or
``upstream_error`` when the backend could not be reached (the client then gets a 502); ``error``
holds a non-2xx body's start, an upstream failure, or ``client disconnected``.

Joining a trace to its tap row (catalog table ``inference_log``; traces from ``mirrorscan sql``)::

    SELECT t.probe_id, t.sample, t.attempt, t.ttft_ms, l.ttft_ms AS tap_ttft_ms,
           t.total_ms, l.total_ms AS tap_total_ms, l.n_chunks AS tap_n_chunks
    FROM traces t JOIN inference_log l
      ON l.probe_id = t.probe_id AND l.sample = t.sample AND l.attempt = t.attempt
     AND l.invocation_id = t.invocation_id AND l.source = 'tap'

Rows while the catalog is down: the tap's ``InferenceLogWriter`` keeps them queued and retries; rows
the catalog has not taken within the writer's ``retry_s`` (10 s), or at shutdown, are *spilled* as
Parquet into the tap's store (``start_tap(store=…)`` / ``mirrorscan tap --store``; default
``$MIRRORSCAN_STORE``, else the home store ``cluster.home.default_store_uri()``, the same default as
``mirrorscan sql``)::

    <store>/_tap/<invocation>/inference_log/part-<time>-tap-<random>.parquet

``_tap`` (``TAP_EXPERIMENT``) stands in for the experiment, which the tap never knows; the leading
``_`` keeps it apart from experiment names, like the writer's own ``_no_experiment`` (the spec refuses an
experiment folder whose name starts with ``_``). ``<invocation>`` is the row's ``X-Invocation-Id`` when
the request carried a valid one, else the tap's own id (``tap_id``: a new uuid at every ``start_tap``,
printed by ``mirrorscan tap``), so one tap run's unkeyed rows sit together. ``mirrorscan sql`` finds
them: its ``inference_log`` view reads every ``*/inference_log/part-*.parquet`` under the store
(``cluster.catalog.inference_view.spill_dataset``), ``stored_in = 'spill'``. A local store is a folder on the
machine the tap's replica runs on; on a multi-node cluster give an ``s3://`` store.

Only 127.0.0.1 is bound unless another host is asked for. Importing this module starts nothing and
imports neither Ray nor httpx.

One module past 400 lines on purpose: the relay, the event parsing that times it and the row it writes are one
path a request takes, and splitting them would put the timing rules in a second place.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
import zlib
from urllib.parse import urlsplit

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.secrets import check_endpoint_url, strip_userinfo

APP_NAME = "mirrorscan-tap"
TAP_EXPERIMENT = "_tap"
"""Experiment folder of spilled tap rows in the store (``<store>/_tap/<invocation>/inference_log/``)."""
DEFAULT_HOST = "127.0.0.1"  # never all addresses unless the user asks
DEFAULT_PORT = 8100
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                        "trailer", "trailers", "transfer-encoding", "upgrade", "host", "content-length"})
"""Request headers not relayed as they are (httpx sets host and content-length for the same body)."""
RESPONSE_DROP = frozenset(HOP_BY_HOP - {"content-length"} | {"date", "server"})
"""Response headers not relayed: hop-by-hop ones, and those the tap's own HTTP server always sets."""
SECRET_HEADERS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization", "api-key"})
"""Request headers never written to a row (credentials)."""
LOGGED_SUFFIXES = ("/chat/completions", "/completions", "/responses")
ERROR_BODY_CHARS = 500     # how much of a non-2xx answer goes into ``error``
JSON_BODY_LIMIT = 8 << 20  # a non-streamed answer longer than this is relayed but not parsed for usage


# --- pure parts (no Ray, no network) --------------------------------------------------------------

def upstream_urls(upstream: str) -> tuple[str, str]:
    """``(api_base, root)`` of an upstream URL: where ``/v1/<rest>`` and where other paths go. A URL with
    credentials before its host is refused (they would reach the log lines); clients send their own keys."""
    check_endpoint_url("", "--upstream", upstream.strip())
    parts = urlsplit(upstream.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError("", "--upstream", f"{upstream!r} is not an http(s) URL",
                          "pass the backend's base URL, e.g. http://127.0.0.1:8000/v1")
    root = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    return root + (path or "/v1"), root


def upstream_url(path: str, query: str, api_base: str, root: str) -> str:
    """The upstream URL a tap request path (and query string) maps to."""
    if path == "/v1" or path.startswith("/v1/"):
        url = api_base + path[3:]
    else:
        url = root + path
    return url + (f"?{query}" if query else "")


def logged_request(method: str, path: str) -> bool:
    """Whether a request is an inference request that gets an ``inference_log`` row."""
    return method == "POST" and path.rstrip("/").endswith(LOGGED_SUFFIXES)


def recorded_headers(headers) -> dict:
    """Request headers as written to a row: lower-cased names, credentials (``SECRET_HEADERS``) removed."""
    return {k.lower(): v for k, v in headers if k.lower() not in SECRET_HEADERS}


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


class SSEParser:
    """Splits a byte stream of server-sent events into the ``data`` payloads of complete events.

    Lines end in ``\\n`` or ``\\r\\n``; an event ends at a blank line; several ``data:`` lines of one
    event are joined with ``\\n`` (the SSE rules). Keeps only the unfinished tail between reads.
    """

    def __init__(self) -> None:
        self._tail = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[str]:
        """The ``data`` of every event that ``chunk`` completes, in order."""
        lines = (self._tail + chunk).split(b"\n")
        self._tail = lines.pop()
        events = []
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data).decode("utf-8", "replace"))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return events


def event_content(data: str) -> tuple[str | None, str | None, dict | None]:
    """``(text, reasoning, usage)`` carried by one SSE ``data`` payload (Chat, Completions or Responses API)."""
    if data.strip() == "[DONE]":
        return None, None, None
    try:
        event = json.loads(data)
    except ValueError:
        return None, None, None
    if not isinstance(event, dict):
        return None, None, None
    texts, reasonings = [], []
    for choice in event.get("choices") or ():
        delta = choice.get("delta")
        if isinstance(delta, dict):
            texts.append(delta.get("content") or "")
            reasonings.append(delta.get("reasoning") or delta.get("reasoning_content") or "")
        elif isinstance(choice.get("text"), str):
            texts.append(choice["text"])
    kind = event.get("type") or ""
    if kind == "response.output_text.delta":
        texts.append(event.get("delta") or "")
    elif kind.startswith("response.reasoning") and kind.endswith("text.delta"):
        reasonings.append(event.get("delta") or "")
    usage = event.get("usage") or (event.get("response") or {}).get("usage")
    return "".join(texts) or None, "".join(reasonings) or None, usage if isinstance(usage, dict) else None


def usage_tokens(usage: dict | None) -> tuple[int | None, int | None]:
    """``(prompt_tokens, completion_tokens)`` from an OpenAI ``usage`` object (Chat or Responses naming)."""
    if not usage:
        return None, None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    return _int_or_none(prompt), _int_or_none(completion)


def _stream_error(data: str) -> str | None:
    """The ``error`` object of an SSE payload as compact JSON text (cut to ERROR_BODY_CHARS), else None."""
    try:
        error = json.loads(data).get("error")
    except (ValueError, AttributeError):
        return None
    return json.dumps(error)[:ERROR_BODY_CHARS] if error else None


class Exchange:
    """What the tap learns about one logged request while its answer passes: timing, usage, status."""

    def __init__(self, headers, endpoint: str, label: str | None) -> None:
        from mirrorscan.actors.streaming import StreamClock

        get = {k.lower(): v for k, v in headers}.get
        probe_id = get("x-probe-id")
        self.row = {
            "probe_id": probe_id, "sample": _int_or_none(get("x-probe-sample")),
            "attempt": _int_or_none(get("x-probe-attempt")), "invocation_id": get("x-invocation-id"),
            "label": label or (probe_id.split("|", 1)[0] if probe_id and "|" in probe_id else None),
            "endpoint": endpoint, "source": "tap", "request_headers": recorded_headers(headers),
            "status": None, "error": None, "prompt_tokens": None, "completion_tokens": None,
        }
        self.clock = StreamClock()
        self.streamed = False
        self._ok = False
        self._t0: float | None = None
        self._sse = SSEParser()
        self._usage: dict | None = None
        self._body: list[bytes] = []
        self._body_len = 0
        self._decoder = None
        self._last_byte: float | None = None

    def start(self) -> None:
        """The request is about to be sent upstream (monotonic 0)."""
        self.clock.start()
        self._t0 = time.monotonic()

    def response(self, status: int, headers) -> None:
        """The upstream's status line and headers arrived."""
        get = {k.lower(): v for k, v in headers}.get
        self.row["status"] = f"http_{status}"
        self._ok = 200 <= status < 300
        self.streamed = (get("content-type") or "").startswith("text/event-stream")
        encoding = (get("content-encoding") or "identity").lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            self._decoder = zlib.decompressobj(31 if "gzip" in encoding else 15)
        elif encoding != "identity":
            self._decoder = False
            self.row["error"] = f"body not parsed: content-encoding {encoding}"

    def data(self, raw: bytes) -> None:
        """One read of the upstream body (as relayed); parsed and timed before it is passed on."""
        self._last_byte = time.monotonic()
        if self._decoder is False:
            return
        chunk = self._decoder.decompress(raw) if self._decoder else raw
        if self.streamed and self._ok:
            for data in self._sse.feed(chunk):
                text, reasoning, usage = event_content(data)
                self.clock.chunk(text, reasoning)
                self._usage = usage or self._usage
                if '"error"' in data and self.row["error"] is None:  # an error event inside a 200 stream
                    self.row["error"] = _stream_error(data)
        elif self._body_len <= JSON_BODY_LIMIT:
            self._body.append(chunk)
            self._body_len += len(chunk)

    def failed(self, message: str) -> None:
        """The exchange broke (upstream unreachable or cut, client gone); the first message wins."""
        if self.row["status"] is None:
            self.row["status"] = "upstream_error"
        self.row["error"] = self.row["error"] or message

    def finish(self) -> dict:
        """The ``inference_log`` row of this exchange."""
        row = self.row
        body = b"".join(self._body)
        if self.row["status"] and not self._ok and body:
            row["error"] = row["error"] or body.decode("utf-8", "replace")[:ERROR_BODY_CHARS]
        elif not self.streamed and body and self._body_len <= JSON_BODY_LIMIT:
            try:
                parsed = json.loads(body)
                self._usage = parsed.get("usage") if isinstance(parsed, dict) else None
            except ValueError:
                pass
        row["prompt_tokens"], row["completion_tokens"] = usage_tokens(self._usage)
        row.update(self.clock.fields(row["completion_tokens"]))
        if not self.streamed:
            end = self._last_byte
            row.update(ttft_ms=None, ttft_answer_ms=None, intervals_ms=None, n_chunks=None,
                       total_ms=(end - self._t0) * 1000.0 if end is not None and self.row["status"] else None)
        return row


# --- the Serve deployment ---------------------------------------------------------------------

class TapProxy:
    """The Serve replica: relays every HTTP request to the upstream and logs inference requests."""

    def __init__(self, upstream: str, catalog_dsn: str, label: str | None = None, store_uri: str | None = None,
                 tap_id: str | None = None) -> None:
        """Relay to ``upstream``; log rows to ``catalog_dsn``, spilled to ``store_uri`` (under
        ``TAP_EXPERIMENT``/<invocation or ``tap_id``>) when the catalog does not take them; ``store_uri``
        None: no spill store (rows the catalog never takes are lost at shutdown, and reported)."""
        import httpx

        from mirrorscan.cluster.catalog.inference_writer import InferenceLogWriter

        self.api_base, self.root = upstream_urls(upstream)
        self.label = label
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), follow_redirects=False,
                                        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
        self.client.headers.clear()  # httpx's default headers would change the request
        self.writer = InferenceLogWriter(catalog_dsn, store_uri, TAP_EXPERIMENT, tap_id, "tap")

    async def __call__(self, request):
        """Relay one request; the answer streams back read by read as the upstream sends it."""
        import httpx
        from starlette.responses import Response, StreamingResponse

        path = request.url.path
        url = upstream_url(path, request.url.query, self.api_base, self.root)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        sent = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]
        body = await request.body()
        endpoint = strip_userinfo(url.split("?", 1)[0])
        exchange = Exchange(headers, endpoint, self.label) if logged_request(request.method, path) else None
        upstream_request = self.client.build_request(request.method, url, headers=sent, content=body)
        if exchange:
            exchange.start()
        try:
            upstream = await self.client.send(upstream_request, stream=True)
        except httpx.HTTPError as exc:
            message = f"upstream {type(exc).__name__}: {exc}"
            if exchange:
                exchange.failed(message)
                self.writer.add([exchange.finish()])
            return Response(json.dumps({"error": {"message": message, "type": "tap_upstream_error"}}),
                            status_code=502, media_type="application/json")
        if exchange:
            exchange.response(upstream.status_code, upstream.headers.multi_items())
        response = StreamingResponse(self._relay(upstream, exchange), status_code=upstream.status_code)
        serve_id = request.headers.get("x-request-id")  # Serve adds this id to the response itself
        response.raw_headers = [(k.encode("latin-1"), v.encode("latin-1"))
                                for k, v in upstream.headers.multi_items() if k.lower() not in RESPONSE_DROP
                                and not (k.lower() == "x-request-id" and v == serve_id)]
        return response

    async def _relay(self, upstream, exchange: Exchange | None):
        """Yield the upstream body's raw reads unchanged; time them first; log the row at the end."""
        try:
            async for raw in upstream.aiter_raw():
                if exchange:
                    exchange.data(raw)
                yield raw
        except BaseException as exc:  # noqa: BLE001 — a cancelled or broken stream is logged, then re-raised
            if exchange:
                gone = isinstance(exc, GeneratorExit) or type(exc).__name__ in ("CancelledError", "ClientDisconnect")
                exchange.failed("client disconnected" if gone else f"upstream stream {type(exc).__name__}: {exc}")
            raise
        finally:
            if exchange:
                self.writer.add([exchange.finish()])
            await upstream.aclose()

    async def flush(self, timeout_s: float = 30.0) -> bool:
        """Write every logged row to the catalog now; True when all were written (handle method).
        Waits in a thread: the replica's event loop keeps relaying meanwhile."""
        import asyncio

        return await asyncio.to_thread(self.writer.flush, timeout_s)

    def __del__(self) -> None:
        """Serve's graceful shutdown: write what is left."""
        writer = getattr(self, "writer", None)
        if writer is not None:
            writer.close(timeout_s=15.0)
            self.writer = None


# --- starting and stopping -------------------------------------------------------------------

def start_tap(upstream: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, catalog_dsn: str | None = None,
              label: str | None = None, max_ongoing_requests: int = 256, store: str | None = None,
              tap_id: str | None = None) -> str:
    """Start the tap on Ray Serve (Ray started locally when not running); returns the clients' base URL.

    ``catalog_dsn`` None → ``$MIRRORSCAN_CATALOG_DSN`` or the embedded catalog. ``store``: where rows the
    catalog does not take are spilled (see the module docstring); None → ``$MIRRORSCAN_STORE``, else the
    home store; opened here, so a bad store fails before anything starts. ``tap_id``: this tap run's id
    (names the spill folder of rows without ``X-Invocation-Id``); None → a new uuid. The returned URL is
    ``http://HOST:PORT/v1`` (what an OpenAI client takes as ``base_url``). One tap per Ray cluster:
    Serve's HTTP address is fixed while Serve runs, so call ``stop_tap()`` before starting another.
    """
    from ray import serve

    from mirrorscan.cluster.catalog.client import resolve_dsn
    from mirrorscan.cluster.home import default_store_uri
    from mirrorscan.cluster.runtime.ray_session import ensure_ray
    from mirrorscan.cluster.store.traces import open_store

    upstream_urls(upstream)  # refuse a bad URL before starting anything
    dsn = resolve_dsn(catalog_dsn)
    store_uri = open_store(store or os.environ.get("MIRRORSCAN_STORE") or default_store_uri()).uri
    ensure_ray()
    quiet = {"log_level": "WARNING", "enable_access_log": False}
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    serve.start(proxy_location="HeadOnly", http_options={"host": host, "port": port}, logging_config=quiet)
    deployment = serve.deployment(TapProxy, name="tap", num_replicas=1, ray_actor_options={"num_cpus": 0},
                                  max_ongoing_requests=max_ongoing_requests, graceful_shutdown_timeout_s=30)
    app = deployment.bind(upstream, dsn, label, store_uri, tap_id or str(uuid.uuid4()))
    serve.run(app, name=APP_NAME, route_prefix="/", logging_config=quiet)
    return f"http://{host if ':' not in host else f'[{host}]'}:{port}/v1"


def flush_tap(timeout_s: float = 30.0) -> bool:
    """Make the running tap write its pending rows to the catalog (or spill them, when the catalog stays
    down past the writer's retry time); True when all were settled within ``timeout_s`` seconds."""
    from ray import serve

    return serve.get_app_handle(APP_NAME).flush.remote(timeout_s).result(timeout_s=timeout_s + 10)


def stop_tap() -> None:
    """Stop the tap and Serve. The replica's shutdown writes pending rows first; rows the catalog does not
    take within about 7 s are spilled to the tap's store."""
    from ray import serve

    serve.shutdown()
