"""The ``mirrorscan`` command: one verb per job.

  mirrorscan scan EXPERIMENT_DIR [--resume]   run (or finish) an experiment's grid
  mirrorscan analyze EXPERIMENT_DIR            its newest invocation's numbers, as its instrument defines them
  mirrorscan compare A B                      two invocations side by side (forced_choice: fingerprints)
  mirrorscan reproduce INVOCATION             rerun its exact grid as a new invocation, then diff the two
  mirrorscan diff A B                         two invocations cell by cell (answers, breakdowns, timing)
  mirrorscan report TARGET [--all]            one self-contained HTML report per invocation
  mirrorscan stats gstudy|kendall|auroc|null  statistics on a long table or an invocation's traces
  mirrorscan sql "SELECT …"                   query traces and invocations
  mirrorscan models prepare NAME              convert or build a packaged model once, visibly (models list)
  mirrorscan prepare-demo                     convert the packaged demo model once
  mirrorscan catalog status|stop              where the local catalog is, whether it runs; stop it
  mirrorscan submit EXPERIMENT_DIR [--address URL]   run it on a Ray cluster as a job
  mirrorscan status [JOB_ID] [--address URL]  the cluster's jobs, or one job
  mirrorscan logs JOB_ID [--follow]           a job's output
  mirrorscan tap --upstream URL [--port P]    time any client's requests to an OpenAI-compatible server
  mirrorscan engines up|list|down             engines that outlive a scan: load a model once, every scan uses it
  mirrorscan browse [--port P] [--host H]    a read-only web app: matrices, traces, comparisons, timing
  mirrorscan matrix EXPERIMENT                an open_scan experiment's models × probes, coverage, summaries
  mirrorscan remeasure EXPERIMENT [--models]  its per-model summaries, recomputed from stored rows
  mirrorscan open_scan import|export …        the method's JSONL in and out
  mirrorscan flinch compare A.json B.json     an instrument's own tools (flinch: results side by side)

``mirrorscan VERB --help`` explains each verb.

A reader that stops early (``mirrorscan sql … | head -1``) ends the output quietly: no traceback, exit code 141
(128 + SIGPIPE, what a shell reports for a command a closed pipe stopped).

Listing the verbs imports no verb: each verb's modules (Ray, torch, an instrument, scipy) are imported only
when that verb runs, so ``mirrorscan --help`` answers at once.
"""

from __future__ import annotations

import sys

VERBS = {
    "scan": ("mirrorscan.jobs.scan", "run or resume an experiment's grid"),
    "analyze": ("mirrorscan.jobs.analyze", "an invocation's numbers, tables and charts, as its instrument defines them"),
    "compare": ("mirrorscan.jobs.compare", "two invocations or models side by side (forced_choice: fingerprints)"),
    "reproduce": ("mirrorscan.jobs.reproduce", "rerun an invocation's exact grid from its frozen settings, then diff the two"),
    "diff": ("mirrorscan.jobs.diff", "two invocations cell by cell: same-answer rates, breakdowns, headlines, timing"),
    "report": ("mirrorscan.jobs.report", "one self-contained HTML file per invocation: numbers, definitions, charts, queries"),
    "stats": ("mirrorscan.jobs.stats", "G-study/D-study, Kendall's W, AUROC per layer, permutation nulls"),
    "sql": ("mirrorscan.jobs.sql", "SQL over traces and scan_invocations"),
    "models": ("mirrorscan.jobs.models", "the packaged models: list them, prepare one (convert or build it once, timed)"),
    "prepare-demo": ("mirrorscan.jobs.prepare_demo", "prepare the packaged demo model (SmolLM2-135M-Instruct)"),
    "catalog": ("mirrorscan.jobs.catalog", "the local catalog server: where it is and whether it runs (status), stop it"),
    "submit": ("mirrorscan.jobs.submit", "run an experiment on a Ray cluster as a job (--address / RAY_ADDRESS)"),
    "status": ("mirrorscan.jobs.submit", "a cluster's submitted jobs, or one job in detail"),
    "logs": ("mirrorscan.jobs.submit", "a submitted job's output (--follow to stream it)"),
    "tap": ("mirrorscan.jobs.tap", "relay an OpenAI-compatible server and log each request's timing (inference_log)"),
    "engines": ("mirrorscan.jobs.engines", "warm engines on Ray Serve: load a model once for every scan (up, list, down)"),
    "browse": ("mirrorscan.jobs.browse", "a read-only web app over the store and catalog: matrices, traces, comparisons, timing"),
}


INSTRUMENT_ALIASES = {
    "matrix": ("open_scan", "an open_scan experiment's model × probe matrix: coverage and summaries"),
    "remeasure": ("open_scan", "an open_scan experiment's per-model summaries, recomputed from stored rows"),
}
"""Top-level verbs that are an instrument's own tool: ``mirrorscan matrix …`` = ``mirrorscan open_scan matrix …``."""


def instrument_tools() -> dict[str, str]:
    """Registered instruments that bring their own tools → the one line of help their registry entry gives
    (``grid.instrument_registry``; read without importing any instrument, so the verb list stays light)."""
    from mirrorscan.grid.instrument_registry import tool_lines

    return tool_lines()


def instrument_verbs() -> dict[str, str]:
    """Registered instruments whose imported object offers tools (``Instrument.tools``) → that line. Imports every
    instrument: for checks, not for the verb list (that reads ``instrument_tools``)."""
    from mirrorscan.grid.instrument import REGISTRY, resolve

    return {name: resolve(name).tools for name in REGISTRY if resolve(name).tools}


def verb_first(argv: list[str]) -> list[str]:
    """``argv`` with the verb first: options written before it (``mirrorscan --store X sql …``) are the
    verb's options, as if written after it."""
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        verb = next((i for i, a in enumerate(argv) if a in VERBS or a in INSTRUMENT_ALIASES), None)
        if verb is not None:
            return [argv[verb], *argv[:verb], *argv[verb + 1:]]
    return argv


EXIT_BROKEN_PIPE = 141
"""Exit code when the reader of stdout went away (128 + SIGPIPE)."""


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a verb's ``main``; returns the exit code (``EXIT_BROKEN_PIPE`` when stdout's reader closed
    the pipe: the rest of the output is dropped without a traceback, as Python's documentation of SIGPIPE
    recommends)."""
    import errno
    import os

    try:
        code = dispatch(argv)
        sys.stdout.flush()   # inside the try: a closed pipe surfaces here, not at interpreter exit
        return code
    except OSError as exc:   # BrokenPipeError, or pyarrow's I/O error carrying EPIPE
        if not (isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE or "Broken pipe" in str(exc)):
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # Python flushes stdout at exit: let that write go nowhere
        return EXIT_BROKEN_PIPE


def dispatch(argv: list[str] | None = None) -> int:
    """Run the verb ``argv`` names (or print the verb list); returns its exit code."""
    import importlib
    import os

    if not os.environ.get("RAY_ADDRESS"):   # before anything imports Ray, which reads its auth mode once
        from mirrorscan.cluster.runtime.ray_session import local_ray_defaults

        local_ray_defaults()

    argv = verb_first(list(sys.argv[1:] if argv is None else argv))
    if argv and argv[0] in INSTRUMENT_ALIASES:
        from mirrorscan.grid.instrument import resolve
        from mirrorscan.results.reader import StoreReader

        return resolve(INSTRUMENT_ALIASES[argv[0]][0]).cli(argv, "mirrorscan", StoreReader())
    tools = instrument_tools()
    if argv and argv[0] not in VERBS and argv[0] in tools:
        from mirrorscan.grid.instrument import resolve
        from mirrorscan.results.reader import StoreReader

        return resolve(argv[0]).cli(argv[1:], f"mirrorscan {argv[0]}", StoreReader())
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in VERBS:
        asked = not argv or argv[0] in ("-h", "--help")
        stream = sys.stdout if asked else sys.stderr   # an unknown verb: the whole list goes to stderr
        print(__doc__.strip(), file=stream)
        print("\nverbs:", file=stream)
        for verb, (_, text) in [*VERBS.items(), *INSTRUMENT_ALIASES.items()]:
            print(f"  {verb:<14}{text}", file=stream)
        for name, text in tools.items():
            print(f"  {name:<14}{text}", file=stream)
        return 0 if asked else 2
    module = importlib.import_module(VERBS[argv[0]][0])
    return module.main(argv[1:], prog=f"mirrorscan {argv[0]}")


if __name__ == "__main__":
    sys.exit(main())
