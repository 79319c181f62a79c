"""What an instrument's own tools reach outside the instrument: the catalog, the trace store and the engines.

``Instrument.cli`` (``mirrorscan <instrument> …``) is handed a ``Reader`` by the command line
(``results.reader.StoreReader``, which opens the real catalog, store and engine classes), so an instrument
imports neither the storage nor the engines: instruments know ``grid`` and ``analysis`` only. This base
names what a tool may ask for; it holds none of it, and each method raises until a subclass supplies it.
"""

from __future__ import annotations

from typing import Any


class Reader:
    """The catalog, the trace store and the engine classes, as an instrument's tools may use them."""

    def catalog(self, dsn: str | None = None) -> Any:
        """An open catalog (a context manager with ``execute``, ``create_invocation`` and ``update_progress``):
        ``dsn``, else the DSN the environment names, else the embedded server."""
        raise NotImplementedError

    def invocation(self, target: str, dsn: str | None = None) -> dict:
        """The catalog row of ``target``: an invocation id, the unique start of one (6+ hex digits), or an
        experiment (folder or name) → its newest invocation; ConfigError when there is none."""
        raise NotImplementedError

    def is_invocation_id(self, text: str) -> bool:
        """Whether ``text`` is a whole invocation id (lower-case, hyphenated UUID), not an experiment."""
        raise NotImplementedError

    def store_uri(self, uri: str | None = None) -> str:
        """The trace store URI a new invocation writes to: ``uri``, else ``$MIRRORSCAN_STORE``, else the
        default store under the home folder (as a scan resolves it)."""
        raise NotImplementedError

    def store(self, uri: str) -> Any:
        """The trace store at ``uri`` (``dataset``, ``check_writable``, ``write_part``)."""
        raise NotImplementedError

    def provenance(self) -> dict:
        """Where and with what this process runs (git sha and dirty flag, host, pid, user, package versions),
        as a new invocation records it."""
        raise NotImplementedError

    def engine(self, backend: str, kind: str) -> type:
        """The engine actor class of (``kind``, ``backend``), to be run in this process (not as a Ray actor)."""
        raise NotImplementedError
