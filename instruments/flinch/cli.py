"""``mirrorscan flinch compare``: flinch results side by side, as a table and an overlay radar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grid.errors import ConfigError

EPILOG = """\
An input is the summary.json that `mirrorscan analyze` writes for a flinch invocation (all its models),
or one model's result in the method's shape ({model, total_flinch, axes: {key: {label, flinch, terms}}}).
Totals are recomputed over the axes every input has (named in the output): totals over different axis
sets are not comparable. Inputs from different corpora (hash) or aggregations are compared with a warning.

example:
  mirrorscan flinch compare run-a/summary.json run-b/summary.json --baseline base.json --out radar.png
"""


def main(argv: list[str], prog: str = "mirrorscan flinch") -> int:
    """Parse ``argv`` and run the subcommand; exit code 0, or 2 for bad input (one line on stderr)."""
    parser = argparse.ArgumentParser(prog=prog, description="Tools for flinch results.")
    sub = parser.add_subparsers(dest="command", required=True)
    cmp = sub.add_parser("compare", help="results side by side: a table and an overlay radar chart",
                         description="Flinch results side by side: per axis and in total over the common axes.",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmp.add_argument("inputs", nargs="+", metavar="FILE", help="result JSON files (summary.json or one model's)")
    cmp.add_argument("--baseline", metavar="FILE", help="one model's result; every row shows its difference from it")
    cmp.add_argument("--out", metavar="PNG", default="flinch-compare.png",
                     help="where the overlay radar is written (default: %(default)s)")
    args = parser.parse_args(argv)
    from instruments.flinch.compare import compare, format_table, overlay_radar

    try:
        result = compare(args.inputs, args.baseline)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_table(result))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(overlay_radar(result))
    print(f"radar: {out.resolve()}")
    return 0
