"""Per-layer vectors (lens's ``layer_vectors``) as a page shows them: never the values, their shape and a few
norms. The browser's trace page and the report's stored rows both put them this way."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

NORMS_SHOWN = 5
"""Entries whose L2 norm is shown (evenly spaced: the first, the last and three between)."""
_LISTS = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)


def is_nested_list(dtype: pa.DataType) -> bool:
    """Whether ``dtype`` is a list (of any kind) of lists: per-layer vectors."""
    return any(t(dtype) for t in _LISTS) and any(t(dtype.value_type) for t in _LISTS)


def summary(column: pa.Array, i: int = 0, *, with_type: bool = True) -> str | None:
    """Row ``i`` of a per-layer vector column as one line: its shape, its storage type (``with_type``: the
    column's Arrow type, which is the stored one only when read from the part itself) and the L2 norm of a few
    entries (entry 0 first); None for a null row."""
    if not column.is_valid()[i].as_py():
        return None
    entries = column[i].values
    if len(entries) == 0:
        return "[0 vectors]"
    rows = [np.asarray(entries[k].values.to_numpy(zero_copy_only=False), dtype=np.float64) for k in range(len(entries))]
    picks = sorted({round(k * (len(rows) - 1) / max(NORMS_SHOWN - 1, 1)) for k in range(NORMS_SHOWN)})
    norms = ", ".join(f"{k}: {float(np.linalg.norm(rows[k])):.4g}" for k in picks)
    stored = f", stored as {entries.type.value_type}" if with_type else ""
    return f"[{len(rows)} × {len(rows[0])} values{stored}] L2 norm by entry: {norms}"
