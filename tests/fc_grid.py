"""Forced-choice grids for tests of the engine (actors, pipeline, journal): cells planned and seeded as a scan
plans them, and the InstrumentRef the pipeline takes, built from the packaged envelopes."""

from __future__ import annotations

import pyarrow as pa

from mirrorscan.grid.cells import add_seeds, plan_attempts, with_probe_ids
from mirrorscan.grid.instrument import InstrumentRef
from mirrorscan.instruments.forced_choice.cells import expand_forced_choice, render_forced_choice
from mirrorscan.instruments.forced_choice.envelopes import PACKAGED, load_envelopes

NO_PRIOR = pa.table({"probe_id": pa.array([], pa.string()), "sample": pa.array([], pa.int32()),
                     "error": pa.array([], pa.string())})


def fc_ref(envelope_ids: list[str], orderings: tuple[str, ...] = ("AB", "BA")) -> InstrumentRef:
    """The forced-choice instrument with the packaged envelopes ``envelope_ids`` (no pair file: the cells
    are made by ``fc_cells``)."""
    env_set = load_envelopes(PACKAGED)
    frozen = {"probe_set": "(test)", "probe_set_sha256": "-", "n_items": 0, "envelopes_file": PACKAGED,
              "envelopes": list(envelope_ids), "orderings": list(orderings),
              "envelope_set": {"file": env_set.path, "version": env_set.version, "sha256": env_set.sha256,
                               "texts": {i: env_set.envelopes[i].frozen() for i in envelope_ids}}}
    return InstrumentRef("forced_choice", frozen)


def fc_cells(labels: list[str], pairs: pa.Table, envelope_ids: list[str], orderings: list[str], samples: int = 1,
             seed: int = 7) -> pa.Table:
    """Every cell of a forced-choice grid with probe ids, attempt 1 and seeds, as a scan plans them."""
    grid = with_probe_ids(expand_forced_choice(labels, pairs, envelope_ids, orderings, samples))
    todo, _ = plan_attempts(grid, NO_PRIOR, max_attempts=3)
    return add_seeds(todo, seed)


def fc_rendered(labels: list[str], pairs: pa.Table, envelope_ids: list[str], orderings: list[str],
                samples: int = 1, seed: int = 7) -> pa.Table:
    """``fc_cells`` with system_text and user_text rendered from the packaged envelopes."""
    return render_forced_choice(fc_cells(labels, pairs, envelope_ids, orderings, samples, seed),
                                load_envelopes(PACKAGED).envelopes)
