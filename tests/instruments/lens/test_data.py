"""lens's packaged data: framings with one {task} slot, task texts, and the synthetic scoring set whose
clean pairs hold identical word multisets (the rules of instruments/lens/data/README.md)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

DATA = Path(__file__).parents[3] / "instruments/lens/data"
FRAMINGS = DATA / "framings" / "v1"
SIGNAL_WORDS = {"test", "tests", "testing", "exam", "eval", "evaluation", "evaluate", "benchmark", "graded",
                "grade", "score", "scored", "assessment", "quiz", "deploy", "deployed", "deployment", "user",
                "customer", "production", "real"}


def jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines()]


def words(text: str) -> Counter:
    """Case-sensitive word multiset, split on whitespace and punctuation."""
    return Counter(re.findall(r"\w+", text))


def test_six_framings_of_each_kind_and_a_version():
    assert sorted(p.name for p in (FRAMINGS / "evaluation").iterdir()) == [f"e0{i}.txt" for i in range(1, 7)]
    assert sorted(p.name for p in (FRAMINGS / "deployment").iterdir()) == [f"d0{i}.txt" for i in range(1, 7)]
    assert (FRAMINGS / "VERSION").read_text(encoding="utf-8").strip() == "lens-framings-v1"


@pytest.mark.parametrize("path", sorted(FRAMINGS.glob("*/*.txt")), ids=lambda p: p.stem)
def test_every_framing_has_one_task_slot_and_no_other_brace(path):
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    assert text.count("{task}") == 1
    rest = text.replace("{task}", "")
    assert "{" not in rest and "}" not in rest
    assert b"\r" not in raw and not text.endswith("\n") and rest.strip()


def test_tasks_are_16_with_unique_ids_no_braces_and_no_signal_words():
    tasks = jsonl("tasks.jsonl")
    assert [t["id"] for t in tasks] == [f"t{i:02d}" for i in range(1, 17)]
    for t in tasks:
        assert set(t) == {"id", "text"} and t["text"].strip()
        assert "{" not in t["text"] and "}" not in t["text"], t["id"]
        assert not {w.lower() for w in words(t["text"])} & SIGNAL_WORDS, t["id"]


def test_scoring_set_counts():
    rows = jsonl("scoring_synthetic.jsonl")
    assert [r["id"] for r in rows] == [f"s{i:03d}" for i in range(1, 65)]
    assert all(set(r) == {"id", "text", "label", "subset"} | ({"group"} if r["subset"] == "clean" else set())
               and r["text"].strip() for r in rows)
    assert Counter((r["subset"], r["label"]) for r in rows) == {
        ("confounded", "testing"): 16, ("confounded", "deployment"): 16,
        ("clean", "testing"): 16, ("clean", "deployment"): 16}
    assert len({r["text"] for r in rows}) == 64
    assert {r["label"] for r in rows[:2]} == {"testing", "deployment"}     # labels interleaved, not blocked


def test_every_clean_pair_has_the_same_word_multiset_and_opposite_labels():
    clean = [r for r in jsonl("scoring_synthetic.jsonl") if r["subset"] == "clean"]
    assert len(clean) == 32 and int(clean[0]["id"][1:]) % 2 == 1      # pairs: consecutive ids, odd id first
    for a, b in zip(clean[::2], clean[1::2]):
        assert int(b["id"][1:]) == int(a["id"][1:]) + 1
        assert a["group"] == b["group"] == f"pair{(int(a['id'][1:]) - 33) // 2 + 1:02d}"   # one group per pair
        assert {a["label"], b["label"]} == {"testing", "deployment"}, (a["id"], b["id"])
        assert words(a["text"]) == words(b["text"]), (a["id"], b["id"])
        assert a["text"] != b["text"]
