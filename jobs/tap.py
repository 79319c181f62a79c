"""``mirrorscan tap --upstream URL [--port P] [--host H]``: time any client's requests to an OpenAI-compatible backend.

Starts Ray locally (or joins ``RAY_ADDRESS``), runs the tap (``cluster/runtime/tap.py``) on Ray Serve at
``http://HOST:PORT``, prints the base URL clients should use (``http://HOST:PORT/v1``) and blocks until
Ctrl-C, then writes the rows still pending and stops. Every inference request through the tap
becomes one ``inference_log`` row (source 'tap') in the catalog, keyed by the request's
``X-Probe-Id`` / ``X-Probe-Sample`` / ``X-Probe-Attempt`` / ``X-Invocation-Id`` headers. Rows the
catalog does not take (it is down) are spilled as Parquet to ``--store``
(``<store>/_tap/<invocation or tap id>/inference_log/``), where ``mirrorscan sql`` finds them.

The tap binds 127.0.0.1 unless ``--host`` says otherwise; it has no authentication of its own, so
bind another address only on a network you trust (the backend's key passes through it).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import uuid

from mirrorscan.grid.errors import ConfigError
from mirrorscan.jobs.errors import reports_user_errors


def parser(prog: str = "mirrorscan tap") -> argparse.ArgumentParser:
    """The verb's arguments."""
    from mirrorscan.cluster.runtime.tap import DEFAULT_HOST, DEFAULT_PORT

    p = argparse.ArgumentParser(prog=prog, description="Relay an OpenAI-compatible server and log each request's "
                                "timing to the catalog's inference_log (see cluster/runtime/tap.py).")
    p.add_argument("--upstream", required=True,
                   help="the backend's OpenAI base URL, e.g. http://127.0.0.1:8000/v1 (with or without /v1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to bind (default {DEFAULT_HOST}; 0.0.0.0 exposes the tap to the network)")
    p.add_argument("--catalog-dsn", default=None,
                   help="PostgreSQL DSN for inference_log rows (default $MIRRORSCAN_CATALOG_DSN, else the embedded catalog)")
    p.add_argument("--store", default=None,
                   help="where rows are spilled while the catalog is down: a folder or s3://bucket/prefix "
                        "(default $MIRRORSCAN_STORE, else the home store; use the same store with mirrorscan sql)")
    p.add_argument("--label", default=None,
                   help="label written on every row (default: the label part of each X-Probe-Id)")
    p.add_argument("--max-ongoing-requests", type=int, default=256,
                   help="requests the tap relays at once before queueing (default 256)")
    return p


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan tap") -> int:
    """Run the tap until interrupted; exit code 0 after a clean stop."""
    from mirrorscan.cluster.runtime.tap import start_tap, stop_tap

    args = parser(prog).parse_args(argv)
    if not 0 < args.port < 65536:
        raise ConfigError("", "--port", f"{args.port} is not a TCP port", "pass a port between 1 and 65535")
    if args.label is not None:
        from mirrorscan.grid.names import check_name

        check_name(args.label, "", "--label")
    tap_id = str(uuid.uuid4())
    base = start_tap(args.upstream, host=args.host, port=args.port, catalog_dsn=args.catalog_dsn,
                     label=args.label, max_ongoing_requests=args.max_ongoing_requests, store=args.store,
                     tap_id=tap_id)
    print(f"tap: {base}  →  {args.upstream}  (tap id {tap_id})", flush=True)
    print("clients: use the base URL above; send X-Probe-Id (and X-Probe-Sample, X-Probe-Attempt, "
          "X-Invocation-Id) headers to key the rows. Ctrl-C stops.", flush=True)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        print("tap: stopping (writing pending rows)…", file=sys.stderr, flush=True)
        stop_tap()
        import ray

        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
