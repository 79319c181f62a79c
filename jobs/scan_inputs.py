"""What a scan reads and records about its inputs: where the config lives, the config as submitted, the
hashes of the item sets and templates it read, the models' weight identities, and which inputs changed
since an invocation started (``jobs.scan`` uses these before anything runs)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.spec import Spec

CONFIG_ORIGIN_ENV = "MIRRORSCAN_CONFIG_ORIGIN"
"""Set by ``mirrorscan submit`` for its job: the config.json path it was submitted from (the job itself
runs from an uploaded copy of the working_dir, at a new path each time)."""


def config_origin(spec: Spec) -> str:
    """Where the experiment's config.json lives, as recorded in ``scan_runs.submitted_config.file``: the
    submitting machine's path for a submitted job, else this one's."""
    return os.environ.get(CONFIG_ORIGIN_ENV) or str(Path(spec.config_path).resolve())


def check_experiment_home(catalog, spec: Spec) -> None:
    """ConfigError when the experiment's name already belongs to runs started from another folder's
    config.json: two folders of one name would mix their invocations (``--as`` names one explicitly)."""
    this = config_origin(spec)
    files = catalog.config_files(spec.experiment)
    if files and this not in files:
        raise ConfigError(spec.config_path, "(experiment folder name)",
                          f"experiment {spec.experiment!r} already holds runs of {files[0]}",
                          f"rename this folder, or pass --as NAME (a new name; or --as {spec.experiment} if this "
                          f"folder is that experiment, moved)")


def submitted_config(spec: Spec) -> dict:
    """The config as submitted, for the driver run's record: its path and JSON as parsed, a catalog_dsn's
    password removed (every other secret was refused when the config was validated)."""
    from mirrorscan.cluster.catalog import redact_dsn

    config = dict(spec.raw)
    if isinstance(config.get("catalog_dsn"), str):
        config["catalog_dsn"] = redact_dsn(config["catalog_dsn"])
    return {"file": config_origin(spec), "config": config}


def content_hashes(spec: Spec) -> dict:
    """Hashes of the inputs an invocation read (the instrument's item sets and templates), for the catalog."""
    hashes = getattr(spec.instrument, "content_hashes", None)
    if hashes is not None:
        return hashes(spec.instrument_spec)
    frozen = json.dumps(spec.instrument.frozen(spec.instrument_spec), sort_keys=True, ensure_ascii=False)
    return {"instrument_settings": hashlib.sha256(frozen.encode()).hexdigest()}


def model_weights(spec: Spec, sources: dict) -> dict:
    """Each model variant's weight identity (``cluster.weights``), by label; a model whose identity cannot be
    read (a hub id gone from the cache) is recorded as unknown with the reason, never failing the scan."""
    from mirrorscan.cluster.weights import UNKNOWN, weights_identity

    out = {}
    for m in spec.models:
        try:
            out[m.label] = weights_identity(sources[m.label], m.backend)
        except Exception as exc:   # noqa: BLE001 - identity is provenance; the engine reports a bad source itself
            out[m.label] = {"kind": UNKNOWN, "value": UNKNOWN, "reason": f"{type(exc).__name__}: {exc}"}
    return out


def changed_inputs(inv: dict, spec: Spec) -> list[str]:
    """Names of the inputs (item sets, templates) whose content differs from what invocation ``inv`` read at
    its start, by the hashes the catalog recorded; none for an instrument that hashes no input files. A
    changed file also changes fields derived from it (counts, hashes): those are not what the user edits."""
    if getattr(spec.instrument, "content_hashes", None) is None:
        return []
    before, now = inv.get("content_hashes") or {}, content_hashes(spec)
    return [name for name in sorted(now) if name in before and before[name] != now[name]]


def changed_inputs_detail(inv: dict, spec: Spec) -> str:
    """``name: old… → new…`` (SHA-256 prefixes) for each input of ``changed_inputs``."""
    before, now = inv["content_hashes"], content_hashes(spec)
    return "; ".join(f"{name} SHA-256 {before[name][:12]}… → {now[name][:12]}…" for name in changed_inputs(inv, spec))
