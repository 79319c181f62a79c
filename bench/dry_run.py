"""Benchmark: ``mirrorscan scan EXPERIMENT --dry-run`` on a 10^6-cell grid, as a user runs it.

Writes a forced_choice experiment into a temporary folder: ``--pairs`` made-up word pairs, the six load-bearing
envelopes, both orderings, ``--samples`` samples, one model (default the packaged demo model, whose local
tokenizer the plan counts input tokens with once it is prepared: ``make demo-model``). The default shape,
5,000 pairs × 6 × 2 × 17 = 1,020,000 cells, has 60,000 distinct request texts; ``--pairs 42500 --samples 2``
gives the same cell count with 510,000 distinct texts (the worst case for the token count, which encodes each
distinct text once).

Then runs the dry run ``--repeats`` times as its own process (``python -P -m mirrorscan.jobs.cli scan EXP
--dry-run``, the code of ``--repo``, default this checkout, imported through a folder of links laid out as its
``pyproject.toml`` maps the package, since an editable install maps ``mirrorscan`` to its own checkout whatever
the working folder; the working folder is that checkout, so the mirrorscan home is the one it finds, or
``$MIRRORSCAN_HOME``) and reports per run the wall time (monotonic, around the process), its
CPU time (user + system, the steadier figure on a shared machine) and the peak resident set size of that
process (``ru_maxrss`` from ``os.wait4``), the median of each, and the plan lines it printed (the same on
every run, and the same between two checkouts when both are given: ``--before`` names a second checkout,
e.g. an exported older commit, run alternately with this one).

Targets: ≤ 10 s and ≤ 300 MB. Nothing is written into the repository. Exit 1 when a run fails or two plans
differ, 3 with ``--check-target`` when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S, TARGET_MB = 10.0, 300.0


def write_experiment(folder: Path, pairs: int, samples: int, model: str) -> int:
    """A forced_choice experiment of ``pairs`` × 6 envelopes × 2 orderings × ``samples`` cells; returns the count."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "pairs.csv", "w") as out:
        out.write("pair_id,word_a,word_b\n")
        for i in range(pairs):
            out.write(f"p{i},alpha{i},beta{i}\n")
    (folder / "config.json").write_text(json.dumps({
        "instrument": "forced_choice", "models": [{"model": model, "dtype": "float32"}],
        "forced_choice": {"probe_set": "pairs.csv", "envelopes": "load_bearing", "orderings": ["AB", "BA"]},
        "samples": samples, "temperature": 0.0, "max_tokens": 24, "seed": 1, "batch_size": 16,
        "store": str(folder.parent / "store")}, indent=1))
    return pairs * 6 * 2 * samples


def package_view(repo: Path, folder: Path) -> Path:
    """A folder from which ``import mirrorscan`` reads ``repo``'s code: ``mirrorscan/`` holding links to the
    parts that the package-dir mapping of ``repo``'s pyproject.toml names. Raises when the view imports code
    from elsewhere."""
    import tomllib

    mapping = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    root = folder / "mirrorscan"
    root.mkdir(parents=True)
    for item in (repo / mapping["mirrorscan"]).iterdir():
        if item.name != "__pycache__":
            (root / item.name).symlink_to(item)
    for name, path in mapping.items():
        if name != "mirrorscan":
            (root / name.split(".", 1)[1]).symlink_to(repo / path)
    found = subprocess.run([sys.executable, "-P", "-c", "import mirrorscan.grid.ids as m; print(m.__file__)"],
                           cwd=repo, env={**os.environ, "PYTHONPATH": str(folder)}, capture_output=True, text=True,
                           check=True).stdout.strip()
    if Path(found).resolve() != (repo / mapping["mirrorscan.grid"] / "ids.py").resolve():
        raise RuntimeError(f"the view of {repo} imports {found}")
    return folder


def run_once(repo: Path, view: Path, experiment: Path) -> dict:
    """One dry run of ``repo``'s code (imported through ``view``, ``package_view``) as its own process: wall
    seconds, CPU seconds, peak RSS (MB) and the plan lines it printed."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(view)}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-P", "-m", "mirrorscan.jobs.cli", "scan", str(experiment),
                                 "--dry-run"], cwd=repo, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)   # this child's own rusage (its peak RSS)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    plan = [line.strip() for line in stdout.splitlines() if "stage (" in line or "all models" in line]
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024,
            "rc": proc.returncode, "plan": plan,
            "stderr": stderr.strip()[-400:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=5000)
    p.add_argument("--samples", type=int, default=17)
    p.add_argument("--model", default="packaged:smollm2-135m-instruct")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--repo", type=Path, default=REPO, help="checkout whose code runs (default: this one)")
    p.add_argument("--before", type=Path, help="a second checkout to run alternately (e.g. an older commit)")
    p.add_argument("--check-target", action="store_true")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench_dry_run_") as tmp:
        experiment = Path(tmp) / "dry_run_bench"
        cells = write_experiment(experiment, args.pairs, args.samples, args.model)
        print(f"{cells:,} cells ({args.pairs:,} pairs × 6 envelopes × 2 orderings × {args.samples} samples), "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        checkouts = {"this": args.repo.resolve(), **({"before": args.before.resolve()} if args.before else {})}
        views = {name: package_view(repo, Path(tmp) / f"view_{name}") for name, repo in checkouts.items()}
        runs: dict[str, list[dict]] = {name: [] for name in checkouts}
        for _ in range(args.repeats):
            for name, repo in checkouts.items():
                run = run_once(repo, views[name], experiment)
                runs[name].append(run)
                print(f"  {name:<6} {run['wall_s']:7.2f} s wall  {run['cpu_s']:7.2f} s CPU  {run['peak_mb']:8.0f} MB  "
                      f"rc {run['rc']}", flush=True)
                if run["rc"] != 0:
                    print(run["stderr"], file=sys.stderr)
                    return 1
    plans = {tuple(r["plan"]) for rs in runs.values() for r in rs}
    for name, rs in runs.items():
        wall, peak = statistics.median(r["wall_s"] for r in rs), statistics.median(r["peak_mb"] for r in rs)
        cpu = statistics.median(r["cpu_s"] for r in rs)
        print(f"{name:<6} median {wall:.2f} s wall ({cpu:.2f} s CPU), peak RSS {peak:.0f} MB   "
              f"(targets ≤ {TARGET_S:g} s, ≤ {TARGET_MB:g} MB)")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    for line in next(iter(plans)):
        print(f"  plan: {line}")
    if len(plans) != 1:
        print("the runs printed different plans", file=sys.stderr)
        return 1
    this = runs["this"]
    missed = statistics.median(r["wall_s"] for r in this) > TARGET_S or \
        statistics.median(r["peak_mb"] for r in this) > TARGET_MB
    return 3 if args.check_target and missed else 0


if __name__ == "__main__":
    sys.exit(main())
