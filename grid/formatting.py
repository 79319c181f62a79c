"""How numbers and units are written for a reader: one formatting shared by ``analyze``, ``report``, ``browse``
and ``diff``, so that a number reads the same wherever it is shown.

Rules: never scientific notation; a rate (a share in [0, 1]) as a percentage with one decimal (``15.6%``); a
difference of rates in percentage points (``+3.1 pp``); a duration in the unit that keeps it readable
(``840 ms``, ``3.2 s``, ``2 min 05 s``); any other number fixed-point (``fixed``: ``0.712``, ``42.5``,
``12345``, ``0.00123``); absence (None, NaN) as ``—``. A headline number's unit is read from its
name (``headline``): ``*_rate`` / ``*_share`` → percent, ``*_pp`` → percentage points, ``*_ms`` →
milliseconds, ``*_s`` / ``*_seconds`` → seconds.

Text a verb prints to a terminal goes through ``printable``: a control character in a stored value (an ESC
starting a colour or a window title, a BEL, a CR that overwrites the line) is shown as an escape, never
acted on. Stored values stay verbatim; only what is printed is escaped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from datetime import timezone
from typing import Any

ABSENT = "—"
"""What an absent value (None, NaN) is printed as."""


CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
"""Characters a terminal acts on instead of showing: the C0 controls (NUL … US: BEL, BS, TAB, LF, CR, ESC), DEL and
the C1 controls (U+0080 … U+009F: CSI and OSC among them)."""

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str, keep: str = "", *, json_text: bool = False) -> str:
    """``text`` safe to print on a terminal: every control character (``CONTROL``) not in ``keep`` written as the
    escape a reader knows, ``\\n``, ``\\r``, ``\\t``, else ``\\x1b``. ``keep="\\n"`` keeps the lines of a
    whole printed text. With ``json_text`` (text ``json.dumps`` wrote, which escapes only C0) the escape is JSON's
    ``\\u009b``, so the text stays JSON and parses to the same values."""
    def escape(match: re.Match) -> str:
        c = match.group()
        if c in keep:
            return c
        if json_text:
            return f"\\u{ord(c):04x}"
        return _NAMED.get(c) or f"\\x{ord(c):02x}"

    return CONTROL.sub(escape, text)


def _absent(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fixed(value) -> str:
    """A number fixed-point, never ``1e-05``: three decimals below 10 (``0.712``, as AUROCs and sharpness are
    printed), one below 1000 (``42.5``, as flinch scores are), none above (``12345``); below 0.01 three
    significant digits (``0.00123``, a small p); integers as they are; ``—`` for None/NaN."""
    if _absent(value):
        return ABSENT
    if isinstance(value, (bool, int)):
        return str(value)
    value = float(value)
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    size = abs(value)
    if size == 0:
        return "0"
    if size < 0.01:
        decimals = min(2 - math.floor(math.log10(size)), 12)
    else:
        decimals = 3 if size < 10 else 1 if size < 1000 else 0
    return f"{value:.{decimals}f}"


def percent(rate, decimals: int = 1) -> str:
    """A rate in [0, 1] as a percentage: 0.15625 → ``15.6%`` (as ``analyze`` prints it); ``—`` when absent."""
    return ABSENT if _absent(rate) else f"{100 * float(rate):.{decimals}f}%"


def points(pp, decimals: int = 1) -> str:
    """A difference already in percentage points, signed: ``+3.1 pp``; ``—`` when absent."""
    return ABSENT if _absent(pp) else f"{float(pp):+.{decimals}f} pp"


def milliseconds(ms) -> str:
    """A duration given in milliseconds, in ms below 10 s (``0.84 ms``, ``12.3 ms``, ``840 ms``), else in
    seconds (``duration``); ``—`` when absent."""
    if _absent(ms):
        return ABSENT
    ms = float(ms)
    if abs(ms) >= 10_000:
        return duration(ms / 1000)
    if abs(ms) >= 100:
        return f"{ms:.0f} ms"
    return f"{ms:.1f} ms" if abs(ms) >= 10 else f"{ms:.2f} ms"


def duration(seconds) -> str:
    """A duration given in seconds: below 1 s in ms (``milliseconds``), below a minute in seconds (``3.2 s``,
    ``42 s``), then minutes and seconds (``2 min 05 s``) and hours (``1 h 02 min``); ``—`` when absent."""
    if _absent(seconds):
        return ABSENT
    seconds = float(seconds)
    if abs(seconds) < 1:
        return milliseconds(seconds * 1000)
    if abs(seconds) < 10:
        return f"{seconds:.1f} s"
    if abs(seconds) < 60:
        return f"{seconds:.0f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def count(n) -> str:
    """A large count (parameters, tokens) short: ``812``, ``41.3K``, ``135M``, ``1.70B`` (three significant
    digits, never ``1.35e+08``); ``—`` when absent."""
    if _absent(n):
        return ABSENT
    n = float(n)
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size * 0.9995:
            v = n / size
            return f"{v:.{2 if abs(v) < 9.995 else 1 if abs(v) < 99.95 else 0}f}{unit}"
    return f"{n:.0f}"


def stamp(moment) -> str:
    """A moment (an aware ``datetime``; a naive one is taken as UTC) as ``2026-12-05 19:35:13 UTC``: to the
    second, in UTC, as browse's tables show start and finish; ``—`` when absent."""
    if _absent(moment):
        return ABSENT
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def unit_of(name: str, units: Mapping[str, str | int] | None = None) -> str | int | None:
    """How the headline number ``name`` is written: its entry in an instrument's ``headline_units`` (the exact
    name, else the longest ``prefix*`` key that matches), else None (the name's suffix decides)."""
    units = units or {}
    if name in units:
        return units[name]
    prefixes = [k for k in units if k.endswith("*") and name.startswith(k[:-1])]
    return units[max(prefixes, key=len)] if prefixes else None


def headline(name: str, value, units: Mapping[str, str | int] | None = None) -> str:
    """A headline number as a reader sees it: as the instrument's ``headline_units`` says (``unit_of``: an
    int is a number of decimals, or one of percent, points, ms, s, fixed), else its unit read from its name
    (see the module docstring); text and counts as they are."""
    if _absent(value):
        return ABSENT
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    unit = unit_of(name, units)
    if isinstance(unit, int) and not isinstance(unit, bool):
        return f"{float(value):.{unit}f}"
    if unit is not None:
        by_unit: Mapping[str | int, Callable[[Any], str]] = {
            "percent": percent, "points": points, "ms": milliseconds, "s": duration, "fixed": fixed}
        return by_unit[unit](value)
    if name.endswith(("_rate", "_share")):
        return percent(value)
    if name.endswith("_pp"):
        return points(value)
    if name.endswith("_ms"):
        return milliseconds(value)
    if name.endswith(("_s", "_seconds")):
        return duration(value)
    return fixed(value)


def article(word: str) -> str:
    """``a`` or ``an`` before ``word`` as it is read: an ATTACH, an open_scan, an UNCLEAR, a UUID, a URL."""
    w = word.lstrip("'\"`(").lower()
    if not w:
        return "a"
    if w.startswith(("uu", "url", "utf", "uni", "use", "usu", "one", "eu")):
        return "a"
    return "an" if w[0] in "aeiou" else "a"


def with_article(word: str) -> str:
    """``word`` after its article: ``an ATTACH``."""
    return f"{article(word)} {word}"
