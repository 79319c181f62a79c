"""``mirrorscan browse``: a read-only web app over the trace store and the catalog.

Pages: experiments and their invocations; an invocation's model × item matrix (filters by envelope,
ordering, model and class; a page of columns at a time), each cell opening its traces and each trace its
verbatim prompts and answer, class or score, and timing; a comparison of two models' answers cell by cell
(and the instrument's own comparison, e.g. forced_choice's fingerprints); per-endpoint timing from the
inference log (time to first token and decode rate over time); links to an invocation's reports and
analyses.

It binds 127.0.0.1 unless ``--host`` says otherwise; it has no login of its own, so bind another address only
on a network you trust. Nothing in it writes to the catalog (its connection is read-only) or to the store.
The one thing it writes is a derived read-side index (where each trace row lives) in ``--index-dir``
(default ``$MIRRORSCAN_HOME/cache/browse-index``), built for an invocation the first time it is shown and
extended when new parts appear; delete that folder at any time. ``--prebuild`` indexes every invocation
before serving, with a progress bar. ``--serve`` runs it on Ray Serve (a cluster's head node, or a local Ray)
instead of uvicorn.
"""

from __future__ import annotations

import argparse
import sys

from mirrorscan.grid.errors import ConfigError
from mirrorscan.jobs.errors import reports_user_errors

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def build_parser(prog: str = "mirrorscan browse") -> argparse.ArgumentParser:
    """The verb's arguments."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}; 0.0.0.0 opens "
                   "it to the network, without any login)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--store", help="read every invocation's traces from this store (default: the store each "
                   "invocation was written to)")
    p.add_argument("--catalog-dsn", help="catalog DSN (default: $MIRRORSCAN_CATALOG_DSN, else the embedded one)")
    p.add_argument("--index-dir", help="where the derived read-side index is kept (default: "
                   "$MIRRORSCAN_HOME/cache/browse-index)")
    p.add_argument("--refresh-s", type=float, default=30.0,
                   help="list an unfinished invocation's parts again at most this often, seconds (default 30)")
    p.add_argument("--prebuild", action="store_true", help="index every invocation before serving")
    p.add_argument("--serve", action="store_true", help="run on Ray Serve (RAY_ADDRESS, else a local Ray)")
    return p


def _progress():
    """A progress callback for indexing: one tqdm bar per invocation on a terminal (``cluster.scan.progress.
    bar_wanted``), else one line per invocation once it is indexed (on stderr)."""
    from tqdm import tqdm

    from mirrorscan.cluster.scan.progress import bar_wanted

    draw = bar_wanted(None)
    bars: dict[str, tqdm] = {}

    def report(invocation_id: str, done: int, total: int) -> None:
        if not draw:
            if done >= total:
                parts = f"{total} part{'' if total == 1 else 's'}"
                print(f"indexed {invocation_id[:8]} ({parts})", file=sys.stderr, flush=True)
            return
        bar = bars.get(invocation_id)
        if bar is None:
            bar = bars[invocation_id] = tqdm(total=total, unit="part", desc=f"indexing {invocation_id[:8]}",
                                             file=sys.stderr, leave=True)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            bars.pop(invocation_id, None)

    return report


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan browse") -> int:
    """Serve the browser until interrupted; exit code 0 after a clean stop, 2 on bad flags."""
    from mirrorscan.cluster.catalog.client import resolve_dsn
    from mirrorscan.cluster.home import subdir
    from mirrorscan.results.browse.index import check_writable

    args = build_parser(prog).parse_args(argv)
    if not 0 < args.port < 65536:
        raise ConfigError("", "--port", f"{args.port} is not a TCP port", "pass a port between 1 and 65535")
    if args.refresh_s < 0:
        raise ConfigError("", "--refresh-s", f"is {args.refresh_s}", "pass 0 or more seconds")
    dsn = resolve_dsn(args.catalog_dsn)
    index_dir = args.index_dir or str(subdir("cache") / "browse-index")
    check_writable(index_dir)   # the index is written while serving: refuse a folder that cannot take it now
    if args.serve:
        import signal
        import threading

        from mirrorscan.results.browse import serve

        address = serve.start(dsn, index_dir, store=args.store, refresh_s=args.refresh_s, host=args.host,
                              port=args.port)
        print(f"browse: {address} (Ray Serve; Ctrl-C stops it)", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
        serve.stop()
        return 0

    import uvicorn

    from mirrorscan.results.browse.app import build_app
    from mirrorscan.results.browse.source import Browser

    browser = Browser(dsn, index_dir, store=args.store, refresh_s=args.refresh_s, progress=_progress())
    if args.prebuild:
        for row in browser.catalog.invocations():
            try:
                browser.indexed(row["invocation_id"])
            except ConfigError as exc:
                print(f"note: invocation {row['invocation_id']} not indexed ({exc.problem})", file=sys.stderr)
    print(f"browse: http://{args.host if ':' not in args.host else f'[{args.host}]'}:{args.port}/ "
          f"(read-only; Ctrl-C stops it)", flush=True)
    try:
        uvicorn.run(build_app(browser), host=args.host, port=args.port, log_level="warning", access_log=False)
    finally:
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.browse"))
