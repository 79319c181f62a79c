"""The one number a lens cell shows in the browser's matrix: the pooled vectors' norm.

A lens cell holds a vector per layer, not an answer. What a cell's row can say on its own, with no analysis
behind it, is how large its pooled activations are: ``pooled_norm`` is the mean over the blocks (entries
1…L of ``layer_vectors``; the embedding output, entry 0, is left out) of the L2 norm of the row's pooled vector,
in the model's own units. Within one model's row of the matrix it shows what the probe's projections are
scaled by — texts whose mean pooling is dominated by a few massive positions (a BOS or first-token sink, more
so in short texts), a variant's pooling or truncation, a float16 store that overflowed (``inf``) or a row
that is not finite (``nan``). It is not a probe result: which way a cell leans is its projection on a
wrapper's direction, which needs every row of the model and is the analysis's (``numbers``, ``predict``).
Norms of models of other widths are not comparable.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

DOC = ("mean over blocks 1…L of the L2 norm of the row's pooled vector (embedding output left out); a scale "
       "and health check of the activations, not a probe result")
"""The value's definition, as the browser's legend shows it."""


def layer_norms(layers: np.ndarray) -> np.ndarray:
    """(entries, hidden) pooled vectors of one row → the L2 norm of each entry, in float64."""
    return np.linalg.norm(np.asarray(layers, dtype=np.float64), axis=1)


def pooled_norm(rows: pa.Table) -> pa.Array:
    """Per row: the mean over entries 1…L of ``layer_vectors``' L2 norms (a row with the embedding output only:
    that entry's); null for a row without vectors (a failed row, or a part without the column). float64."""
    n = rows.num_rows
    if "layer_vectors" not in rows.column_names:
        return pa.nulls(n, pa.float64())
    column = rows.column("layer_vectors").combine_chunks()
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    out = np.zeros(n, dtype=np.float64)
    for i in np.flatnonzero(valid):
        entries = column[i].values          # one list per layer entry, each the pooled vector
        flat = entries.flatten().to_numpy(zero_copy_only=False)
        width = len(flat) // max(len(entries), 1)
        if len(entries) == 0 or width * len(entries) != len(flat):
            valid[i] = False                # no vectors, or entries of unequal widths: nothing to show
            continue
        norms = layer_norms(flat.reshape(len(entries), width))
        out[i] = float(norms[1:].mean() if len(norms) > 1 else norms[0])
    return pa.array(out, pa.float64(), mask=~valid)
