"""Forced choice end to end: a tiny Llama overfit to a planted answer table → scan → analyze.

The fixture trains a tiny Llama (tests/jobs/overfit.py) until greedy decoding reproduces ``TABLE`` on
every cell, checks that with the real HF sampler in several batch mixes, and hands the folder to a real
scan (Ray, embedded PostgreSQL, local store). The test then checks that classes were written at scan
time and that ``analyze`` finds exactly the numbers derived by hand from the table below, and that
re-classification gives the same numbers without touching the stored rows.

The planted classes (E1 = english_strict, line idiom; E2 = json_schema, json idiom; A = word_a):

    pair         word_a word_b   E1 AB  E1 BA    E2 AB  E2 BA
    gin_rum      gin    rum      A      A        A      A        ┐
    rum_sake     rum    sake     A      A        A      A        ├ the 3-cycle gin > rum > sake > gin
    gin_sake     gin    sake     B      B        B      B        ┘
    tea_coffee   tea    coffee   A      A        A      A          always word_a
    red_blue     red    blue     A      B        A      B          always the first-named word
    cat_dog      cat    dog      REF    UNCLEAR  B      B          E1 neither picks; E2 agrees on dog
    sun_moon     sun    moon     A      A        A      B          E1 agrees on sun; E2's AB/BA disagree
    up_down      up     down     A      A        B      B          each envelope agrees, they disagree
    salt_pepper  salt   pepper   REF    UNCLEAR  UNCLEAR REF       no definite pick at all
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import overfit   # tests/jobs/overfit.py, beside this file

from mirrorscan.grid.records import ModelVariant, InvocationContext

CLASSES = {   # pair → classes of (E1 AB, E1 BA, E2 AB, E2 BA), as in the module docstring
    "gin_rum": "A A A A", "rum_sake": "A A A A", "gin_sake": "B B B B", "tea_coffee": "A A A A",
    "red_blue": "A B A B", "cat_dog": "REF UNCLEAR B B", "sun_moon": "A A A B", "up_down": "A A B B",
    "salt_pepper": "REF UNCLEAR UNCLEAR REF",
}
CELL_ORDER = [(e, o) for e in overfit.ENVELOPES for o in overfit.ORDERINGS]
BATCH_SIZE = 8
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def overfit_model(overfit_dir):
    """The trained model folder (``overfit_dir``), checked cell by cell through the HF sampler in several
    batch mixes."""
    from mirrorscan.actors.hf_sampler import HFSampler

    folder = overfit_dir
    variant = ModelVariant(label="fit", model=str(folder), temperature=0.0, top_p=1.0, max_tokens=MAX_TOKENS)
    sampler = HFSampler(variant, str(folder), InvocationContext(invocation_id="check", experiment="check",
                                                         instrument="forced_choice", envelope_version="check"))
    cells, wanted = overfit.rendered_cells("fit"), overfit.expected_responses()
    pair_of = dict(zip(cells["probe_id"].to_pylist(), cells["pair_id"].to_pylist()))   # engines see cells, not pairs
    n = cells.num_rows
    mixes = {"grid order, batches of 8": (list(range(n)), BATCH_SIZE),
             "reversed, batches of 5": (list(reversed(range(n))), 5),
             "interleaved, one batch": ([i for k in range(3) for i in range(k, n, 3)], n)}
    for name, (order, size) in mixes.items():
        shuffled = cells.take(order)
        got = {}
        for start in range(0, n, size):
            for row in sampler(shuffled.slice(start, size)).to_pylist():
                assert row["error"] is None and row["finish_reason"] == "stop", (name, row)
                got[(pair_of[row["probe_id"]], row["envelope"], row["ordering"])] = row["response"]
        assert got == wanted, name
    return folder


def write_experiment(folder: Path, model_dir: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "pairs.csv").write_text(overfit.PAIRS_CSV)
    config = {"instrument": "forced_choice", "description": "tiny Llama overfit to a planted answer table",
              "models": [{"model": str(model_dir), "label": "fit"}], "probe_set": "pairs.csv",
              "envelopes": list(overfit.ENVELOPES), "orderings": list(overfit.ORDERINGS), "samples": 1,
              "temperature": 0.0, "max_tokens": MAX_TOKENS, "seed": 3, "batch_size": BATCH_SIZE, "actor_pool_size": 1}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_planted_table_gives_exact_numbers_through_scan_and_analyze(overfit_model, tmp_path, catalog_dsn, ray_local):
    from mirrorscan.instruments.forced_choice.classify import CLASSIFIER_VERSION
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.jobs.analyze import analyze_invocation
    from mirrorscan.jobs.scan import run_scan

    exp = write_experiment(tmp_path / "exps" / "fc_overfit", overfit_model)
    store_dir = tmp_path / "store"
    result = run_scan(str(exp), store=str(store_dir), catalog_dsn=catalog_dsn, quiet=True)
    assert result.status == "complete" and result.counts["ok"] == result.counts["cells"] == 36

    # ---- classes were written at scan time (read from the stored Parquet itself) ----------------------
    store = open_store(str(store_dir))
    parts = store.list_parts("fc_overfit", result.invocation_id)
    rows = [r for part in parts for r in pq.read_table(part).to_pylist()]
    assert len(rows) == 36
    wanted = overfit.expected_responses()
    for r in rows:
        cell = (r["pair_id"], r["envelope"], r["ordering"])
        assert r["error"] is None and r["response"] == wanted[cell], cell
        assert r["class"] == CLASSES[r["pair_id"]].split()[CELL_ORDER.index(cell[1:])], cell
        assert r["classifier_version"] == CLASSIFIER_VERSION

    # ---- analyze, writing its outputs ----------------------------------------------------------------
    report = analyze_invocation(str(exp), store=str(store_dir), catalog_dsn=catalog_dsn, write=True)
    assert report.invocation_id == result.invocation_id and not report.analysis.detail.reclassified
    assert report.analysis.detail.classifier_version == CLASSIFIER_VERSION
    (s,) = report.analysis.detail.summaries
    assert s.label == "fit"
    check_numbers(s)

    names = sorted(p.rsplit("/", 1)[1] for p in report.outputs)
    assert names == ["fingerprint_agreement.png", "pair_commit_split.png", "pairs.parquet",
                     "position_bias_by_envelope.png", "summary.json"]
    outputs = {p.rsplit("/", 1)[1]: Path(p) for p in report.outputs}
    for name, path in outputs.items():
        assert path.is_file() and path.stat().st_size > 0, name
        if name.endswith(".png"):
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    summary = json.loads(outputs["summary.json"].read_text())
    (model,) = summary["models"]
    assert model["pair_commit_unanimity"]["split"] == "3 / 1 / 5"
    assert model["pair_commit_per_envelope_majority"]["split"] == "4 / 2 / 3"
    assert [c["words"] for c in model["cycles"]] == [["gin", "rum", "sake"]]
    pairs = {r["pair_id"]: r for r in pq.read_table(outputs["pairs.parquet"]).to_pylist()}
    assert {p: (r["unanimity"], r["per_envelope_majority"]) for p, r in pairs.items()} == {
        p: (UNANIMITY[p], MAJORITY[p]) for p in CLASSES}
    assert {p: r["sharpness"] for p, r in pairs.items()} == SHARPNESS

    # ---- re-classification: the same numbers, the stored files untouched --------------------------------
    before = snapshot(store_dir)
    again = analyze_invocation(str(exp), store=str(store_dir), catalog_dsn=catalog_dsn, reannotate=True, write=False)
    assert again.analysis.detail.reclassified and again.outputs == []
    assert [x.to_dict() for x in again.analysis.detail.summaries] == [x.to_dict() for x in report.analysis.detail.summaries]
    assert snapshot(store_dir) == before


# ---- the numbers, derived by hand from CLASSES -----------------------------------------------------------

# Verdict per pair. unanimity: all four cells pick one word. per_envelope_majority: an envelope agrees when
# its AB and BA cells pick the same word; strict majority of the agreeing envelopes (of two).
UNANIMITY = {"gin_rum": "word_a", "rum_sake": "word_a", "gin_sake": "word_b", "tea_coffee": "word_a",
             "red_blue": "unclear", "cat_dog": "unclear", "sun_moon": "unclear", "up_down": "unclear",
             "salt_pepper": "unclear"}
MAJORITY = {**UNANIMITY,
            "cat_dog": "word_b",      # E1 does not agree (REF, UNCLEAR); E2 agrees on dog: 1 vs 0
            "sun_moon": "word_a"}     # E1 agrees on sun; E2 does not (sun, moon): 1 vs 0
# red_blue: neither envelope agrees (A then B in both); up_down: E1 agrees on up, E2 on down: 1 vs 1, a tie.
SHARPNESS = {"gin_rum": 1.0, "rum_sake": 1.0, "gin_sake": 1.0, "tea_coffee": 1.0,
             "red_blue": 0.5,         # 2 A, 2 B
             "cat_dog": 1.0,          # 0 A, 2 B (REF and UNCLEAR are not picks)
             "sun_moon": 0.75,        # 3 A, 1 B
             "up_down": 0.5,          # 2 A, 2 B
             "salt_pepper": None}     # no definite pick


def check_numbers(s):
    # Per-cell commit rate. A: gin_rum 4 + rum_sake 4 + tea_coffee 4 + red_blue 2 + sun_moon 3 + up_down 2 = 19;
    # B: gin_sake 4 + red_blue 2 + cat_dog 2 + sun_moon 1 + up_down 2 = 11; UNCLEAR: cat_dog 1 + salt_pepper 2;
    # REF: cat_dog 1 + salt_pepper 2. 36 answered cells, 30 with a pick.
    c = s.commit_rate
    assert (c.n_answered, c.n_a, c.n_b, c.n_unclear, c.n_ref, c.n_errors) == (36, 19, 11, 3, 3, 0)
    assert c.per_cell_commit_rate == 30 / 36

    # Pair-commit. unanimity: word_a = gin_rum, rum_sake, tea_coffee; word_b = gin_sake; the other 5 unclear.
    # per_envelope_majority adds sun_moon (word_a) and cat_dog (word_b); red_blue, up_down, salt_pepper unclear.
    u, m = s.pair_commit_unanimity, s.pair_commit_per_envelope_majority
    assert (u.rule, u.split, u.n_word_a, u.n_word_b, u.n_unclear, u.n_incomplete) == ("unanimity", "3 / 1 / 5", 3, 1, 5, 0)
    assert u.pair_commit_rate == 4 / 9
    assert (m.rule, m.split, m.n_word_a, m.n_word_b, m.n_unclear, m.n_incomplete) == (
        "per_envelope_majority", "4 / 2 / 3", 4, 2, 3, 0)
    assert m.pair_commit_rate == 6 / 9
    assert {p.pair_id: p.verdict for p in u.pairs} == UNANIMITY
    assert {p.pair_id: p.verdict for p in m.pairs} == MAJORITY
    assert {p.pair_id: p.committed_word for p in m.pairs if p.committed_word} == {
        "gin_rum": "gin", "rum_sake": "rum", "gin_sake": "sake", "tea_coffee": "tea", "cat_dog": "dog", "sun_moon": "sun"}

    # Sharpness: mean over the 8 pairs with a pick (salt_pepper has none) = (4×1.0 + 0.5 + 1.0 + 0.75 + 0.5) / 8.
    sh = s.sharpness
    assert {p.pair_id: p.sharpness for p in sh.pairs} == SHARPNESS
    assert {p.pair_id: (p.n_a, p.n_b) for p in sh.pairs if p.pair_id in ("cat_dog", "sun_moon", "salt_pepper")} == {
        "cat_dog": (0, 2), "sun_moon": (3, 1), "salt_pepper": (0, 0)}
    assert {p.pair_id: p.winner for p in sh.pairs if p.pair_id in ("red_blue", "sun_moon")} == {
        "red_blue": None, "sun_moon": "sun"}
    assert (sh.mean_sharpness, sh.n_pairs_with_picks, sh.n_pairs) == (6.75 / 8, 8, 9)

    # Position bias. AB cells classed A: E1 — gin_rum, rum_sake, tea_coffee, red_blue, sun_moon, up_down (6);
    # E2 — gin_rum, rum_sake, tea_coffee, red_blue, sun_moon (5): 11 of 18. BA cells classed A: E1 — gin_rum,
    # rum_sake, tea_coffee, sun_moon, up_down (5); E2 — gin_rum, rum_sake, tea_coffee (3): 8 of 18.
    pb = s.position_bias
    o = pb.overall
    assert (o.scope, o.n_ab, o.n_ba, o.pct_a_when_AB, o.pct_a_when_BA) == ("all", 18, 18, 11 / 18, 8 / 18)
    assert o.position_bias_pp == pytest.approx(100 * 3 / 18)   # +16.7 pp
    # First-named picks: AB→A 11 + BA→B 7 (gin_sake 2, red_blue 2, cat_dog, sun_moon, up_down) = 18;
    # second-named: AB→B 4 (gin_sake 2, cat_dog, up_down) + BA→A 8 = 12; ratio 1.5.
    assert (pb.n_first_named, pb.n_second_named, pb.position_ratio, pb.n_errors) == (18, 12, 1.5, 0)
    per_env = {e.scope: (e.n_ab, e.n_ba, e.pct_a_when_AB, e.pct_a_when_BA) for e in pb.per_envelope}
    assert per_env == {"english_strict": (9, 9, 6 / 9, 5 / 9), "json_schema": (9, 9, 5 / 9, 3 / 9)}
    per_pair = {p.scope: (p.pct_a_when_AB, p.pct_a_when_BA, p.position_bias_pp, p.symmetric_pick_rate_a)
                for p in pb.per_pair}
    assert per_pair == {
        "gin_rum": (1.0, 1.0, 0.0, 1.0), "rum_sake": (1.0, 1.0, 0.0, 1.0), "gin_sake": (0.0, 0.0, 0.0, 0.0),
        "tea_coffee": (1.0, 1.0, 0.0, 1.0),    # always word_a: no position bias
        "red_blue": (1.0, 0.0, 100.0, 0.5),     # always the first-named word: +100 pp
        "cat_dog": (0.0, 0.0, 0.0, 0.0), "sun_moon": (1.0, 0.5, 50.0, 0.75), "up_down": (0.5, 0.5, 0.0, 0.5),
        "salt_pepper": (0.0, 0.0, 0.0, 0.0)}

    # Fingerprint (unanimity) and its one 3-cycle: gin > rum (gin_rum), rum > sake (rum_sake), sake > gin (gin_sake).
    assert s.fingerprint.committed() == {"gin_rum": "gin", "rum_sake": "rum", "gin_sake": "sake", "tea_coffee": "tea"}
    assert [(c.words, c.pair_ids) for c in s.cycles] == [(("gin", "rum", "sake"), ("gin_rum", "rum_sake", "gin_sake"))]
