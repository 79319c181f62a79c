"""The surface-form baseline of a lens invocation: how well the scoring texts' words alone predict their labels.

Out of fold over the whole scoring set, then over each subset it names, with the set's groups (``group``: a
pair of reworded twins) kept in one fold, so a held-out item's twin is never in the training fold
(``analysis.surface.surface_baseline``: a bag-of-words logistic regression; AUROC with the invocation's
positive class; its feature count). Flagged above ``analysis.surface.SURFACE_WARNING``: a probe scored on
such items may be reading the prompt's surface.

The texts are the stored ones (``user_text`` of the scoring rows, which every model reads alike). A scoring set
that may not be redistributed stores none: its texts are then read from the set's own file, which must be on
the analysing machine and unchanged (its SHA-256 is checked); without it the baseline is reported missing.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.errors import ConfigError


def scoring_items(traces: pa.Table, spec) -> tuple[list[dict], str | None]:
    """(scoring items sorted by id, each {id, label, subset, group, text}; None, or why the texts are missing)
    from the rows of the first model and variant: every model reads the same scoring texts."""
    names = set(traces.column_names)
    ok = traces.filter(pc.and_(pc.is_null(traces.column("error")), pc.equal(traces.column("arm"), "scoring")))
    if not ok.num_rows:
        return [], "no scoring row without an error"
    first = ok.slice(0, 1).to_pylist()[0]
    ok = ok.filter(pc.and_(pc.equal(ok.column("label"), first["label"]), pc.equal(ok.column("variant"), first["variant"])))
    wanted = [c for c in ("item_id", "item_label", "subset", "item_group", "user_text") if c in names]
    by_id = {r["item_id"]: r for r in ok.select(wanted).to_pylist()}
    items = [{"id": i, "label": r["item_label"], "subset": r.get("subset"), "group": r.get("item_group"),
              "text": r.get("user_text")} for i, r in sorted(by_id.items())]
    if all(i["text"] is not None for i in items):
        return items, None
    try:                                    # withheld texts: the set's own file, as frozen
        texts = {i.id: i.text for i in spec.inputs()[2].items}
    except ConfigError as err:
        return items, f"the scoring texts are not stored (not redistributable) and their file cannot be read: {err}"
    return [{**i, "text": texts.get(i["id"])} for i in items], None


def surface_numbers(traces: pa.Table, spec) -> dict:
    """``{"all": …, "<subset>": …}``, each ``analysis.surface.surface_baseline``'s dict; ``{"missing": why}``
    when the texts cannot be had. A subset with a class of fewer than 2 items is left out."""
    from mirrorscan.analysis.surface import surface_baseline

    items, missing = scoring_items(traces, spec)
    if missing:
        return {"missing": missing}
    out = {}
    for name in [None] + sorted({i["subset"] for i in items if i["subset"] is not None}):
        chosen = [i for i in items if name is None or i["subset"] == name]
        labels = [i["label"] for i in chosen]
        if len(set(labels)) < 2 or min(labels.count(c) for c in set(labels)) < 2:
            continue
        out[name or "all"] = surface_baseline([i["text"] for i in chosen], labels, spec.config.positive,
                                              groups=[i["group"] for i in chosen], seed=spec.config.seed)
    return out


def surface_lines(surface: dict) -> list[str]:
    """One line per set the baseline ran on: AUROC, items, features, folds and groups, and the warning."""
    from mirrorscan.analysis.surface import SURFACE_WARNING

    if "missing" in surface:
        return [f"surface baseline: none ({surface['missing']})"]
    lines = []
    for name, s in surface.items():
        split = (f"{s['folds']} folds, {s['n_groups']} groups kept whole" if s["grouped"]
                 else f"{s['folds']} folds, no groups")
        lines.append(f"surface baseline ({name}, {s['n']} items, {s['n_features']} word features, {split}): "
                     f"bag-of-words out-of-fold AUROC {s['bag_of_words_auroc']:.2f}"
                     + (f"  WARNING: above {SURFACE_WARNING}, the probe may be reading the prompt's surface"
                        if s["warning"] else ""))
    return lines


PLUMBING_PREFIX = "tiny-random-llama"
"""Folder names of the packaged random models (``cluster.models.resolve``: ``packaged:tiny-random-llama…``)."""


def plumbing_note(sources: dict) -> str | None:
    """A line naming the labels whose model (``label → model_canonical``) is a packaged random one, None when
    there is none: random weights, so their numbers — and any comparison, G-study or scaling they enter — test
    the pipeline and mean nothing about a model."""
    from pathlib import PurePath

    labels = sorted(label for label, source in sources.items()
                    if source and PurePath(str(source)).name.startswith(PLUMBING_PREFIX))
    if not labels:
        return None
    return (f"note: {', '.join(labels)} {'is a plumbing model' if len(labels) == 1 else 'are plumbing models'} "
            "(seeded random weights): their numbers, and every comparison, G-study and scaling figure they enter, "
            "test the pipeline and mean nothing about a model.")
