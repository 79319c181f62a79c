"""Probe ids and cell seeds: the keys every row, join and resume depends on.

probe_id = ``label|item_key|envelope|ordering`` with ``-`` for a coordinate an instrument lacks; each
instrument defines its item_key (e.g. ``claude-fable-5|vodka|whiskey|english_strict|AB`` has item_key
``vodka|whiskey``). ``sample`` is never part of the probe_id: the key
for resume and deduplication is (invocation_id, probe_id, sample).
"""

from __future__ import annotations

import hashlib
import unicodedata

from mirrorscan.grid.errors import ConfigError, excerpt

SEP = "|"
"""Separator between probe_id components; forbidden inside any component."""
MAX_COMPONENT_CHARS = 200
"""Longest id component (label, item, word) accepted: a probe_id is a key, not a prompt."""
MISSING = "-"
"""Stands for a coordinate the instrument does not have (e.g. no ordering in open_scan)."""


def check_component(value: str, file: str, field: str) -> str:
    """Return ``value`` if it can be a probe_id component, else raise ConfigError naming file and field."""
    if not isinstance(value, str) or value == "":
        raise ConfigError(file, field, "is empty", "give a non-empty text")
    if SEP in value:
        raise ConfigError(file, field, f"{excerpt(value)} contains '|', the probe_id separator",
                          "remove or replace the '|' character")
    if value != value.strip():
        raise ConfigError(file, field, f"{excerpt(value)} has leading or trailing whitespace", "strip it")
    control = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if control is not None:
        raise ConfigError(file, field, f"{excerpt(value)} holds the control character U+{ord(control):04X}",
                          "remove it (ids and words are single-line printable text)")
    if len(value) > MAX_COMPONENT_CHARS:
        raise ConfigError(file, field, f"is {len(value)} characters long (at most {MAX_COMPONENT_CHARS})",
                          "shorten it")
    return value


def make_probe_id(label: str, item_key: str, envelope: str = MISSING, ordering: str = MISSING) -> str:
    """Join the coordinates of a cell (all but sample) into its probe_id."""
    return SEP.join((label, item_key, envelope or MISSING, ordering or MISSING))


def cell_seed(root_seed: int, probe_id: str, sample: int) -> int:
    """The seed of one cell: a hash of (root seed, probe_id, sample), in [0, 2**63).

    It alone fixes a sampled cell's output, whatever batch the cell lands in or how many workers run.
    """
    digest = hashlib.blake2b(f"{root_seed}{SEP}{probe_id}{SEP}{sample}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 63) - 1)
