"""What a scan reads and records about its inputs, and what it checks against earlier invocations before
anything runs: where the config lives, the config as submitted, the hashes of the item sets and templates it
read, the models' weight identities, which inputs changed since an invocation started, which invocation a
resume finishes, and what an appending instrument already holds (``cluster.scan.run`` uses these)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

from mirrorscan.cluster.catalog.runs import pid_alive
from mirrorscan.cluster.scan.stages import (NO_INVOCATION, StageScope, earlier_rows, grid_cells, instrument_ref,
                                       of_model_sources, stage_grids)
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.settings import Settings
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
    from mirrorscan.cluster.catalog.client import redact_dsn

    redacted = {"catalog_dsn": redact_dsn(spec.catalog_dsn)} if spec.catalog_dsn else {}
    return {"file": config_origin(spec), "config": {**spec.raw, **redacted}}


def content_hashes(spec: Spec) -> dict:
    """Hashes of the inputs an invocation read (the instrument's item sets and templates), for the catalog."""
    hashes = spec.instrument.content_hashes(spec.instrument_spec)
    if hashes:
        return hashes
    frozen = json.dumps(spec.instrument.frozen(spec.instrument_spec), sort_keys=True, ensure_ascii=False)
    return {"instrument_settings": hashlib.sha256(frozen.encode()).hexdigest()}


def model_weights(spec: Spec, model_sources: dict) -> dict:
    """Each model variant's weight identity (``cluster.models.weights``), by label; a model whose identity cannot be
    read (a hub id gone from the cache) is recorded as unknown with the reason, never failing the scan."""
    from mirrorscan.cluster.models.weights import UNKNOWN, weights_identity

    out = {}
    for m in spec.models:
        try:
            out[m.label] = weights_identity(model_sources[m.label], m.backend)
        except Exception as exc:   # noqa: BLE001 - identity is provenance; the engine reports a bad source itself
            out[m.label] = {"kind": UNKNOWN, "value": UNKNOWN, "reason": f"{type(exc).__name__}: {exc}"}
    return out


def changed_inputs(inv: dict, spec: Spec) -> list[str]:
    """Names of the inputs (item sets, templates) whose content differs from what invocation ``inv`` read at
    its start, by the hashes the catalog recorded; none for an instrument that hashes no input files. A
    changed file also changes fields derived from it (counts, hashes): those are not what the user edits."""
    if not spec.instrument.content_hashes(spec.instrument_spec):
        return []
    before, now = inv.get("content_hashes") or {}, content_hashes(spec)
    return [name for name in sorted(now) if name in before and before[name] != now[name]]


def changed_inputs_detail(inv: dict, spec: Spec) -> str:
    """``name: old… → new…`` (SHA-256 prefixes) for each input of ``changed_inputs``."""
    before, now = inv["content_hashes"], content_hashes(spec)
    return "; ".join(f"{name} SHA-256 {before[name][:12]}… → {now[name][:12]}…" for name in changed_inputs(inv, spec))


def resume_target(catalog, spec: Spec, settings: Settings, invocation_id: str | None = None) -> dict:
    """The invocation a resume finishes: ``invocation_id``, else the experiment's newest unfinished one; refused
    when there is none, its inputs or result-shaping settings changed, or another process still runs it."""
    inv = catalog.newest_unfinished(spec.experiment) if invocation_id is None else catalog.get_invocation(invocation_id)
    if invocation_id is None and inv is None:
        raise ConfigError(spec.config_path, "--resume", f"experiment {spec.experiment!r} has no unfinished invocation",
                          "run scan without --resume to start a new invocation")
    if inv is None or inv["status"] == "complete":
        raise ConfigError(spec.config_path, "--resume", f"invocation {invocation_id} is "
                          f"{'complete' if inv else 'not in the catalog'}", "run without --resume to start a new one")
    changed = changed_inputs(inv, spec)
    if changed:
        raise ConfigError(spec.config_path, ", ".join(changed),
                          f"file content changed since invocation {inv['invocation_id']} started "
                          f"({changed_inputs_detail(inv, spec)})",
                          "put the file back as it was, or start a new invocation without --resume")
    diffs = settings.shaping_differences(inv["settings"])
    if diffs:
        raise ConfigError(spec.config_path, ", ".join(diffs),
                          f"differs from the frozen settings of invocation {inv['invocation_id']}",
                          "restore those fields in config.json, or start a new invocation without --resume")
    if inv["status"] == "running" and inv["host"] == socket.gethostname() and inv["pid"] != os.getpid() \
            and pid_alive(int(inv["pid"])) and not catalog.execute(   # an invocation from before driver runs
                "SELECT 1 FROM scan_runs WHERE invocation_id = %s", [inv["invocation_id"]]):
        raise ConfigError(spec.config_path, "--resume", f"invocation {inv['invocation_id']} is still running (pid {inv['pid']})",
                          "wait for it to finish or stop that process first")
    return inv


def earlier_scans(catalog, experiment: str) -> list[tuple[str, object, dict]]:
    """The experiment's scan invocations as (invocation id, start, frozen instrument settings), oldest first:
    neither imports nor reproductions. The instrument reads what it needs of them (open_scan: which text each
    probe had)."""
    rows = catalog.execute(
        "SELECT invocation_id::text, started_at, settings->'instrument_settings' FROM "
        "scan_invocations WHERE experiment = %s AND reproduces IS NULL AND reconstructed_from IS NULL AND "
        "settings->'execution'->>'reproduces' IS NULL ORDER BY started_at, invocation_id", [experiment])
    return [(i, t, s or {}) for i, t, s in rows]


def check_append(spec: Spec, settings: Settings, model_sources: dict, trace_store, accept_changed: bool,
                 catalog=None) -> tuple[list[str], bool]:
    """Before a new invocation of an instrument that holds cells across invocations (``held_cells``): refuse a
    label that earlier invocations ran with another model, let the instrument check its items
    (``check_append``: open_scan's changed probes) and return (lines to print, whether nothing is left to
    run). Other instruments: ([], False)."""
    ref = instrument_ref(settings)
    if not ref.instrument.appends:
        return [], False
    earlier = earlier_rows(StageScope(trace_store, spec.experiment, NO_INVOCATION, ref))
    own = ref.instrument.scanned_rows(earlier)   # imported rows name their models as their file did
    if own.num_rows:
        pairs = own.group_by(["label", "model", "model_canonical"]).aggregate([]).to_pylist()
        for i, m in enumerate(spec.models):
            other = next((p for p in pairs if p["label"] == m.label and p["model_canonical"] != model_sources[m.label]),
                         None)
            if other is not None:
                raise ConfigError(spec.config_path, f"models[{i}].label", f"label {m.label!r} already names "
                                  f"{other['model']!r} ({other['model_canonical']}) in experiment {spec.experiment!r}, "
                                  f"and now names {m.model!r} ({model_sources[m.label]})",
                                  "give this model its own label (two models never share one in an experiment)")
    notes = list(ref.instrument.check_append(ref.spec, earlier, accept_changed,
                                             scans=earlier_scans(catalog, spec.experiment) if catalog is not None else None))
    if notes:   # a recorded change (a changed or reverted probe, a new series) makes an invocation, cells or not
        return notes, False
    scope = StageScope(trace_store, spec.experiment, NO_INVOCATION, ref, model_sources)
    for stage in stage_grids(scope, grid_cells(settings), of_model_sources(earlier, model_sources)):
        if stage.cells.num_rows:
            return notes, False
    return notes, True   # the scan's summary says so
