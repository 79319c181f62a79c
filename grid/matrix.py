"""What one cell of the browser's matrix shows (``Presenter.cell_value``): a stored trace column, or one value
derived from each stored row, checked by ``cell_value`` before the browser indexes or a report prints it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class CellValue:
    """What one cell of the browser's matrix shows: a stored trace column, or one number derived from each
    stored row (an instrument whose answer is not a scalar: lens's per-layer vectors). The plain form
    ``cell_value = (column, kind)`` is this without ``derive``."""

    column: str | None
    """The stored trace column (plain form), or the derived value's name (shown as the cell's column name);
    None: the instrument names none and cells show row counts."""
    kind: str
    """``class`` (counted per value) or ``score`` (averaged over a cell's successful rows); ``none`` without a
    column."""
    reads: tuple[str, ...] = ()
    """The trace columns ``derive`` reads (only they are read from each part); empty for a stored column."""
    derive: Callable[[pa.Table], pa.Array] | None = None
    """Rows (the ``reads`` columns of one part) → one value per row, null where a row has none (a failed row);
    text for ``class``, float64 for ``score``. It runs where the browser indexes, once per part."""
    doc: str = ""
    """One line saying what the value is (the matrix legend shows it)."""


def cell_value(instrument) -> CellValue:
    """The instrument's ``cell_value`` (``(column, "class" | "score")`` or a ``CellValue``) as a CellValue, checked;
    ``CellValue(None, "none")`` where it names none (cells show row counts)."""
    value = instrument.cell_value
    value = value if isinstance(value, CellValue) else CellValue(*value)
    if value.column is None and value.kind == "none":
        return value
    if value.kind not in ("class", "score"):
        raise ValueError(f"instrument {instrument.name!r}: cell_value kind {value.kind!r} is not 'class' or 'score'")
    if value.derive is not None and not value.reads:
        raise ValueError(f"instrument {instrument.name!r}: a derived cell_value must name the columns it reads")
    return value
