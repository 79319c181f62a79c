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
    return subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", *args], cwd=REPO, env=env, capture_output=True,
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
        self._key, self._cell, self._text, self._id, self._exact = None, None, [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "number":
            self._key = (a["data-model"], a["data-number"])
            self.rows[self._key] = {"value": "", "shown": "", "sql": []}
        elif self._key and tag == "td" and a.get("class") == "value":
            self._cell, self._text = "value", []
            self._exact = a.get("data-value")   # the number as the query returns it; the text is as analyze prints
        elif self._key and tag == "pre" and a.get("class") == "sql":
            self._cell, self._text = "sql", []
        elif self._key and tag == "a" and a.get("id"):   # the anchor just before a printed command
            self._id = a["id"]
        elif self._key and tag == "a" and a.get("class") == "same-query" and a.get("data-kind") == "sql":
            self.rows[self._key]["sql"].append(("#", a["href"].removeprefix("#")))
            self.links += 1

    def handle_endtag(self, tag):
        if self._key and self._cell == "value" and tag == "td":
            self.rows[self._key]["shown"] = "".join(self._text)
            self.rows[self._key]["value"] = "".join(self._text) if self._exact is None else self._exact
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


class _Loads(HTMLParser):
    """What a page's tags would load or lead to: each URL-valued attribute, the ids on the page, and the
    tags that run or fetch something by themselves."""

    URL_ATTRS = ("src", "href", "srcset", "action", "formaction", "poster", "background", "data", "cite")
    FETCHING = ("script", "link", "iframe", "frame", "object", "embed", "base", "form")

    def __init__(self):
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []
        self.ids: set[str] = set()
        self.fetching: list[str] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        if tag in self.FETCHING or (tag == "meta" and dict(attrs).get("http-equiv")):   # a refresh loads a page
            self.fetching.append(tag)
        for name, value in attrs:
            if name == "id":
                self.ids.add(value or "")
            elif name in self.URL_ATTRS:
                self.urls.append((tag, name, value or ""))
            elif name == "style":
                self.styles.append(value or "")
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


def self_contained_problems(page: str) -> list[str]:
    """Why ``page`` is not self-contained (empty when it is): a tag that runs or fetches something (script,
    link, iframe, …), a ``src`` (or other loading attribute) that is not a ``data:`` URL, an ``href`` that is
    not a fragment naming an element of the same page (an external or relative link, or a dangling
    ``#…``), or a CSS ``url(…)`` that is not a ``data:`` URL."""
    parser = _Loads()
    parser.feed(page)
    parser.close()
    problems = [f"<{tag}>" for tag in parser.fetching]
    for tag, name, value in parser.urls:
        if name == "href":
            if not (value.startswith("#") and value[1:] in parser.ids):
                problems.append(f"<{tag} href={value!r}>")
        elif not value.strip().lower().startswith("data:"):
            problems.append(f"<{tag} {name}={value!r}>")
    problems += [f"url({u})" for css in parser.styles
                 for u in re.findall(r"url\(\s*([^)]*)\)", css) if not u.strip("'\" ").lower().startswith("data:")]
    return problems


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
