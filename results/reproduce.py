"""Rebuild an invocation's exact spec from its frozen settings, and say what cannot be restored.

``plan(target)`` reads the invocation (catalog row, settings in either format, traces, manifest) and returns a
``Plan``: a ``grid.spec.Spec`` whose ``settings()`` are the frozen ones — models with their sources,
backends, endpoints, dtypes, sampling and overrides; the instrument's frozen section (envelopes or framings,
items and their hashes, orderings); samples, seed, max_tokens, batch size — plus the cells to run and one
warning per difference it cannot restore:

- result-shaping settings that come out differently today (e.g. the HF sampler's version of a sampled grid);
- items: the instrument expands the grid from its item files when their hashes match what was frozen; when
  a file changed or is gone, the cells are rebuilt from the coordinates stored in the traces (first stage
  only; cells of the original with no stored row cannot be recovered), which carry the item texts the
  instrument renders (rows stored before they did cannot be rendered: reproduce refuses);
- model sources that resolve elsewhere now, and weights whose recorded identity (``cluster.models.weights``)
  differs from today's, or was never recorded ("unknown");
- package versions, and the git tree (another commit, or a dirty one then or now).

An imported invocation (``open_scan import``: rows from a file, no grid run) is refused in one line.

Nothing here runs the grid or writes anything: the plan's spec and ``reproduction()`` make the run
(``cluster.scan.run.ScanRun``) that ``mirrorscan reproduce`` executes as a new invocation of the same
experiment (``reproduces`` recorded), or with ``--resume`` to finish an unfinished one, and ends with
``results.diff``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.cells import with_probe_ids
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.spec import API_BACKENDS, Spec
from mirrorscan.results.invocations import Invocation, load, resolve_rows

ITEMS_FROM_FILES, ITEMS_FROM_TRACES = "item files", "stored coordinates"
"""Where a plan's cells come from."""


@dataclass
class Plan:
    """A reproduction, ready to run: the rebuilt spec, its cells, and what could not be restored."""

    original: Invocation
    """The invocation reproduced."""
    spec: Spec
    """The spec rebuilt from the frozen settings (``spec.settings()`` is what the new invocation freezes)."""
    model_sources: dict[str, str]
    """Label → model source resolved now (a folder, a cached hub id, or an API model's name)."""
    weights: dict[str, dict]
    """Label → the identity of those weights now (``cluster.models.weights``)."""
    items_from: str
    """ITEMS_FROM_FILES or ITEMS_FROM_TRACES."""
    cells: pa.Table | None
    """With ITEMS_FROM_TRACES: the first stage's cells rebuilt from the stored coordinates (probe ids
    added); None: the instrument expands them from its files."""
    submitted: dict
    """What the new driver run records as submitted: the original's config file where one is known."""
    warnings: list[str] = field(default_factory=list)
    """One line per difference that cannot be restored."""
    resumes: str | None = None
    """With ``resume``: the unfinished reproduction of ``original`` that this run finishes (its id)."""

    def reproduction(self):
        """What makes the run of this plan a reproduction (``cluster.scan.records.Reproduction``): the original,
        the cells, what was submitted, the model sources, the reproduction it finishes and the warnings."""
        from mirrorscan.cluster.scan.records import Reproduction

        return Reproduction(self.original.invocation_id, self.cells, self.submitted, self.model_sources, self.resumes,
                            tuple(self.warnings))

    @property
    def n_cells(self) -> int:
        """Cells of the first stage the reproduction runs."""
        return self.cells.num_rows if self.cells is not None else self.spec.n_cells()


def spec_from_settings(frozen: Settings, config_path: str, store_uri: str | None) -> Spec:
    """The ``Spec`` ``frozen`` settings describe, as if its config had been validated again:
    ``Spec.settings()`` gives back their result-shaping part. ``config_path`` is what errors name (the
    original config file where known); ``store_uri`` the store to write to."""
    from mirrorscan.grid.input_paths import absolute_inputs, experiment_folder
    from mirrorscan.grid.instrument import resolve

    instrument = resolve(frozen.instrument)
    inputs = absolute_inputs(frozen.instrument_settings, experiment_folder(config_path))   # ./… beside config.json
    # max_concurrent_models is left to the run's default (all models on a cluster, one on a local Ray)
    return Spec(config_path=config_path, experiment=frozen.experiment, raw={"models": frozen.to_json()["models"]},
                models=frozen.models, instrument=instrument,
                instrument_spec=instrument.from_frozen(inputs), instrument_name=frozen.instrument,
                description=frozen.description, samples=frozen.samples, temperature=frozen.temperature,
                top_p=frozen.top_p, max_tokens=frozen.max_tokens, seed=frozen.seed, batch_size=frozen.batch_size,
                actor_pool_size=frozen.execution.actor_pool_size or 1, store=store_uri)


def run_order(store, experiment: str, invocation_id: str) -> dict[tuple[str, int], int]:
    """(probe_id, sample) → where the invocation first ran the cell: its stored parts (each one engine batch,
    its rows in the batch's order) ordered by the earliest start their rows record (parts without one last,
    ties in the store's order), their rows one after another."""
    import pyarrow.parquet as pq

    parts = []
    for n, path in enumerate(store.list_parts(experiment, invocation_id)):
        with store.fs.open_input_file(path) as src:
            part = pq.read_table(src, columns=["probe_id", "sample", "started_at"])
        start = pc.min(part.column("started_at")).as_py() if part.num_rows else None
        parts.append((start is None, start.timestamp() if start is not None else 0.0, n, part))
    order: dict[tuple[str, int], int] = {}
    for *_, part in sorted(parts, key=lambda p: p[:3]):
        for key in zip(part.column("probe_id").to_pylist(), part.column("sample").to_pylist()):
            order.setdefault(key, len(order))
    return order


def stored_cells(traces: pa.Table, instrument, order: dict[tuple[str, int], int] | None = None) -> pa.Table:
    """The first-stage cells of ``traces`` (every cell with a stored row, errors included), from their stored
    coordinates, with probe ids: what the grid was, without its item files. With ``order`` (``run_order``)
    they come in the order the original ran them, so that, cut at the same batch size, the reproduction's
    batches hold the same cells (left padding can move a greedy answer); else in the order read."""
    from mirrorscan.cluster.scan.stages import STAGE_SEP

    rows = traces
    if instrument.stages:
        rows = rows.filter(pc.invert(pc.match_substring(rows.column("item_key"), STAGE_SEP)))
    columns = ["label", "item_key", "envelope", "ordering", "sample", *instrument.coordinates]
    first: dict[tuple[str, int], int] = {}
    for i, key in enumerate(zip(rows.column("probe_id").to_pylist(), rows.column("sample").to_pylist())):
        first.setdefault(key, i)
    keys = sorted(first, key=lambda k: order.get(k, len(order))) if order is not None else list(first)
    cells = rows.take(pa.array([first[k] for k in keys], pa.int64())).select(columns)
    return with_probe_ids(cells, instrument=instrument.name)


def submitted_config(invocation_id: str, dsn: str | None = None) -> dict | None:
    """The config as the invocation's first driver run recorded it (``scan_runs.submitted_config``: its file
    and JSON); None when none was recorded (before migration 0004)."""
    from mirrorscan.cluster.catalog.client import Catalog

    with Catalog(dsn) as catalog:
        rows = catalog.execute(
            "SELECT submitted_config FROM scan_runs WHERE invocation_id = %s AND submitted_config IS NOT NULL "
            "ORDER BY started_at LIMIT 1", [invocation_id])
    return rows[0][0] if rows else None


def _recorded_model_sources(original: Invocation) -> dict[str, str]:
    """Label → the model source the original resolved (its manifest, else its trace rows)."""
    recorded = dict((original.manifest or {}).get("model_sources") or {})
    if not recorded and original.traces.num_rows:
        pairs = original.traces.select(["label", "model_canonical"]).group_by(["label", "model_canonical"]).aggregate([])
        recorded = dict(zip(pairs.column("label").to_pylist(), pairs.column("model_canonical").to_pylist()))
    return recorded


def _resolve_model_sources(spec: Spec, config_file: str, recorded: dict[str, str],
                           warnings: list[str]) -> dict[str, str]:
    """Each model's source now: an API model's name; else its entry resolved as a scan resolves it (relative
    paths next to the original config file), falling back to the source the original recorded."""
    from mirrorscan.cluster.models.resolve import resolve_model_source

    model_sources = {}
    for i, m in enumerate(spec.models):
        if m.backend in API_BACKENDS:
            model_sources[m.label] = m.model
            continue
        before = recorded.get(m.label)
        try:
            now = resolve_model_source(m.model, config_file, f"models[{i}].model")
        except ConfigError as exc:
            if before and (os.path.isdir(before) or not before.startswith("/")):
                warnings.append(f"model {m.label}: {m.model!r} does not resolve now ({exc.problem}); using the source "
                                f"the original resolved, {before}")
                model_sources[m.label] = before
                continue
            raise
        if before and os.path.realpath(now) != os.path.realpath(before):
            warnings.append(f"model {m.label}: {m.model!r} resolves to {now} now, the original ran {before}")
        model_sources[m.label] = now
    return model_sources


def _weight_warnings(spec: Spec, model_sources: dict, recorded: dict | None, warnings: list[str]) -> dict[str, dict]:
    """Today's weight identities, with a warning for each that differs from the recorded one or cannot be
    compared."""
    from mirrorscan.cluster.models.weights import UNKNOWN, describe, same_weights, weights_identity

    now = {}
    for m in spec.models:
        try:
            now[m.label] = weights_identity(model_sources[m.label], m.backend)
        except Exception as exc:   # noqa: BLE001 - an identity that cannot be read is a warning, not a stop
            now[m.label] = {"kind": UNKNOWN, "value": UNKNOWN, "reason": f"{type(exc).__name__}: {exc}"}
        before = (recorded or {}).get(m.label)
        same = same_weights(before, now[m.label])
        if same is False:
            warnings.append(f"model {m.label}: weights differ (recorded {describe(before)}, now {describe(now[m.label])})")
        elif same is None:
            why = "the original recorded no weight identity" if not before else "the identities cannot be compared"
            warnings.append(f"model {m.label}: weights unknown ({why}; recorded {describe(before)}, "
                            f"now {describe(now[m.label])})")
    return now


def _provenance_warnings(row: dict, warnings: list[str]) -> None:
    """Package versions and the git tree: then (the catalog row) against now."""
    from mirrorscan.cluster.runtime.provenance import git_state, package_versions

    then, now = row.get("package_versions") or {}, package_versions()
    for name in sorted(set(then) | set(now)):
        if then.get(name) != now.get(name):
            warnings.append(f"package {name}: {then.get(name, 'absent')} then, {now.get(name, 'absent')} now")
    sha, dirty = git_state()
    if row.get("git_sha") != sha:
        warnings.append(f"git: the original ran commit {row.get('git_sha') or 'unknown'}, this is "
                        f"{sha or 'not a git tree'}")
    if row.get("git_dirty"):
        warnings.append("git: the original ran from a tree with uncommitted changes")
    if dirty:
        warnings.append("git: this tree has uncommitted changes")


def _cells(spec: Spec, original: Invocation, warnings: list[str]) -> tuple[str, pa.Table | None]:
    """Where the cells come from: the item files when the instrument can expand them (their hashes match),
    else the stored coordinates. Those must render without the files: every instrument's cells carry the item
    text they render (forced_choice's word pair, flinch's carrier, lens's framed text, open_scan's query);
    rows stored before they did make reproduce refuse."""
    labels = [m.label for m in spec.models]
    try:
        with_probe_ids(spec.instrument.cells(spec.instrument_spec, labels, spec.samples),
                       instrument=spec.instrument.name)   # reads the item files and checks their hashes
    except (ConfigError, OSError) as exc:
        problem = exc.problem if isinstance(exc, ConfigError) else str(exc)
        where = f"{exc.file}: " if isinstance(exc, ConfigError) and exc.file else ""
        warnings.append(f"items: {where}{problem}; the cells are rebuilt from the coordinates stored in the traces")
        cells = stored_cells(original.traces, spec.instrument,
                             run_order(original.store, original.experiment, original.invocation_id))
        planned = int((original.row.get("counts") or {}).get("cells") or 0)
        if planned > cells.num_rows and not spec.instrument.stages:
            warnings.append(f"items: {planned - cells.num_rows} of the original's {planned} cells have no stored row "
                            f"and cannot be rebuilt")
        try:
            spec.instrument.render(cells, spec.instrument_spec)   # every cell: string work, no engine
        except (ConfigError, OSError, KeyError) as err:
            raise ConfigError(getattr(err, "file", "") or "", "items", f"instrument {spec.instrument.name!r} renders "
                              f"its prompts from the item file, which changed since invocation {original.invocation_id} "
                              f"(its stored rows do not carry the item texts it renders)",
                              "restore the file as it was, then reproduce again") from None
        return ITEMS_FROM_TRACES, cells
    return ITEMS_FROM_FILES, None


def unfinished_reproduction(target: str, dsn: str | None = None) -> tuple[str, str]:
    """(the original's id, the id of the reproduction to finish) for ``reproduce <target> --resume``: ``target``
    itself when it is an unfinished reproduction, else the newest unfinished reproduction of ``target``.
    ConfigError when there is none."""
    from mirrorscan.cluster.catalog.client import Catalog

    (row,) = resolve_rows(target, dsn=dsn)
    target_id = str(row["invocation_id"])
    if row.get("reproduces") and row["status"] != "complete":
        return str(row["reproduces"]), target_id
    with Catalog(dsn) as catalog:
        found = catalog.execute("SELECT invocation_id::text FROM scan_invocations WHERE reproduces = %s "
                                "AND status <> 'complete' ORDER BY started_at DESC LIMIT 1", [target_id])
    if not found:
        raise ConfigError("", "--resume", f"invocation {target_id} has no unfinished reproduction",
                          "run reproduce without --resume to start one")
    return target_id, found[0][0]


def plan(target: str, *, store: str | None = None, dsn: str | None = None, resume: bool = False) -> Plan:
    """The reproduction of invocation ``target`` (see the module docstring): read from the catalog at ``dsn``
    and the store (``store``, default the one it recorded), which the reproduction writes to as well. With
    ``resume``, the plan finishes an unfinished reproduction instead (``unfinished_reproduction``): the same
    spec and cells, rebuilt from the original again, and ``resumes`` names it."""
    resumes = None
    if resume:
        target, resumes = unfinished_reproduction(target, dsn)
    (row,) = resolve_rows(target, dsn=dsn)
    # the diff that ends a reproduction reads the original's rows: one without any is refused now, before a
    # new invocation is written (a finished invocation that planned no cells has none to read, and is planned)
    original = load(row, store=store, dsn=dsn, need_traces=needs_traces(row))
    imported = original.row.get("reconstructed_from") or original.settings.instrument_settings.get("imported")
    if imported:
        source = imported if isinstance(imported, str) else f"{imported.get('file')} sha256:{imported.get('sha256')}"
        raise ConfigError("", "invocation", f"invocation {original.invocation_id} was imported ({source}), not "
                          "scanned: it has no grid or sampling to run again",
                          f"import the file again, or reproduce a scan of experiment {original.experiment!r}")
    submitted = submitted_config(original.invocation_id, dsn) or {}
    # its ./ input paths are relative to this config file's folder (the manifest names it too)
    config_file = submitted.get("file") or (original.manifest or {}).get("config_file") or ""
    check_recorded_config(original, submitted, config_file or f"(invocation {original.invocation_id})")
    warnings: list[str] = []
    store_uri = store or original.row.get("store_uri") or original.settings.execution.store
    spec = spec_from_settings(original.settings, config_file or f"(invocation {original.invocation_id})", store_uri)
    rebuilt, frozen = spec.settings().to_json(), original.settings.to_json()
    for path in spec.settings().shaping_differences(original.row["settings"]):
        warnings.append(f"settings: {path} cannot be restored (frozen {_at(frozen, path)!r}, "
                        f"now {_at(rebuilt, path)!r})")
    model_sources = _resolve_model_sources(spec, config_file, _recorded_model_sources(original), warnings)
    weights = _weight_warnings(spec, model_sources, original.row.get("model_weights"), warnings)
    items_from, cells = _cells(spec, original, warnings)
    _provenance_warnings(original.row, warnings)
    record = {"reproduces": original.invocation_id}
    if config_file:
        record.update(file=config_file, **({"config": submitted["config"]} if "config" in submitted else {}))
    return Plan(original, spec, model_sources, weights, items_from, cells, record, warnings, resumes)


def needs_traces(row: dict) -> bool:
    """Whether a reproduction of the invocation of catalog ``row`` needs its stored rows to be found: always,
    except for a finished invocation that planned no cells (nothing to diff, nothing missing). An unfinished
    one without rows (interrupted before its first part landed) is finished by ``scan --resume`` instead."""
    return row.get("status") != "complete" or bool((row.get("counts") or {}).get("cells"))


def check_recorded_config(original: Invocation, submitted: dict, where: str) -> None:
    """Refuse to copy into a new invocation what a scan would refuse today (``grid.secrets.check_config_values``,
    ``grid.names.check_experiment_name``): the recorded config and the frozen settings' config values (not the
    instrument's section, which also holds what its item files say) hold no NUL and nothing shaped like a
    secret, and the experiment's name follows the name rule. Raises ConfigError naming ``where``."""
    from mirrorscan.grid.names import check_experiment_name
    from mirrorscan.grid.secrets import check_config_values

    fix = ("reproduce would copy it into a new invocation; scan a config without it instead, and delete the "
           "original's rows if they must go")
    check_experiment_name(original.experiment, where, "experiment")
    check_config_values(where, submitted.get("config") or {}, fix)
    check_config_values(where, {k: v for k, v in original.settings.to_json().items()
                                if k not in ("instrument_settings", "execution")}, fix)


def _at(settings: dict, path: str):
    """The value at a dotted path with ``[i]`` indexes (as ``grid.settings.settings_differences`` names them)."""
    import re

    value = settings
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            index = int(part[1:-1])
            value = value[index] if isinstance(value, list) and index < len(value) else None
        else:
            value = value.get(part) if isinstance(value, dict) else None
    return value


def describe(plan: Plan, stages: list) -> str:
    """The rebuilt spec in a few lines: experiment, instrument, models (source, backend) with each stage's
    cells and the sampling those cells carry, grid. ``stages``: the scan's own plan of the reproduction
    (``StagePlan``s with ``label``, ``stage``, ``cells`` and ``sampling_text()``), which the caller computes
    over the rebuilt settings and cells (the full grid, nothing held)."""
    s = plan.spec
    lines = [f"reproduce {plan.original.invocation_id}  experiment {s.experiment}  instrument {s.instrument.name}  "
             f"(settings format {plan.original.row['settings'].get('format', 1)})"]
    for m in s.models:
        where = f" at {m.endpoint}" if m.endpoint else ""
        overrides = {k: val for k, val in (("effort", m.effort), ("extra_body", m.extra_body),
                                          ("chat_template_kwargs", m.chat_template_kwargs),
                                          ("engine_args", m.engine_args)) if val}
        lines.append(f"  model {m.label}: {m.model} → {plan.model_sources[m.label]} ({m.backend}{where}, {m.dtype}"
                     + (f"; overrides {overrides}" if overrides else "") + ")")
        for p in (p for p in stages if p.label == m.label):
            later = " (if every earlier cell is answered)" if p.stage else ""
            lines.append(f"    {p.stage or 'first'} stage: {p.cells} cells{later}; {p.sampling_text()}")
    lines.append(f"  grid: {plan.n_cells} cells from the {plan.items_from}; samples {s.samples}, seed {s.seed}, "
                 f"batch_size {s.batch_size}; store {s.store}")
    if plan.resumes:
        lines.append(f"  resume: finishes reproduction {plan.resumes} (cells it stored are kept, not rerun)")
    lines += [f"  warning: {w}" for w in plan.warnings] or ["  nothing that cannot be restored"]
    return "\n".join(lines)
