"""``mirrorscan catalog status|stop``: the local embedded catalog server of this machine's mirrorscan home.

``status`` prints the home folder (``cluster.home``: ``$MIRRORSCAN_HOME``, else the nearest
``.mirrorscan`` above the working folder, else the per-user data folder), the catalog folder, whether its
server runs (pid, port, DSN) and, when ``$MIRRORSCAN_CATALOG_DSN`` names another catalog, that the runs
go there instead. ``stop`` stops the embedded server (open transactions are rolled back; the next scan
starts it again). Neither starts a server or creates a folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mirrorscan.cluster.catalog.client import catalog_status


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Print the catalog's status, or stop its server; returns the exit code."""
    parser = argparse.ArgumentParser(prog=prog or "python -m mirrorscan.jobs.catalog", description=__doc__.split("\n\n")[1])
    parser.add_argument("action", choices=["status", "stop"], help="status: where it is and whether it runs; "
                        "stop: stop the embedded server")
    args = parser.parse_args(argv)
    status = catalog_status()
    if args.action == "stop":
        if not status["running"]:
            print(f"catalog: not running ({status['catalog']})")
            return 0
        from mirrorscan.cluster.catalog import embedded_pg
        from mirrorscan.grid.errors import CatalogError

        try:
            embedded_pg.stop(Path(status["catalog"]))
        except CatalogError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"catalog: stopped (pid {status['pid']}, port {status['port']}; {status['catalog']})")
        return 0
    print(f"home:    {status['home']}")
    print(f"catalog: {status['catalog']}")
    if status["running"]:
        print(f"server:  running, pid {status['pid']}, port {status['port']}  {status['dsn']}")
    else:
        print("server:  not running (a scan, sql or analyze starts it)")
    if status["external_dsn"]:
        print(f"note:    MIRRORSCAN_CATALOG_DSN is set: runs use {status['external_dsn']}, not this catalog")
    return 0


if __name__ == "__main__":
    sys.exit(main())
