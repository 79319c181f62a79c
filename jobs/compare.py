"""``mirrorscan compare A B``: compare the fingerprints of two models, effort tiers or reruns.

A and B are each an invocation id or an experiment (its newest invocation); ``--label-a``/``--label-b``
pick the model variant where an invocation holds several. Prints the Hamming distance over all pairs
(pairs one side lacks read ``incomplete``), the agreement, and the violent disagreement (both
committed, opposite words; undefined when no pair is committed by both). Fingerprints use rule
``unanimity`` unless ``--rule per_envelope_majority``.
"""

from __future__ import annotations

import argparse
import sys

from grid.errors import ConfigError
from jobs.errors import reports_user_errors


def pick(report, label: str | None, side: str):
    """The ModelSummary of ``label`` in an analysis report (the only one when ``label`` is None)."""
    labels = [s.label for s in report.summaries]
    if label is None:
        if len(labels) != 1:
            raise ConfigError("", f"--label-{side}", f"invocation {report.invocation_id} holds {len(labels)} models ({', '.join(labels)})",
                              f"name one with --label-{side}")
        return report.summaries[0]
    for s in report.summaries:
        if s.label == label:
            return s
    raise ConfigError("", f"--label-{side}", f"no model {label!r} in invocation {report.invocation_id}", f"use one of: {', '.join(labels)}")


def compare(a: str, b: str, *, label_a: str | None = None, label_b: str | None = None, rule: str = "unanimity",
            store: str | None = None, catalog_dsn: str | None = None):
    """The FingerprintComparison of two (invocation, label) fingerprints under ``rule``."""
    from analysis.forced_choice import compare_fingerprints, fingerprint
    from jobs.analyze import analyze_invocation

    fps = []
    for target, label, side in ((a, label_a, "a"), (b, label_b, "b")):
        report = analyze_invocation(target, store=store, catalog_dsn=catalog_dsn, write=False)
        summary = pick(report, label, side)
        fps.append(summary.fingerprint if rule == "unanimity" else _refingerprint(target, summary.label, rule, store, catalog_dsn, fingerprint))
    return compare_fingerprints(*fps)


def _refingerprint(target, label, rule, store, catalog_dsn, fingerprint):
    from analysis.forced_choice import by_model
    from cluster.catalog import Catalog, resolve_dsn
    from cluster.store import open_store
    from jobs.analyze import classified_cells, expected_cells, resolve_invocation

    with Catalog(resolve_dsn(catalog_dsn)) as catalog:
        inv = resolve_invocation(target, catalog)
    traces = open_store(store or inv["store_uri"]).read(inv["experiment"], str(inv["invocation_id"]))
    cells, _ = classified_cells(traces, inv["settings"], reclassify=False)
    table = by_model(cells)[(label, str(inv["invocation_id"]))]
    return fingerprint(table, expected_cells(inv["settings"]), rule)


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan compare") -> int:
    """CLI entry point; returns the exit code."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="invocation id or experiment (folder or name)")
    p.add_argument("b", help="invocation id or experiment (folder or name)")
    p.add_argument("--label-a", help="model label in A (needed when A holds several)")
    p.add_argument("--label-b", help="model label in B (needed when B holds several)")
    p.add_argument("--rule", choices=("unanimity", "per_envelope_majority"), default="unanimity")
    p.add_argument("--store", help="trace store URI (default: the one recorded for each invocation)")
    p.add_argument("--catalog-dsn", help="catalog DSN (default: $MIRRORSCAN_CATALOG_DSN, else the embedded one)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = p.parse_args(argv)
    result = compare(args.a, args.b, label_a=args.label_a, label_b=args.label_b, rule=args.rule,
                     store=args.store, catalog_dsn=args.catalog_dsn)
    if args.json:
        print(result.to_json(indent=2))
        return 0
    vd = "undefined (no pair committed by both)" if result.violent_disagreement is None else \
        f"{result.violent_disagreement:.3f} ({result.n_violent} of {result.n_co_committed} co-committed pairs)"
    agreement = "—" if result.agreement is None else f"{result.agreement:.3f}"
    print(f"{result.left}  vs  {result.right}   rule {result.rule}")
    print(f"pairs {result.n_pairs}   hamming {result.hamming}   agreement {agreement}   violent disagreement {vd}")
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m jobs.compare"))
