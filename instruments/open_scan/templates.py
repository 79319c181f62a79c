"""open_scan templates: one wrapper for every model, and two self-report prompts with their rating scale.

A template set is a folder (the shipped one is ``packaged:v1`` = ``data/templates/v1/``):

* ``system.txt`` — the system prompt, the same for every model and query; no placeholder.
* ``user.txt`` — the user turn, exactly the placeholders ``{locale}`` and ``{query}``.
* ``cold.json`` — the self-report asked before any answer: ``{query}``, optionally ``{locale}``.
* ``posthoc.json`` — the self-report asked about the model's own answer: ``{query}`` and ``{answer}``,
  optionally ``{locale}``.
* ``VERSION`` — the set's version text.

Each ``.json`` is ``{"template": str, "scale": [low, high], "rates": "<what the integer rates>"}``. Every
template, system prompt included, is a ``str.format`` text: ``{name}`` is a placeholder and a literal brace is
written ``{{`` or ``}}``; positional ``{}``, format specs and conversions are refused. A query or an answer is
substituted once and never parsed again, so one holding ``{x}`` or ``{{`` reaches the model as written. Text
files are read verbatim (a trailing newline an editor adds is part of the prompt). The SHA-256 of every file's
bytes is frozen with the run.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirrorscan.grid.errors import ConfigError, refuse_duplicate_keys, unknown_key
from mirrorscan.grid.files import packaged_path, sha256
from mirrorscan.instruments.open_scan.probes import DATA, decode_utf8

PACKAGED = {"packaged:v1": "templates/v1"}
"""Shipped template sets, by the name a config uses, relative to this package's ``data`` folder."""
FILES = {"system": "system.txt", "user": "user.txt", "cold": "cold.json", "posthoc": "posthoc.json"}
"""The files of a template set, by the key an override uses."""
SLOTS = {"system": ((), ()), "user": (("locale", "query"), ()), "cold": (("query",), ("locale",)),
         "posthoc": (("query", "answer"), ("locale",))}
"""Per template: the placeholders it must hold, and those it may hold besides."""
SELF_REPORT_KEYS = ("template", "scale", "rates")
"""The keys of a self-report ``.json`` file."""
BASE_SYSTEM_PROMPT = "You are a helpful assistant."
"""The shipped system prompt (``v1/system.txt``): the common default, so that what is measured is each model's
default behaviour rather than a persona the instrument imposes."""
BASE_USER_TEMPLATE = "Locale: {locale}\n\n{query}"
"""The shipped user turn (``v1/user.txt``): the locale on a line of its own, then the query as given."""
BRACES_FIX = "write literal braces as {{ and }}"


def placeholders(template: str, file: str, field: str) -> tuple[str, ...]:
    """The named placeholders of ``template`` in order of appearance; ConfigError for a positional ``{}``, a
    format spec or conversion, an unmatched brace, or an attribute/index access (``{query.x}``)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(file, field, f"has an unmatched brace ({exc})", BRACES_FIX) from None
    names = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        written = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        if not name.isidentifier() or spec or conversion:
            raise ConfigError(file, field, f"has the placeholder {written} (only plain named ones such as "
                              "{query} are filled)", BRACES_FIX)
        names.append(name)
    return tuple(names)


def check_template(kind: str, template: str, file: str, field: str) -> str:
    """Return ``template`` if it holds the placeholders ``SLOTS[kind]`` allows and requires, else ConfigError."""
    required, optional = SLOTS[kind]
    names = placeholders(template, file, field)
    extra = next((n for n in names if n not in required + optional), None)
    if extra is not None:
        allowed = ", ".join("{" + n + "}" for n in required + optional) or "none"
        raise ConfigError(file, field, f"has the placeholder {{{extra}}} (allowed: {allowed})", BRACES_FIX)
    missing = [n for n in required if n not in names]
    if missing:
        raise ConfigError(file, field, f"lacks the placeholder {{{missing[0]}}}",
                          f"put {{{missing[0]}}} where the {missing[0]} goes")
    return template


@dataclass(frozen=True)
class SelfReport:
    """A self-report prompt: the model rates one thing about a query (cold) or its own answer (posthoc) with
    one integer on a closed scale."""

    name: str
    """``cold`` or ``posthoc``."""
    template: str
    """The prompt, a ``str.format`` text with the placeholders ``SLOTS[name]`` allows."""
    low: int
    """Lowest rating on the scale (≥ 0)."""
    high: int
    """Highest rating on the scale (> low)."""
    rates: str
    """What the integer rates, in one phrase (stored with the run, shown in the analysis)."""

    def render(self, query: str, answer: str | None = None, locale: str | None = None) -> str:
        """The prompt with ``query`` (and ``answer``, ``locale``) substituted verbatim. ``answer`` is required
        exactly when the template has an ``{answer}`` slot, ``locale`` when it has a ``{locale}`` slot."""
        names = set(placeholders(self.template, self.name, "template"))
        if ("answer" in names) != (answer is not None):
            raise ValueError(f"{self.name} self-report: answer must be given exactly when the template has "
                             "an {answer} slot")
        if "locale" in names and locale is None:
            raise ValueError(f"{self.name} self-report: the template has a {{locale}} slot and no locale was given")
        return self.template.format_map({"query": query, "answer": answer, "locale": locale})

    def rating(self, reply: str | None) -> int | None:
        """The rating ``reply`` holds on this scale, else None (``parse_rating``)."""
        return parse_rating(reply, self.low, self.high)


@dataclass(frozen=True)
class Templates:
    """The template set a run uses: system prompt, user turn, and the two self-reports."""

    version: str
    """The set's ``VERSION`` text, with ``+<key>`` for each overridden file (``1+cold``)."""
    system: str
    """``system.txt`` as written (a template without placeholders; ``system_prompt`` is what is sent)."""
    user: str
    """``user.txt`` as written: placeholders ``{locale}`` and ``{query}``."""
    cold: SelfReport
    """The self-report asked with the query alone, before any answer."""
    posthoc: SelfReport
    """The self-report asked with the query and the model's own answer."""
    hashes: tuple[tuple[str, str], ...]
    """(file key, hex SHA-256 of the file's bytes) for ``system``, ``user``, ``cold``, ``posthoc``."""

    @property
    def system_prompt(self) -> str:
        """The system prompt as sent (literal ``{{``/``}}`` unescaped)."""
        return self.system.format_map({})

    def render_user(self, locale: str, query: str) -> str:
        """The user turn of ``query`` in ``locale``, both substituted verbatim."""
        return self.user.format_map({"locale": locale, "query": query})

    def frozen(self) -> dict:
        """Plain JSON holding every text, scale and file hash: stored with the run, read by ``from_frozen``."""
        sha = dict(self.hashes)
        out: dict = {"version": self.version, "system": {"text": self.system, "sha256": sha["system"]},
                     "user": {"text": self.user, "sha256": sha["user"]}}
        for report in (self.cold, self.posthoc):
            out[report.name] = {"template": report.template, "scale": [report.low, report.high],
                                "rates": report.rates, "sha256": sha[report.name]}
        return out

    @classmethod
    def from_frozen(cls, d: dict) -> Templates:
        """The templates ``frozen`` stored, checked again."""
        file = "frozen templates"
        cold, posthoc = (self_report(k, {key: d[k][key] for key in SELF_REPORT_KEYS}, file, k)
                         for k in ("cold", "posthoc"))
        return cls(str(d["version"]), check_template("system", d["system"]["text"], file, "system"),
                   check_template("user", d["user"]["text"], file, "user"), cold, posthoc,
                   tuple((k, d[k]["sha256"]) for k in FILES))


def self_report(kind: str, data: object, file: str, field: str) -> SelfReport:
    """The self-report of kind ``cold`` or ``posthoc`` from a decoded ``.json`` object; ConfigError naming
    the key at fault."""
    if not isinstance(data, dict):
        raise ConfigError(file, field, "is not a JSON object",
                          'write {"template": …, "scale": [1, 10], "rates": …}')
    for key in data:
        if key not in SELF_REPORT_KEYS:
            raise unknown_key(file, f"{field}.{key}", key, SELF_REPORT_KEYS)
    for key in ("template", "rates"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ConfigError(file, f"{field}.{key}", "is missing or not a non-empty text",
                              "give the prompt" if key == "template" else "say in one phrase what the integer rates")
    scale = data.get("scale")
    if not (isinstance(scale, list) and len(scale) == 2 and all(type(v) is int for v in scale)
            and 0 <= scale[0] < scale[1]):
        raise ConfigError(file, f"{field}.scale", f"is {json.dumps(scale)}, not two integers 0 ≤ low < high",
                          "give the scale as [low, high], e.g. [1, 10]")
    template = check_template(kind, data["template"], file, f"{field}.template")
    return SelfReport(kind, template, scale[0], scale[1], data["rates"])


def _read(kind: str, path: Path, overridden: bool, config: str) -> tuple[Any, str]:
    """The decoded content of one template file (text, or the JSON object) and the SHA-256 of its bytes."""
    file = str(path)
    if not path.is_file():
        raise ConfigError(file, FILES[kind], "does not exist", f"correct the {kind} override's path in {config}"
                          if overridden else f"add {FILES[kind]} to the template folder, or override it")
    data = path.read_bytes()
    sha, text = sha256(data), decode_utf8(data, file, FILES[kind])
    if kind in ("system", "user"):
        return text, sha
    try:
        return json.loads(text, object_pairs_hook=refuse_duplicate_keys(file)), sha
    except json.JSONDecodeError as exc:
        raise ConfigError(file, f"{FILES[kind]}:{exc.lineno}", f"is not JSON ({exc.msg})",
                          "fix the JSON syntax") from None


def load_templates(name_or_folder: str = "packaged:v1", overrides: dict | None = None, file: str = "config.json",
                   field: str = "open_scan.templates") -> Templates:
    """The template set of a folder (or ``packaged:v1``), with any file replaced by ``overrides`` (keys
    ``system``, ``user``, ``cold``, ``posthoc``; absolute paths). ``file`` and ``field`` name the config
    entry in errors about the folder or the overrides; errors inside a template name that template's file."""
    folder = packaged_path(name_or_folder, PACKAGED, DATA)
    overrides = dict(overrides or {})
    for key in overrides:
        if key not in FILES:
            raise unknown_key(file, f"{field}.{key}", key, FILES)
    if not folder.is_dir():
        raise ConfigError(file, field, f"{name_or_folder!r} is not a folder", "give a folder holding "
                          f"{', '.join(FILES.values())} and VERSION, or {', '.join(PACKAGED)}")
    paths = {kind: Path(overrides.get(kind, folder / name)) for kind, name in FILES.items()}
    read = {kind: _read(kind, path, kind in overrides, file) for kind, path in paths.items()}
    shown = {kind: str(path) for kind, path in paths.items()}
    system = check_template("system", read["system"][0], shown["system"], "system.txt")
    user = check_template("user", read["user"][0], shown["user"], "user.txt")
    cold, posthoc = (self_report(k, read[k][0], shown[k], FILES[k]) for k in ("cold", "posthoc"))
    version_file = folder / "VERSION"
    version = version_file.read_text(encoding="utf-8").strip() if version_file.is_file() else folder.name
    version += "".join(f"+{k}" for k in FILES if k in overrides)
    return Templates(version, system, user, cold, posthoc, tuple((k, read[k][1]) for k in FILES))


RATING = re.compile(r"([-−]?)(\.?)(\d+)([.,]\d)?")
"""The first number of a reply: a run of digits (any script) with any minus sign, leading point or decimal
part attached to it."""
MAX_RATING_DIGITS = 9
"""A longer digit run is out of any scale (and ``int`` of a very long run raises)."""


def parse_rating(text: str | None, low: int, high: int) -> int | None:
    """The rating a self-report reply holds, or None: not measured (never 0).

    Rule: the rating is the *first* number in the reply. It counts only if it is a plain whole number written
    in ASCII digits 0–9 within [low, high]; the reply is otherwise unmeasured: a decimal ("7.5", "7,5", "8.0"),
    a negative ("-3"), a number in other digits (full-width "１０", Arabic-Indic), one outside the scale, or no
    number at all ("eleven", "", None). Text around the number is ignored ("Rating: 7.", " 8/10", "**6**",
    "I'd rate it 10 out of 10" → 10). Because the first number decides, a reply that restates the scale before
    answering ("On a 1-10 scale: 7") reads as its first number; the raw reply is stored, so it can be re-read.
    """
    if not text:
        return None
    match = RATING.search(text)
    if match is None:
        return None
    sign, point, digits, fraction = match.groups()
    if sign or point or fraction or not digits.isascii() or len(digits) > MAX_RATING_DIGITS:
        return None
    value = int(digits)
    return value if low <= value <= high else None
