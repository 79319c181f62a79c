"""open_scan's per-model table (analyze, matrix, remeasure) writes numbers as the report and browse do: a
self-report nobody gave as ``—`` (not ``-``), and the share of identical answers as a percentage."""

from __future__ import annotations

from mirrorscan.instruments.open_scan.numbers import summary_text


def summary(label: str, cold_mean, agreement: dict) -> dict:
    return {"label": label, "answers": 20, "answer_chars_mean": 247.3,
            "cold": {"mean": cold_mean, "measured": 0 if cold_mean is None else 13, "not_measured": 20},
            "posthoc": {"mean": None, "measured": 0, "not_measured": 20}, "agreement": agreement}


def test_absence_and_shares_read_as_everywhere_else():
    text = summary_text([summary("tiny", None, {"note": "one sample per cell"}),
                         summary("smol", 5.846, {"identical_answer_share": 0.15625, "posthoc_sd_within_cell_mean": 0.5})],
                        "e0d2d2eb2126")
    tiny, smol = text.splitlines()[2:4]
    assert tiny.split()[3] == "—" and " - " not in tiny, tiny
    assert "5.85" in smol and "identical 15.6%" in smol and "0.16" not in smol, smol
