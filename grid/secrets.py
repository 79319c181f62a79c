"""Secrets never enter an experiment's config.json, and never reach a recorded endpoint.

config.json is recorded verbatim: in the run's settings (catalog), and its endpoints in every trace row
and inference_log row. A key written there would be copied everywhere, so ``load_spec`` refuses:

- a key (at any depth) NAMED like a credential, exactly: ``SECRET_KEYS``, case-insensitive, ``-`` = ``_``.
  Names that merely contain "token" or "key" are ordinary settings (``budget_tokens``,
  ``max_completion_tokens``, ``max_num_batched_tokens``, ``tokenizer_mode``, ``api_key_env``);
- a string VALUE anywhere (any key, list items, nested objects, free text such as ``description``) SHAPED
  like a credential (``grid.secret_shapes.SECRET_SHAPES``): ``sk-`` keys, ``Bearer <token>``, AWS access
  key ids, ``hf_`` and GitHub tokens, private keys, URLs with ``user:password@``, ``password=…``;
- an endpoint URL carrying ``user@`` or ``user:password@`` (``check_endpoint_url``).

``grid.secret_shapes.SECRET_SHAPES`` is the project's one list of credential shapes: ``reject_secrets`` is
what every verb that reads a config or an input it records (scan, ``--dry-run``, submit, reproduce's frozen
settings, open_scan import's JSONL) runs before anything is written, and submit's runtime-env and DSN checks use the same
shapes, so every verb gives the same verdict on the same value.

Errors name the file, the field path and the fix, and never echo the value. ``strip_userinfo`` is
what every place that records an endpoint applies (samplers, inference log, tap), for URLs that did
not come through ``load_spec`` (a resumed run's stored settings, the tap's ``--upstream``).
"""

from __future__ import annotations

import re

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.secret_shapes import looks_like_secret, secret_shape

SECRET_KEYS = frozenset({"api_key", "apikey", "authorization", "password", "passwd", "secret", "client_secret",
                         "access_token", "refresh_token", "auth_token", "bearer_token", "x_api_key"})
"""Key names refused anywhere in config.json (compared lower-cased, with ``-`` read as ``_``)."""

_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")
_HAS_USERINFO = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://)?[^/?#]*@")   # scheme-less too: user:pw@host/v1
_FIX = "remove it from config.json; put the key in an environment variable and name that variable in api_key_env"


def reject_secrets(file: str, obj: object, path: str = "", fix: str = _FIX) -> None:
    """Raise ConfigError for the first secret-named key or secret-shaped string in ``obj`` (parsed JSON),
    naming ``file`` and the dotted field path (``models[0].extra_body.api_key``), never the value; ``fix``
    is what the message tells the user to do (default: move the key to an environment variable)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            key = str(key)
            if looks_like_secret(key):
                raise ConfigError(file, path or "(top level)", "has a key that looks like a secret (an API key, "
                                  "bearer token or access key id)", fix)
            sub = f"{path}.{key}" if path else key
            if key.strip().lower().replace("-", "_") in SECRET_KEYS:
                raise ConfigError(file, sub, "names a secret; secrets must not be written in config.json "
                                  "(it is recorded in the run's settings)", fix)
            reject_secrets(file, value, sub, fix)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            reject_secrets(file, value, f"{path}[{i}]", fix)
    elif isinstance(obj, str) and looks_like_secret(obj):
        raise ConfigError(file, path or "(top level)", f"holds a value that looks like {secret_shape(obj)}; what "
                          "mirrorscan reads here is recorded with the run and cannot be removed later", fix)


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


def reject_nul(file: str, obj: object, path: str = "") -> None:
    """Raise ConfigError for the first key or string in ``obj`` (parsed JSON) holding NUL (U+0000), naming
    ``file`` and the dotted field path; PostgreSQL stores no NUL in text or JSON."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                raise ConfigError(file, path or "(top level)", "has a key holding NUL (U+0000)",
                                  "remove the NUL character")
            reject_nul(file, value, sub)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            reject_nul(file, value, f"{path}[{i}]")
    elif isinstance(obj, str) and "\x00" in obj:
        raise ConfigError(file, path or "(top level)", "holds NUL (U+0000), which the catalog cannot store",
                          "remove the NUL character (\\u0000 in JSON)")


def check_config_values(file: str, config: object, fix: str = _FIX) -> None:
    """The one check every verb runs over every value of a config before anything is written (``load_spec``
    for scan, ``--dry-run`` and submit; reproduce over the frozen settings and the recorded config it would
    copy): no NUL anywhere (``reject_nul``: the catalog cannot store it) and nothing named or shaped
    like a secret (``reject_secrets``); a config's ``catalog_dsn`` is left to the DSN's own redaction. Raises
    ConfigError naming ``file`` and the field, never the value."""
    reject_nul(file, config)
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if k != "catalog_dsn"}
    reject_secrets(file, config, "", fix)
