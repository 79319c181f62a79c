"""``mirrorscan models list|prepare``: the packaged models, and preparing one as a step of its own.

A packaged model is converted or built once under ``$MIRRORSCAN_HOME/models/`` the first time something uses
it: the demo model (``packaged:smollm2-135m-instruct``) is converted from its GGUF (about 40 s idle, minutes
under load), a tiny random model (``packaged:tiny-random-llama``, ``…-<blocks>x<width>-s<seed>``) is built
from the demo tokenizer (about a second, after the demo model). ``models prepare`` does that ahead, says
what it does and how long it took, so a scan starts with the model ready; run again, it says the model is
already prepared and returns at once.
"""

from __future__ import annotations

import argparse
import sys
import time

from mirrorscan.grid.errors import ConfigError
from mirrorscan.jobs.errors import reports_user_errors

HELP = """\
The packaged models: `list` shows them and whether each is prepared; `prepare NAME` converts or builds one
under $MIRRORSCAN_HOME/models/ now, printing what it does and how long it took (a scan would otherwise do it
before its first cell). NAME may leave out the `packaged:` prefix.

  packaged:smollm2-135m-instruct            the demo model, converted from its GGUF once (about 40 s idle;
                                            CPU speed, load and disk decide: minutes on a busy machine)
  packaged:tiny-random-llama                a tiny random Llama with the demo tokenizer (built in about 1 s)
  packaged:tiny-random-llama-<B>x<W>-s<S>   one of B blocks of width W and seed S (1-16, 32-512, W a multiple of 4);
                                            the lens design demo scans -2x64-s1 and -4x96-s2
"""


def full_name(name: str) -> str:
    """``name`` with the ``packaged:`` prefix it may leave out."""
    name = name.strip()
    return name if name.startswith("packaged:") else f"packaged:{name}"


def prepare(name: str, force: bool = False, out=None) -> int:
    """Prepare packaged model ``name`` (see HELP) and print one line: where it is, and the seconds it took
    (wall clock), or that it was already prepared. Returns the exit code."""
    from mirrorscan.cluster.models.resolve import is_prepared, packaged_folder, prepare_packaged

    out = out or sys.stdout
    alias = full_name(name)
    folder = packaged_folder(alias)   # ConfigError for a name that is no packaged model
    if not force and is_prepared(alias):
        print(f"models: {alias} is already prepared: {folder}", file=out)
        return 0
    print(f"models: preparing {alias} into {folder} …", file=out, flush=True)
    started = time.monotonic()
    prepare_packaged(alias, force=force)
    print(f"models: {alias} prepared in {time.monotonic() - started:.1f} s: {folder}", file=out)
    return 0


def show(out=None) -> int:
    """Print each packaged model, whether it is prepared, and its folder; returns 0."""
    from mirrorscan.cluster.models.resolve import is_prepared, packaged_aliases, packaged_folder

    out = out or sys.stdout
    for alias in packaged_aliases():
        state = "prepared" if is_prepared(alias) else "not prepared"
        print(f"{alias:<44}{state:<14}{packaged_folder(alias)}", file=out)
    return 0


@reports_user_errors
def main(argv: list[str] | None = None, prog: str = "mirrorscan models") -> int:
    """``mirrorscan models list|prepare NAME [--force]``; returns the exit code (2 for a bad name)."""
    parser = argparse.ArgumentParser(prog=prog, description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{list,prepare}")
    sub.add_parser("list", help="the packaged models, whether each is prepared, and where")
    p = sub.add_parser("prepare", help="convert or build a packaged model now (once)")
    p.add_argument("name", help="e.g. packaged:smollm2-135m-instruct or tiny-random-llama")
    p.add_argument("--force", action="store_true", help="prepare it again even if it is already prepared")
    args = parser.parse_args(argv)
    if args.command == "list":
        return show()
    return prepare(args.name, force=args.force)


if __name__ == "__main__":
    sys.exit(main())
