"""Every text a probe id has had: its versions in order of use, with the first and last invocation of each.

A probe's text is identified by its hash (``query_hash``); the texts themselves are stored on the rows
(``query``). The history is read from the experiment's scan invocations (each froze its probe set's
(query_id, query_hash) items), oldest first; imports and reproductions never change it.

A probe set whose text for an id differs from the text the newest earlier scan used is a **change**, refused
unless accepted (``scan --accept-changed-probes``) and recorded with the invocation:

* an **edit** — a text the id never had: a new version, whose answers start from nothing;
* a **revert** — a text the id had before: the id's series **continues under that earlier text**. Answers are
  keyed by (query_id, query_hash), so the earlier text's stored answers count again, as current, and only what
  they lack is asked; the answers to the texts used in between stay stored, superseded. The matrix names each
  revert, with the versions' first and last use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Use:
    """One scan invocation's probe set, as the history reads it."""

    invocation_id: str
    """The invocation."""
    started_at: object
    """When it started (a datetime, or any value that orders invocations)."""
    items: tuple[tuple[str, str], ...]
    """Its (query_id, query_hash) pairs."""


def uses_of_scans(scans: list[tuple[str, object, dict]]) -> list[Use]:
    """The ``Use`` of each earlier scan given as (invocation id, start, frozen instrument settings), oldest
    first, as the engine reads them from the catalog; scans that froze no probe set are left out."""
    return [Use(i, t, tuple(tuple(x) for x in (s or {}).get("probes", {}).get("items") or ()))
            for i, t, s in scans if (s or {}).get("probes", {}).get("items")]


def uses_of_rows(rows) -> list[Use]:
    """The ``Use`` of each invocation among stored rows (columns invocation_id, created_at, query_id, query_hash;
    the first two optional): its earliest row's time and its distinct (query_id, query_hash) pairs, invocations and
    pairs in order of first appearance. Grouped by Arrow: a held experiment has hundreds of thousands of rows."""
    import numpy as np
    import pyarrow as pa

    n = rows.num_rows
    cols = {"invocation_id": rows.column("invocation_id") if "invocation_id" in rows.column_names
            else pa.array([""] * n, pa.string()),
            "query_id": rows.column("query_id"), "query_hash": rows.column("query_hash"),
            "row": pa.array(np.arange(n, dtype=np.int64))}
    if "created_at" in rows.column_names:
        cols["created_at"] = rows.column("created_at")
    table = pa.table(cols)
    first = table.group_by("invocation_id", use_threads=False).aggregate(
        [("row", "min")] + ([("created_at", "min")] if "created_at" in cols else [])).sort_by("row_min")
    pairs = table.group_by(["invocation_id", "query_id", "query_hash"], use_threads=False).aggregate(
        [("row", "min")]).sort_by("row_min")
    items: dict[str, list] = {}
    for inv, q, h in zip(*(pairs.column(c).to_pylist() for c in ("invocation_id", "query_id", "query_hash"))):
        items.setdefault(inv, []).append((q, h))
    starts = first.column("created_at_min").to_pylist() if "created_at" in cols else [0] * first.num_rows
    return [Use(inv, t, tuple(items[inv])) for inv, t in zip(first.column("invocation_id").to_pylist(), starts)]


@dataclass(frozen=True)
class Version:
    """One text of one probe id."""

    query_hash: str
    """Hex SHA-256 of the text."""
    first_invocation: str
    """The first scan invocation that used it."""
    first_at: object
    """When that invocation started."""
    last_invocation: str
    """The last scan invocation that used it."""
    last_at: object
    """When that invocation started."""


def probe_history(uses: list[Use]) -> tuple[dict[str, list[Version]], dict[str, list[str]]]:
    """(query_id → its versions in order of first use; query_id → the sequence of hashes it was used with, one
    entry per change, oldest first) of ``uses`` (sorted here by start)."""
    versions: dict[str, dict[str, Version]] = {}
    sequence: dict[str, list[str]] = {}
    for use in sorted(uses, key=lambda u: (u.started_at, u.invocation_id)):
        for query_id, query_hash in use.items:
            mine = versions.setdefault(query_id, {})
            old = mine.get(query_hash)
            mine[query_hash] = Version(query_hash, old.first_invocation if old else use.invocation_id,
                                       old.first_at if old else use.started_at, use.invocation_id, use.started_at)
            seq = sequence.setdefault(query_id, [])
            if not seq or seq[-1] != query_hash:
                seq.append(query_hash)
    return {q: list(v.values()) for q, v in versions.items()}, sequence


@dataclass(frozen=True)
class Change:
    """A probe id whose text differs from the one the newest earlier scan used."""

    query_id: str
    """The probe id."""
    kind: str
    """``edit`` (a text the id never had) or ``revert`` (a text it had before)."""
    previous: str
    """The hash the newest earlier scan used."""
    now: str
    """The hash the probe set holds now."""
    earlier: Version | None
    """For a revert: the version it returns to (its first and last use); None for an edit."""


def changes(uses: list[Use], items: Sequence[tuple[str, str]]) -> list[Change]:
    """The probe ids of ``items`` (the probe set now) whose text differs from the last one ``uses`` used for
    them, in ``items`` order. An id no earlier scan used is new, not changed."""
    versions, sequence = probe_history(uses)
    out = []
    for query_id, query_hash in items:
        seq = sequence.get(query_id)
        if not seq or seq[-1] == query_hash:
            continue
        earlier = next((v for v in versions[query_id] if v.query_hash == query_hash), None)
        out.append(Change(query_id, "revert" if earlier else "edit", seq[-1], query_hash, earlier))
    return out


def describe(query_id: str, versions: list[Version], sequence: list[str], when=str) -> str | None:
    """One line telling the texts ``query_id`` had (``when`` formats a start time), or None for one text."""
    if len(sequence) < 2:
        return None
    by_hash = {v.query_hash: v for v in versions}
    steps = " → ".join(f"{h[:8]} ({when(by_hash[h].first_at)}…{when(by_hash[h].last_at)})" for h in sequence)
    now = sequence[-1]
    if now in sequence[:-1]:
        return (f"{query_id}: {steps}: reverted to {now[:8]}; its series continues under that text's earlier "
                f"answers, and the answers to the texts between are superseded")
    return f"{query_id}: {steps}: edited; {now[:8]} is a new version, the earlier texts' answers are superseded"


def change_notes(found: list[Change], accept_changed: bool, probes_file: str) -> list[str]:
    """The lines recording ``found`` (``changes``) with a new invocation, edits and reverts apart; without
    ``accept_changed``, a ConfigError naming the ids (one line) instead."""
    from mirrorscan.grid.errors import ConfigError

    notes = []
    for kind, what in (("edit", "changed text under the same id since the last scan"),
                       ("revert", "returned to an earlier text")):
        mine = [c for c in found if c.kind == kind]
        if not mine:
            continue
        ids = [c.query_id for c in mine]
        shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
        if not accept_changed:
            fix = ("restore their text, give them new ids, or pass --accept-changed-probes to start new versions "
                   "(earlier rows are kept and marked superseded in the matrix)") if kind == "edit" else \
                ("restore the text the last scan used, or pass --accept-changed-probes to go back: each id's "
                 "series then continues under its earlier text's answers")
            raise ConfigError(probes_file, "query", f"{len(ids)} probe(s) {what}: {shown}", fix)
        if kind == "edit":
            notes.append(f"open_scan: {len(ids)} changed probe(s) accepted as new versions: {shown}")
        else:
            notes.append(f"open_scan: {len(ids)} probe(s) reverted to an earlier text, accepted (each continues under "
                         "that text's earlier answers): " + ", ".join(
                             f"{c.query_id} → {c.now[:8]} (used {c.earlier.first_invocation[:8]}…"
                             f"{c.earlier.last_invocation[:8]})" for c in mine if c.earlier is not None))
    return notes
