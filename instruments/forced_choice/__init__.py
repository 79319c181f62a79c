"""forced_choice: word-pair preference probes (see README.md beside this file for its numbers)."""

from mirrorscan.instruments.forced_choice.instrument import COLUMNS, INSTRUMENT, ForcedChoice

__all__ = ["COLUMNS", "INSTRUMENT", "ForcedChoice"]
