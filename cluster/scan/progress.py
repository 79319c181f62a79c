"""A scan's progress while its cells land: the bar on the terminal (what each model's pool is doing), the
counts in the catalog every few seconds, and the driver's lease checked as each part lands."""

from __future__ import annotations

import os
import sys
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.cluster.scan.records import Recording
from mirrorscan.grid.errors import CatalogError
from mirrorscan.grid.records import ModelVariant

CATALOG_EVERY_S, RECONNECT_EVERY_S = 5.0, 30.0
"""Seconds between progress updates in the catalog; between reconnect tries while the catalog is lost."""
TICK_S, LOG_TICK_S = 1.0, 10.0
"""Seconds between redraws of a bar on a terminal (its clock keeps moving while an engine loads); the least
seconds between two of its lines in a log (a job's log, or ``--progress`` into a file), where each redraw is
a line of its own."""
FALLBACK_COLUMNS, FALLBACK_ROWS = 100, 24
"""The bar's width and the screen's height on a terminal that reports 0 × 0 (a pseudo-terminal nobody sized,
as some container and editor shells are): tqdm would draw an empty line there."""


def terminal_columns(stream) -> int | None:
    """The columns of the terminal ``stream`` writes to (0 where the terminal reports no size); None when it
    writes to no terminal."""
    try:
        if not stream.isatty():
            return None
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):   # no isatty/fileno, a closed stream, no size to ask
        return None


def bar_wanted(requested: bool | None, stream=None) -> bool:
    """Whether a progress bar is drawn: ``requested`` when a flag said so (``--progress`` / ``--no-progress``);
    otherwise only on a terminal outside CI (``stream``, default stderr, is a TTY and ``$CI`` is unset or
    ``false``), so pipes, log files and CI logs get no bar."""
    if requested is not None:
        return requested
    stream = sys.stderr if stream is None else stream
    in_ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    try:
        return stream.isatty() and not in_ci
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return False


class ModelProgress:
    """What the progress bar says about each model: waiting, loading its engine, or its cells landed."""

    ENGINES = {"vllm": "vLLM engine start", "hf": "transformers"}

    def __init__(self, todo: pa.Table, title: str):
        """Cells to run per label in ``todo``; ``title`` starts every description."""
        counts = pc.value_counts(todo.column("label")).to_pylist() if todo.num_rows else []
        self.total = {c["values"]: c["counts"] for c in counts}
        self.done: dict[str, int] = {}
        self.state: dict[str, str] = {}
        self.title = title

    def loading(self, variant: ModelVariant, warm: str | None = None) -> None:
        """``variant``'s pool started: its engines load until its first part lands, or, where the running warm
        engine ``warm`` answers its batches, nothing loads and its actors start as clients of that engine."""
        self.state[variant.label] = (f"{variant.label} on warm engine {warm}" if warm else
                                     f"loading {variant.label} ({self.ENGINES.get(variant.backend, variant.backend)})")

    def landed(self, label: str, rows: int) -> None:
        """A part of ``rows`` rows of ``label`` landed."""
        self.done[label] = self.done.get(label, 0) + rows
        self.state[label] = f"{label} {min(self.done[label], self.total.get(label, 0))}/{self.total.get(label, 0)}"

    def description(self) -> str:
        """The bar's text: the title, then each started model that is still running or loading (one model
        alone: only until its first part lands, since the bar's own count is then that model's)."""
        running = [text for label, text in self.state.items()
                   if self.done.get(label, 0) < self.total.get(label, 0)
                   and (len(self.total) > 1 or label not in self.done)]
        return " · ".join([self.title, *running])


class RunProgress:
    """The progress of one stage of a run: its ``on_model`` and ``on_part`` are the sweep's callbacks
    (``cluster.scan.sweep.run_grid``)."""

    def __init__(self, recording: Recording, todo: pa.Table, stage: str = "", *, show: bool = True):
        """A bar over ``todo``'s cells (none unless ``show``), titled by the experiment of ``recording`` and
        ``stage``; it says what it waits for until cells land, and its clock moves every ``TICK_S`` while it
        waits (in a log: a line at most every ``LOG_TICK_S``). Counts go to the catalog of ``recording`` and
        its lease is checked as each part lands."""
        from tqdm import tqdm

        self.recording, self.cells = recording, todo.num_rows
        title = f"scan {recording.experiment}" + (f" ({stage})" if stage else "")
        self.per_model = ModelProgress(todo, title)
        columns = terminal_columns(sys.stderr)   # None: a log; 0: a terminal of no size
        self.tick_s = TICK_S if columns is not None else LOG_TICK_S
        self.bar = tqdm(total=todo.num_rows, unit="cell", desc=f"{title} · starting Ray", file=sys.stderr,
                        disable=not show, smoothing=0.1,
                        dynamic_ncols=bool(columns), ncols=FALLBACK_COLUMNS if columns == 0 else None,
                        nrows=FALLBACK_ROWS if columns == 0 else None,
                        mininterval=0.1 if columns is not None else LOG_TICK_S)
        self.done = {"rows": 0, "errors": 0}
        self.last_update = time.monotonic()
        self.closed = threading.Event()
        if not self.bar.disable:
            threading.Thread(target=self._tick, name="progress-tick", daemon=True).start()

    def _tick(self) -> None:
        """Redraw the bar every ``tick_s`` until it closes (tqdm serialises writes under its own lock)."""
        while not self.closed.wait(self.tick_s):
            self.bar.refresh()

    def on_model(self, variant: ModelVariant, warm: str | None = None) -> None:
        """``variant``'s pool started: its engines load (or warm engine ``warm`` answers its batches)."""
        self.per_model.loading(variant, warm)
        self.bar.set_description(self.per_model.description(), refresh=True)

    def on_part(self, rows: int, errors: int, label: str) -> None:
        """A part of ``rows`` rows (``errors`` of them errors) of ``label`` landed. A driver whose lease lapsed
        stops here (LeaseLost): another may have taken the invocation over."""
        if self.recording.driver is not None:
            self.recording.driver.check()
        self.per_model.landed(label, rows)
        self.done["rows"] += rows
        self.done["errors"] += errors
        self.bar.set_description(self.per_model.description(), refresh=False)
        self.bar.update(rows)
        self.bar.set_postfix(errors=self.done["errors"], refresh=False)
        catalog = self.recording.catalog
        if time.monotonic() - self.last_update > (CATALOG_EVERY_S if catalog.connected else RECONNECT_EVERY_S):
            self.last_update = time.monotonic()
            try:
                if not catalog.connected:
                    catalog.reconnect()
                catalog.update_progress(self.recording.invocation_id, "running", {"cells_this_run": self.cells, **self.done})
            except CatalogError:
                pass   # progress is advisory; the final status is written at the end (cluster.scan.outcome)

    def close(self) -> None:
        """Close the bar (and stop its clock)."""
        self.closed.set()
        self.bar.close()
