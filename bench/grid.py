"""Benchmark: expand a 1,000,000-cell forced-choice grid and plan it against 1,000,000 stored rows.

What a ``scan --resume`` does before any model runs, with the real functions on real Parquet parts:

    expand   forced-choice expansion + grid.cells.with_probe_ids: labels × pairs × envelopes × orderings × samples
    read     cluster.store.traces.TraceStore.read     the stored (probe_id, sample, error) of the invocation
    plan     grid.cells.plan_attempts          anti-join: done / retry (attempt = errors + 1) / given up
    seeds    grid.cells.add_seeds              one blake2b per cell left to run

Targets (issue: the grid "expands and anti-joins in seconds with bounded memory"): the four steps
together under 60 s, and the process's peak resident memory under 2 GiB.

Setup (not timed, run in a child process so that its memory never reaches the measured process's
peak): the grid is expanded once and ``--stored`` trace rows are written as ``--parts`` Parquet parts
with ``open_store(tmp).write_part``, in TRACE_SCHEMA with only the key columns filled (probe_id,
sample, error, attempt, invocation_id, created_at; the rest null). The rows, shuffled across parts:

    ok        cells with one successful row                       → done
    err→ok    cells with an error row (attempt 1) then a success  → done
    err×1     cells with one error row                            → retried with attempt 2
    err×3     cells with --max-attempts error rows                → given up
    foreign   keys outside the grid (sample out of range, or an unknown label), 10% of them errors

About 90% of all rows are successful and 10% errors. Every count the plan must produce follows from
these numbers, and the script exits 1 if any differs (``--check-targets`` also exits 3 when a target
is missed).

Memory (all in the measured process; the setup child is excluded):
    peak RSS     ``resource.getrusage(RUSAGE_SELF).ru_maxrss``: the kernel's high-water mark of the
                 resident set, imports included; read after each step, so each step's rise shows.
    arrow peak   ``pyarrow.default_memory_pool().max_memory()``: the high-water mark of bytes
                 allocated by Arrow's default pool (tracemalloc cannot see Arrow buffers);
                 ``arrow now`` is ``pyarrow.total_allocated_bytes()`` sampled between steps.
Times are wall clock (``time.perf_counter``), one run, single process; Arrow may use its own
thread pool inside a step (``pyarrow.cpu_count()`` threads).

Run from the repository root:  ``python bench/grid.py`` (``--help`` for options).
"""

from __future__ import annotations

import os
import sys


import argparse  # noqa: E402
import multiprocessing  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from mirrorscan.cluster.store.traces import open_store  # noqa: E402
from mirrorscan.grid.cells import CELL_KEY, add_seeds, plan_attempts, with_probe_ids  # noqa: E402
from mirrorscan.instruments.forced_choice.envelopes import PACKAGED, load_envelopes  # noqa: E402
from mirrorscan.grid.ids import cell_seed  # noqa: E402
from mirrorscan.instruments.forced_choice.cells import ORDERINGS, expand_forced_choice  # noqa: E402
from mirrorscan.grid.trace_schema import TRACE_SCHEMA  # noqa: E402

TARGET_SECONDS = 60.0      # expand + read + plan + seeds, wall clock
TARGET_RSS_BYTES = 2 << 30  # peak resident set of the measuring process
EXPERIMENT = "bench_grid"
INVOCATION = "00000000-0000-4000-8000-000000000001"
ERROR_TEXT = "RuntimeError: synthetic failure written by bench/grid.py"
ROOT_SEED = 20261129


@dataclass(frozen=True)
class Shape:
    """The grid's dimensions (cells = labels × pairs × envelopes × orderings × samples)."""

    labels: int
    pairs: int
    envelopes: int
    orderings: int
    samples: int

    @property
    def cells(self) -> int:
        return self.labels * self.pairs * self.envelopes * self.orderings * self.samples


@dataclass(frozen=True)
class StoredMix:
    """How many cells of each kind the stored rows describe (see the module docstring)."""

    ok: int
    err_then_ok: int
    err_once: int
    err_max: int
    foreign: int
    foreign_err: int
    max_attempts: int

    @property
    def rows(self) -> int:
        return (self.ok + 2 * self.err_then_ok + self.err_once + self.max_attempts * self.err_max
                + self.foreign)

    @property
    def error_rows(self) -> int:
        return self.err_then_ok + self.err_once + self.max_attempts * self.err_max + self.foreign_err

    @property
    def touched(self) -> int:
        """Grid cells that have at least one stored row."""
        return self.ok + self.err_then_ok + self.err_once + self.err_max


def stored_mix(stored: int, cells: int, max_attempts: int) -> StoredMix:
    """Split ``stored`` rows into the kinds above: ~5% foreign, ~10% errors overall."""
    foreign = stored // 20
    foreign_err = foreign // 10
    err_in = stored // 10 - foreign_err                 # error rows on grid cells
    err_max = err_in // (4 * max_attempts)              # ~1/4 of those rows: given-up cells
    err_then_ok = err_in // 4                           # ~1/4: failed once, then succeeded
    err_once = err_in - max_attempts * err_max - err_then_ok
    ok = stored - foreign - err_in - err_then_ok        # successful rows minus the err→ok successes
    mix = StoredMix(ok, err_then_ok, err_once, err_max, foreign, foreign_err, max_attempts)
    assert mix.rows == stored, (mix, stored)
    if mix.touched > cells:
        raise SystemExit(f"--stored {stored} describes {mix.touched} grid cells, more than the grid's {cells}; "
                         f"lower --stored or raise --cells")
    return mix


def synthetic_pairs(n: int) -> pa.Table:
    """``n`` word pairs with ids and words of realistic length (no '|')."""
    ids = [f"p{i:06d}" for i in range(n)]
    a = [f"alpha{i:04d}word" for i in range(n)]
    b = [f"beta{i:04d}term" for i in range(n)]
    return pa.table({"pair_id": ids, "word_a": a, "word_b": b})


def grid_inputs(shape: Shape) -> tuple[list[str], pa.Table, list[str], list[str]]:
    """Labels, pairs, envelope ids (real packaged ids while there are enough) and orderings."""
    labels = [f"smollm2-135m-instruct-v{i:02d}" for i in range(shape.labels)]
    real = list(load_envelopes(PACKAGED).envelopes)
    envelopes = real[: shape.envelopes] if shape.envelopes <= len(real) else \
        [f"envelope_{i:03d}" for i in range(shape.envelopes)]
    orderings = list(ORDERINGS)[: shape.orderings]
    return labels, synthetic_pairs(shape.pairs), envelopes, orderings


# ---------------------------------------------------------------------------------------------------
# Setup (child process): stored rows as real trace parts


def _key_table(probe_id: pa.Array, sample: np.ndarray, error: pa.Array, attempt: np.ndarray) -> pa.Table:
    """A TRACE_SCHEMA table with the key columns filled and every other column null."""
    n = len(probe_id)
    filled = {
        "probe_id": probe_id,
        "sample": pa.array(sample, pa.int32()),
        "error": error,
        "attempt": pa.array(attempt, pa.int32()),
        "invocation_id": pa.array(np.full(n, INVOCATION, dtype=object), pa.string()),
        "created_at": pa.array(np.full(n, np.datetime64("2026-11-29T12:00:00", "us")), pa.timestamp("us")).cast(
            pa.timestamp("us", tz="UTC")),
    }
    arrays = [filled[f.name] if f.name in filled else pa.nulls(n, f.type) for f in TRACE_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA)


def write_stored(store_dir: str, shape: Shape, mix: StoredMix, parts: int, seed: int) -> dict:
    """Write the stored rows as ``parts`` trace parts; return what was written (for the report)."""
    started = time.perf_counter()
    labels, pairs, envelopes, orderings = grid_inputs(shape)
    grid = with_probe_ids(expand_forced_choice(labels, pairs, envelopes, orderings, shape.samples))
    probe_ids = grid.column("probe_id").combine_chunks()
    samples = grid.column("sample").to_numpy()
    rng = np.random.default_rng(seed)
    perm = rng.permutation(shape.cells)
    cuts = np.cumsum([mix.ok, mix.err_then_ok, mix.err_once, mix.err_max])
    ok, eo, e1, emax = np.split(perm[: cuts[-1]], cuts[:-1])

    idx, attempt, is_err = [], [], []

    def add(cells: np.ndarray, att: int, err: bool) -> None:
        idx.append(cells)
        attempt.append(np.full(len(cells), att, np.int32))
        is_err.append(np.full(len(cells), err))

    add(ok, 1, False)
    add(eo, 1, True)
    add(eo, 2, False)
    add(e1, 1, True)
    for k in range(1, mix.max_attempts + 1):
        add(emax, k, True)
    idx_all = np.concatenate(idx)
    pid = probe_ids.take(pa.array(idx_all))
    smp = samples[idx_all]
    # foreign keys: half real probe ids with a sample outside the grid, half an unknown label
    f_idx = rng.integers(0, shape.cells, mix.foreign)
    half = mix.foreign // 2
    f_pid = probe_ids.take(pa.array(f_idx))
    f_pid = pa.concat_arrays([f_pid.slice(0, half),
                              pc.replace_substring_regex(f_pid.slice(half), pattern=r"^[^|]+",
                                                         replacement="ghost-model")])
    f_smp = np.where(np.arange(mix.foreign) < half, shape.samples, samples[f_idx]).astype(np.int32)
    f_err = np.arange(mix.foreign) < mix.foreign_err
    f_err = np.concatenate([f_err[::2], f_err[1::2]])   # errors in both halves
    pid = pa.concat_arrays([pid, f_pid])
    smp = np.concatenate([smp, f_smp])
    err_mask = np.concatenate([*is_err, f_err])
    att = np.concatenate([*attempt, np.ones(mix.foreign, np.int32)])
    error = pa.array(np.where(err_mask, ERROR_TEXT, None), pa.string())
    del grid, probe_ids
    order = pa.array(rng.permutation(len(smp)))   # rows of all kinds mixed across parts
    table = _key_table(pid, smp, error, att).take(order)

    store = open_store(store_dir)
    bounds = np.linspace(0, table.num_rows, parts + 1).astype(int)
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        store.write_part(table.slice(lo, hi - lo), EXPERIMENT, INVOCATION, writer=f"bench{i}")
    size = sum(os.path.getsize(p) for p in store.list_parts(EXPERIMENT, INVOCATION))
    return {"rows": table.num_rows, "error_rows": int(err_mask.sum()), "parts": parts,
            "bytes": size, "seconds": time.perf_counter() - started}


def _child(queue, store_dir: str, shape: dict, mix: dict, parts: int, seed: int) -> None:
    try:
        queue.put(write_stored(store_dir, Shape(**shape), StoredMix(**mix), parts, seed))
    except BaseException as exc:  # report to the parent rather than die silently
        queue.put({"error": f"{type(exc).__name__}: {exc}"})
        raise


# ---------------------------------------------------------------------------------------------------
# Measurement


def rss_peak_bytes() -> int:
    """High-water mark of this process's resident set (Linux reports ru_maxrss in KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def mib(n: int) -> str:
    return f"{n / 2**20:8.1f} MiB"


class Steps:
    """Times named steps and samples memory after each."""

    def __init__(self):
        self.rows: list[tuple[str, float, int, int, int]] = []
        self.pool = pa.default_memory_pool()

    def run(self, name: str, fn):
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
        self.rows.append((name, seconds, pa.total_allocated_bytes(), self.pool.max_memory(), rss_peak_bytes()))
        return out

    @property
    def total(self) -> float:
        return sum(r[1] for r in self.rows)


def check(problems: list[str], what: str, got, want) -> None:
    ok = got == want
    print(f"  {'ok  ' if ok else 'FAIL'} {what}: {got}" + ("" if ok else f" (expected {want})"))
    if not ok:
        problems.append(what)


def verify(cells: pa.Table, prior: pa.Table, todo: pa.Table, given_up: pa.Table, shape: Shape,
           mix: StoredMix) -> list[str]:
    """Compare every count with what the stored mix implies; return the failed checks."""
    problems: list[str] = []
    untouched = shape.cells - mix.touched
    check(problems, "grid cells", cells.num_rows, shape.cells)
    check(problems, "stored rows read", prior.num_rows, mix.rows)
    check(problems, "stored error rows", prior.num_rows - prior.column("error").null_count, mix.error_rows)
    check(problems, "cells left to run", todo.num_rows, shape.cells - mix.ok - mix.err_then_ok - mix.err_max)
    attempts = todo.column("attempt")
    check(problems, "  of them never tried (attempt 1)", pc.sum(pc.equal(attempts, 1)).as_py() or 0, untouched)
    check(problems, "  of them retried (attempt 2)", pc.sum(pc.equal(attempts, 2)).as_py() or 0, mix.err_once)
    check(problems, "cells given up", given_up.num_rows, mix.err_max)
    if given_up.num_rows:
        check(problems, "  their attempt counts", pc.unique(given_up.column("attempts")).to_pylist(), [mix.max_attempts])
    keys = todo.select(list(CELL_KEY))
    check(problems, "distinct keys among cells left", keys.group_by(list(CELL_KEY)).aggregate([]).num_rows, todo.num_rows)
    ok_keys = prior.filter(pc.is_null(prior.column("error"))).select(list(CELL_KEY))
    check(problems, "cells left that have a successful row", keys.join(ok_keys, list(CELL_KEY), join_type="inner").num_rows, 0)
    pos = cells.select(list(CELL_KEY)).append_column("_pos", pa.array(np.arange(cells.num_rows)))
    order = keys.append_column("_i", pa.array(np.arange(todo.num_rows))).join(pos, list(CELL_KEY), join_type="inner").sort_by("_i")
    check(problems, "cells left keep grid order", bool(np.all(np.diff(order.column("_pos").to_numpy()) > 0)), True)
    check(problems, "seeds present", todo.column("seed").null_count, 0)
    rng = np.random.default_rng(1)
    spots = rng.integers(0, todo.num_rows, min(5, todo.num_rows)).tolist()
    rows = [todo.slice(i, 1).select(["probe_id", "sample", "seed"]).to_pylist()[0] for i in spots]
    check(problems, "seeds equal cell_seed (5 spot checks)",
          all(r["seed"] == cell_seed(ROOT_SEED, r["probe_id"], r["sample"]) for r in rows), True)
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=1_000_000,
                   help="grid cells; a multiple of labels×envelopes×orderings×samples (default 1000000)")
    p.add_argument("--stored", type=int, default=1_000_000, help="stored trace rows to plan against (default 1000000)")
    p.add_argument("--labels", type=int, default=10, help="model labels (default 10)")
    p.add_argument("--envelopes", type=int, default=20, help="envelope ids (default 20)")
    p.add_argument("--orderings", type=int, default=2, choices=(1, 2), help="orderings (default 2: AB, BA)")
    p.add_argument("--samples", type=int, default=1, help="samples per cell (default 1)")
    p.add_argument("--parts", type=int, default=8, help="Parquet parts the stored rows are written in (default 8)")
    p.add_argument("--max-attempts", type=int, default=3, help="as scan --max-attempts (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic stored mix (default 0)")
    p.add_argument("--keep", metavar="DIR", help="write the store under DIR and keep it (default: a temp dir, removed)")
    p.add_argument("--check-targets", action="store_true", help="also exit 3 when a target (60 s, 2 GiB) is missed")
    args = p.parse_args(argv)

    per_pair = args.labels * args.envelopes * args.orderings * args.samples
    if args.cells <= 0 or args.cells % per_pair:
        p.error(f"--cells must be a positive multiple of labels×envelopes×orderings×samples = {per_pair}")
    shape = Shape(args.labels, args.cells // per_pair, args.envelopes, args.orderings, args.samples)
    mix = stored_mix(args.stored, shape.cells, args.max_attempts)
    print(f"grid: {shape.labels} labels × {shape.pairs} pairs × {shape.envelopes} envelopes × "
          f"{shape.orderings} orderings × {shape.samples} samples = {shape.cells:,} cells")
    print(f"stored: {mix.rows:,} rows ({mix.error_rows:,} errors) in {args.parts} parts: {mix.ok:,} ok, "
          f"{mix.err_then_ok:,} err→ok, {mix.err_once:,} err×1, {mix.err_max:,} err×{mix.max_attempts}, "
          f"{mix.foreign:,} foreign keys")

    tmp = args.keep or tempfile.mkdtemp(prefix="mirrorscan-bench-grid-")
    try:
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        child = ctx.Process(target=_child, args=(queue, tmp, asdict(shape), asdict(mix), args.parts, args.seed))
        child.start()
        written = queue.get()
        child.join()
        if "error" in written or child.exitcode:
            print(f"setup failed: {written.get('error', child.exitcode)}", file=sys.stderr)
            return 1
        print(f"setup (child process, not timed): {written['rows']:,} rows, {written['parts']} parts, "
              f"{written['bytes'] / 2**20:.1f} MiB Parquet, {written['seconds']:.1f} s")

        labels, pairs, envelopes, orderings = grid_inputs(shape)
        baseline = rss_peak_bytes()
        steps = Steps()
        cells = steps.run("expand", lambda: with_probe_ids(expand_forced_choice(labels, pairs, envelopes, orderings,
                                                                                shape.samples)))
        prior = steps.run("read", lambda: open_store(tmp).read(EXPERIMENT, INVOCATION,
                                                               columns=["probe_id", "sample", "error"]))
        todo, given_up = steps.run("plan", lambda: plan_attempts(cells, prior, args.max_attempts))
        todo = steps.run("seeds", lambda: add_seeds(todo, ROOT_SEED))

        print(f"\n{'step':<8} {'seconds':>8}   {'arrow now':>12} {'arrow peak':>12} {'peak RSS':>12}")
        for name, seconds, now, peak, rss in steps.rows:
            print(f"{name:<8} {seconds:8.2f}   {mib(now):>12} {mib(peak):>12} {mib(rss):>12}")
        rss = rss_peak_bytes()
        arrow_peak = steps.pool.max_memory()
        print(f"{'total':<8} {steps.total:8.2f}")
        print(f"\npeak RSS {rss / 2**20:.0f} MiB (of which {baseline / 2**20:.0f} MiB before the first step: "
              f"imports and inputs); Arrow pool ({steps.pool.backend_name}) peak {arrow_peak / 2**20:.0f} MiB; "
              f"pyarrow threads {pa.cpu_count()}")
        time_ok, mem_ok = steps.total < TARGET_SECONDS, rss < TARGET_RSS_BYTES
        print(f"target time   < {TARGET_SECONDS:.0f} s:   {steps.total:.2f} s   {'met' if time_ok else 'MISSED'}")
        print(f"target memory < {TARGET_RSS_BYTES / 2**30:.0f} GiB: {rss / 2**30:.2f} GiB  {'met' if mem_ok else 'MISSED'}")

        print("\ncorrectness:")
        problems = verify(cells, prior, todo, given_up, shape, mix)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        print(f"\nWRONG: {len(problems)} check(s) failed: {', '.join(problems)}", file=sys.stderr)
        return 1
    if args.check_targets and not (time_ok and mem_ok):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
