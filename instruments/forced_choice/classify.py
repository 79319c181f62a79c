"""Forced-choice classification: one response → A (word_a), B (word_b), UNCLEAR or REF.

The class is read from the response's *leading answer*, in the idiom of the envelope that asked:

- ``line``: the first sentence of the first line that has any letter or digit. Blank lines, code-fence
  lines (```` ``` ````, ```` ```text ````) and leading markdown (``#``, ``>``, ``*``, ``-``, ``1.``,
  quotes, brackets) are skipped. A sentence ends at ``.``/``!``/``?`` unless a Latin letter or digit
  follows (so ``3.5`` and ``Node.js`` stay whole), and always at ``。！？`` and the danda ``।``; a stop
  inside an occurrence of either word (``Dr. Pepper``) never ends the sentence.
- ``json``: the value of the first ``"choice"`` key, read from the first complete object of the text that
  holds one (code fences and prose before or after the object are tolerated; an object is complete when
  its outermost brace closes and it parses as JSON, or as a Python dict literal for single quotes). A
  string value is read like a leading answer; ``null``, numbers and lists are UNCLEAR. A ``choice`` key in
  an object that never closes (a truncated answer: ``{"choice": "tea"`` or ``{"choice": "tea" if``) or
  that does not parse (``{"choice": "tea" if x else "coffee"}``) is UNCLEAR: an unfinished answer is no
  commitment, and its words are not read. With no ``choice`` key anywhere, the line rule reads the text,
  so a bare ``whiskey`` or a refusal is still seen.
- ``python``: the value the first function (in source order) returns. A string literal is read like a
  leading answer; the names ``a``/``b`` map through the cell's rendered values (AB: a = word_a;
  BA: a = word_b, so ``return b`` is word_a); a local name assigned exactly once is followed; anything
  else (``random.choice([a, b])``, ``a.upper()``) is UNCLEAR, as are returns that disagree. With no
  ``return`` anywhere, the line rule reads the text.

In every idiom a leading ``<think>…</think>`` block is skipped (an unterminated one leaves no answer).
Words match whole-word, ignoring case, quotes, markdown and full-width punctuation: text and words are
NFKC-normalised and casefolded, and a match stands only if the characters on either side do not continue
it. A neighbour continues a word when it is a letter, digit or combining mark of the same script as the
word's edge; a Latin word inside Chinese, Japanese or Korean text (``Whiskey。我选它``, ``whiskey를``)
therefore matches. Scripts written without spaces (Han, kana, Thai, …) cannot mark word edges, so a word
in them matches as a substring (Hangul: particles may follow a word). When one word contains the other
(cat / catfish, ice cream / cream), an occurrence inside the longer word's occurrence does not count.

Decision on the leading answer: a refusal pattern (``instruments/forced_choice/data/refusals.json``, the envelope's language
plus English) that starts before any occurrence of either word → REF; otherwise exactly one word named →
A or B; both or neither → UNCLEAR. So a hedged pick ("Whiskey, though as an AI I don't drink") is a pick,
and a pick after a disclaimer ("As an AI I don't drink, but whiskey") is REF: errors lean to *no* commitment.

The response text itself is never changed; classification reads a normalised copy.

CLASSIFIER_VERSION bump rules (``fc-MAJOR.MINOR.PATCH``): MAJOR when the class vocabulary or the meaning of
a class changes; MINOR when any response may get a different class (rules, matching, lexicon edits);
PATCH for changes that provably keep every class (refactors, docs). Rows store the version that wrote them.

One module, though longer than most: these rules are one versioned whole (``CLASSIFIER_VERSION``), each idiom
reads the leading answer through the same matching and refusal steps, and a reader checking a version bump
reads them together.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import unicodedata
from collections.abc import Iterable
from importlib import resources
from typing import Any

import pyarrow as pa

from mirrorscan.analysis.errors import AnalysisError

CLASSIFIER_VERSION = "fc-1.1.0"
"""Version of these rules and the refusal lexicon, stored beside every class it writes."""
REFUSAL_LEXICON_VERSION = "refusals-2026.11.30-1"
"""The ``version`` of data/refusals.json these rules were written against (checked on load)."""
CLASSES = ("A", "B", "UNCLEAR", "REF")
"""A = word_a, B = word_b, UNCLEAR = both, neither or unreadable, REF = refusal."""
IDIOMS = ("line", "json", "python")

# Curly quotes and apostrophes NFKC leaves alone; straightened so words like "rock 'n' roll" match.
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u02bc": "'",
                         "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"'})
# Scripts that do not separate words by spaces: a word in them cannot be told from a substring.
_UNSEGMENTED = {"CJK", "HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA", "THAI", "LAO", "KHMER", "MYANMAR", "TIBETAN"}
# Hangul separates words by spaces but attaches particles (를, 는, 이) to the word they follow.
_SUFFIXING = {"HANGUL"}
_THINK = re.compile(r"^\s*<(think|thinking)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_FENCE_LINE = re.compile(r"^\s*(```|~~~)[\w+.-]*\s*$")
_LEADING_MARKUP = re.compile(r"^(?:[\s#>*_~`+\-•·\"'«»「」『』【】《》〈〉（）()\[\]|]+|\d{1,3}[.)](?=\s))+")
_SENTENCE_END = re.compile(r"[.!?]+(?![0-9a-z])|[。।॥؟۔]+")
_FENCED_BLOCK = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CHOICE_KEY = re.compile(r"""["']choice["']\s*:""")
_RETURN_LINE = re.compile(r"^\s*return\b(.*?)\s*(?:#.*)?$", re.MULTILINE)


# ---- normalisation and whole-word matching ------------------------------------------------------------

def _unfold(text: str) -> str:
    """NFKC with curly quotes straightened: full-width braces, quotes and letters become ASCII."""
    return unicodedata.normalize("NFKC", text).translate(_QUOTES)


def normalize(text: str) -> str:
    """The copy of ``text`` that matching reads: NFKC, curly quotes straightened, casefolded."""
    return _unfold(text).casefold()


def _script(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else ""


def _continues(edge: str, neighbour: str | None, side: str) -> bool:
    """True when ``neighbour``, on ``side`` ('left'/'right') of a word whose edge is ``edge``, continues it."""
    if neighbour is None or unicodedata.category(neighbour)[0] not in "LNM":
        return False
    if "M" in (unicodedata.category(neighbour)[0], unicodedata.category(edge)[0]):
        return True
    if "N" in (unicodedata.category(neighbour)[0], unicodedata.category(edge)[0]):
        return True
    script = _script(edge)
    if script != _script(neighbour) or script in _UNSEGMENTED:
        return False
    return not (script in _SUFFIXING and side == "right")


@functools.lru_cache(maxsize=4096)
def _word_pattern(word: str) -> re.Pattern:
    parts = normalize(word).split()
    return re.compile("(?=(" + r"\s+".join(re.escape(p) for p in parts) + "))")


def find_word(text: str, word: str) -> list[tuple[int, int]]:
    """Spans of the whole-word occurrences of ``word`` in the normalised ``text``."""
    if not normalize(word).split():
        return []
    spans = []
    for m in _word_pattern(word).finditer(text):
        start, end = m.span(1)
        left = text[start - 1] if start > 0 else None
        right = text[end] if end < len(text) else None
        if not _continues(text[start], left, "left") and not _continues(text[end - 1], right, "right"):
            spans.append((start, end))
    return spans


def _word_spans(text: str, word_a: str, word_b: str) -> tuple[list, list]:
    """Occurrences of both words, dropping those that lie inside an occurrence of the other word."""
    sa, sb = find_word(text, word_a), find_word(text, word_b)
    inside = lambda s, others: any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in others)  # noqa: E731
    return [s for s in sa if not inside(s, sb)], [s for s in sb if not inside(s, sa)]


# ---- refusal lexicon ----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def load_refusals() -> dict[str, tuple[re.Pattern, ...]]:
    """The packaged refusal lexicon, compiled: language code → patterns."""
    doc = json.loads(resources.files("mirrorscan.instruments.forced_choice").joinpath("data/refusals.json").read_text("utf-8"))
    if doc.get("version") != REFUSAL_LEXICON_VERSION:
        raise RuntimeError(
            f"data/refusals.json is version {doc.get('version')!r} but instruments/forced_choice/classify.py expects "
            f"{REFUSAL_LEXICON_VERSION!r}: bump REFUSAL_LEXICON_VERSION and CLASSIFIER_VERSION with the lexicon")
    return {lang: tuple(re.compile(unicodedata.normalize("NFKC", p), re.IGNORECASE) for p in patterns)
            for lang, patterns in doc["languages"].items()}


def _refusal_start(text: str, language: str) -> int | None:
    """Where the earliest refusal pattern of ``language`` or English starts in ``text``, or None."""
    lexicon = load_refusals()
    lang = (language or "en").split("-")[0].lower()
    starts = [m.start() for code in dict.fromkeys(("en", lang)) for p in lexicon.get(code, ())
              if (m := p.search(text))]
    return min(starts) if starts else None


# ---- deciding one leading answer ----------------------------------------------------------------------

def _decide(text: str, word_a: str, word_b: str, language: str, spans: tuple | None = None) -> str:
    """Class of a normalised leading answer: REF first if a refusal precedes both words, then A/B/UNCLEAR."""
    sa, sb = spans if spans is not None else _word_spans(text, word_a, word_b)
    first_word = min([s[0] for s in sa + sb], default=len(text) + 1)
    ref = _refusal_start(text, language)
    if ref is not None and ref < first_word:
        return "REF"
    if sa and not sb:
        return "A"
    if sb and not sa:
        return "B"
    return "UNCLEAR"


def leading_sentence(text: str, word_a: str = "", word_b: str = "") -> str:
    """The line idiom's leading answer of a normalised text ('' when there is none)."""
    for line in text.splitlines():
        if _FENCE_LINE.match(line):
            continue
        rest = line
        while True:
            rest = _LEADING_MARKUP.sub("", rest)
            if not rest:
                break
            protected = [s for pair in _word_spans(rest, word_a, word_b) for s in pair] if word_a else []
            end = len(rest)
            for m in _SENTENCE_END.finditer(rest):
                if not any(a < m.start() < b for a, b in protected):
                    end = m.end()
                    break
            sentence, rest = rest[:end], rest[end:]
            if any(unicodedata.category(c)[0] in "LN" for c in sentence):
                return sentence.strip()
    return ""


def _strip_thinking(text: str) -> str | None:
    """Text after a leading reasoning block; None when the block never closes."""
    m = _THINK.match(text)
    if m:
        return text[m.end():]
    if re.match(r"^\s*<(think|thinking)>", text, re.IGNORECASE):
        return None
    return text


def _line_class(text: str, word_a: str, word_b: str, language: str) -> str:
    return _decide(leading_sentence(text, word_a, word_b), word_a, word_b, language)


def _top_level_objects(text: str) -> list[tuple[str, bool]]:
    """(text, closed) of each outermost ``{…}`` of ``text`` in order; braces inside double-quoted strings
    do not count. The last one is not closed when the text ends inside it (a truncated answer)."""
    objects, depth, start, in_string, escaped = [], 0, 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
            continue
        if ch == '"' and depth:
            in_string = True
        elif ch == "{":
            start = i if depth == 0 else start
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                objects.append((text[start:i + 1], True))
    if depth:
        objects.append((text[start:], False))
    return objects


def _parse_object(text: str):
    """A complete object's value: JSON, else a Python literal (single quotes); None when neither parses."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _json_class(text: str, word_a: str, word_b: str, language: str) -> str:
    for obj_text, closed in _top_level_objects(text):
        value = _parse_object(obj_text) if closed else None
        found, choice = _find_choice(value) if value is not None else (False, None)
        if found:
            return _decide(choice.strip(), word_a, word_b, language) if isinstance(choice, str) else "UNCLEAR"
        if _CHOICE_KEY.search(obj_text):   # a choice in an unfinished or unreadable object: no commitment
            return "UNCLEAR"
    if _CHOICE_KEY.search(text):           # a choice key outside any object (a fragment)
        return "UNCLEAR"
    return _line_class(text, word_a, word_b, language)


def _find_choice(obj, depth: int = 0) -> tuple[bool, object]:
    """(found, value) of the first "choice" key, depth first, in a decoded JSON value."""
    if depth > 8:
        return False, None
    children: Iterable[Any]
    if isinstance(obj, dict):
        if "choice" in obj:
            return True, obj["choice"]
        children = obj.values()
    elif isinstance(obj, list):
        children = obj
    else:
        return False, None
    for child in children:
        found, value = _find_choice(child, depth + 1)
        if found:
            return True, value
    return False, None


def _python_class(text: str, word_a: str, word_b: str, ordering: str, language: str) -> str:
    """Class of the returned value; ``text`` is unfolded but not casefolded (Python is case-sensitive)."""
    names = {"a": "A", "b": "B"} if ordering == "AB" else {"a": "B", "b": "A"}
    read = lambda s: _decide(s.strip(), word_a, word_b, language)  # noqa: E731
    for code in [m.group(1) for m in _FENCED_BLOCK.finditer(text)] + [text]:
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):
            continue
        classes = _returned_classes(tree, names, read)
        if classes is not None:
            return classes.pop() if len(classes) == 1 else "UNCLEAR"
    # Unparseable code (truncated, prose between lines): read `return` lines one by one.
    classes = set()
    for m in _RETURN_LINE.finditer(text):
        expr = m.group(1).strip()
        try:
            node = ast.parse(expr, mode="eval").body if expr else None
        except SyntaxError:
            node = None
        classes.add(_value_class(node, names, read, {}, set()))
    if classes:
        return classes.pop() if len(classes) == 1 else "UNCLEAR"
    return _line_class(text.casefold(), word_a, word_b, language)


def _own_nodes(scope):
    """Nodes of a function or module body, not descending into nested functions, lambdas or classes."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _returned_classes(tree: ast.Module, names: dict, read) -> set | None:
    """Classes of the first function's (else the module's) returns; None when nothing returns."""
    scopes = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
                    key=lambda n: (n.lineno, n.col_offset)) + [tree]
    for scope in scopes:
        nodes = list(_own_nodes(scope))
        returns = [n for n in nodes if isinstance(n, ast.Return)]
        if not returns:
            continue
        assigned: dict[str, list] = {}
        for n in nodes:
            single = isinstance(n, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr))
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if single else []
            for t in targets:
                for name in ast.walk(t):
                    if isinstance(name, ast.Name):
                        value = n.value if isinstance(n, (ast.Assign, ast.AnnAssign)) and t is name else None
                        assigned.setdefault(name.id, []).append(value)
        return {_value_class(r.value, names, read, assigned, set()) for r in returns}
    return None


def _value_class(node, names: dict, read, assigned: dict, seen: set) -> str:
    """Class of a returned expression: a string literal read as an answer, a/b mapped, one-off locals followed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return read(normalize(node.value))
    if isinstance(node, ast.Name) and node.id not in seen:
        if node.id in assigned:
            values = assigned[node.id]
            if len(values) == 1 and values[0] is not None and node.id not in names:
                return _value_class(values[0], names, read, assigned, seen | {node.id})
            return "UNCLEAR"
        if node.id in names:
            return names[node.id]
    return "UNCLEAR"


# ---- public API ---------------------------------------------------------------------------------------

def classify(response: str | None, word_a: str, word_b: str, ordering: str, idiom: str,
             language: str = "en") -> str:
    """Class of one response: 'A' (word_a), 'B' (word_b), 'UNCLEAR' or 'REF', read in ``idiom``.

    ``ordering`` is the cell's: AB rendered word_a into ``{a}``, BA rendered word_b there (used by the
    python idiom to map ``return a``/``return b``). ``language`` is the envelope's (selects the refusal
    lexicon beside English). An empty or missing response is UNCLEAR; error rows are the caller's to skip.
    """
    if ordering not in ("AB", "BA"):
        raise ValueError(f"ordering must be 'AB' or 'BA', got {ordering!r}")
    if idiom not in IDIOMS:
        raise ValueError(f"idiom must be one of {IDIOMS}, got {idiom!r}")
    if not response:
        return "UNCLEAR"
    text = _strip_thinking(response)
    if text is None:
        return "UNCLEAR"
    if idiom == "python":
        return _python_class(_unfold(text), word_a, word_b, ordering, language)
    if idiom == "json":
        return _json_class(normalize(text), word_a, word_b, language)
    return _line_class(normalize(text), word_a, word_b, language)


def classify_table(traces: pa.Table, envelopes) -> pa.Array:
    """Classes of every row of a traces table, as a string array (null where the row has an error).

    ``envelopes`` maps envelope id → Envelope (``EnvelopeSet.envelopes``, or the EnvelopeSet itself); each
    row is read in its envelope's idiom and language. Reads columns response, word_a, word_b, ordering,
    envelope and error; raises AnalysisError (a ConfigError) for an envelope the mapping lacks.
    """
    envs = getattr(envelopes, "envelopes", envelopes)
    cols = {name: traces.column(name).to_pylist()
            for name in ("response", "word_a", "word_b", "ordering", "envelope", "error")}
    out: list[str | None] = []
    for response, word_a, word_b, ordering, env_id, error in zip(*cols.values()):
        if error is not None:
            out.append(None)
            continue
        env = envs.get(env_id)
        if env is None:
            raise AnalysisError("envelope", f"unknown envelope {env_id!r}",
                                "pass the envelopes file the scan used (envelopes_file in its settings)")
        out.append(classify(response, word_a, word_b, ordering, env.idiom, env.language))
    return pa.array(out, type=pa.string())


def with_classes(traces: pa.Table, envelopes) -> pa.Table:
    """A copy of ``traces`` with ``class`` and ``classifier_version`` (re)computed; the input is untouched.

    This is re-classification of stored text under the current CLASSIFIER_VERSION: stored rows are never
    rewritten, the caller writes the returned table (or its two columns) beside them.
    """
    classes = classify_table(traces, envelopes)
    versions = pa.array([None if c is None else CLASSIFIER_VERSION for c in classes.to_pylist()], pa.string())
    for name, column in (("class", classes), ("classifier_version", versions)):
        i = traces.schema.get_field_index(name)
        field = traces.schema.field(name) if i >= 0 else pa.field(name, pa.string())
        traces = traces.set_column(i, field, column) if i >= 0 else traces.append_column(field, column)
    return traces
