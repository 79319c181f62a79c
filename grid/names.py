"""What a user-given name may be, and what any configured text may hold: one rule, checked in one place.

A NAME is anything a user chooses that becomes part of a path, a catalog key, a probe_id or a page: an
experiment (its folder name, ``--as``, ``open_scan import --experiment``), a model label, a lens variant, an
open_scan run label or query_id, a flinch axis id, a forced_choice envelope (wrapper) id or pair id, a lens
framing id or item id, the tap's ``--label``. The rule (``NAME_RULE``): 1 to ``MAX_NAME_CHARS`` characters from
``A-Z a-z 0-9 . _ - @ +``, starting with a letter or digit, with no ``..`` — so no path separator, no dot segment, no markup, no
whitespace or control character, nothing a shell or a URL must quote. ``check_name`` applies it and raises
a ConfigError naming the field and the rule; every verb calls it before anything is written.
``check_experiment_name`` adds what an experiment may not be called (``_…``, an analyze subcommand).

Free text (a description, a prompt, an item) may hold any printable text, but never NUL: PostgreSQL refuses
it in text and JSON, so a NUL would end a scan in a catalog error after validation. ``grid.secrets.reject_nul``
walks parsed JSON (keys and values) and refuses the first one (``grid.secrets.check_config_values`` runs it
with the secret check over every config). ``check_imported_text`` is the same pair of checks for a field of an
imported file.
"""

from __future__ import annotations

import re

from mirrorscan.grid.errors import ConfigError, excerpt
from mirrorscan.grid.secrets import reject_nul, reject_secrets

MAX_NAME_CHARS = 64
"""Longest name accepted (characters)."""
NAME_RULE = (f"1 to {MAX_NAME_CHARS} characters from A-Z a-z 0-9 . _ - @ +, starting with a letter or digit, "
             "without '..'")
"""The rule in words, as every refusal states it (and docs/operations.md documents it)."""
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._@+-]{{0,{MAX_NAME_CHARS - 1}}}")


def name_problem(value: object) -> str | None:
    """Why ``value`` is not a name under ``NAME_RULE`` (a phrase), or None when it is one."""
    if not isinstance(value, str) or value == "":
        return "is empty" if value in ("", None) else f"is {type(value).__name__}, not text"
    if len(value) > MAX_NAME_CHARS:
        return f"is {len(value)} characters long (at most {MAX_NAME_CHARS})"
    separator = next((c for c in "/\\" if c in value), None)
    if separator:
        return f"{excerpt(value)} holds the path separator {separator!r}"
    if ".." in value or value in (".",):
        return f"{excerpt(value)} holds a dot segment ('..')"
    if not _NAME.fullmatch(value):
        bad = next((c for c in value if not re.fullmatch(r"[A-Za-z0-9._@+-]", c)), None)
        if bad is None:
            return f"{excerpt(value)} starts with {value[0]!r}"
        return f"{excerpt(value)} holds the character {ascii(bad)}"
    return None


def check_name(value: object, file: str, field: str) -> str:
    """``value`` when it is a name under ``NAME_RULE``; else a ConfigError naming ``file``, ``field`` and the
    rule (the value only as a short escaped excerpt)."""
    problem = name_problem(value)
    if problem is not None:
        raise ConfigError(file, field, f"{problem}; a name is {NAME_RULE}", "rename it to follow that rule")
    return value   # type: ignore[return-value]


RESERVED_NAMES = ("gstudy", "dstudy", "kendall", "auroc", "null", "bootstrap", "scaling", "compare")
"""Subcommands of ``mirrorscan analyze``: no experiment may be named after one."""


def check_experiment_name(value: object, file: str, field: str) -> str:
    """``value`` when it can name an experiment (a folder in the store, a catalog key): a name under
    ``NAME_RULE``, not starting with ``_`` (mirrorscan's own folders in a store) and not ``RESERVED_NAMES``;
    else a ConfigError naming ``file`` and ``field``."""
    if isinstance(value, str) and value.startswith("_"):
        raise ConfigError(file, field, f"{excerpt(value)} starts with '_', which marks mirrorscan's own folders "
                          "in a store (the tap's log rows live under _tap/)", "rename the experiment")
    name = check_name(value, file, field)
    if name in RESERVED_NAMES:
        raise ConfigError(file, field, f"{name!r} is reserved for `mirrorscan analyze {name}`", "rename the experiment")
    return name


IMPORT_FIX = "remove it from the file (or mask it); an imported file is stored as it is and cannot be edited later"


def check_imported_text(file: str, field: str, value: str, in_catalog: bool = False) -> str:
    """``value``, a string read from an input file that is stored as it is (an imported run's fields), when
    it holds nothing shaped like a secret (``grid.secrets``) and, where it reaches the catalog
    (``in_catalog``), no NUL; else a ConfigError naming ``file`` and ``field``, never the value. (Trace rows
    keep NUL: Parquet stores any string.)"""
    if in_catalog:
        reject_nul(file, value, field)
    reject_secrets(file, value, field, IMPORT_FIX)
    return value
