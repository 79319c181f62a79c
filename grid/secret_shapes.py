"""What a credential looks like: the project's one list of credential shapes (``SECRET_SHAPES``), which every
secret check (``grid.secrets``: config values, runtime env, DSN flags, imported files) and every quoted
excerpt of user input (``grid.errors``) tests a value against."""

from __future__ import annotations

import re

_TOKEN = r"[A-Za-z0-9._~+/-]"
SECRET_SHAPES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"(?<![A-Za-z0-9_-])sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"), "an API key (sk-…)"),
    (re.compile(rf"\b(?i:bearer)\s+(?:(?={_TOKEN}*\d){_TOKEN}{{8,}}|{_TOKEN}{{16,}})"), "a bearer token"),
    (re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"), "an AWS access key id"),
    (re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{20,}"), "a Hugging Face token (hf_…)"),
    (re.compile(r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), "a GitHub token"),
    (re.compile(r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}"), "a Slack token"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
    (re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:[^\s/?#@]+@"), "a URL with a password (user:password@)"),
    (re.compile(r"(?:^|\s)password\s*=\s*\S", re.I), "a password (password=…)"),
)
"""Value shapes that are credentials wherever they appear (→ what each is). ``secret_shape`` tests them; every
secret check of the project (config values, runtime env, DSN flags, imported files, error excerpts) uses it."""


def secret_shape(value: str) -> str | None:
    """What credential ``value`` holds something shaped like (a phrase: "a GitHub token"), or None: ``sk-``,
    ``sk-ant-`` or ``sk-proj-`` and 16+ key characters, ``Bearer`` and a token (8+ characters with a digit, or
    16+), an AWS access key id (``AKIA``/``ASIA`` + 16), ``hf_``/``ghp_``/``github_pat_``/``xox?-`` tokens, a
    private key block, a URL carrying ``user:password@``, or ``password=…``."""
    return next((what for pattern, what in SECRET_SHAPES if pattern.search(value)), None)


def looks_like_secret(value: str) -> bool:
    """Whether ``value`` contains something shaped like a credential (``secret_shape``)."""
    return secret_shape(value) is not None
