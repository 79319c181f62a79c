"""Reading a report page back in tests: its headline rows, the queries it prints, and the CLI as a user runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli(args: list[str], env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    """``mirrorscan ARGS`` as a user runs it (this checkout's code first on the path)."""
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


class Numbers(HTMLParser):
    """The headline rows of a report page: (model, number) → (shown value, printed sql command lines). A row
    that links to a query printed earlier on the page (each is printed once) gets that query's text."""

    def __init__(self):
        super().__init__()
        self.rows: dict = {}
        self.printed: dict = {}
        """Anchor id → text of each printed command."""
        self.links: int = 0
        """Rows' links to a query printed earlier."""
        self._key, self._cell, self._text, self._id = None, None, [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "number":
            self._key = (a["data-model"], a["data-number"])
            self.rows[self._key] = {"value": "", "sql": []}
        elif self._key and tag == "td" and a.get("class") == "value":
            self._cell, self._text = "value", []
        elif self._key and tag == "pre" and a.get("class") == "sql":
            self._cell, self._text = "sql", []
        elif self._key and tag == "a" and a.get("id"):   # the anchor just before a printed command
            self._id = a["id"]
        elif self._key and tag == "a" and a.get("class") == "same-query" and a.get("data-kind") == "sql":
            self.rows[self._key]["sql"].append(("#", a["href"].removeprefix("#")))
            self.links += 1

    def handle_endtag(self, tag):
        if self._key and self._cell == "value" and tag == "td":
            self.rows[self._key]["value"] = "".join(self._text)
            self._cell = None
        elif self._key and self._cell == "sql" and tag == "pre":
            text = "".join(self._text)
            self.rows[self._key]["sql"].append(text)
            if self._id:
                self.printed[self._id] = text
            self._cell, self._id = None, None
        elif tag == "tr":
            self._key = None

    def handle_data(self, data):
        if self._cell:
            self._text.append(data)


def numbers(page: str) -> dict:
    parser = Numbers()
    parser.feed(page)
    for row in parser.rows.values():
        row["sql"] = [parser.printed[s[1]] if isinstance(s, tuple) else s for s in row["sql"]]
    return parser.rows


def query_of(command: str) -> str:
    """The SQL of a printed ``mirrorscan sql "…"`` line."""
    match = re.fullmatch(r'mirrorscan sql "(.*)"', command, re.DOTALL)
    assert match, command
    return match.group(1)
