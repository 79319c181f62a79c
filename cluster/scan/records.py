"""What a run of a scan is made from and what it returns (``cluster.scan.run.ScanRun``): the options of one
start of the driver, what makes it a reproduction, where its invocation is recorded (the one record the
parts that record while cells land and at the end are handed), and the result the command line summarises."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from mirrorscan.grid.errors import ConfigError


@dataclass(frozen=True)
class Reproduction:
    """What makes a new invocation a reproduction of an earlier one (``mirrorscan reproduce``)."""

    of: str
    """The invocation id reproduced (catalog ``reproduces``; also in the manifest and ``execution``)."""
    cells: pa.Table | None = None
    """The first stage's cells when they cannot come from the item files (their hashes changed): rebuilt from
    the coordinates stored in the traces; None: the instrument expands them from the files."""
    submitted: dict = field(default_factory=dict)
    """What the driver run records as submitted (the original's config file where one is known)."""
    model_sources: dict | None = None
    """Label → resolved model source, resolved by the caller (None: resolved here, as a scan does)."""
    resumes: str | None = None
    """An unfinished reproduction of ``of`` to finish (``reproduce --resume``), its stored cells kept; None: a
    new invocation."""
    warnings: tuple[str, ...] = ()
    """What could not be restored (``results.reproduce.Plan.warnings``), recorded with the new invocation as
    ``settings.execution.reproduce_warnings`` (not hashed)."""


@dataclass(frozen=True)
class ScanOptions:
    """How this start of the driver runs a spec: the invocation's options, none of which shapes results."""

    resume: bool = False
    """Finish the experiment's newest unfinished invocation instead of starting a new one."""
    max_attempts: int = 3
    """Attempts per cell (a died batch's cells, a resume's error cells) before the cell is given up (≥ 1)."""
    store: str | None = None
    """Trace store URI given by flag (None: config ``store``, $MIRRORSCAN_STORE, else the home's store)."""
    catalog_dsn: str | None = None
    """Catalog DSN given by flag (None: config ``catalog_dsn``, $MIRRORSCAN_CATALOG_DSN, else embedded)."""
    ray_address: str | None = None
    """Ray cluster to join (None: $RAY_ADDRESS, else a local Ray started here)."""
    quiet: bool = False
    """No progress bar and no notes on the terminal (warnings and the invocation line still print)."""
    progress: bool = True
    """Draw the progress bar on stderr (the command line turns it off where stderr is no terminal, and in CI:
    ``cluster.scan.progress.bar_wanted``)."""
    check_home: bool = True
    """Refuse an experiment name that belongs to another folder's runs (False: the name was given by ``--as``)."""
    accept_changed_probes: bool = False
    """An appending instrument (open_scan) takes probes whose text changed under their id as new versions."""
    reproduction: Reproduction | None = None
    """A rerun of an earlier invocation's full grid (no cell held elsewhere, none held for later scans), or with
    its ``resumes`` the resume of such a rerun; None: a scan."""
    resource_wait_s: float | None = None
    """Seconds a model may wait for a node that can hold one of its engine actors where only an autoscaler can
    add one (``cluster.scan.resources``); None: ``$MIRRORSCAN_RESOURCE_WAIT_S``, else 600."""

    def __post_init__(self):
        """ConfigError for fewer than one attempt per cell, or a negative resource wait."""
        if self.max_attempts < 1:
            raise ConfigError("", "--max-attempts", f"is {self.max_attempts}", "use 1 or more")
        if self.resource_wait_s is not None and not self.resource_wait_s >= 0:
            raise ConfigError("", "resource_wait_s", f"is {self.resource_wait_s}", "use a number of seconds, 0 or more")


@dataclass(frozen=True)
class Recording:
    """Where a started run records its invocation: what the progress (``cluster.scan.progress.RunProgress``)
    and the outcome (``cluster.scan.outcome.record_outcome``) are handed instead of the run itself."""

    experiment: str
    """The experiment's name (the store's folder; the progress bar's title)."""
    invocation_id: str
    """The invocation the counts and the final status belong to."""
    catalog: object
    """The run's open catalog (``cluster.catalog.client.Catalog``); a lost one is reconnected."""
    store: object = None
    """The opened trace store (``cluster.store.traces``) where an outcome is kept while the catalog is lost."""
    driver: object | None = None
    """This driver start's lease (``cluster.catalog.runs``), checked as each part lands; None: no lease."""
    config_path: str = ""
    """The config file the run was made from (the ``--resume`` a lost catalog's note suggests)."""


@dataclass
class ScanResult:
    """What one scan did: the invocation, where its traces are and how many cells ended how (an appending
    instrument with nothing left to run makes no invocation: ``invocation_id`` is "")."""

    invocation_id: str
    experiment: str
    status: str
    traces_path: str
    counts: dict = field(default_factory=dict)
    log_path: str = ""
    """The file holding the run's engine and Ray output (``cluster.scan.log``)."""
    instrument: str = ""
    """The instrument's registry name or import path (the summary prints its suggested query)."""
