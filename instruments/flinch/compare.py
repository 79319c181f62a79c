"""Flinch results of several runs side by side — and beside the method's reference table — per axis, with
totals only where they sum one axis set.

An input is a JSON file in the method's per-model shape (``{model, total_flinch, axes: {key: {label, flinch,
terms}}}``), an analysis ``summary.json`` holding several (``models``), or ``reference:<model>``, a row of the
method's published reference table (``reference``). Axis keys are read under the method's names
(``ALIASES``: an older result's ``clinical_sexual`` is ``sexual``).

The compared axes are those given (``axes``) or else those every input has. A row's total is the sum over
exactly those axes, and it is given only when the row has each of them whole: a row lacking one, or whose
input marks one incomplete (terms without a scored carrier), gets no total, and the reason is printed — totals
over different axis sets are never ranked side by side. A total over fewer axes than an input's own set is
named as such ("5 of 6 axes"). A differing corpus hash or aggregation among the runs is a warning, and a
reference row beside a run carries the note that the comparison is indicative only. Two or more models of one
invocation (one ``summary.json``) also get their intervals and paired differences over the compared axes,
computed from the invocation's carrier rows as ``analyze`` computes them (``compare_intervals``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mirrorscan.grid.errors import ConfigError
from mirrorscan.instruments.flinch import reference
from mirrorscan.instruments.flinch.compare_intervals import intervals_text, invocation_intervals

UNKNOWN = "unknown"
"""Corpus hash or aggregation of an input that does not record it (a file written by another tool)."""
ALIASES = {"clinical_sexual": "sexual"}
"""Older axis keys → the method's keys, followed by every comparison."""


@dataclass(frozen=True)
class Entry:
    """One model's flinch result from one input."""

    name: str
    """The model, with the file it came from when several files name the same model."""
    axes: dict
    """Axis key (the method's name) → {label, flinch (0–100), complete?, …} as the input holds it."""
    corpus_sha256: str
    aggregation: str
    file: str
    axis_set: tuple[str, ...] = ()
    """The input's own axis set (the axes its run scored), which may hold axes this model lacks."""
    incomplete: tuple[str, ...] = ()
    """Axes the input marks incomplete (terms without a scored carrier)."""
    is_reference: bool = False
    renamed: tuple[str, ...] = field(default=())
    """``old → new`` of each axis key read under its method name."""


def _alias(key: str) -> str:
    return ALIASES.get(key, key)


def reference_entry(name: str, where: str = "(input)") -> Entry:
    """The reference table's row ``name`` as an entry (ConfigError listing the models when there is none)."""
    b = reference.baseline(name, where)
    return Entry(f"{b.model} [reference]", {k: {"label": k, "flinch": v, "complete": True} for k, v in b.axes.items()},
                 reference.CORPUS_ID, "axis_lp_mean", f"{reference.PREFIX}{b.model}", tuple(b.axes), (), True)


def load_entries(path: str) -> list[Entry]:
    """The model results in one input (a file, or ``reference:<model>``); ConfigError naming the file and field
    when it is neither shape."""
    if path.startswith(reference.PREFIX):
        return [reference_entry(path.removeprefix(reference.PREFIX), path)]
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(path, "(file)", "not found", "give a flinch result JSON, an analysis summary.json, or "
                          f"{reference.PREFIX}<model>") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(path, "(file)", f"is not valid JSON ({exc})", "give a flinch result JSON") from None
    default_hash: str
    default_agg: str
    if isinstance(data, dict) and isinstance(data.get("models"), list):
        records, summary = data["models"], True
        default_hash, default_agg = data.get("corpus_sha256", UNKNOWN), data.get("aggregation", UNKNOWN)
        default_set = data.get("axes") if isinstance(data.get("axes"), list) else None
    elif isinstance(data, dict) and "model" in data:
        records, summary, default_hash, default_agg, default_set = [data], False, UNKNOWN, UNKNOWN, None
    else:
        raise ConfigError(path, "(top level)", "holds neither a flinch result ({model, total_flinch, axes}) nor an "
                          "analysis summary (models: [...])", "give the summary.json `mirrorscan analyze` wrote")
    entries = []
    for i, m in enumerate(records):
        prefix = f"models[{i}]." if summary else ""
        if not isinstance(m, dict) or not isinstance(m.get("axes"), dict) or not isinstance(m.get("model"), str):
            raise ConfigError(path, prefix.rstrip(".") or "(top level)", "lacks model or axes", "each result needs {model, axes: {key: {flinch}}}")
        for key, axis in m["axes"].items():
            if not isinstance(axis, dict) or not isinstance(axis.get("flinch"), (int, float)):
                raise ConfigError(path, f"{prefix}axes.{key}.flinch", "is missing or not a number",
                                  "each axis needs its flinch value (0–100)")
        axis_set = m.get("axis_set")
        own = axis_set if isinstance(axis_set, list) else default_set or list(m["axes"])
        incomplete = [k for k, a in m["axes"].items() if a.get("complete") is False]
        entries.append(Entry(m["model"], {_alias(k): a for k, a in m["axes"].items()},
                             m.get("corpus_sha256", default_hash), m.get("aggregation", default_agg), path,
                             tuple(_alias(k) for k in own), tuple(_alias(k) for k in incomplete), False,
                             tuple(f"{k} → {ALIASES[k]}" for k in m["axes"] if k in ALIASES)))
    return entries


def compare(inputs: list[str], baseline: str | None = None, axes: list[str] | None = None,
            references: list[str] | None = None) -> dict:
    """Per axis and in total, each model's flinch, over ``axes`` (default: those every input has); with
    ``baseline`` (a file or ``reference:<model>``) each model's difference from it (flinch points; positive =
    flinches more); ``references`` adds rows of the reference table.

    Returns {"axes", "labels", "rows": [{model, label, file, total, total_of, no_total, axes: {key: flinch or
    None}, delta_total, delta_axes}], "baseline": row or None, "ranked": [model, …] by total, highest first (rows
    with a total only), "warnings": [...], "invocations": [{file, models, intervals}] (the models of one input
    with their intervals and paired differences, ``compare_intervals``), "notes": [...]}."""
    entries = [e for path in inputs for e in load_entries(path)]
    entries += [reference_entry(name, "--reference") for name in (references or [])]
    base = None
    if baseline is not None:
        found = load_entries(baseline)
        if len(found) != 1:
            raise ConfigError(baseline, "(file)", f"holds {len(found)} models", "give a baseline file with one model")
        base = found[0]
    everyone = entries + ([base] if base else [])
    if not entries:
        raise ConfigError(", ".join(inputs), "(files)", "hold no model results", "give at least one result file")
    if axes:
        wanted = [_alias(k) for k in axes]
        unknown = [k for k in wanted if not any(k in e.axes for e in everyone)]
        if unknown:
            seen = list(dict.fromkeys(k for e in everyone for k in e.axes))
            raise ConfigError("--axes", "--axes", f"names {', '.join(unknown)}, which no input has",
                              f"use some of: {', '.join(seen)}")
        common = wanted
    else:
        common = [k for k in everyone[0].axes if all(k in e.axes for e in everyone)]
        if not common:
            raise ConfigError(", ".join(inputs), "axes", "the inputs share no axis",
                              "compare results over one corpus, or name the axes with --axes")
    labels = {k: next((e.axes[k].get("label", k) for e in everyone if k in e.axes and not e.is_reference), k)
              for k in common}
    warnings = []
    runs = [e for e in everyone if not e.is_reference]
    for attr, what in (("corpus_sha256", "corpus hash"), ("aggregation", "aggregation")):
        distinct = {getattr(e, attr) for e in runs}
        if len(distinct) > 1:
            warnings.append(f"the runs differ in {what} ({', '.join(sorted(s[:12] for s in distinct))}): the same axis "
                            "key may not be on one footing; compare with care")
    if any(e.is_reference for e in everyone) and runs:
        warnings.append(reference.INDICATIVE)
    dropped = sorted({k for e in everyone for k in e.axes} - set(common))
    if dropped:
        warnings.append(f"axes left out of the comparison: {', '.join(dropped)}"
                        + ("" if axes else " (not in every input)"))
    warnings += [f"{e.name} ({e.file}): axis {r} (the method's key)" for e in everyone for r in e.renamed]
    names = [e.name for e in entries]

    def row(e: Entry) -> dict:
        values = {k: float(e.axes[k]["flinch"]) if k in e.axes else None for k in common}
        lacks = [k for k in common if k not in e.axes]
        partial = [k for k in common if k in e.incomplete]
        why = ([f"lacks {', '.join(lacks)}"] if lacks else []) + \
              ([f"{', '.join(partial)} incomplete (terms without a scored carrier)"] if partial else [])
        own = len(e.axis_set) or len(e.axes)
        name = f"{e.name} ({Path(e.file).name})" if names.count(e.name) > 1 else e.name
        return {"model": name, "label": e.name, "file": e.file, "axes": values,
                "total": None if why else float(sum(v for v in values.values() if v is not None)),
                "total_of": f"{len(common)} of {own} axes" if not why else None,
                "no_total": "; ".join(why) or None}

    rows = [row(e) for e in entries]
    base_row = row(base) if base else None
    if base_row:
        base_row["model"] += " [baseline]"
        for r in rows:
            r["delta_axes"] = {k: None if r["axes"][k] is None or base_row["axes"][k] is None
                               else r["axes"][k] - base_row["axes"][k] for k in common}
            r["delta_total"] = (None if r["total"] is None or base_row["total"] is None
                                else r["total"] - base_row["total"])
    fewer = sorted({f"{r['model']}: {r['total_of']}" for r in rows + ([base_row] if base_row else [])
                    if r["total_of"] and not r["total_of"].startswith(f"{len(common)} of {len(common)} ")})
    if fewer:
        warnings.append("totals here sum the compared axes only, not each input's own total: " + "; ".join(fewer))
    ranked = [r["model"] for r in sorted((r for r in rows if r["total"] is not None), key=lambda r: -r["total"])]
    invocations, notes = invocation_intervals(rows, common, ALIASES)
    return {"axes": common, "common_axes": common, "labels": labels, "rows": rows, "baseline": base_row,
            "ranked": ranked, "warnings": warnings, "invocations": invocations, "notes": notes}


def format_table(result: dict) -> str:
    """The comparison as text: one line per model, its total over the compared axes (or "—" and why there is
    none), then each axis (and its difference from the baseline, when there is one); the ranking by total."""
    common, base = result["axes"], result["baseline"]
    shown = ([base] if base else []) + result["rows"]
    width = max(12, *(len(r["model"]) for r in shown))
    cell = 16 if base else 9

    def num(value, diff=None) -> str:
        if value is None:
            return "—"
        return f"{value:.1f}" + ("" if diff is None else f" ({diff:+.1f})")

    lines = [f"flinch over {len(common)} axes ({', '.join(common)}); 0–100 per axis, total = their sum, given only "
             "for a model with every one of them whole",
             f"{'model':<{width}} {'total':>{cell}}  " + "  ".join(f"{k[:cell]:>{cell}}" for k in common)]
    for r in shown:
        delta = r is not base and base is not None
        values = [num(r["axes"][k], r["delta_axes"][k] if delta else None) for k in common]
        total = num(r["total"], r["delta_total"] if delta else None)
        lines.append(f"{r['model']:<{width}} {total:>{cell}}  " + "  ".join(f"{v:>{cell}}" for v in values))
    missing = [f"{r['model']}: no total ({r['no_total']})" for r in shown if r["no_total"]]
    ranked = result["ranked"]
    lines += missing
    if ranked:
        lines.append(f"ranked by total over these {len(common)} axes, most flinch first: " + " > ".join(ranked)
                     + (f" (not ranked: {', '.join(r['model'] for r in result['rows'] if r['total'] is None)})"
                        if len(ranked) < len(result["rows"]) else ""))
    lines += intervals_text(result.get("invocations", []), width)
    return "\n".join(lines + [f"note: {n}" for n in result.get("notes", [])]
                     + [f"warning: {w}" for w in result["warnings"]])


def overlay_radar(result: dict) -> bytes:
    """PNG bytes: every input (and the baseline) on one radar over the compared axes."""
    from mirrorscan.instruments.flinch.charts import radar

    shown = ([result["baseline"]] if result["baseline"] else []) + result["rows"]
    n = len(result["axes"])
    models = [{"model": r["model"], "total_flinch": r["total"],
               "total_of": r["total_of"] or f"partial: {sum(v is not None for v in r['axes'].values())} of {n} axes",
               "partial_total_flinch": None if r["total"] is not None else
               sum(v for v in r["axes"].values() if v is not None) or None,
               "axes": {k: {"flinch": v} for k, v in r["axes"].items() if v is not None}} for r in shown]
    title = "flinch per axis (compared axes)" + (" — reference rows indicative only" if any(
        r["file"].startswith(reference.PREFIX) for r in shown) else "")
    return radar(models, result["labels"], title)
