"""The one error type a user can cause, and how it is worded.

Every message names the file, the field and the fix, on one line, so the CLI can print it without a
traceback and exit with code 2 before anything is written.
"""

from __future__ import annotations

import functools
import sys

from mirrorscan.grid.secret_shapes import looks_like_secret


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
    shaped like a secret (``grid.secret_shapes``) is not quoted at all. Errors about input files quote nothing else
    of the file's content."""
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


CSV_FIELD_LIMIT = 131_072
"""The longest CSV field read, in characters (Python's csv default): a longer one, or a quote left open that
runs to the end of the file, is a ``file_error`` naming the line."""


def csv_rows(text: str, file: str, dict_rows: bool = False):
    """The rows of CSV ``text`` (lists, or dicts keyed by the header with ``dict_rows``), read with Python's
    csv module; a malformed row (a field over ``CSV_FIELD_LIMIT`` characters, a NUL, a quote left open:
    ``open_quote_line``) is a ``file_error`` naming ``file`` and the line instead of csv's traceback or a miscounted
    row. Returns a list."""
    import csv
    import io

    reader = (csv.DictReader if dict_rows else csv.reader)(io.StringIO(text, newline=""))
    rows = []
    try:
        for row in reader:
            rows.append(row)
    except csv.Error as exc:
        line = (reader.reader if isinstance(reader, csv.DictReader) else reader).line_num
        raise file_error(file, f"line {line}", f"cannot be read as CSV ({read_problem(exc)}; a field may hold at most "
                         f"{CSV_FIELD_LIMIT} characters)", "shorten the field, or close the quote that opens it") from None
    opened = open_quote_line(text)
    if opened is not None:   # csv read the rest of the file into one field: its row would be misreported
        raise file_error(file, f"line {opened}", "has a quote left open: the field it starts runs to the end of the "
                         "file", 'close the quote (a " inside a quoted field is written "")')
    return rows


def open_quote_line(text: str) -> int | None:
    """The line of CSV ``text`` whose row opens a quote that never closes (Python's csv, when not strict, reads the
    rest of the file into that one field without a word), or None."""
    import csv
    import io

    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1
    try:
        for _ in reader:
            start = reader.line_num + 1
    except csv.Error as exc:
        return start if "unexpected end of data" in str(exc) else None
    return None


def read_problem(exc: BaseException) -> str:
    """What a parser's exception says about a file, without the file's content: its first line, with the
    row or value some parsers append cut off (pyarrow's ``Expected 2 columns, got 3: <the row>``, ``invalid
    value '<value>'``; YAML's context lines), at most 160 characters; for ``file_error`` messages."""
    import re

    mark = getattr(exc, "problem_mark", None)   # YAML: say where, not what
    problem = getattr(exc, "problem", None)
    if problem:
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{problem}{where}"
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = re.sub(r"(got \d+ ?\w*): .*", r"\1", text)
    text = re.sub(r"(invalid value|value) '.*", r"\1", text)
    return type(exc).__name__ if looks_like_secret(text) else shorten(text, 160)


EXIT_CONFIG = 2
"""Bad input (config, probe set, envelopes, flags, analysis input): nothing was written."""
EXIT_CATALOG = 1
"""The catalog refused or could not be reached."""


DISK_PROBLEMS = {
    "ENOSPC": ("no space is left on its disk", "free space there, or point --store / $MIRRORSCAN_HOME at a disk "
               "with room"),
    "EDQUOT": ("the disk quota is used up", "free space there, or point --store / $MIRRORSCAN_HOME elsewhere"),
    "EFBIG": ("a file grew past the size this process may write (ulimit -f)", "raise the limit (ulimit -f "
              "unlimited), or point --store / $MIRRORSCAN_HOME elsewhere"),
    "EROFS": ("it is on a read-only file system", "point --store / $MIRRORSCAN_HOME at a writable folder (or "
              "pass --no-write where the verb has it)"),
    "EACCES": ("permission denied", "make it writable for this user, or point --store / $MIRRORSCAN_HOME "
               "elsewhere"),
    "EPERM": ("the operation is not permitted", "make it writable for this user, or point --store / "
              "$MIRRORSCAN_HOME elsewhere"),
    "ENAMETOOLONG": ("its name is longer than the file system allows", "use a shorter name or path"),
}
"""Errors of the machine's disk a user can fix (by errno name): what the one line says and the fix."""


def disk_error(exc: OSError) -> ConfigError | None:
    """The one-line ConfigError for an OSError of the disk (``DISK_PROBLEMS``: no space, quota, file size
    limit, read-only, permission), naming the path it hit; None for any other OSError. pyarrow's I/O errors
    carry no errno: their message is matched instead."""
    import errno as errnos
    import os
    import re

    name = errnos.errorcode.get(exc.errno or 0)
    if name not in DISK_PROBLEMS:
        text = str(exc)
        found = re.search(r"\[errno (\d+)\]", text, re.IGNORECASE)
        name = errnos.errorcode.get(int(found.group(1))) if found else None
        if name not in DISK_PROBLEMS:
            name = next((n for n in DISK_PROBLEMS if os.strerror(getattr(errnos, n)) in text), None)
        if name is None:
            return None
    quoted = re.search(r"'(/[^']+)'", str(exc))   # pyarrow names the file in quotes
    path = exc.filename or (quoted.group(1) if quoted else "(a file it writes)")
    problem, fix = DISK_PROBLEMS[name]
    verb = "cannot be used" if name == "ENAMETOOLONG" else "cannot be written"
    return ConfigError(shorten(str(path), 120), "(disk)", f"{verb}: {problem}", fix)


def reports_user_errors(main):
    """Decorate a verb's ``main``: ConfigError → ``error: …`` and exit 2; CatalogError → ``catalog error: …`` and
    exit 1; an OSError of the disk (``disk_error``: no space, read-only, permission) → one ``error:`` line
    naming the path and the fix, exit 2."""
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
        except OSError as exc:
            error = disk_error(exc)
            if error is None:
                raise
            print(f"error: {error}", file=sys.stderr)
            return EXIT_CONFIG
    return wrapper
