"""The trace store: Parquet parts under ``<store>/<experiment>/<invocation_id>/traces/``.

One ``TraceStore`` for a local directory and for ``s3://bucket/prefix``: listing and reading go through
the pyarrow filesystem of either; only "put an immutable object" differs (``LocalObjects`` here,
``cluster.store.s3.S3Objects`` for S3). Writes are append-only: every part has a name unique per writer and
attempt and is never overwritten, and a reader never sees half an object — locally it is written under
a temporary name (``.<name>.tmp``) and renamed when complete; on S3, which has no rename, the final key
is written directly with ``If-None-Match: *`` (a single PUT, or a multipart upload that stays invisible
until completed). Readers list only ``*.parquet`` names that do not start with ``.``; ``cleanup`` removes
stale temporaries (locally ``.tmp`` files, on S3 unfinished multipart uploads) and moves unreadable parts
to ``quarantine/`` with a warning.

S3 endpoint, region and credentials come from the standard AWS environment of the process that opens
the store, never from the URI (``cluster.store.s3`` lists the variable names). Ray workers open the store
themselves, so the AWS_* settings must reach them: a local Ray inherits the driver's environment; on a
cluster the driver passes ``cluster.store.s3.forwarded_env()`` (endpoint, region, profile — no secrets)
through the Ray ``runtime_env`` ``env_vars`` and the nodes hold the credentials (instance role, IRSA,
profile file). A ``TraceStore`` pickles as its URI and is reopened from the receiving process's environment.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.trace_schema import TRACE_COLUMNS, TRACE_SCHEMA, is_large

CORE_COLUMNS = frozenset(TRACE_COLUMNS)
"""The trace columns every instrument's rows have (``grid.trace_schema``)."""

log = logging.getLogger(__name__)
TRACES = "traces"
QUARANTINE = "quarantine"
MANIFEST = "invocation.json"


def open_store(uri: str, create: bool = True) -> "TraceStore":
    """A TraceStore for a local folder (absolute or relative path, or ``file://``) or ``s3://bucket/prefix``.

    A local folder is created unless ``create`` is False (readers: a folder that does not exist is a
    ConfigError, not an empty store). For S3 the bucket is checked once (a missing bucket or refused
    credentials raise ConfigError)."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in ("", "file"):
        path = os.path.abspath(uri.split("://", 1)[1] if scheme else uri)
        if not create and not os.path.isdir(path):
            raise ConfigError("", "store", f"{path} does not exist (or is not a folder)",
                              "name the store a scan wrote to (its `traces:` line shows it), or leave --store out")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise ConfigError("", "store", f"{path} cannot be created ({exc.strerror or exc})",
                              "choose a folder you can write (store in config.json, --store or $MIRRORSCAN_STORE)") from None
        return TraceStore(uri=path, fs=pafs.LocalFileSystem(), root=path, objects=LocalObjects())
    if scheme != "s3":
        raise ConfigError("", "store", f"unsupported store URI scheme {scheme!r} in {uri!r}",
                          "use a local folder or s3://bucket/prefix")
    from mirrorscan.cluster.store import s3

    bucket, prefix = s3.parse_s3_uri(uri)
    objects = s3.S3Objects(s3.resolve_settings())
    objects.check_bucket(bucket, prefix)
    root = f"{bucket}/{prefix}" if prefix else bucket
    return TraceStore(uri=uri, fs=s3.s3_filesystem(objects.settings), root=root, objects=objects)


class Objects(Protocol):
    """How a store puts immutable objects; the one part that differs between a folder and S3."""

    def put(self, path: str, data: bytes) -> None:
        """Store ``data`` at ``path`` atomically; FileExistsError when something is already there."""

    def remove_incomplete(self, folder: str) -> list[str]:
        """Remove what unfinished writes left under ``folder``; return the removed paths."""

    def delete(self, path: str) -> None:
        """Delete one object."""


class LocalObjects:
    """Immutable files in a local folder: temporary name, then rename; an existing file is refused."""

    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``.<name>.tmp`` beside ``path`` and rename it to ``path`` when complete."""
        if os.path.lexists(path):
            raise FileExistsError(f"{path} exists; objects in the store are never overwritten")
        folder, name = os.path.split(path)
        os.makedirs(folder, exist_ok=True)
        temp = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(temp, "wb") as sink:
                sink.write(data)
            os.replace(temp, path)
        except BaseException as exc:   # a full disk or an interrupt leaves no partial temporary behind
            with contextlib.suppress(OSError):
                os.remove(temp)
            if isinstance(exc, OSError) and not exc.filename:   # a failed write() names no file: name it
                exc.filename = path
            raise

    def remove_incomplete(self, folder: str) -> list[str]:
        """Delete the temporaries (``.*.tmp``) in ``folder`` that unfinished writes left."""
        if not os.path.isdir(folder):
            return []
        removed = sorted(f"{folder}/{n}" for n in os.listdir(folder) if n.startswith(".") and n.endswith(".tmp"))
        for path in removed:
            os.remove(path)
        return removed

    def delete(self, path: str) -> None:
        """Delete one file."""
        os.remove(path)


@dataclass
class TraceStore:
    """Where traces and manifests of invocations are kept."""

    uri: str
    """The store as the user named it (a local store: its absolute path)."""
    fs: pafs.FileSystem
    """pyarrow filesystem for listing and reading."""
    root: str
    """The store's root as a filesystem path (``bucket/prefix`` on S3)."""
    objects: Objects
    """How immutable objects are put (local folder or S3)."""

    def __reduce__(self):
        return open_store, (self.uri,)   # reopened from the receiving process's own environment

    @property
    def is_local(self) -> bool:
        """True for a local folder."""
        return isinstance(self.objects, LocalObjects)

    def check_writable(self) -> None:
        """ConfigError unless an object can be written here (a scan checks before anything is recorded):
        writes and removes a small probe object."""
        probe = f"{self.root}/.write-check-{uuid.uuid4().hex[:12]}"
        try:
            self.objects.put(probe, b"mirrorscan write check")
            self.objects.delete(probe)
        except OSError as exc:
            raise ConfigError("", "store", f"{self.display(self.root)} cannot be written "
                              f"({getattr(exc, 'strerror', None) or exc})",
                              "choose a store you can write (store in config.json, --store or $MIRRORSCAN_STORE)") from None

    def invocation_dir(self, experiment: str, invocation_id: str) -> str:
        """Folder of one invocation (filesystem path, not URI)."""
        return f"{self.root}/{experiment}/{invocation_id}"

    def traces_dir(self, experiment: str, invocation_id: str) -> str:
        """Folder holding the invocation's trace parts."""
        return f"{self.invocation_dir(experiment, invocation_id)}/{TRACES}"

    def display(self, path: str) -> str:
        """A path as the user should see it (with the s3:// scheme where it applies)."""
        return path if self.is_local else f"s3://{path}"

    def write_part(self, table: pa.Table, experiment: str, invocation_id: str, writer: str) -> str:
        """Write one immutable trace part (Parquet, zstd); return its path. Never overwrites an existing part.
        No dictionary pages: a part holds one engine batch, whose repeated values zstd compresses as well, and
        without them a 16-row part is smaller and costs about a third less CPU to write."""
        return self.write_parquet_part(self.traces_dir(experiment, invocation_id), table, writer, dictionary=False)

    def write_parquet_part(self, folder: str, table: pa.Table, writer: str, dictionary: bool = True) -> str:
        """Write ``table`` as one immutable Parquet part (zstd) named ``part-<time>-<writer>-<random>.parquet``
        in ``folder`` (a path inside this store, e.g. from ``invocation_dir``); return its path. Atomic and
        never overwriting, on either backend. ``dictionary``: dictionary-encode the columns that are not
        per-layer vectors (for large files of repeated values, such as a row index)."""
        name = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{writer}-{uuid.uuid4().hex[:12]}.parquet"
        path = f"{folder}/{name}"
        sink = pa.BufferOutputStream()
        # per-layer vectors (large columns) are nearly all distinct floats: a dictionary only adds an index per
        # value (lens vectors took 48 % more than their raw floats with one)
        encoded = [f.name for f in table.schema if not is_large(f)] if dictionary else False
        pq.write_table(table, sink, compression="zstd", use_dictionary=encoded)
        self.objects.put(path, sink.getvalue().to_pybytes())
        return path

    def write_manifest(self, experiment: str, invocation_id: str, manifest: dict) -> str:
        """Write ``invocation.json`` (settings and provenance) once; an existing manifest is kept as it is."""
        path = f"{self.invocation_dir(experiment, invocation_id)}/{MANIFEST}"
        data = json.dumps(manifest, indent=2, sort_keys=True, default=str).encode()
        try:
            self.objects.put(path, data)
        except FileExistsError:
            pass
        return path

    def read_manifest(self, experiment: str, invocation_id: str) -> dict | None:
        """The invocation's ``invocation.json`` (None when it has none, or it cannot be parsed)."""
        path = f"{self.invocation_dir(experiment, invocation_id)}/{MANIFEST}"
        try:
            return json.loads(self.read_bytes(path))
        except (OSError, ValueError):
            return None

    def write_analysis_folder(self, experiment: str, invocation_id: str, relfolder: str,
                              files: dict[str, bytes]) -> list[str]:
        """Write one analysis (``files``: name → bytes) as the new folder ``<invocation>/analysis/<relfolder>/``,
        complete or not at all: on a local store the files go to a hidden temporary sibling
        (``.<name>.<random>.tmp``) that is renamed into place once every file is written, and removed when a
        write fails (a full disk, a read-only store); on S3 each object is atomic and ``summary.json``, written
        first in ``files`` order by the caller, is the only key a reader needs. Returns the display paths."""
        final = f"{self.invocation_dir(experiment, invocation_id)}/analysis/{relfolder}"
        if not self.is_local:
            return [self.write_analysis(experiment, invocation_id, f"{relfolder}/{name}", data)
                    for name, data in files.items()]
        parent, name = os.path.split(final)
        if os.path.lexists(final):
            raise FileExistsError(f"{final} exists; analysis outputs are never overwritten")
        temp = os.path.join(parent, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            os.makedirs(temp)
            for file, data in files.items():
                os.makedirs(os.path.dirname(os.path.join(temp, file)), exist_ok=True)
                with open(os.path.join(temp, file), "wb") as sink:
                    sink.write(data)
            os.rename(temp, final)
        except BaseException as exc:
            shutil.rmtree(temp, ignore_errors=True)
            if isinstance(exc, OSError):   # name the folder the user will look for, not the temporary
                exc.filename = final
            raise
        return [self.display(f"{final}/{file}") for file in files]

    def write_analysis(self, experiment: str, invocation_id: str, relpath: str, data: bytes) -> str:
        """Write one analysis output under ``<invocation>/analysis/``; refuses to overwrite an existing
        file (FileExistsError). Returns its display path."""
        path = f"{self.invocation_dir(experiment, invocation_id)}/analysis/{relpath}"
        try:
            self.objects.put(path, data)
        except FileExistsError:
            raise FileExistsError(f"{self.display(path)} exists; analysis outputs are never overwritten") from None
        return self.display(path)

    def _files(self, base: str) -> list[pafs.FileInfo]:
        if self.fs.get_file_info(base).type == pafs.FileType.NotFound:
            return []
        return [f for f in self.fs.get_file_info(pafs.FileSelector(base, recursive=True)) if f.type == pafs.FileType.File]

    def list_parts(self, experiment: str | None = None, invocation_id: str | None = None) -> list[str]:
        """Paths of complete trace parts: of one invocation, one experiment, or the whole store."""
        base = self.root
        if experiment:
            base = self.invocation_dir(experiment, invocation_id) if invocation_id else f"{self.root}/{experiment}"
        return sorted(f.path for f in self._files(base)
                      if f.base_name.endswith(".parquet") and not f.base_name.startswith(".")
                      and f.path.rsplit("/", 2)[-2] == TRACES)

    def dataset(self, experiment: str | None = None, invocation_id: str | None = None,
                schema: pa.Schema | None = None) -> pads.Dataset:
        """A pyarrow dataset over the complete parts (lazy; read only the columns you need). ``schema``
        names the columns to read (default: the core columns plus every registered instrument's,
        ``grid.instrument.known_trace_schema``); a part lacking one reads it as null."""
        if schema is None:
            from mirrorscan.grid.instrument import known_trace_schema

            schema = known_trace_schema()
        return pads.dataset(self.list_parts(experiment, invocation_id), schema=schema,
                            format="parquet", filesystem=self.fs)

    def read(self, experiment: str, invocation_id: str, columns: list[str] | None = None,
             schema: pa.Schema | None = None) -> pa.Table:
        """The invocation's traces (selected columns; ``schema`` as in ``dataset``) as one table. Columns that are
        all core ones read with the core schema alone, so that no instrument is imported for them."""
        if schema is None and columns is not None and set(columns) <= CORE_COLUMNS:
            schema = TRACE_SCHEMA
        return self.dataset(experiment, invocation_id, schema).to_table(columns=columns)

    def read_bytes(self, path: str) -> bytes:
        """The whole content of one object."""
        with self.fs.open_input_stream(path) as src:
            return src.read()

    def cleanup(self, experiment: str, invocation_id: str) -> tuple[list[str], list[str]]:
        """Remove what unfinished writes left (local temporaries, S3 unfinished multipart uploads) and
        quarantine unreadable parts; return (removed, quarantined). Run it when no writer is active."""
        removed = self.objects.remove_incomplete(self.traces_dir(experiment, invocation_id))
        quarantined = []
        for path in self.list_parts(experiment, invocation_id):
            try:
                with self.fs.open_input_file(path) as src:
                    pq.read_metadata(src)
            except (OSError, pa.ArrowInvalid) as exc:
                target = f"{self.invocation_dir(experiment, invocation_id)}/{QUARANTINE}/{path.rsplit('/', 1)[-1]}"
                try:
                    self.objects.put(target, self.read_bytes(path))
                except FileExistsError:   # quarantined before, but the delete did not happen
                    pass
                self.objects.delete(path)
                log.warning("quarantined unreadable trace part %s → %s (%s)", path, target, exc)
                quarantined.append(target)
        return removed, quarantined
