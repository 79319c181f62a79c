"""Two invocations cell by cell: how often they give the same answer, where they differ, and how fast.

A *cell* is (probe_id, sample); each side contributes its successful row of the highest attempt. Over the
cells both sides hold (``shared``):

- ``same_answer`` — the instrument's own test (``Instrument.same_answer``): forced_choice the same response
  text and class; open_scan the same text and rating; flinch every target token's log-prob within
  1e-4 nats (``SAME_LP_NATS``); lens every pooled value within 1e-5 of its layer's largest magnitude.
  Greedy float32 reruns on the same engine give 100 %.
- ``responses`` — exact equality of the response text (rows that carry text on both sides);
- ``columns`` — exact equality of each of the instrument's scalar answer columns that either side filled
  (forced_choice: ``class``; open_scan: ``rating``);
- breakdowns of ``same_answer`` per envelope, ordering and model label;
- the instrument's headline numbers of each side (``Instrument.headline``), side by side;
- fingerprint distance per model label where the instrument compares fingerprints (forced_choice's
  ``compare``: Hamming distance and agreement);
- timing per model label: medians of ttft (ms) and decode rate (tokens/s) of each side's engine requests
  (``results.invocations.request_timing``: the inference_log), and the shift right − left.

A rate is ``same / compared``; None (printed ``—``) when nothing was compared, never 0.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from mirrorscan.grid.formatting import fixed, headline, milliseconds, printable
from mirrorscan.grid.instrument import headline_units
from mirrorscan.results.invocations import Invocation, successful_cells

BREAKDOWNS = ("envelope", "ordering", "label")
"""Coordinates ``same_answer`` is broken down by."""


@dataclass(frozen=True)
class Match:
    """How many compared cells agree."""

    compared: int
    """Cells compared (both sides hold one and the measure applies to it)."""
    same: int
    """Of those, the cells that agree."""

    @property
    def rate(self) -> float | None:
        """same / compared (a fraction in [0, 1]); None when nothing was compared."""
        return self.same / self.compared if self.compared else None

    def to_dict(self) -> dict:
        return {"compared": self.compared, "same": self.same, "rate": self.rate}


@dataclass
class Diff:
    """Two invocations compared cell by cell (see the module docstring for each part)."""

    left: str
    """Invocation id of the left side (A)."""
    right: str
    """Invocation id of the right side (B)."""
    instrument: str
    """The instrument of both."""
    same_answer_rule: str
    """What ``same_answer`` tests, in the instrument's words."""
    cells_left: int
    """Cells with a successful row in A."""
    cells_right: int
    """Cells with a successful row in B."""
    shared: int
    """Cells with a successful row in both."""
    same_answer: Match
    responses: Match
    columns: dict[str, Match] = field(default_factory=dict)
    """Answer column → exact match over the shared cells where either side filled it."""
    by: dict[str, dict[str, Match]] = field(default_factory=dict)
    """Breakdown coordinate → its value → ``same_answer`` over the shared cells with that value."""
    headlines: dict = field(default_factory=dict)
    """{"left": …, "right": …}: each side's ``Instrument.headline`` (an ``error`` entry when analysis failed)."""
    fingerprints: dict = field(default_factory=dict)
    """Model label → the instrument's fingerprint comparison numbers (hamming, agreement, …)."""
    timing: dict = field(default_factory=dict)
    """Model label → {"ttft_ms": {left, right, shift}, "decode_tok_s": {…}}; ``source`` says where from."""
    settings_differences: list[str] = field(default_factory=list)
    """Result-shaping settings fields that differ between the two."""

    @property
    def exact(self) -> bool:
        """Whether every cell of either side is in both and gives the same answer."""
        return (self.shared == self.cells_left == self.cells_right and self.shared > 0
                and self.same_answer.same == self.shared)

    def to_dict(self) -> dict:
        """Plain JSON (rates as fractions)."""
        out = asdict(self)
        out["same_answer"] = self.same_answer.to_dict()
        out["responses"] = self.responses.to_dict()
        out["columns"] = {k: m.to_dict() for k, m in self.columns.items()}
        out["by"] = {k: {v: m.to_dict() for v, m in values.items()} for k, values in self.by.items()}
        out["exact"] = self.exact
        return out


def answer_columns(instrument) -> list[str]:
    """The instrument's scalar answer columns: its string and integer columns that are not coordinates and not
    versions (forced_choice: ``class``)."""
    out = []
    for f in instrument.columns:
        if f.name in instrument.coordinates or f.name.endswith("_version"):
            continue
        if pa.types.is_string(f.type) or pa.types.is_integer(f.type) or pa.types.is_boolean(f.type):
            out.append(f.name)
    return out


def _by_key(table: pa.Table) -> dict[tuple, dict]:
    return {(row["probe_id"], row["sample"]): row for row in table.to_pylist()}


def match_cells(instrument, left: pa.Table, right: pa.Table) -> tuple[Match, Match, dict[str, Match],
                                                                     dict[str, dict[str, Match]], int, int, int]:
    """(same_answer, responses, columns, breakdowns, cells in A, cells in B, shared) of two invocations' trace
    rows (see ``Diff``)."""
    a, b = _by_key(successful_cells(left)), _by_key(successful_cells(right))
    shared = sorted(a.keys() & b.keys())
    same = [bool(instrument.same_answer(a[k], b[k])) for k in shared]
    texts = [(a[k].get("response"), b[k].get("response")) for k in shared]
    texts = [(x, y) for x, y in texts if x is not None and y is not None]
    responses = Match(len(texts), sum(x == y for x, y in texts))
    columns = {}
    for name in answer_columns(instrument):
        pairs = [(a[k].get(name), b[k].get(name)) for k in shared]
        pairs = [(x, y) for x, y in pairs if x is not None or y is not None]
        if pairs:
            columns[name] = Match(len(pairs), sum(x == y for x, y in pairs))
    by: dict[str, dict[str, Match]] = {}
    for coordinate in BREAKDOWNS:
        groups: dict[str, list[bool]] = {}
        for key, ok in zip(shared, same):
            groups.setdefault(str(a[key].get(coordinate)), []).append(ok)
        by[coordinate] = {value: Match(len(oks), sum(oks)) for value, oks in sorted(groups.items())}
    return Match(len(shared), sum(same)), responses, columns, by, len(a), len(b), len(shared)


def _headline(invocation: Invocation) -> dict:
    try:
        analysis = invocation.instrument.analyze(invocation.traces, invocation.settings)
        return invocation.instrument.headline(analysis)
    except Exception as exc:   # noqa: BLE001 - a side whose analysis fails still diffs cell by cell
        return {"error": f"{type(exc).__name__}: {exc}"}


def fingerprint_distances(left: Invocation, right: Invocation) -> dict:
    """Per model label both sides hold: the instrument's fingerprint comparison (``compare``) numbers;
    empty when the instrument has none."""
    if not left.instrument.compares:
        return {}
    labels = set(left.traces.column("label").to_pylist()) & set(right.traces.column("label").to_pylist())
    out = {}
    for label in sorted(labels):
        try:
            result = left.instrument.compare((left.traces, left.settings), (right.traces, right.settings),
                                             label_a=label, label_b=label)
            out[label] = {k: result.numbers.get(k) for k in ("n_pairs", "hamming", "agreement",
                                                              "violent_disagreement") if k in result.numbers}
        except Exception as exc:   # noqa: BLE001 - one label's fingerprint failing leaves the others
            out[label] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def timing_shifts(left: pa.Table, right: pa.Table) -> dict:
    """Per model label: median ttft_ms and decode_tok_s of each side's requests and the shift (right − left;
    None where a side has no value)."""
    out = {}
    labels = sorted(set(left.column("label").to_pylist()) | set(right.column("label").to_pylist()) - {None})
    for label in labels:
        entry = {}
        for metric in ("ttft_ms", "decode_tok_s"):
            lv = _median(v for lab, v in zip(left.column("label").to_pylist(), left.column(metric).to_pylist())
                         if lab == label)
            rv = _median(v for lab, v in zip(right.column("label").to_pylist(), right.column(metric).to_pylist())
                         if lab == label)
            entry[metric] = {"left": lv, "right": rv, "shift": rv - lv if lv is not None and rv is not None else None}
        out[label] = entry
    return out


def diff(left: Invocation, right: Invocation, timing: tuple[tuple[pa.Table, str], tuple[pa.Table, str]]) -> Diff:
    """Compare two invocations of one instrument (``timing``: each side's ``request_timing``); no I/O."""
    from mirrorscan.grid.errors import ConfigError
    from mirrorscan.grid.settings import shaping_differences

    if left.instrument.name != right.instrument.name:
        raise ConfigError("", "A, B", f"are of different instruments ({left.instrument.name}, {right.instrument.name})",
                          "diff two invocations of one instrument")
    same, responses, columns, by, n_left, n_right, shared = match_cells(left.instrument, left.traces, right.traces)
    rule = (left.instrument.same_answer.__doc__ or "the instrument's same_answer").strip().splitlines()[0]
    (tl, source_l), (tr, source_r) = timing
    times = timing_shifts(tl, tr)
    times["source"] = source_l if source_l == source_r else f"{source_l} (A), {source_r} (B)"
    return Diff(left.invocation_id, right.invocation_id, left.instrument.name, rule, n_left, n_right, shared, same, responses, columns, by,
                {"left": _headline(left), "right": _headline(right)}, fingerprint_distances(left, right), times,
                [d for d in shaping_differences(left.row["settings"], right.row["settings"]) if d != "experiment"])


def diff_targets(a: str, b: str, *, store: str | None = None, dsn: str | None = None) -> Diff:
    """Read invocations ``a`` and ``b`` (ids, unique starts, or experiments → newest) and their request timing,
    and ``diff`` them."""
    from mirrorscan.results.invocations import load, request_timing

    left, right = load(a, store=store, dsn=dsn), load(b, store=store, dsn=dsn)
    return diff(left, right, (request_timing(left, dsn), request_timing(right, dsn)))


def _pct(m: Match) -> str:
    return f"{m.same}/{m.compared} = {100 * m.rate:.1f}%" if m.rate is not None else f"{m.same}/{m.compared} = —"


def _num(value) -> str:
    return fixed(value) if isinstance(value, float) else "—" if value is None else str(value)


def _shift(value, unit: str) -> str:
    """A signed shift in ``unit``; milliseconds as ``grid.formatting.milliseconds`` writes the two medians
    (``+132 ms``, ``+12 s``), so a shift and its medians read in one unit and precision."""
    if value is None:
        return "shift —"
    return f"shift {'+' if value >= 0 else ''}" + (milliseconds(value) if unit == "ms" else f"{fixed(value)} {unit}")


def _phrase(rule: str) -> str:
    """An instrument's same-answer rule (a sentence: its docstring) as a phrase inside a line."""
    rule = rule.strip().rstrip(".")
    return rule[:1].lower() + rule[1:] if rule[1:2].islower() else rule


def format_diff(d: Diff) -> str:
    """The diff as text: counts, match rates, breakdowns, headlines side by side, fingerprints, timing; control
    characters of stored values escaped (``printable``), as it is printed."""
    lines = [f"diff A {d.left}  vs  B {d.right}   instrument {d.instrument}",
             f"cells: {d.cells_left} in A · {d.cells_right} in B · {d.shared} in both "
             f"({d.cells_left - d.shared} only in A, {d.cells_right - d.shared} only in B)",
             f"same answer ({_phrase(d.same_answer_rule)}): {_pct(d.same_answer)}"
             + ("   EXACT MATCH" if d.exact else ""),
             f"responses, exact text: {_pct(d.responses)}"]
    lines += [f"{name}, exact: {_pct(m)}" for name, m in d.columns.items()]
    for coordinate, values in d.by.items():
        if list(values) == ["-"]:
            continue
        name = "model" if coordinate == "label" else coordinate
        lines.append(f"by {name}: " + " · ".join(f"{value} {_pct(m)}" for value, m in values.items()))
    left, right = d.headlines.get("left", {}), d.headlines.get("right", {})
    units = headline_units(d.instrument)
    if left or right:
        lines.append("headline (A → B):")
        for key in sorted(set(left) | set(right), key=str):
            lv, rv = left.get(key), right.get(key)
            if isinstance(lv, dict) or isinstance(rv, dict):
                lv, rv = lv or {}, rv or {}
                for metric in sorted(set(lv) | set(rv)):
                    lines.append(f"  {key} {metric}: {headline(metric, lv.get(metric), units)} → "
                                 f"{headline(metric, rv.get(metric), units)}")
            else:
                lines.append(f"  {key}: {headline(str(key), lv, units)} → {headline(str(key), rv, units)}")
    for label, numbers in d.fingerprints.items():
        if "error" in numbers:
            lines.append(f"fingerprint {label}: not compared ({numbers['error']})")
        else:
            lines.append(f"fingerprint {label}: hamming {numbers.get('hamming')} of {numbers.get('n_pairs')} pairs, "
                         f"agreement {_num(numbers.get('agreement'))}")
    source = d.timing.get("source", "")
    for label, entry in d.timing.items():
        if label == "source":
            continue
        ttft, rate = entry["ttft_ms"], entry["decode_tok_s"]
        lines.append(f"timing {label} ({source}, medians): ttft {milliseconds(ttft['left'])} → "
                     f"{milliseconds(ttft['right'])} ({_shift(ttft['shift'], 'ms')}), decode {_num(rate['left'])} → "
                     f"{_num(rate['right'])} tok/s ({_shift(rate['shift'], 'tok/s')})")
    lines.append("settings that differ: " + (", ".join(d.settings_differences) or "none"))
    return printable("\n".join(lines), "\n")
