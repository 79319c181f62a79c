"""Weight identities: a file's SHA-256 is computed once and then served from the cache keyed by its path, size
and mtime; a changed file changes the identity; a hub snapshot is named by its commit."""

from __future__ import annotations

import hashlib
import os
import shutil

from mirrorscan.cluster.models.weights import HashCache, describe, hub_commit, same_weights, weights_identity


def test_a_weight_file_is_hashed_once_then_served_from_the_cache(tmp_path, tiny_dir):
    folder = tmp_path / "model"
    shutil.copytree(tiny_dir, folder)
    weights = folder / "model.safetensors"
    cache = HashCache(tmp_path / "cache" / "weight-hashes.json")
    first = weights_identity(str(folder), "hf", cache)
    assert first["kind"] == "sha256" and list(first["files"]) == ["model.safetensors"]
    assert first["files"]["model.safetensors"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert (cache.computed, cache.served) == (1, 0)

    again = HashCache(cache.path)   # another process: reads the cache file
    assert weights_identity(str(folder), "hf", again) == first
    assert (again.computed, again.served) == (0, 1)

    # the cache is keyed by path, size and mtime: bytes changed under the same size and mtime are not read again
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights_identity(str(folder), "hf", HashCache(cache.path)) == first

    # a write that moves the mtime is hashed again, and the identity changes
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    third = HashCache(cache.path)
    changed = weights_identity(str(folder), "hf", third)
    assert third.computed == 1
    assert changed["sha256"] != first["sha256"]
    assert changed["files"]["model.safetensors"] == hashlib.sha256(bytes(data)).hexdigest()
    assert same_weights(first, changed) is False and same_weights(first, first) is True
    assert describe(first).startswith(f"sha256 {first['sha256'][:12]}")


def test_a_hub_snapshot_is_named_by_its_commit_and_unknowns_stay_unknown(tmp_path):
    snapshot = tmp_path / "hub" / "models--org--name" / "snapshots" / ("ab" * 20)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert hub_commit(snapshot) == ("org/name", "ab" * 20)
    identity = weights_identity(str(snapshot), "hf", HashCache(tmp_path / "c.json"))
    assert identity == {"kind": "hub_commit", "repo": "org/name", "commit": "ab" * 20}
    assert same_weights(None, identity) is None and describe(None) == "unknown"
    api = weights_identity("gpt-x", "openai")
    assert api["value"] == "unknown" and same_weights(api, api) is None
