"""The trace store: Parquet parts under ``<store>/<experiment>/<invocation_id>/traces/``.

One code path for a local directory and (Part 5) ``s3://`` through pyarrow filesystems. Writes are
append-only: every part has a name unique per writer and attempt, is written under a temporary name
(``.<name>.tmp``) and renamed when complete, so a reader never sees half a part. Readers list only
``*.parquet`` names that do not start with ``.``; ``cleanup`` removes stale temporaries and moves
unreadable parts to ``quarantine/`` with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from grid.trace_schema import TRACE_SCHEMA

log = logging.getLogger(__name__)
TRACES = "traces"
QUARANTINE = "quarantine"
MANIFEST = "invocation.json"


def open_store(uri: str) -> "TraceStore":
    """A TraceStore for a local folder (absolute or relative path, or ``file://``) or an ``s3://`` URI."""
    if "://" not in uri:
        os.makedirs(uri, exist_ok=True)
        return TraceStore(uri=os.path.abspath(uri), fs=pafs.LocalFileSystem(), root=os.path.abspath(uri))
    fs, root = pafs.FileSystem.from_uri(uri)
    return TraceStore(uri=uri, fs=fs, root=root.rstrip("/"))


@dataclass
class TraceStore:
    """Where traces and manifests of invocations are kept."""

    uri: str
    fs: pafs.FileSystem
    root: str

    def invocation_dir(self, experiment: str, invocation_id: str) -> str:
        """Folder of one invocation (filesystem path, not URI)."""
        return f"{self.root}/{experiment}/{invocation_id}"

    def traces_dir(self, experiment: str, invocation_id: str) -> str:
        """Folder holding the invocation's trace parts."""
        return f"{self.invocation_dir(experiment, invocation_id)}/{TRACES}"

    def display(self, path: str) -> str:
        """A path as the user should see it (with the s3:// scheme where it applies)."""
        return path if isinstance(self.fs, pafs.LocalFileSystem) else f"{self.uri.split('://')[0]}://{path}"

    def write_part(self, table: pa.Table, experiment: str, invocation_id: str, writer: str) -> str:
        """Write one immutable part (Parquet, zstd); return its path. Never overwrites an existing part."""
        folder = self.traces_dir(experiment, invocation_id)
        self.fs.create_dir(folder, recursive=True)
        name = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{writer}-{uuid.uuid4().hex[:12]}.parquet"
        final, temp = f"{folder}/{name}", f"{folder}/.{name}.tmp"
        with self.fs.open_output_stream(temp) as sink:
            pq.write_table(table, sink, compression="zstd")
        self.fs.move(temp, final)
        return final

    def write_manifest(self, experiment: str, invocation_id: str, manifest: dict) -> str:
        """Write ``invocation.json`` (settings and provenance) once; an existing manifest is kept as it is."""
        path = f"{self.invocation_dir(experiment, invocation_id)}/{MANIFEST}"
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            return path
        self.fs.create_dir(self.invocation_dir(experiment, invocation_id), recursive=True)
        with self.fs.open_output_stream(path) as sink:
            sink.write(json.dumps(manifest, indent=2, sort_keys=True, default=str).encode())
        return path

    def write_analysis(self, experiment: str, invocation_id: str, relpath: str, data: bytes) -> str:
        """Write one analysis output under ``<invocation>/analysis/`` (temporary name, then rename);
        refuses to overwrite an existing file. Returns its display path."""
        path = f"{self.invocation_dir(experiment, invocation_id)}/analysis/{relpath}"
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            raise FileExistsError(f"{self.display(path)} exists; analysis outputs are never overwritten")
        folder, name = path.rsplit("/", 1)
        self.fs.create_dir(folder, recursive=True)
        temp = f"{folder}/.{name}.tmp"
        with self.fs.open_output_stream(temp) as sink:
            sink.write(data)
        self.fs.move(temp, path)
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

    def dataset(self, experiment: str | None = None, invocation_id: str | None = None) -> pads.Dataset:
        """A pyarrow dataset over the complete parts (lazy; read only the columns you need)."""
        return pads.dataset(self.list_parts(experiment, invocation_id), schema=TRACE_SCHEMA,
                            format="parquet", filesystem=self.fs)

    def read(self, experiment: str, invocation_id: str, columns: list[str] | None = None) -> pa.Table:
        """The invocation's traces (selected columns) as one table."""
        return self.dataset(experiment, invocation_id).to_table(columns=columns)

    def cleanup(self, experiment: str, invocation_id: str) -> tuple[list[str], list[str]]:
        """Remove stale temporaries and quarantine unreadable parts; return (removed, quarantined)."""
        removed, quarantined = [], []
        folder = self.traces_dir(experiment, invocation_id)
        for info in self._files(folder):
            if info.base_name.startswith(".") and info.base_name.endswith(".tmp"):
                self.fs.delete_file(info.path)
                removed.append(info.path)
        for path in self.list_parts(experiment, invocation_id):
            try:
                with self.fs.open_input_file(path) as src:
                    pq.read_metadata(src)
            except (OSError, pa.ArrowInvalid) as exc:
                target_dir = f"{self.invocation_dir(experiment, invocation_id)}/{QUARANTINE}"
                self.fs.create_dir(target_dir, recursive=True)
                target = f"{target_dir}/{path.rsplit('/', 1)[-1]}"
                self.fs.move(path, target)
                log.warning("quarantined unreadable trace part %s → %s (%s)", path, target, exc)
                quarantined.append(target)
        return removed, quarantined
