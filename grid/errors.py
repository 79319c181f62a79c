"""The one error type a user can cause, and how it is worded.

Every message names the file, the field and the fix, on one line, so the CLI can print it without a
traceback and exit with code 2 before anything is written.
"""

from __future__ import annotations

import functools
import sys


class ConfigError(Exception):
    """A problem in user input (config, probe set, envelopes, flags) that the user can fix.

    Attributes:
        file: the file the problem is in (path as given), or "" when it is not a file (a flag).
        field: the field, column or flag at fault, e.g. ``models[1].label`` or ``items.csv:14:query``.
        fix: what the user should do, imperative.
    """

    def __init__(self, file: str, field: str, problem: str, fix: str):
        self.file = str(file)
        self.field = field
        self.problem = problem
        self.fix = fix
        where = f"{self.file}: " if self.file else ""
        super().__init__(f"{where}{field}: {problem} — fix: {fix}")


class CatalogError(Exception):
    """The catalog refused or failed an operation; the message says which and why, in plain words."""


def unknown_key(file: str, field: str, key: str, known) -> ConfigError:
    """The ConfigError for an unknown ``key`` at ``field``: suggests the closest known key (a typo such as
    ``max_token``) and lists them all."""
    import difflib

    known = list(known)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    fix = f"remove it or use one of: {', '.join(known)}"
    return ConfigError(file, field, "unknown key", f"did you mean {close[0]}? Otherwise {fix}" if close else fix)


def refuse_duplicate_keys(file: str):
    """A ``json.loads`` ``object_pairs_hook`` that refuses an object holding one key twice (JSON lets the
    last one win silently), naming the key."""
    def hook(pairs: list[tuple[str, object]]) -> dict:
        seen: dict = {}
        for key, value in pairs:
            if key in seen:
                raise ConfigError(file, key, "appears twice in one object (the last would silently win)",
                                  "keep one of them")
            seen[key] = value
        return seen
    return hook


def shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, with "…" where it was cut (error
    messages quote values; a value cut mid-word reads as a different value)."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip() + "…"


EXCERPT_CHARS = 24
"""Most characters of a user's input an error message quotes (``excerpt``)."""


def excerpt(value: object, limit: int = EXCERPT_CHARS, items: int = 4) -> str:
    """How an error quotes a piece of user input (a file's field, a name): escaped as Python's ``ascii``
    writes it (quoted; control characters and markup stay visible and inert), and when longer than ``limit``
    characters cut, marked ``'root:x:0:0:…' (first 24 characters)``. A list or tuple (a header's columns) is
    quoted as its first ``items`` values, each so cut, and how many there are. A value holding anything
    shaped like a secret (``grid.secrets``) is not quoted at all. Errors about input files quote nothing else
    of the file's content."""
    from grid.secrets import looks_like_secret   # grid.secrets imports this module

    values = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
    if any(looks_like_secret(v) for v in values):
        return "(a value shaped like a secret, not quoted)"

    def one(v: str) -> str:
        return ascii(v) if len(v) <= limit else f"{ascii(v[:limit])}… (first {limit} characters)"

    quoted = ", ".join(one(v) for v in values[:items])
    return quoted + (f", … ({len(values)} in all)" if len(values) > items else "")


def file_error(file: str, field: str, problem: str, fix: str, offending: object = None) -> ConfigError:
    """The ConfigError for unreadable or malformed input ``file``: names the file, the field (line, column)
    and the problem, and quotes the offending value only as an ``excerpt`` (never more of the file). Every
    reader of an input file (CSV, JSON, JSONL) builds its errors about the file's content here."""
    quoted = f" ({excerpt(offending)})" if offending is not None else ""
    return ConfigError(file, field, f"{problem}{quoted}", fix)


def read_problem(exc: BaseException) -> str:
    """What a parser's exception says about a file, without the file's content: its first line, with the
    row or value some parsers append cut off (pyarrow's ``Expected 2 columns, got 3: <the row>``, ``invalid
    value '<value>'``; YAML's context lines), at most 160 characters; for ``file_error`` messages."""
    import re

    mark = getattr(exc, "problem_mark", None)   # YAML: say where, not what
    if getattr(exc, "problem", None):
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{exc.problem}{where}"
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = re.sub(r"(got \d+ ?\w*): .*", r"\1", text)
    text = re.sub(r"(invalid value|value) '.*", r"\1", text)
    from grid.secrets import looks_like_secret

    return type(exc).__name__ if looks_like_secret(text) else shorten(text, 160)


EXIT_CONFIG = 2
"""Bad input (config, probe set, envelopes, flags, analysis input): nothing was written."""
EXIT_CATALOG = 1
"""The catalog refused or could not be reached."""


def reports_user_errors(main):
    """Decorate a verb's ``main``: ConfigError → ``error: …`` and exit 2; CatalogError → ``catalog error: …`` and exit 1."""
    @functools.wraps(main)
    def wrapper(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        except CatalogError as exc:
            print(f"catalog error: {exc}", file=sys.stderr)
            return EXIT_CATALOG
    return wrapper
