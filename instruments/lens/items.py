"""Lens inputs: framings (evaluation and deployment wrappers), contrastive task texts, and a labelled scoring set.

* **Framings** — a folder ``<set>/evaluation/*.txt`` and ``<set>/deployment/*.txt`` (the file stem is the
  framing's id), each UTF-8 text with exactly one ``{task}`` slot, plus a ``VERSION`` file. A wrapper is one
  (evaluation, deployment) pair. The shipped set is ``packaged:v1`` (6 × 6).
* **Task texts** — unlabelled, JSONL ``{"id", "text"}`` or CSV with those columns; every framing wraps the
  same bytes of every task. Shipped: ``packaged:tasks`` (16).
* **Scoring set** — labelled, JSONL or CSV with ``id``, ``text``, ``label`` and optionally ``subset``; other
  column names are mapped in the config (``{"path": …, "id": "question_id", "text": "prompt", "label":
  "answer"}``), so user sets such as SAD's stages-oversight load without editing. Exactly two label
  values; an optional ``group`` column keeps paired items in one fold of the surface baseline, and
  ``"redistribute": false`` marks a set whose texts may not be copied into the store. Shipped:
  ``packaged:synthetic`` (64 items written for the project: a surface-confounded subset and a clean one of 16
  pairs, grouped).

Every item keeps its id and the SHA-256 of its text; every set records the SHA-256 of its bytes, frozen with
the run. The newline convention (``lf``, ``crlf`` or ``keep``) is applied to every text at render time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from mirrorscan.grid.errors import ConfigError, csv_rows, excerpt
from mirrorscan.grid.files import packaged_path, sha256
from mirrorscan.grid.names import check_name

SLOT = "{task}"
"""Where a framing puts the task text."""
ARMS = ("evaluation", "deployment")
"""The two arms of a wrapper: framings that announce an evaluation, and framings of real use."""
NEWLINES = ("lf", "crlf", "keep")
"""Newline conventions of the rendered texts: all LF, all CRLF, or the files' bytes as they are."""
PACKAGED = {"packaged:v1": "framings/v1", "packaged:tasks": "tasks.jsonl", "packaged:synthetic": "scoring_synthetic.jsonl"}
"""Shipped inputs, by the name a config uses, relative to this package's ``data`` folder."""
DATA = Path(__file__).resolve().parent / "data"
"""This package's data folder, which the ``PACKAGED`` names point into (``grid.files.packaged_path``)."""
EMPTY_TASK = "_empty"
"""Id of the empty task text: each framing rendered around nothing, for the surface-only direction."""
SCORING = "score"
"""The framing coordinate of scoring items (rendered once, in no framing): no framing may be named so."""


def apply_newline(text: str, newline: str) -> str:
    """``text`` in the newline convention ``newline`` (``NEWLINES``)."""
    if newline == "keep":
        return text
    lf = text.replace("\r\n", "\n")
    return lf if newline == "lf" else lf.replace("\n", "\r\n")


@dataclass(frozen=True)
class Framing:
    """One framing: an arm's wrapper text with one ``{task}`` slot."""

    id: str
    arm: str
    """``evaluation`` or ``deployment``."""
    text: str
    """The file's text, verbatim."""

    def wrap(self, task: str) -> str:
        """The framing with ``task`` in its slot."""
        return self.text.replace(SLOT, task)


@dataclass(frozen=True)
class FramingSet:
    """A versioned set of framings."""

    path: str
    """``packaged:v1`` or the folder's absolute path."""
    version: str
    sha256: str
    """SHA-256 over every framing file's arm, name and bytes, in sorted order."""
    framings: tuple[Framing, ...]

    def arm(self, arm: str) -> tuple[Framing, ...]:
        """The framings of one arm, in file-name order."""
        return tuple(f for f in self.framings if f.arm == arm)

    def wrappers(self) -> list[tuple[str, str]]:
        """Every (evaluation id, deployment id) pair, evaluation-major."""
        return [(e.id, d.id) for e in self.arm("evaluation") for d in self.arm("deployment")]


def load_framings(name: str) -> FramingSet:
    """The framing set of ``name`` (``packaged:v1`` or a folder); ConfigError naming the file and the fix."""
    folder = packaged_path(name, PACKAGED, DATA)
    if not folder.is_dir():
        raise ConfigError(str(folder), "framings", "is not a folder", "give a folder holding evaluation/*.txt and "
                          "deployment/*.txt, or 'packaged:v1'")
    digest, framings = hashlib.sha256(), []
    for arm in ARMS:
        files = sorted((folder / arm).glob("*.txt"))
        if len(files) < 2:
            raise ConfigError(str(folder / arm), "framings", f"holds {len(files)} framing file(s) (*.txt)",
                              "give at least 2 per arm (6 × 6 is the shipped design)")
        for file in files:
            data = file.read_bytes()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(str(file), "framings", f"is not UTF-8 ({exc.reason} at byte {exc.start})",
                                  "save it as UTF-8") from None
            if text.count(SLOT) != 1:
                raise ConfigError(str(file), "framings", f"has {text.count(SLOT)} {SLOT} slots",
                                  f"put exactly one {SLOT} where the task text goes")
            check_name(file.stem, str(file), "framing id (file name)")
            if file.stem == SCORING:
                raise ConfigError(str(file), "framings", f"is named {SCORING!r}, the scoring items' coordinate",
                                  "rename the file")
            digest.update(f"{arm}/{file.name}\0".encode() + data + b"\0")
            framings.append(Framing(file.stem, arm, text))
    ids = [f.id for f in framings]
    if len(set(ids)) != len(ids):
        raise ConfigError(str(folder), "framings", "two framings share a file name across the arms",
                          "give every framing file a distinct name")
    version_file = folder / "VERSION"
    version = version_file.read_text(encoding="utf-8").strip() if version_file.exists() else folder.name
    return FramingSet(name if name in PACKAGED else str(folder.resolve()), version, digest.hexdigest(), tuple(framings))


@dataclass(frozen=True)
class Item:
    """A task text or a scoring item."""

    id: str
    text: str
    label: str | None = None
    """The scoring class (None for task texts)."""
    subset: str | None = None
    """An optional subset name (e.g. ``confounded`` / ``clean`` in the shipped set)."""
    group: str | None = None
    """An optional group id: items of one group (a pair of reworded twins) are kept in one fold by the surface
    baseline. None: the item is its own group."""

    @property
    def sha256(self) -> str:
        """SHA-256 of the text's UTF-8 bytes."""
        return sha256(self.text.encode("utf-8"))


@dataclass(frozen=True)
class ItemSet:
    """Task texts or a scoring set, as loaded."""

    path: str
    sha256: str
    """SHA-256 of the file's bytes."""
    items: tuple[Item, ...]
    redistribute: bool = True
    """False for a set whose texts may not be redistributed (SAD's stages-oversight): its texts and token ids are
    not written into the store, so the browser and reports show its items by id only."""

    @property
    def classes(self) -> tuple[str, ...]:
        """The label values, sorted (empty for task texts)."""
        return tuple(sorted({i.label for i in self.items if i.label is not None}))


def _rows(file: Path, data: bytes) -> list[dict]:
    text = data.decode("utf-8")
    if file.suffix.lower() == ".csv":
        return csv_rows(text, str(file), dict_rows=True)
    rows = []
    for n, line in enumerate(text.split("\n"), 1):   # not splitlines(): U+2028 and friends are legal inside JSON strings
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(str(file), f"line {n}", f"is not JSON ({exc.msg})", "write one JSON object per line") from None
        if not isinstance(row, dict):
            raise ConfigError(str(file), f"line {n}", "is not a JSON object", "write one object per line")
        rows.append(row)
    return rows


def load_items(source: str | dict, field: str, labelled: bool) -> ItemSet:
    """Task texts (``labelled`` False) or a scoring set from ``source``: a ``packaged:`` name or path, or a
    mapping ``{"path", "id", "text", "label", "subset", "group"}`` naming the file's columns, with
    ``"redistribute": false`` for a set that may not be redistributed. ``field`` is the config field, for
    errors."""
    columns = {"id": "id", "text": "text", "label": "label", "subset": "subset", "group": "group"}
    redistribute = True
    if isinstance(source, dict):
        columns.update({k: v for k, v in source.items() if k in columns})
        redistribute = source.get("redistribute", True)
        if not isinstance(redistribute, bool):
            raise ConfigError(str(source["path"]), f"{field}.redistribute", f"is {redistribute!r}",
                              "use false for a set that may not be redistributed, true (the default) otherwise")
    name: str = source["path"] if isinstance(source, dict) else source
    file = packaged_path(name, PACKAGED, DATA)
    if not file.is_file():
        raise ConfigError(str(file), field, "does not exist", "give a JSONL or CSV file, or a packaged: name")
    data = file.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        raise ConfigError(str(file), field, "starts with a byte-order mark", "save it as UTF-8 without a BOM")
    try:
        rows = _rows(file, data)
    except UnicodeDecodeError as exc:
        raise ConfigError(str(file), field, f"is not UTF-8 ({exc.reason} at byte {exc.start})", "save it as UTF-8") from None
    items, seen = [], set()
    for n, row in enumerate(rows, 1):
        where = f"{field}, item {n}"
        need = ("id", "text", "label") if labelled else ("id", "text")
        missing = [columns[k] for k in need if row.get(columns[k]) in (None, "")]
        if missing:
            raise ConfigError(str(file), where, f"lacks {', '.join(missing)}",
                              "give every item an id and a text" + (" and a label" if labelled else "")
                              + " (map other column names in the config)")
        item_id = check_name(str(row[columns["id"]]), str(file), f"{where}.id")   # an id the user gives: the one name rule
        if item_id in seen:
            raise ConfigError(str(file), f"{where}.id", f"{excerpt(item_id)} appears twice", "give every item its own id")
        seen.add(item_id)
        subset, group = row.get(columns["subset"]), row.get(columns["group"])
        items.append(Item(item_id, str(row[columns["text"]]), str(row[columns["label"]]) if labelled else None,
                          str(subset) if subset not in (None, "") else None,
                          str(group) if group not in (None, "") else None))
    if not items:
        raise ConfigError(str(file), field, "holds no items", "give at least one item")
    result = ItemSet(name if name in PACKAGED else str(file.resolve()), sha256(data), tuple(items), redistribute)
    if labelled and len(result.classes) != 2:
        raise ConfigError(str(file), field, f"has {len(result.classes)} label value(s) ({excerpt(list(result.classes))})",
                          "give exactly two classes (e.g. testing and deployment)")
    return result
