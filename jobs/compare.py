"""``mirrorscan compare A B``: two invocations (or two model labels of one) side by side, as their instrument
compares them (forced_choice: fingerprints — Hamming distance, agreement, violent disagreement).

A and B are each an invocation id or an experiment (its newest invocation); ``--label-a``/``--label-b``
pick the model variant where an invocation holds several. Both must be of one instrument, and that
instrument must offer a comparison (``Instrument.compare``).
"""

from __future__ import annotations

import argparse
import json
import sys

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.formatting import printable
from mirrorscan.grid.instrument import Analysis, resolve
from mirrorscan.jobs.errors import reports_user_errors


def compare(a: str, b: str, *, label_a: str | None = None, label_b: str | None = None, rule: str | None = None,
            store: str | None = None, catalog_dsn: str | None = None) -> Analysis:
    """The instrument's comparison of two (invocation, label) sides."""
    from mirrorscan.jobs.analyze import load_invocation

    sides = []
    for target in (a, b):
        _, settings, traces, _ = load_invocation(target, store=store, catalog_dsn=catalog_dsn)
        sides.append((traces, settings))
    names = {resolve(s.instrument).name for _, s in sides}
    if len(names) != 1:
        raise ConfigError("", "A, B", f"are of different instruments ({', '.join(sorted(names))})",
                          "compare two invocations of one instrument")
    instrument = resolve(sides[0][1].instrument)
    if not instrument.compares:
        raise ConfigError("", "A, B", f"instrument {instrument.name!r} offers no comparison", "use mirrorscan analyze")
    return instrument.compare(sides[0], sides[1], label_a=label_a, label_b=label_b, rule=rule)


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
