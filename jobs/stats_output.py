"""Where a ``mirrorscan stats`` result goes: JSON on stdout or in ``--out``, and for an invocation's table also
beside its analysis in the store."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np


def jsonable(x: Any) -> Any:
    """JSON has no NaN/inf or numpy types: non-finite floats become None (inf sizes are already "inf")."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def emit(result: dict, out: str | None) -> None:
    """Write the JSON to ``out`` (and say where on stderr) or print it on stdout."""
    text = json.dumps(jsonable(result), indent=2, ensure_ascii=False, allow_nan=False)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
        print(f"wrote {out}", file=sys.stderr)
    else:
        print(text)


def write_beside(inv: dict, command: str, result: dict) -> None:
    """Store the JSON beside the invocation's analysis (``results.long_table.write_beside``) and say where."""
    from mirrorscan.results.long_table import write_beside as store_beside

    text = json.dumps(jsonable(result), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    print(f"wrote {store_beside(inv, command, text)}", file=sys.stderr)
