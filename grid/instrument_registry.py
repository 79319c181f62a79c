"""The registered instruments: one entry each, naming where the instrument is and what its own tools are.

Kept apart from ``grid.instrument`` (which imports pyarrow) so that the command line's verb list reads every
instrument's tools line without importing any instrument or any heavy library: an entry is the only place
that line is written. ``grid.instrument.resolve`` imports an entry's instrument on first use.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Registered:
    """One registered instrument."""

    ref: str
    """``"module:attr"`` of the instrument object, imported on first use."""
    tools: str = ""
    """One line saying what ``mirrorscan <name> …`` offers (the instrument's ``cli``), starting
    ``"<name>'s own tools"``; empty: the instrument has no tools of its own."""


REGISTRY: dict[str, Registered] = {
    "forced_choice": Registered("mirrorscan.instruments.forced_choice.instrument:INSTRUMENT"),
    "flinch": Registered("mirrorscan.instruments.flinch.instrument:INSTRUMENT",
                         "flinch's own tools: `compare` results side by side, the `reference` table, a `corpus` file"),
    "lens": Registered("mirrorscan.instruments.lens.instrument:INSTRUMENT",
                       "lens's own tools: `predict` new texts on an invocation's directions, `headline` again from "
                       "a report"),
    "open_scan": Registered("mirrorscan.instruments.open_scan.instrument:INSTRUMENT",
                            "open_scan's own tools: matrix, remeasure, and the method's JSONL (import, export)"),
}
"""Instrument name → its entry (importing mirrorscan imports no instrument)."""


def tool_lines() -> dict[str, str]:
    """Registered instruments with tools of their own → the one line of help for ``mirrorscan <name> …``."""
    return {name: entry.tools for name, entry in REGISTRY.items() if entry.tools}
