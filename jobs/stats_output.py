"""Where a ``mirrorscan stats`` result goes: JSON on stdout or in ``--out``, and for an invocation's table also
beside its analysis in the store."""

from __future__ import annotations

import sys
from pathlib import Path

from mirrorscan.results.long_stats import result_json


def emit(result: dict, out: str | None) -> None:
    """Write the JSON to ``out`` (and say where on stderr) or print it on stdout."""
    text = result_json(result)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
        print(f"wrote {out}", file=sys.stderr)
    else:
        print(text)


def write_beside(inv: dict, command: str, result: dict) -> None:
    """Store the JSON beside the invocation's analysis (``results.long_table.write_beside``) and say where."""
    from mirrorscan.results.long_table import write_beside as store_beside

    text = result_json(result) + "\n"
    print(f"wrote {store_beside(inv, command, text)}", file=sys.stderr)
