"""``mirrorscan flinch``: results side by side (``compare``, a table and an overlay radar), the method's
reference table (``reference``), and a corpus file checked as a scan would load it (``corpus``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mirrorscan.grid.errors import ConfigError, reports_user_errors
from mirrorscan.grid.formatting import printable

EPILOG = """\
An input is the summary.json that `mirrorscan analyze` writes for a flinch invocation (all its models),
one model's result in the method's shape ({model, total_flinch, axes: {key: {label, flinch, terms}}}), or
reference:<model>, a row of the method's published reference table (`mirrorscan flinch reference` lists them).
The axes compared are those given with --axes, else those every input has. A model's total is the sum over
exactly those axes, given only when it has each of them whole; otherwise the row says why it has none, and
it is not ranked. Runs from different corpora (hash) or aggregations are compared with a warning; reference
rows come from another corpus, so beside a run they are indicative only, axis by axis. Two or more models of
one summary.json also get each compared axis's and the total's interval over terms and carriers and every
pair's paired difference (Holm p, verdict), recomputed from the carriers.parquet beside it as analyze does.

examples:
  mirrorscan flinch compare run-a/summary.json run-b/summary.json --baseline base.json --out radar.png
  mirrorscan flinch compare run/summary.json --reference gemma-2-9b heretic-v2-9b
  mirrorscan flinch compare reference:heretic-v2-9b --baseline reference:gemma-2-9b
  mirrorscan flinch corpus my_corpus.json --axes slurs,sexual
"""


def axis_list(values: list[str] | None) -> list[str] | None:
    """``--axes`` as the method takes it: keys separated by commas or spaces, in the order given."""
    if not values:
        return None
    keys = [k.strip() for v in values for k in v.split(",") if k.strip()]
    return keys or None


CHART = "flinch-compare.png"
"""The overlay radar's file name when ``--out`` is not given."""


def chart_path(inputs: list[str], out: str | None) -> Path:
    """Where ``compare`` writes its radar: ``out`` when given, else ``CHART`` beside the first input file (a
    summary.json sits in its invocation's analysis folder) or, when every input is a reference row, in the current
    folder, under the next free name (``flinch-compare-2.png``, …) when an earlier chart is there."""
    if out is not None:
        return Path(out)
    files = [Path(i) for i in inputs if not i.startswith("reference:")]
    folder = files[0].resolve().parent if files else Path.cwd()
    path, n = folder / CHART, 2
    while path.exists():
        path, n = folder / f"{CHART[:-4]}-{n}.png", n + 1
    return path


def write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, which must not exist yet (ConfigError naming it otherwise): never overwrite."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "xb") as f:
            f.write(data)
    except FileExistsError:
        raise ConfigError(str(path), "--out", "already exists; flinch compare never overwrites a file",
                          "name another file, or remove this one first") from None


@reports_user_errors
def main(argv: list[str], prog: str = "mirrorscan flinch") -> int:
    """Parse ``argv`` and run the subcommand; exit code 0, or 2 for bad input (one line on stderr)."""
    parser = argparse.ArgumentParser(prog=prog, description="Tools for flinch results and corpora.")
    sub = parser.add_subparsers(dest="command", required=True)
    cmp = sub.add_parser("compare", help="results side by side: a table and an overlay radar chart",
                         description="Flinch results side by side: per axis, and in total over one axis set.",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmp.add_argument("inputs", nargs="*", metavar="FILE", help="result JSON files (summary.json or one model's), "
                     "or reference:<model>")
    cmp.add_argument("--baseline", metavar="FILE", help="one model's result (or reference:<model>); every row "
                     "shows its difference from it")
    cmp.add_argument("--reference", nargs="+", metavar="MODEL", default=[],
                     help="rows of the method's reference table to set beside the inputs")
    cmp.add_argument("--axes", nargs="+", metavar="KEY", help="the axes to compare and total, comma- or "
                     "space-separated (default: those every input has)")
    cmp.add_argument("--out", metavar="PNG",
                     help=f"where the overlay radar is written; an existing file is refused (default: {CHART} beside "
                          f"the first input file, its analysis, or in the current folder for reference rows only; "
                          f"an earlier chart there is kept and the next free name, {CHART[:-4]}-2.png, taken)")
    sub.add_parser("reference", help="the method's published reference table, with its source",
                   description="Print the flinch method's reference baselines shipped with mirrorscan.")
    cor = sub.add_parser("corpus", help="load a corpus file as a scan would, and say what it holds",
                         description="Load a corpus file (or packaged:starter) as a scan would: its axes, terms "
                                     "and carriers, the keys kept as descriptions, and its warnings.")
    cor.add_argument("file", metavar="FILE", help="a corpus JSON file, or packaged:starter")
    cor.add_argument("--axes", nargs="+", metavar="KEY", help="the axes to load, comma- or space-separated")
    args = parser.parse_args(argv)
    try:
        if args.command == "reference":
            from mirrorscan.instruments.flinch.reference import describe

            print(describe())
            return 0
        if args.command == "corpus":
            print(corpus_text(args.file, axis_list(args.axes)))
            return 0
        from mirrorscan.instruments.flinch.compare import compare, format_table, overlay_radar

        if not args.inputs and not args.reference:
            raise ConfigError("(command line)", "FILE", "no input given", "give result files or --reference MODEL")
        result = compare(args.inputs, args.baseline, axis_list(args.axes), args.reference)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = chart_path(args.inputs, args.out)
    if args.out is not None and out.exists():   # before anything is printed: one error line, nothing written
        raise ConfigError(args.out, "--out", "already exists; flinch compare never overwrites a file",
                          "name another file, or remove this one first")
    chart = overlay_radar(result)
    print(printable(format_table(result), "\n"))
    write_new(out, chart)
    print(printable(f"radar: {out.resolve()}"))
    return 0


def corpus_text(path: str, axes: list[str] | None) -> str:
    """What ``load_corpus`` reads from ``path`` (the axes selected): per axis its terms and carriers, the
    descriptive keys kept, and the warnings."""
    from mirrorscan.instruments.flinch.corpus import METHOD_AXES, load_corpus

    corpus = load_corpus(path, axes=axes)
    lines = [f"corpus {corpus.path} (version {corpus.version or '-'}, SHA-256 {corpus.sha256[:12]}…): "
             f"{len(corpus.axes)} axes, {corpus.n_carriers()} carriers"]
    for a in corpus.axes:
        lines.append(f"  {a.key:<16} {len(a.terms):>4} terms {sum(len(t.carriers) for t in a.terms):>6} carriers  "
                     f"{a.label}" + ("" if a.key in METHOD_AXES else "  (not one of the method's axis keys)"))
    if corpus.extra:
        places: dict[str, int] = {}
        for keys in corpus.extra.values():
            for k in keys:
                places[k] = places.get(k, 0) + 1
        lines.append("kept as descriptions, not read: " + ", ".join(f"{k} ({n}×)" for k, n in places.items()))
    return "\n".join(lines + [f"warning: {w}" for w in corpus.warnings])
