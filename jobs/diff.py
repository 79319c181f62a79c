"""``mirrorscan diff A B``: two invocations of one instrument, cell by cell.

A and B are invocation ids (or their unique starts, 6+ hex digits), or experiments (their newest invocation).
Printed: cells in each and in both; the rate of cells giving the same answer by the instrument's own test
(forced_choice: same response and class; flinch: every target log-prob within 1e-4 nats; lens: every pooled
value within 1e-5 of its layer's largest magnitude; open_scan: same text and rating), the exact-match rate
of the response text and of each answer column (forced_choice: class); the same-answer rate per envelope,
ordering and model; the instrument's headline numbers of A and B side by side; fingerprint distance per
model (forced_choice); and timing shifts per model (median ttft and decode rate, from the inference_log).
Greedy float32 reruns on the same engine match exactly. Definitions: docs/results.md.

Exit code: 0; with ``--expect-exact``, 1 unless every cell of either side is in both with the same answer.
"""

from __future__ import annotations

import argparse
import json
import sys

from mirrorscan.grid.formatting import printable
from mirrorscan.jobs.errors import reports_user_errors


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan diff") -> int:
    """CLI entry point; returns the exit code."""
    from mirrorscan.results.diff import diff_targets, format_diff

    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="invocation id (or unique start), or experiment (folder or name)")
    p.add_argument("b", help="invocation id (or unique start), or experiment (folder or name)")
    p.add_argument("--store", help="trace store URI (default: the one recorded for each invocation)")
    p.add_argument("--catalog-dsn", help="catalog DSN (default: $MIRRORSCAN_CATALOG_DSN, else the embedded one)")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.add_argument("--expect-exact", action="store_true", help="exit 1 unless the two match exactly")
    args = p.parse_args(argv)
    d = diff_targets(args.a, args.b, store=args.store, dsn=args.catalog_dsn)
    print(printable(json.dumps(d.to_dict(), indent=2, ensure_ascii=False), "\n", json_text=True) if args.json
          else format_diff(d))
    return 1 if args.expect_exact and not d.exact else 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m mirrorscan.jobs.diff"))
