"""``mirrorscan browse``: a read-only web app over a trace store and its catalog.

``source.Browser`` reads (catalog, stores, the derived read-side index of ``index``), ``pages`` renders HTML,
``app.build_app`` is the ASGI app, ``serve`` puts it on Ray Serve. See docs/browse.md.
"""

from mirrorscan.results.browse.app import build_app
from mirrorscan.results.browse.source import Browser

__all__ = ["Browser", "build_app"]
