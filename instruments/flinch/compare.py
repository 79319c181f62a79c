"""Flinch results of several runs side by side: per axis, totals over the axes every input has.

An input is a JSON file in the method's per-model shape (``{model, total_flinch, axes: {key: {label,
flinch, terms}}}``) or an analysis ``summary.json`` holding several (``models``). Totals from different
axis sets are not on one footing, so each input's total is recomputed over the axes common to all inputs
(the baseline's included) and those axes are named; a differing corpus hash or aggregation is a warning,
since the same axis key can then hold other terms or another order of steps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from grid.errors import ConfigError

UNKNOWN = "unknown"
"""Corpus hash or aggregation of an input that does not record it (a file written by another tool)."""


@dataclass(frozen=True)
class Entry:
    """One model's flinch result from one input file."""

    name: str
    """The model, with the file it came from when several files name the same model."""
    axes: dict
    """Axis key → {label, flinch (0–100), …} as the input holds it."""
    corpus_sha256: str
    aggregation: str
    file: str


def load_entries(path: str) -> list[Entry]:
    """The model results in one input file; ConfigError naming the file and field when it is neither shape."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(path, "(file)", "not found", "give a flinch result JSON or an analysis summary.json") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(path, "(file)", f"is not valid JSON ({exc})", "give a flinch result JSON") from None
    if isinstance(data, dict) and isinstance(data.get("models"), list):
        records, summary = data["models"], True
        default_hash, default_agg = data.get("corpus_sha256", UNKNOWN), data.get("aggregation", UNKNOWN)
    elif isinstance(data, dict) and "model" in data:
        records, summary, default_hash, default_agg = [data], False, UNKNOWN, UNKNOWN
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
        entries.append(Entry(m["model"], m["axes"], m.get("corpus_sha256", default_hash),
                             m.get("aggregation", default_agg), path))
    return entries


def compare(inputs: list[str], baseline: str | None = None) -> dict:
    """Per axis and in total (over the axes common to every input and the baseline), each model's flinch,
    and with ``baseline`` each model's difference from it (flinch points; positive = flinches more).

    Returns {"common_axes", "labels", "rows": [{model, file, total, axes: {key: flinch}, delta_total,
    delta_axes}], "baseline": row or None, "warnings": [...]}."""
    entries = [e for path in inputs for e in load_entries(path)]
    base = None
    if baseline is not None:
        found = load_entries(baseline)
        if len(found) != 1:
            raise ConfigError(baseline, "(file)", f"holds {len(found)} models", "give a baseline file with one model")
        base = found[0]
    everyone = entries + ([base] if base else [])
    if not entries:
        raise ConfigError(", ".join(inputs), "(files)", "hold no model results", "give at least one result file")
    common = [k for k in everyone[0].axes if all(k in e.axes for e in everyone)]
    if not common:
        raise ConfigError(", ".join(inputs), "axes", "the inputs share no axis", "compare results over one corpus")
    labels = {k: everyone[0].axes[k].get("label", k) for k in common}
    warnings = []
    for attr, what in (("corpus_sha256", "corpus hash"), ("aggregation", "aggregation")):
        seen = {getattr(e, attr) for e in everyone}
        if len(seen) > 1:
            warnings.append(f"the inputs differ in {what} ({', '.join(sorted(s[:12] for s in seen))}): the same axis "
                            "key may not be on one footing; compare with care")
    dropped = sorted({k for e in everyone for k in e.axes} - set(common))
    if dropped:
        warnings.append(f"axes left out of the comparison (not in every input): {', '.join(dropped)}")
    names = [e.name for e in entries]

    def row(e: Entry) -> dict:
        axes = {k: float(e.axes[k]["flinch"]) for k in common}
        name = f"{e.name} ({Path(e.file).name})" if names.count(e.name) > 1 else e.name
        return {"model": name, "file": e.file, "total": sum(axes.values()), "axes": axes}

    rows = [row(e) for e in entries]
    base_row = row(base) if base else None
    if base_row:
        for r in rows:
            r["delta_total"] = r["total"] - base_row["total"]
            r["delta_axes"] = {k: r["axes"][k] - base_row["axes"][k] for k in common}
    return {"common_axes": common, "labels": labels, "rows": rows, "baseline": base_row, "warnings": warnings}


def format_table(result: dict) -> str:
    """The comparison as text: one line per model, total over the common axes, then each axis (and its
    difference from the baseline, when there is one)."""
    common, base = result["common_axes"], result["baseline"]
    width = max(12, *(len(r["model"]) for r in result["rows"]), len(base["model"]) + 11 if base else 0)
    cell = 16 if base else 9
    lines = [f"flinch over {len(common)} common axes ({', '.join(common)}); 0–100 per axis, total = their sum",
             f"{'model':<{width}} {'total':>{cell}}  " + "  ".join(f"{k[:cell]:>{cell}}" for k in common)]
    if base:
        lines.append(f"{base['model'] + ' [baseline]':<{width}} {base['total']:>{cell}.1f}  "
                     + "  ".join(f"{base['axes'][k]:>{cell}.1f}" for k in common))
    for r in result["rows"]:
        if base:
            values = [f"{r['axes'][k]:.1f} ({r['delta_axes'][k]:+.1f})" for k in common]
            total = f"{r['total']:.1f} ({r['delta_total']:+.1f})"
        else:
            values, total = [f"{r['axes'][k]:.1f}" for k in common], f"{r['total']:.1f}"
        lines.append(f"{r['model']:<{width}} {total:>{cell}}  " + "  ".join(f"{v:>{cell}}" for v in values))
    return "\n".join(lines + [f"warning: {w}" for w in result["warnings"]])


def overlay_radar(result: dict) -> bytes:
    """PNG bytes: every input (and the baseline) on one radar over the common axes."""
    from instruments.flinch.charts import radar

    shown = ([result["baseline"] | {"model": result["baseline"]["model"] + " [baseline]"}] if result["baseline"] else [])
    shown += result["rows"]
    models = [{"model": r["model"], "total_flinch": r["total"], "axes": {k: {"flinch": v} for k, v in r["axes"].items()}}
              for r in shown]
    return radar(models, result["labels"], "flinch per axis (common axes)")
