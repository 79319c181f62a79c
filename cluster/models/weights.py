"""A recorded identity for a model's weights: what an invocation ran, so a reproduction can tell whether it runs
the same weights.

An identity is one of:

- ``hub_commit`` — the model is a Hugging Face hub snapshot (a hub id found in the local cache, or a folder
  ``…/models--org--name/snapshots/<commit>/``): the snapshot's commit hash names the weights exactly;
- ``sha256`` — any other local folder: SHA-256 of each weight file (``WEIGHT_SUFFIXES``, found recursively)
  and one SHA-256 over the sorted ``relative/path<TAB>sha256`` lines of them all;
- ``api`` — a model behind an HTTP API: its weights are not visible here (the identity is its name at the
  endpoint, and ``value`` is ``"unknown"``).

Hashing a weight file reads it whole (about 1 s per GiB), so each file's hash is cached in
``$MIRRORSCAN_HOME/cache/weight-hashes.json``, keyed by the file's real path, size in bytes and mtime in
nanoseconds: a file is hashed once, and any write that changes its size or mtime hashes it again. The cache
is shared by processes (an exclusive lock while it is updated, replaced atomically).

Invocations recorded before identities existed have none; readers say "unknown" for them (``describe``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mirrorscan.grid.files import file_sha256, sha256

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".msgpack", ".npz")
"""File endings that hold weights (tokenizer and config files are not weights and are left out)."""
CACHE_NAME = "weight-hashes.json"
"""The hash cache's file name under ``$MIRRORSCAN_HOME/cache/``."""
UNKNOWN = "unknown"
"""What an identity says when none was recorded, or none can be known here."""


@dataclass
class HashCache:
    """SHA-256 of files, cached by (real path, size, mtime_ns) in one JSON file."""

    path: Path
    """The cache file (created on first store)."""
    computed: int = 0
    """Files hashed by this object (cache misses)."""
    served: int = 0
    """Hashes served from the cache (hits)."""
    _entries: dict | None = field(default=None, repr=False)

    @classmethod
    def default(cls) -> HashCache:
        """The cache under the mirrorscan home folder."""
        from mirrorscan.cluster.home import subdir

        return cls(subdir("cache") / CACHE_NAME)

    def _read(self) -> dict:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def sha256(self, file: str | Path) -> str:
        """Hex SHA-256 of ``file``'s bytes: from the cache when its path, size and mtime match an entry, else
        read now (and stored)."""
        real = os.path.realpath(file)
        stat = os.stat(real)
        key = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        if self._entries is None:
            self._entries = self._read()
        found = self._entries.get(real)
        if found and found.get("size") == key["size"] and found.get("mtime_ns") == key["mtime_ns"]:
            self.served += 1
            return found["sha256"]
        digest = file_sha256(real)
        self.computed += 1
        self._store(real, {**key, "sha256": digest})
        return digest

    def _store(self, real: str, entry: dict) -> None:
        """Add one entry under an exclusive lock (entries other processes wrote meanwhile are kept)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(self.path.with_name(f".{self.path.name}.lock")):
            entries = self._read()
            entries[real] = entry
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entries, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path)
        self._entries = entries


@contextlib.contextmanager
def _locked(lock_path: Path):
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def weight_files(folder: str | Path) -> list[Path]:
    """The weight files under ``folder`` (recursive, ``WEIGHT_SUFFIXES``; hidden files left out), sorted."""
    folder = Path(folder)
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def hub_commit(folder: str | Path) -> tuple[str, str] | None:
    """(repo id, commit) when ``folder`` is a snapshot in a Hugging Face cache (``models--org--name/snapshots/
    <commit>``), else None."""
    real = Path(os.path.realpath(folder))
    if real.parent.name != "snapshots" or not real.parent.parent.name.startswith("models--"):
        return None
    repo = real.parent.parent.name[len("models--"):].replace("--", "/")
    return repo, real.name


def weights_identity(source: str, backend: str = "hf", cache: HashCache | None = None) -> dict:
    """The identity of the weights at ``source`` (a resolved model source: a folder or a cached hub id; an API
    model's name for an API backend), as plain JSON: ``{"kind": "hub_commit", "repo", "commit"}``,
    ``{"kind": "sha256", "sha256", "files": {relative path: sha256}}``, or ``{"kind": "api", "model",
    "value": "unknown"}``. A folder without weight files gives ``sha256`` over no files (``files`` empty)."""
    if backend in ("openai", "anthropic"):
        return {"kind": "api", "model": source, "value": UNKNOWN}
    folder = Path(source)
    if not folder.is_dir():   # a hub id: its cached snapshot
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(source, local_files_only=True))
    found = hub_commit(folder)
    if found is not None:
        return {"kind": "hub_commit", "repo": found[0], "commit": found[1]}
    cache = cache or HashCache.default()
    files = {str(p.relative_to(folder)): cache.sha256(p) for p in weight_files(folder)}
    combined = sha256("".join(f"{name}\t{sha}\n" for name, sha in sorted(files.items())).encode())
    return {"kind": "sha256", "sha256": combined, "files": files}


def describe(identity: dict | None) -> str:
    """One short line for an identity: ``hub org/name@<commit12>``, ``sha256 <hex12>…``, ``api (unknown)``, or
    ``unknown`` (none recorded)."""
    if not identity:
        return UNKNOWN
    kind = identity.get("kind")
    if kind == "hub_commit":
        return f"hub {identity.get('repo')}@{str(identity.get('commit'))[:12]}"
    if kind == "sha256":
        return f"sha256 {str(identity.get('sha256'))[:12]}… ({len(identity.get('files') or {})} file(s))"
    return f"{kind} ({identity.get('value', UNKNOWN)})"


def same_weights(recorded: dict | None, now: dict | None) -> bool | None:
    """Whether two identities name the same weights: True or False, or None when either is unknown (none
    recorded, or an API model)."""
    if not recorded or not now or UNKNOWN in (recorded.get("value"), now.get("value")):
        return None
    if recorded.get("kind") != now.get("kind"):
        return None   # a snapshot commit and a file hash cannot be compared
    if recorded["kind"] == "hub_commit":
        return (recorded.get("repo"), recorded.get("commit")) == (now.get("repo"), now.get("commit"))
    return recorded.get("sha256") == now.get("sha256")
