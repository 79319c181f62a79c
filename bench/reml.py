"""REML at the prompt-facet paper's scale: 10 models × 36 wrappers × 400 items with 10 % of cells missing.

What a user runs: a long table (Parquet, 129,600 rows after the 10 % are dropped) and
``mirrorscan stats gstudy --input table.parquet --score score --object model --facets wrapper,item``, then
``mirrorscan stats intervals`` on the same table. Each command is its own process; wall time by the monotonic
clock, CPU time and peak resident memory from ``os.wait4`` (the child's ru_maxrss). The components used to
draw the table are printed beside the estimates.

Targets: each command ≤ 120 s and ≤ 4 GiB on the 2-core machine.

Run from the repository root:  ``python bench/reml.py`` (``--models``, ``--wrappers``, ``--items``, ``--missing``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TRUE = {"model": 1.0, "wrapper": 0.25, "item": 0.64, "model:wrapper": 0.09, "model:item": 0.36,
        "wrapper:item": 0.16, "residual": 0.49}


def write_table(path: Path, nm: int, nw: int, ni: int, missing: float, seed: int) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    sd = {k: np.sqrt(v) for k, v in TRUE.items()}
    y = (rng.normal(0, sd["model"], (nm, 1, 1)) + rng.normal(0, sd["wrapper"], (1, nw, 1))
         + rng.normal(0, sd["item"], (1, 1, ni)) + rng.normal(0, sd["model:wrapper"], (nm, nw, 1))
         + rng.normal(0, sd["model:item"], (nm, 1, ni)) + rng.normal(0, sd["wrapper:item"], (1, nw, ni))
         + rng.normal(0, sd["residual"], (nm, nw, ni)))
    m, w, i = (a.ravel() for a in np.meshgrid(range(nm), range(nw), range(ni), indexing="ij"))
    keep = rng.random(y.size) >= missing
    pq.write_table(pa.table({"model": [f"model-{k:02d}" for k in m[keep]], "wrapper": [f"w{k:02d}" for k in w[keep]],
                             "item": [f"item-{k:03d}" for k in i[keep]], "score": y.ravel()[keep]}), path)
    return int(keep.sum())


def timed(argv: list[str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS GiB, stdout) of one child process."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        err = proc.stderr.read().decode()
        out.seek(0)
        text = out.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv[:4])} … failed:\n{err}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2 ** 20, text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=10)
    p.add_argument("--wrappers", type=int, default=36)
    p.add_argument("--items", type=int, default=400)
    p.add_argument("--missing", type=float, default=0.10)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    exe = [sys.executable, "-m", "mirrorscan.jobs.cli", "stats"]
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "paper_design.parquet"
        rows = write_table(table, args.models, args.wrappers, args.items, args.missing, args.seed)
        print(f"{args.models} models × {args.wrappers} wrappers × {args.items} items, "
              f"{args.missing:.0%} of cells missing: {rows:,} rows")
        common = ["--input", str(table), "--score", "score", "--object", "model", "--facets", "wrapper,item"]
        results = {}
        for name in ("gstudy", "intervals"):
            wall, cpu, rss, text = timed(exe + [name] + common)
            results[name] = json.loads(text)
            ok = "met" if wall <= 120 and rss <= 4 else "MISSED"
            print(f"stats {name:<10} wall {wall:6.1f} s   CPU {cpu:6.1f} s   peak RSS {rss:5.2f} GiB   "
                  f"(targets ≤ 120 s, ≤ 4 GiB: {ok})")
        g = results["gstudy"]
        print(f"estimation: {g['components_method']}, {g['missing_cells']:,} missing cells, "
              f"{g.get('reml_iterations')} iterations")
        print(f"{'component':<15} {'true':>8} {'REML':>8}")
        for name, true in TRUE.items():
            print(f"{name:<15} {true:8.3f} {g['components'][name]['estimate']:8.3f}")
        o = results["intervals"]["objects"][0]
        print(f"intervals: {o['object']} {o['estimate']:.3f} [{o['interval'][0]:.3f}, {o['interval'][1]:.3f}], "
              f"naive width × {o['width_ratio']:.2f}; {len(results['intervals']['differences'])} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
