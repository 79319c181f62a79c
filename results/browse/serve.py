"""The browser as a Ray Serve deployment, for a cluster: the same ASGI app, built on its replica.

``start(...)`` starts Serve's HTTP proxy on the head node at ``host:port`` (127.0.0.1 unless told
otherwise) and runs one replica whose ingress is ``build_app(Browser(...))``; the replica opens the catalog,
the stores and its own index folder from the node it runs on (which must reach them, as the cluster's
workers do).
"""

from __future__ import annotations

import logging

APP_NAME = "mirrorscan-browse"


def start(catalog_dsn: str, index_dir: str, *, store: str | None, refresh_s: float, host: str, port: int) -> str:
    """Run the browser on Ray Serve (Ray started locally when not running); returns its URL."""
    from ray import serve

    from mirrorscan.cluster.runtime.ray_session import ensure_ray

    def build():
        from mirrorscan.results.browse.app import build_app
        from mirrorscan.results.browse.source import Browser

        return build_app(Browser(catalog_dsn, index_dir, store=store, refresh_s=refresh_s))

    ensure_ray()
    quiet = {"log_level": "WARNING", "enable_access_log": False}
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    serve.start(proxy_location="HeadOnly", http_options={"host": host, "port": port}, logging_config=quiet)

    @serve.deployment(name="browse", num_replicas=1, ray_actor_options={"num_cpus": 0})
    @serve.ingress(build)
    class Browse:
        """One replica serving the browser's ASGI app."""

    serve.run(Browse.bind(), name=APP_NAME, route_prefix="/", logging_config=quiet)
    return f"http://{host if ':' not in host else f'[{host}]'}:{port}/"


def stop() -> None:
    """Stop the browser's Serve application and Serve."""
    from ray import serve

    serve.shutdown()
