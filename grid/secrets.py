"""Secrets never enter an experiment's config.json, and never reach a recorded endpoint.

config.json is recorded verbatim: in the run's settings (catalog), and its endpoints in every trace row
and inference_log row. A key written there would be copied everywhere, so ``load_spec`` refuses:

- a key (at any depth) NAMED like a credential, exactly: ``SECRET_KEYS``, case-insensitive, ``-`` = ``_``.
  Names that merely contain "token" or "key" are ordinary settings (``budget_tokens``,
  ``max_completion_tokens``, ``max_num_batched_tokens``, ``tokenizer_mode``, ``api_key_env``);
- a string VALUE anywhere (any key, list items, nested objects) SHAPED like a credential
  (``looks_like_secret``): ``sk-``/``sk-ant-`` keys, ``Bearer <token>``, AWS access key ids;
- an endpoint URL carrying ``user:password@`` (``check_endpoint_url``).

Errors name the file, the field path and the fix, and never echo the value. ``strip_userinfo`` is
what every place that records an endpoint applies (samplers, inference log, tap), for URLs that did
not come through ``load_spec`` (a resumed run's stored settings, the tap's ``--upstream``).
"""

from __future__ import annotations

import re
from grid.errors import ConfigError

SECRET_KEYS = frozenset({"api_key", "apikey", "authorization", "password", "passwd", "secret", "client_secret",
                         "access_token", "refresh_token", "auth_token", "bearer_token", "x_api_key"})
"""Key names refused anywhere in config.json (compared lower-cased, with ``-`` read as ``_``)."""

_TOKEN = r"[A-Za-z0-9._~+/-]"
_SECRET_VALUE = re.compile(
    r"(?<![A-Za-z0-9_-])sk-(?:ant-)?[A-Za-z0-9_-]{16,}"                 # OpenAI / Anthropic style keys
    rf"|\b(?i:bearer)\s+(?:(?={_TOKEN}*\d){_TOKEN}{{8,}}|{_TOKEN}{{16,}})"   # a bearer token
    r"|(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])")     # AWS access key id
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
_HAS_USERINFO = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://)?[^/?#]*@")   # scheme-less too: user:pw@host/v1
_FIX = "remove it from config.json; put the key in an environment variable and name that variable in api_key_env"


def looks_like_secret(value: str) -> bool:
    """Whether ``value`` contains something shaped like a credential: ``sk-`` or ``sk-ant-`` and 16+ key
    characters, ``Bearer`` and a token (8+ characters with a digit, or 16+), or an AWS access key id."""
    return bool(_SECRET_VALUE.search(value))


def reject_secrets(file: str, obj: object, path: str = "") -> None:
    """Raise ConfigError for the first secret-named key or secret-shaped string in ``obj`` (parsed JSON),
    naming ``file`` and the dotted field path (``models[0].extra_body.api_key``), never the value."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            key = str(key)
            if looks_like_secret(key):
                raise ConfigError(file, path or "(top level)", "has a key that looks like a secret (an API key, "
                                  "bearer token or access key id)", _FIX)
            sub = f"{path}.{key}" if path else key
            if key.strip().lower().replace("-", "_") in SECRET_KEYS:
                raise ConfigError(file, sub, "names a secret; secrets must not be written in config.json "
                                  "(it is recorded in the run's settings)", _FIX)
            reject_secrets(file, value, sub)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            reject_secrets(file, value, f"{path}[{i}]")
    elif isinstance(obj, str) and looks_like_secret(obj):
        raise ConfigError(file, path or "(top level)", "holds a value that looks like a secret (an API key, "
                          "bearer token or access key id); config.json is recorded in the run's settings", _FIX)


def check_endpoint_url(file: str, field: str, url: str | None) -> None:
    """Raise ConfigError when ``url`` carries credentials (``user@`` or ``user:password@``): they would be
    recorded with every row. The message names ``field`` and api_key_env, never the URL."""
    if url is not None and _HAS_USERINFO.match(url):
        raise ConfigError(file, field, "carries credentials (user:password@ before the host), which would be "
                          "recorded with every row", "remove them from the URL; put the key in an environment "
                          "variable and name that variable in api_key_env")


def strip_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` before its host (otherwise unchanged); None and "" pass through.
    Applied wherever an endpoint is recorded, so a row never holds credentials."""
    return _USERINFO.sub(r"\1", url) if url else url
