"""The ``Reader`` an instrument's own tools are handed (``grid.reader``): the real catalog, trace store and engines.

The command line builds one ``StoreReader`` per call of ``mirrorscan <instrument> …`` and passes it to
``Instrument.cli``; tests of an instrument's tools build one the same way.
"""

from __future__ import annotations

import os

from mirrorscan.grid.reader import Reader


class StoreReader(Reader):
    """The catalog (``cluster.catalog.client``), the trace store (``cluster.store.traces``) and the engine classes
    (``actors.registry``) of this machine, opened on demand."""

    def catalog(self, dsn: str | None = None):
        """``cluster.catalog.client.Catalog`` at ``resolve_dsn(dsn)``."""
        from mirrorscan.cluster.catalog.client import Catalog, resolve_dsn

        return Catalog(resolve_dsn(dsn))

    def invocation(self, target: str, dsn: str | None = None) -> dict:
        """``cluster.catalog.client.resolve_invocation`` over the catalog at ``dsn``."""
        from mirrorscan.cluster.catalog.client import resolve_invocation

        with self.catalog(dsn) as catalog:
            return resolve_invocation(target, catalog)

    def is_invocation_id(self, text: str) -> bool:
        """``cluster.catalog.client.UUID_PATTERN`` matches the lower-cased, stripped text."""
        from mirrorscan.cluster.catalog.client import UUID_PATTERN

        return bool(UUID_PATTERN.match(text.strip().lower()))

    def store_uri(self, uri: str | None = None) -> str:
        """``uri``, else ``$MIRRORSCAN_STORE``, else ``cluster.home.default_store_uri()``."""
        from mirrorscan.cluster.home import default_store_uri

        return uri or os.environ.get("MIRRORSCAN_STORE") or default_store_uri()

    def store(self, uri: str):
        """``cluster.store.traces.open_store(uri)``."""
        from mirrorscan.cluster.store.traces import open_store

        return open_store(uri)

    def provenance(self) -> dict:
        """``cluster.runtime.provenance.provenance()``."""
        from mirrorscan.cluster.runtime.provenance import provenance

        return provenance()

    def engine(self, backend: str, kind: str) -> type:
        """``actors.registry.engine_class(backend, kind)``."""
        from mirrorscan.actors.registry import engine_class

        return engine_class(backend, kind)
