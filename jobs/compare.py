"""``mirrorscan compare A B``: two invocations (or two model labels of one) side by side, as their instrument
compares them (forced_choice: fingerprints — Hamming distance, agreement, violent disagreement);
``results.compare.compare`` computes it, this module parses and prints.

A and B are each an invocation id or an experiment (its newest invocation); ``--label-a``/``--label-b``
pick the model variant where an invocation holds several. Both must be of one instrument, and that
instrument must offer a comparison (``Instrument.compare``).

When A and B are one invocation and the labels two of its models (one grid), the comparison is followed by
the two models' paired differences from the invocation's analysis (its headline intervals, the
``numbers["intervals"]`` any instrument's analysis may carry): per headline the difference A − B, its interval
over the random facets, p, the Holm p as adjusted over every pair of models of the invocation, and the verdict.
The analysis is the stored one of the same code and inputs where there is one (as ``report`` reuses it), else
computed here and not written.
"""

from __future__ import annotations

import argparse
import json
import sys

from mirrorscan.grid.formatting import printable
from mirrorscan.jobs.errors import reports_user_errors
from mirrorscan.results.compare import compare


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan compare") -> int:
    """CLI entry point; returns the exit code."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="invocation id or experiment (folder or name)")
    p.add_argument("b", help="invocation id or experiment (folder or name)")
    p.add_argument("--label-a", help="model label in A (needed when A holds several)")
    p.add_argument("--label-b", help="model label in B (needed when B holds several)")
    p.add_argument("--rule", help="the instrument's comparison rule (forced_choice: unanimity, the default, "
                                  "or per_envelope_majority)")
    p.add_argument("--store", help="trace store URI (default: the one recorded for each invocation)")
    p.add_argument("--catalog-dsn", help="catalog DSN (default: $MIRRORSCAN_CATALOG_DSN, else the embedded one)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = p.parse_args(argv)
    result = compare(args.a, args.b, label_a=args.label_a, label_b=args.label_b, rule=args.rule,
                     store=args.store, catalog_dsn=args.catalog_dsn)
    if args.json:
        print(printable(json.dumps(result.json_view if result.json_view is not None else result.numbers, indent=2,
                                   ensure_ascii=False), "\n", json_text=True))
    else:
        print(printable(result.text, "\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.compare"))
