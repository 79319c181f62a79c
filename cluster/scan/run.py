"""One run of a scan: the object that owns an invocation from its plan to its summary.

``ScanRun(spec, options)`` is made from a validated spec and the options of this start of the driver
(``ScanOptions``: resume, attempts, store, catalog, Ray address, quiet, a reproduction). Every way a grid
runs drives the same object: ``scan`` and ``submit``'s job (``python -m mirrorscan.jobs.scan``) call
``execute``; ``scan --dry-run`` prints its ``plan`` (and ``resume_plan``) without starting anything;
``reproduce`` prints its ``plan`` and then ``execute``s it. ``run_scan`` is the one call that loads an experiment
and executes its run (``scan`` and the tests use it).

``execute``: the checks that refuse a config before anything is written (``cluster.scan.preflight``; resources no
node has and no autoscaler can add, ``cluster.scan.resources``) → the
invocation recorded in the catalog (settings frozen) or the unfinished one a resume finishes
(``cluster.scan.inputs.resume_target``), under a driver lease (``cluster.catalog.runs``) → each stage's grid, minus
cells already held (``cluster.scan.stages``), through one actor pool per model (``cluster.scan.sweep``) → the final
counts and status recorded (``cluster.scan.outcome``). Engine and Ray output goes to the run's log file
(``cluster.scan.log``); the terminal gets the progress bar, the notes a user acts on, and a ``ScanResult``.

Past 400 lines, kept whole: it is the one object of a run's life, and each step it takes is already a call into
the modules named above; split further, a reader would follow one run across files.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import uuid

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.cluster.scan.preflight import (check_context, check_empty_prefixes, check_engines, check_template_overrides,
                                          resolve_store)
from mirrorscan.cluster.scan.inputs import (changed_inputs, changed_inputs_detail, check_append,
                                            check_experiment_home, content_hashes, model_weights, resume_target,
                                            submitted_config)
from mirrorscan.cluster.scan.outcome import (LOG_SETTLE_S, await_inference_log, cell_counts, index_rows,
                                             loggable_rows, logged_rows, record_outcome)
from mirrorscan.cluster.scan.plan import PlanScope, StagePlan, existing_store, plan_model_sources, scan_plan
from mirrorscan.cluster.scan.records import Recording, Reproduction, ScanOptions, ScanResult
from mirrorscan.cluster.scan.stages import StageScope, grid_cells, instrument_ref, stage_grids
from mirrorscan.grid.cells import add_seeds, plan_attempts
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.spec import API_BACKENDS, Spec, load_spec


class ScanRun:
    """One run of a validated spec under ``ScanOptions``: its plan, its execution and its outcome."""

    def __init__(self, spec: Spec, options: ScanOptions = ScanOptions()):
        """Resolve where the traces go (the spec itself is left as validated) and freeze the settings."""
        self.options = options
        self.spec = dataclasses.replace(spec, store=resolve_store(options.store, spec))
        """The spec with its store resolved (flag, config, environment, home)."""
        self.settings: Settings = self.spec.settings()
        """The settings this run freezes (``grid.settings.Settings``); a resume takes the store the invocation
        recorded, and what a run adds to ``execution`` (notes, what it reproduces) is set here."""
        self.model_sources: dict[str, str] | None = None
        """Label → canonical model source, once ``check`` resolved them."""
        self.trace_store = self.catalog = self.driver = None
        self.dsn: str | None = None
        """The catalog DSN the run records to (resolved by ``execute``)."""
        self.invocation_id: str | None = None
        self.ran: dict[tuple[str, str], int] = {}
        """(stage, label) → cells this run sent to the engines (after ``execute``)."""
        self.resource_waits: dict[str, str] = {}
        """Label → what the model waits for (in words) where only an autoscaler can add a node that holds one
        of its engine actors, once ``check`` held the demands against the cluster (``cluster.scan.resources``)."""

    @property
    def reproduction(self) -> Reproduction | None:
        """The reproduction this run is (``ScanOptions.reproduction``)."""
        return self.options.reproduction

    @property
    def first_cells(self) -> pa.Table | None:
        """The first stage's cells when the run does not expand them from the settings (a reproduction's)."""
        return self.reproduction.cells if self.reproduction is not None else None

    def check(self, *, dry: bool = False) -> None:
        """The checks a scan makes before it records anything (ConfigError on the first problem), and the model
        sources resolved. ``dry``: load and convert nothing (a dry run: the demo model's source is known only
        once converted, and the empty-prefix check, which loads tokenizers, is left out)."""
        from mirrorscan.cluster.scan.resources import check_resources, cluster_capacity, resource_wait_s

        spec = self.spec
        check_engines(spec)
        if self.options.resource_wait_s is None:
            self.options = dataclasses.replace(self.options, resource_wait_s=resource_wait_s())
        # resources no node has and no autoscaler can add: Ray would queue the engines forever
        self.resource_waits = check_resources(spec, cluster_capacity(self.options.ray_address, join=not dry))
        check_template_overrides(spec, prepare=not dry)
        if dry:
            self.model_sources = plan_model_sources(spec)
        elif self.reproduction is not None and self.reproduction.model_sources is not None:
            self.model_sources = dict(self.reproduction.model_sources)
        else:
            from mirrorscan.cluster.models.resolve import resolve_model_source

            self.model_sources = {m.label: m.model if m.backend in API_BACKENDS   # an API model: a name at its endpoint
                                  else resolve_model_source(m.model, spec.config_path, f"models[{i}].model")
                                  for i, m in enumerate(spec.models)}
        check_context(spec, self.model_sources)
        if not dry:
            check_empty_prefixes(spec, self.model_sources, self.first_cells)

    def plan(self, *, count_tokens: bool = True) -> list[StagePlan]:
        """What ``execute`` would run as a new invocation, per stage and model (``cluster.scan.plan``), read
        from the store as it is now; nothing is started or written."""
        return scan_plan(self.settings, PlanScope(
            store=existing_store(self.settings.execution.store), model_sources=self.model_sources,
            max_attempts=self.options.max_attempts, first=self.first_cells, hold=self.reproduction is None,
            count_tokens=count_tokens))

    def resume_plan(self, inv: dict) -> tuple[int, int, list[str], list[StagePlan]]:
        """What a resume of the unfinished invocation ``inv`` (a catalog row) would run: (cells it would run,
        cells it would give up, what blocks it: input files whose content changed, else shaping fields that
        differ; the resume's plan)."""
        if changed_inputs(inv, self.spec):
            return 0, 0, [f"file content changed ({changed_inputs_detail(inv, self.spec)})"], []
        diffs = self.settings.shaping_differences(inv["settings"])
        if diffs:
            return 0, 0, [f"{', '.join(diffs)} differ from the frozen settings"], []
        plans = scan_plan(self.settings, PlanScope(
            store=existing_store(inv["store_uri"] or self.settings.execution.store),
            invocation_id=str(inv["invocation_id"]), model_sources=self.model_sources,
            max_attempts=self.options.max_attempts,
            hold=not (inv["settings"].get("execution") or {}).get("reproduces")))
        return sum(p.run for p in plans), sum(p.given_up for p in plans), [], plans

    def catalog_dsn(self, *, start: bool = True) -> str | None:
        """The catalog DSN the run records to (``cluster.catalog.client.resolve_dsn``: flag, config,
        $MIRRORSCAN_CATALOG_DSN, else the embedded server, started now; with ``start`` False, only when it
        already runs: None otherwise)."""
        from mirrorscan.cluster.catalog.client import resolve_dsn

        return resolve_dsn(self.options.catalog_dsn, self.spec.catalog_dsn, start=start)

    def execute(self) -> ScanResult:
        """Run (or resume) the grid; return the invocation id, final status, counts and traces path."""
        from mirrorscan.cluster.catalog.client import Catalog
        from mirrorscan.cluster.scan.log import RunLog, log_path
        from mirrorscan.cluster.store.traces import open_store

        options = self.options
        self.check()
        self.trace_store = open_store(self.spec.store)
        self.trace_store.check_writable()   # before the catalog records anything
        if not (options.ray_address or os.environ.get("RAY_ADDRESS")) or not self.trace_store.is_local:
            from mirrorscan.cluster.home import check_home_writable

            check_home_writable()   # a local Ray keeps its token there, a remote store's run log goes there
        self.dsn = self.catalog_dsn()
        with Catalog(self.dsn) as catalog:
            self.catalog = catalog
            if options.check_home and self.reproduction is None:
                check_experiment_home(catalog, self.spec)
            resumed = options.resume or (self.reproduction is not None and self.reproduction.resumes is not None)
            if resumed:
                self._take_up()
            elif not self._start():
                return ScanResult("", self.spec.experiment, "complete", "", {"cells": 0, "ok": 0})
            # one machine-readable line before any work, so a submitted job's log names its invocation at once
            print(f"mirrorscan-invocation: {self.invocation_id} experiment={self.spec.experiment} "
                  f"{'resumed' if resumed else 'new'}", file=sys.stderr, flush=True)
            if self.driver.took_over and not options.quiet:
                print(f"note: took over the stale lease of driver run {self.driver.took_over}", file=sys.stderr)
            self.driver.start_heartbeat()
            log = log_path(self.trace_store, self.spec.experiment, self.invocation_id)
            if not options.quiet:
                print(f"log: {log} (engine and Ray output)", file=sys.stderr, flush=True)
            try:
                with RunLog(log):
                    result = self._run_stages()
            finally:
                self.driver.end(catalog)
        result.log_path = str(log)
        return result

    def appends(self) -> bool:
        """Whether this run appends to its experiment (an instrument holding cells across invocations, not a
        reproduction): then one driver at a time may run the experiment (``cluster.catalog.runs.refuse_concurrent_append``)."""
        return self.reproduction is None and instrument_ref(self.settings).instrument.appends

    def _submitted(self) -> dict:
        """What the driver run records as submitted."""
        return self.reproduction.submitted if self.reproduction is not None else submitted_config(self.spec)

    def _take_up(self) -> None:
        """Resume: the unfinished invocation, in the store it recorded, under a fresh lease; stale parts cleared."""
        from mirrorscan.cluster.catalog import runs
        from mirrorscan.cluster.store.traces import open_store

        spec, catalog, reproduction = self.spec, self.catalog, self.reproduction
        inv = resume_target(catalog, spec, self.settings, reproduction.resumes if reproduction is not None else None)
        self.invocation_id = str(inv["invocation_id"])
        if inv.get("store_uri") and inv["store_uri"] != spec.store:
            if not self.options.quiet:
                print(f"note: resuming in the invocation's own store {inv['store_uri']} "
                      f"(not {spec.store})", file=sys.stderr)
            self.spec = spec = dataclasses.replace(spec, store=inv["store_uri"])
            self.settings = spec.settings()
            self.trace_store = open_store(spec.store)
        reproduces = (inv["settings"].get("execution") or {}).get("reproduces")
        if reproduces:   # a reproduction stays one: its full grid, holding no cells
            self.settings = self.settings.with_execution(reproduces=reproduces)
            if reproduction is not None and reproduction.warnings:
                self.settings = self.settings.with_execution(reproduce_warnings=reproduction.warnings)
        self._record_engines()   # this driver start's machine, in its scan_runs row (the frozen row keeps the first)
        # before touching the store: refused while another driver runs it (or, appending, its experiment)
        with catalog.transaction():
            if self.appends():
                runs.refuse_concurrent_append(catalog, spec.experiment, spec.config_path,
                                              invocation_id=self.invocation_id)
            self.driver = runs.acquire(catalog, self.invocation_id, runs.DriverStart(
                self.settings.execution_json(), resumed=True, config_file=spec.config_path,
                submitted=self._submitted()))
        removed, quarantined = self.trace_store.cleanup(spec.experiment, self.invocation_id)
        if not self.options.quiet and (removed or quarantined):
            print(f"resume: removed {len(removed)} stale temporary part(s), quarantined {len(quarantined)} unreadable "
                  f"part(s)", file=sys.stderr)
        catalog.update_progress(self.invocation_id, "running", inv.get("counts") or {})

    def _record_engines(self) -> None:
        """``execution.engines``: the vLLM version and GPU each vLLM model's engines run on, as this driver knows
        them (``cluster.runtime.provenance.driver_engine_records``); not hashed. Nothing when no model is on vLLM."""
        from mirrorscan.cluster.runtime.provenance import driver_engine_records

        engines = driver_engine_records(self.settings.models, self.options.ray_address)
        if engines:
            self.settings = self.settings.with_execution(engines=engines)

    def _start(self) -> bool:
        """A new invocation recorded (catalog row, manifest) under this driver's lease; False when an appending
        instrument has nothing left to run (no invocation is made)."""
        from mirrorscan.cluster.catalog import runs
        from mirrorscan.cluster.runtime.provenance import provenance

        spec, catalog, reproduction = self.spec, self.catalog, self.reproduction
        notes, nothing_left = check_append(spec, self.settings, self.model_sources, self.trace_store,
                                           self.options.accept_changed_probes, catalog) \
            if reproduction is None else ([], False)   # a reproduction reruns the full grid
        for line in notes:
            print(line, file=sys.stderr)
        if nothing_left:
            return False
        if notes:   # recorded with the invocation, not hashed
            self.settings = self.settings.with_execution(append_notes=tuple(notes))
        if reproduction is not None:   # not hashed; a resume reads it
            self.settings = self.settings.with_execution(reproduces=reproduction.of)
            if reproduction.warnings:
                self.settings = self.settings.with_execution(reproduce_warnings=reproduction.warnings)
        self._record_engines()
        settings = self.settings.to_json()
        self.invocation_id = invocation_id = str(uuid.uuid4())
        prov = provenance()
        weights = model_weights(spec, self.model_sources)
        n_cells = self.first_cells.num_rows if self.first_cells is not None else spec.n_cells()
        reproduces = {"reproduces": reproduction.of} if reproduction is not None else {}
        with catalog.transaction():   # appending: refused while another scan of the experiment runs
            if self.appends():
                runs.refuse_concurrent_append(catalog, spec.experiment, spec.config_path)
            catalog.create_invocation({
                "invocation_id": invocation_id, "experiment": spec.experiment, "instrument": spec.instrument.name,
                "settings": settings, "settings_hash": self.settings.settings_hash(), **prov,
                "content_hashes": content_hashes(spec), "model_weights": weights,
                "reproduces": reproduction.of if reproduction is not None else None,
                "store_uri": spec.store, "status": "running", "counts": {"cells": n_cells}})
            config_file = self._submitted().get("file")   # where its ./ input paths are (grid.input_paths)
            self.trace_store.write_manifest(spec.experiment, invocation_id, {
                "invocation_id": invocation_id, "settings": settings, "provenance": prov,
                "model_sources": self.model_sources, "model_weights": weights, **reproduces,
                **({"config_file": config_file} if config_file else {})})
            self.driver = runs.acquire(catalog, invocation_id, runs.DriverStart(
                self.settings.execution_json(), resumed=False, config_file=spec.config_path,
                submitted=self._submitted()))
        return True

    def _run_stages(self) -> ScanResult:
        """Expand the grid from the frozen settings (or take the reproduction's first-stage cells), run what is
        left stage by stage (``cluster.scan.stages``), and record the outcome. A reproduction
        (``execution.reproduces``) runs its full grid: no cell counts as held by another invocation."""
        store, experiment, invocation_id = self.trace_store, self.spec.experiment, self.invocation_id
        settings, max_attempts = self.settings, self.options.max_attempts
        n_cells, given_up, held = 0, 0, 0
        status = "running"
        hold = not settings.execution.reproduces
        first = grid_cells(settings) if self.first_cells is None else self.first_cells
        try:
            scope = StageScope(store, experiment, invocation_id, instrument_ref(settings), self.model_sources)
            for stage in stage_grids(scope, first, hold=hold):
                n_cells += stage.cells.num_rows
                held += stage.held_elsewhere
                prior = store.read(experiment, invocation_id, columns=["probe_id", "sample", "error"])
                todo, gave_up = plan_attempts(stage.cells, prior, max_attempts)
                given_up += gave_up.num_rows
                for count in (pc.value_counts(todo.column("label")).to_pylist() if todo.num_rows else []):
                    self.ran[(stage.name, count["values"])] = count["counts"]
                if todo.num_rows:
                    self._run_stage(add_seeds(todo, settings.seed), stage.name)
            counts = cell_counts(store, experiment, invocation_id, n_cells)
            counts["given_up"] = given_up
            if held:
                counts["held_elsewhere"] = held
            status = "complete" if counts["ok"] == counts["cells"] else "incomplete"
        except KeyboardInterrupt:
            status, counts = "interrupted", cell_counts(store, experiment, invocation_id, n_cells)
            raise
        except BaseException:
            status, counts = "failed", cell_counts(store, experiment, invocation_id, n_cells)
            raise
        finally:
            if status != "running":
                index_rows(store, experiment, invocation_id, settings)
                record_outcome(self.recording(), status, counts,
                               raise_on_failure=status in ("complete", "incomplete"))
        return ScanResult(invocation_id, experiment, status, store.display(store.traces_dir(experiment, invocation_id)),
                          counts, instrument=settings.instrument)

    def _run_stage(self, todo: pa.Table, stage: str) -> None:
        """Run one stage's cells, then wait (bounded) for their inference_log rows."""
        store, catalog, experiment = self.trace_store, self.catalog, self.spec.experiment
        invocation_id = self.invocation_id
        before = (loggable_rows(store, experiment, invocation_id),
                  logged_rows(store, catalog, experiment, invocation_id))
        self.run_cells(todo, stage)
        missing = await_inference_log(store, catalog, experiment, invocation_id, before)
        if missing:
            print(f"warning: {missing} inference_log row(s) of invocation {invocation_id} were neither in the "
                  f"catalog nor spilled {LOG_SETTLE_S:.0f} s after the run; the engine actors keep trying "
                  f"while they live", file=sys.stderr)

    def run_cells(self, todo: pa.Table, stage: str = "") -> None:
        """Send ``todo`` (cells with seeds) through one actor pool per model (``cluster.scan.sweep``), with a progress
        bar, progress in the catalog every few seconds, and the lease checked as each part lands
        (``cluster.scan.progress.RunProgress``)."""
        from mirrorscan.cluster.scan.progress import RunProgress
        from mirrorscan.cluster.runtime.ray_session import ensure_ray
        from mirrorscan.cluster.scan.resources import watch_waits
        from mirrorscan.cluster.scan.log import attach_ray_output
        from mirrorscan.cluster.scan.sweep import run_grid

        progress = RunProgress(self.recording(), todo, stage, show=not self.options.quiet and self.options.progress)
        watch = watch_waits(self, progress)   # models only an autoscaler can make room for
        try:
            ensure_ray(self.options.ray_address)
            attach_ray_output()   # forwarded engine output goes to the run's log file
            if _SIGTERM_INTERRUPTS:
                signal.signal(signal.SIGTERM, _terminated)
            variants = list(self.settings.models)
            run_grid(todo, variants, self.model_sources, self.sweep(variants), progress.on_part,
                     on_model=watch.on_model if watch is not None else progress.on_model)
        finally:
            if watch is not None:
                watch.stop()
            progress.close()

    def recording(self) -> Recording:
        """Where this run records its invocation (once ``execute`` started or took it up): what its progress
        and its outcome are handed."""
        return Recording(self.spec.experiment, self.invocation_id, self.catalog, self.trace_store, self.driver,
                         self.spec.config_path)

    def sweep(self, variants: list[ModelVariant]):
        """What every model's pool of this run shares (``cluster.scan.sweep.Sweep``): the invocation as the engines get
        it (their inference_log rows go to the run's catalog), the instrument, batch and pool sizes, attempts,
        and how many pools run at once."""
        from mirrorscan.cluster.home import subdir
        from mirrorscan.cluster.scan.sweep import Sweep, concurrent_models

        settings, how = self.settings, self.settings.execution
        ref = instrument_ref(settings)
        run = InvocationContext(invocation_id=self.invocation_id, experiment=self.spec.experiment,
                         instrument=ref.instrument.name, envelope_version=ref.instrument.envelope_version(ref.spec),
                         catalog_dsn=self.dsn, store_uri=how.store, cache_dir=str(subdir("cache")))
        at_once = concurrent_models(how.max_concurrent_models, variants,
                                    joined=bool(self.options.ray_address or os.environ.get("RAY_ADDRESS")))
        return Sweep(run, ref, how.store, batch_size=settings.batch_size, pool_size=how.actor_pool_size,
                     max_attempts=self.options.max_attempts, max_concurrent_models=at_once)


class InterruptedBeforeRecording(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a new scan before its invocation was recorded in the catalog: there is nothing
    to resume."""


def run_scan(experiment: str, *, as_name: str | None = None, **options) -> ScanResult:
    """Run (or resume) an experiment's grid (the folder or its config.json); return the invocation id, final
    status, counts and traces path. ``options``: the fields of ``ScanOptions`` (resume,
    max_attempts, store, catalog_dsn, ray_address, quiet, progress, accept_changed_probes). ``as_name`` names the
    experiment explicitly (default: its folder's name, which must not already belong to another folder's
    runs). Ctrl-C before the invocation is recorded raises ``InterruptedBeforeRecording``."""
    options = ScanOptions(check_home=as_name is None, **options)
    run = ScanRun(load_spec(experiment, as_name), options)
    try:
        return run.execute()
    except KeyboardInterrupt:
        if run.driver is None and not options.resume:   # the invocation and its driver start are recorded at once
            raise InterruptedBeforeRecording() from None
        raise


_SIGTERM_INTERRUPTS = False
"""Set by a command that runs scans: SIGTERM stops the scan as Ctrl-C does (re-armed after Ray starts, whose
core worker installs a SIGTERM handler of its own)."""


def _terminated(signum, frame) -> None:
    """SIGTERM handler: stop the scan the way Ctrl-C does (the catalog records ``interrupted``)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)   # a second SIGTERM ends the process at once
    raise KeyboardInterrupt(f"signal {signum}")


def stop_like_ctrl_c_on_sigterm() -> None:
    """For a command that runs scans (scan, reproduce): from now on SIGTERM stops a scan as Ctrl-C does, so a
    job stopped by its scheduler ends ``interrupted`` and resumable (re-armed after Ray starts)."""
    global _SIGTERM_INTERRUPTS
    _SIGTERM_INTERRUPTS = True
    signal.signal(signal.SIGTERM, _terminated)
