"""The lens config section as a user writes it: every refusal names the field and a fix (one ConfigError), the
accepted forms load (a mapped CSV scoring set), and the cells and rendered texts follow from the inputs —
one cell per (model, variant, framing × task or scoring item), the task text in the framing's slot byte for
byte, the newline convention applied, and inputs changed after freezing refused.

Every test writes its own experiment folder under tmp_path: ``LensSpec.inputs`` is cached per process by
paths and hashes, so folders are never shared between tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.instrument import ref_from_section
from mirrorscan.instruments.lens.instrument import SECTION_KEYS

LABELS = ["testing", "deployment"] * 4
"""Default scoring labels: 8 items, 4 per class."""


def write_experiment(folder: Path, evaluation=("e1", "e2"), deployment=("d1", "d2"), tasks=None, scoring=None,
                     framing_text=None) -> Path:
    """Framings ``<arm>/<id>.txt`` (text ``framing_text(arm, id)``, default one line plus the slot), tasks.jsonl
    (``tasks``: list of (id, text)) and scoring.jsonl (``scoring``: list of (id, text, label))."""
    framing_text = framing_text or (lambda arm, name: f"[{arm} {name}] Please answer:\n{{task}}\nThanks.")
    for arm, names in (("evaluation", evaluation), ("deployment", deployment)):
        (folder / "framings" / arm).mkdir(parents=True, exist_ok=True)
        for name in names:
            (folder / "framings" / arm / f"{name}.txt").write_bytes(framing_text(arm, name).encode("utf-8"))
    tasks = tasks if tasks is not None else [(f"t{i}", f"task text {i}") for i in range(3)]
    (folder / "tasks.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in tasks),
                                        encoding="utf-8")
    scoring = scoring if scoring is not None else [(f"s{i}", f"scoring item {i}", l) for i, l in enumerate(LABELS)]
    (folder / "scoring.jsonl").write_text("".join(json.dumps({"id": i, "text": t, "label": l}) + "\n"
                                                  for i, t, l in scoring), encoding="utf-8")
    return folder


def section(**overrides) -> dict:
    return {"framings": "framings", "tasks": "tasks.jsonl", "scoring_set": "scoring.jsonl", "item_samples": 2,
            **overrides}


def load(folder: Path, **overrides):
    return ref_from_section("lens", section(**overrides), str(folder))


def refused(folder: Path, **overrides) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(folder, **overrides)
    err = info.value
    assert err.problem and err.fix and err.field, err
    assert err.field in str(err) and err.fix in str(err) and "fix:" in str(err)
    return err


# --------------------------------------------------------------------------------------------------------------
# refusals

def test_an_unknown_section_key_is_refused_with_the_closest_known_key(tmp_path):
    err = refused(write_experiment(tmp_path), item_sample=2)
    assert err.field == "lens.item_sample" and err.problem == "unknown key"
    assert "did you mean item_samples?" in err.fix
    assert set(SECTION_KEYS) <= set(err.fix.replace(",", " ").replace(":", " ").split()) | {"item_samples"}


def test_a_positive_class_that_is_not_a_scoring_label_is_refused(tmp_path):
    err = refused(write_experiment(tmp_path), positive="deploy")
    assert err.field == "lens.positive" and "'deploy'" in err.problem
    assert "deployment" in err.fix and "testing" in err.fix


def test_an_unknown_pooling_is_refused(tmp_path):
    err = refused(write_experiment(tmp_path), extraction={"pooling": "max"})
    assert err.field == "lens.extraction.pooling" and "'max'" in err.problem
    assert "mean" in err.fix and "last_token" in err.fix


def test_a_variant_with_an_unknown_pooling_is_refused_under_its_own_name(tmp_path):
    err = refused(write_experiment(tmp_path), variants={"base": {}, "odd": {"pooling": "first"}})
    assert err.field == "lens.variants.odd.pooling"


def test_zero_max_input_tokens_is_refused(tmp_path):
    err = refused(write_experiment(tmp_path), extraction={"max_input_tokens": 0})
    assert err.field == "lens.extraction.max_input_tokens" and "0" in err.problem
    assert "positive" in err.fix


def test_a_variant_name_holding_the_item_key_separator_is_refused(tmp_path):
    err = refused(write_experiment(tmp_path), variants={"last/token": {"pooling": "last_token"}})
    assert err.field == "lens.variants.last/token" and "'/'" in err.problem
    assert "rename" in err.fix


def test_more_item_samples_than_items_in_the_smaller_class_are_refused(tmp_path):
    labels = ["testing"] * 5 + ["deployment"] * 3
    folder = write_experiment(tmp_path, scoring=[(f"s{i}", f"item {i}", l) for i, l in enumerate(labels)])
    assert load(folder, item_samples=3).frozen["item_samples"] == 3          # = the smaller class: accepted
    err = refused(folder, item_samples=4)
    assert err.field == "lens.item_samples" and "4" in err.problem and "3" in err.problem
    assert "fewer" in err.fix


def test_a_framing_with_two_task_slots_is_refused_naming_its_file(tmp_path):
    folder = write_experiment(tmp_path, framing_text=lambda arm, name: "{task} and again {task}" if name == "d2"
                              else f"{name}: {{task}}")
    err = refused(folder)
    assert err.file == str(folder / "framings" / "deployment" / "d2.txt")
    assert err.field == "framings" and "2 {task} slots" in err.problem and "exactly one {task}" in err.fix


def test_a_framing_without_a_task_slot_is_refused(tmp_path):
    folder = write_experiment(tmp_path, framing_text=lambda arm, name: "no slot here" if name == "e1"
                              else f"{name}: {{task}}")
    err = refused(folder)
    assert err.file.endswith("e1.txt") and "0 {task} slots" in err.problem


def test_an_arm_with_one_framing_is_refused(tmp_path):
    folder = write_experiment(tmp_path, evaluation=("e1",))
    err = refused(folder)
    assert err.file == str(folder / "framings" / "evaluation") and err.field == "framings"
    assert "1 framing file" in err.problem and "at least 2" in err.fix


def test_a_scoring_csv_with_a_byte_order_mark_is_refused(tmp_path):
    folder = write_experiment(tmp_path)
    rows = "".join(f"s{i},item {i},{l}\n" for i, l in enumerate(LABELS))
    (folder / "scoring.csv").write_bytes(b"\xef\xbb\xbf" + f"id,text,label\n{rows}".encode("utf-8"))
    err = refused(folder, scoring_set="scoring.csv")
    assert err.file == str(folder / "scoring.csv") and err.field == "scoring_set"
    assert "byte-order mark" in err.problem and "without a BOM" in err.fix
    (folder / "scoring.csv").write_bytes(f"id,text,label\n{rows}".encode("utf-8"))   # the same file without it loads
    assert load(folder, scoring_set="scoring.csv").frozen["scoring_set"]["n"] == 8


def test_duplicate_item_ids_are_refused_naming_the_item(tmp_path):
    scoring = [(f"s{i}", f"item {i}", l) for i, l in enumerate(LABELS)]
    scoring[5] = ("s2", "another text", scoring[5][2])
    err = refused(write_experiment(tmp_path, scoring=scoring))
    assert err.field == "scoring_set, item 6.id" and "'s2' appears twice" in err.problem
    assert "own id" in err.fix


@pytest.mark.parametrize("item_id, says", [("t 0", "' '"), ("t:0", "':'"), ("_empty", "starts with '_'"),
                                          ("<i>", "'<'")])
def test_an_item_id_follows_the_one_name_rule(tmp_path, item_id, says):
    """A task or scoring item's id is a name the user gives: the name rule applies, as to a pair id (``_empty``,
    the empty task lens adds itself, cannot be given)."""
    err = refused(write_experiment(tmp_path, tasks=[("t1", "a"), (item_id, "b")]))
    assert err.field == "tasks, item 2.id" and says in err.problem and "a name is 1 to 64 characters" in err.problem


def test_duplicate_task_ids_are_refused(tmp_path):
    err = refused(write_experiment(tmp_path, tasks=[("t0", "a"), ("t1", "b"), ("t0", "c")]))
    assert err.field == "tasks, item 3.id" and "'t0' appears twice" in err.problem


def test_a_scoring_set_with_three_label_values_is_refused(tmp_path):
    labels = ["testing", "deployment", "unsure"] * 3
    err = refused(write_experiment(tmp_path, scoring=[(f"s{i}", f"item {i}", l) for i, l in enumerate(labels)]))
    assert err.field == "scoring_set" and "3 label value(s)" in err.problem
    assert "exactly two classes" in err.fix


def test_a_mapped_csv_scoring_set_loads_with_its_own_column_names(tmp_path):
    folder = write_experiment(tmp_path)
    texts = ['Is this, with a comma, a test?', 'He said "hi"\nthen left', "plain deployment text", "ünïcödé ✓ item"]
    answers = ["testing", "deployment", "deployment", "testing"]
    lines = ["qid,prompt,answer,extra"] + [f'q{i},"{t.replace(chr(34), chr(34) * 2)}",{a},x'
                                            for i, (t, a) in enumerate(zip(texts, answers))]
    (folder / "s.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ref = load(folder, scoring_set={"path": "s.csv", "id": "qid", "text": "prompt", "label": "answer"},
               item_samples=2)
    frozen = ref.frozen["scoring_set"]
    assert frozen["n"] == 4 and frozen["classes"] == ["deployment", "testing"]
    assert frozen["source"] == {"path": str((folder / "s.csv").resolve()), "id": "qid", "text": "prompt",
                                "label": "answer"}
    _, _, scoring = ref.spec.inputs()
    assert [(i.id, i.text, i.label) for i in scoring.items] == [(f"q{i}", t, a)
                                                                for i, (t, a) in enumerate(zip(texts, answers))]
    cells = ref.instrument.cells(ref.spec, ["m"], 1)
    scored = [r for r in cells.to_pylist() if r["arm"] == "scoring"]
    assert [(r["item_id"], r["item_label"]) for r in scored] == [(f"q{i}", a) for i, a in enumerate(answers)]
    text = dict(zip(cells.column("item_key").to_pylist(),
                    ref.instrument.render(cells, ref.spec).column("text").to_pylist()))
    assert [text[f"base/score|q{i}"] for i in range(4)] == texts


def test_a_mapped_scoring_set_naming_a_missing_column_is_refused(tmp_path):
    folder = write_experiment(tmp_path)
    (folder / "s.csv").write_text("qid,prompt,answer\nq0,a,testing\nq1,b,deployment\n", encoding="utf-8")
    err = refused(folder, scoring_set={"path": "s.csv", "id": "qid", "text": "question", "label": "answer"},
                  item_samples=1)
    assert err.field == "scoring_set, item 1" and "question" in err.problem and "map" in err.fix


def test_a_task_named_empty_is_refused(tmp_path):
    err = refused(write_experiment(tmp_path, tasks=[("t0", "a"), ("_empty", "b")]))   # the name rule: no leading _
    assert err.field == "tasks, item 2.id" and "'_empty'" in err.problem and "rename" in err.fix


def test_a_framing_named_like_the_scoring_coordinate_is_refused(tmp_path):
    """``score`` is the framing coordinate of scoring items, as ``_empty`` is the item id of the empty task: a
    framing file of that name must be refused at load time like the reserved task id."""
    folder = write_experiment(tmp_path, evaluation=("score", "e2"))
    with pytest.raises(ConfigError) as info:
        ref = load(folder)
        ref.instrument.render(ref.instrument.cells(ref.spec, ["m"], 1), ref.spec)
    assert "score" in str(info.value)


# --------------------------------------------------------------------------------------------------------------
# cells and rendering

def cells_and_texts(ref, labels=("m1",)):
    cells = ref.instrument.cells(ref.spec, list(labels), 1)
    rendered = ref.instrument.render(cells, ref.spec)
    return cells, rendered


def test_there_is_one_cell_per_model_and_item_with_item_keys_variant_framing_item(tmp_path):
    ref = load(write_experiment(tmp_path, tasks=[(f"t{i}", f"task {i}") for i in range(3)]))
    framings, tasks, scoring = 4, 3, 8
    n_items = framings * (tasks + 1) + scoring
    assert ref.instrument.n_items(ref.spec) == n_items == 24
    cells = ref.instrument.cells(ref.spec, ["m1", "m2", "m3"], 1)
    assert cells.num_rows == 3 * n_items
    keys = cells.column("item_key").to_pylist()
    assert len(set(zip(cells.column("label").to_pylist(), keys))) == cells.num_rows
    expected = ([f"base/{f}|{t}" for f in ("e1", "e2", "d1", "d2") for t in ("t0", "t1", "t2", "_empty")]
                + [f"base/score|s{i}" for i in range(8)])
    assert sorted(set(keys)) == sorted(expected)
    assert keys[:n_items] == expected                                           # input order, per model
    rows = {r["item_key"]: r for r in cells.to_pylist() if r["label"] == "m1"}
    assert rows["base/e1|t0"]["arm"] == "evaluation" and rows["base/d2|_empty"]["arm"] == "deployment"
    assert rows["base/e1|t0"]["item_label"] is None
    assert (rows["base/score|s3"]["arm"], rows["base/score|s3"]["framing"], rows["base/score|s3"]["item_id"],
            rows["base/score|s3"]["item_label"]) == ("scoring", "score", "s3", LABELS[3])
    assert cells.num_rows == ref.instrument.cells(ref.spec, ["m1", "m2", "m3"], 2).num_rows / 2


def test_two_variants_double_the_cells_and_carry_their_options(tmp_path):
    folder = write_experiment(tmp_path)
    one = load(folder)
    two = load(folder, variants={"base": {}, "last": {"pooling": "last_token", "drop_bos": True}})
    n = one.instrument.n_items(one.spec)
    assert two.instrument.n_items(two.spec) == 2 * n
    cells = two.instrument.cells(two.spec, ["m1", "m2"], 1).to_pylist()
    assert len(cells) == 2 * 2 * n
    by_variant = {v: [r for r in cells if r["variant"] == v] for v in ("base", "last")}
    assert len(by_variant["base"]) == len(by_variant["last"]) == 2 * n
    assert {(r["pooling"], r["drop_bos"]) for r in by_variant["base"]} == {("mean", False)}
    assert {(r["pooling"], r["drop_bos"]) for r in by_variant["last"]} == {("last_token", True)}
    assert all(r["item_key"].startswith(r["variant"] + "/") for r in cells)
    assert {r["item_key"].split("/", 1)[1] for r in by_variant["base"]} == \
        {r["item_key"].split("/", 1)[1] for r in by_variant["last"]}
    assert two.frozen["variants"]["last"]["pooling"] == "last_token"
    assert two.frozen["variants"]["last"]["rendering"] == "chat_user"            # the rest from the extraction


def test_the_typed_settings_hold_what_the_frozen_section_holds_and_cannot_be_changed(tmp_path):
    import dataclasses

    from mirrorscan.instruments.lens.instrument import from_frozen

    folder = write_experiment(tmp_path)
    ref = load(folder, variants={"base": {}, "last": {"pooling": "last_token", "layers": "all"}}, seed=5,
               object_variance=[0.6, 0.7, 0.65], wrapper_facets="crossed")
    s, frozen = ref.spec.config, ref.frozen
    assert (s.positive, s.seed, s.item_samples, s.wrapper_facets) == ("deployment", 5, 2, "crossed")
    assert s.object_variance == (0.6, 0.7, 0.65) and s.null_permutations == frozen["null_permutations"]
    assert s.framings.evaluation == ("e1", "e2") and s.framings.wrappers()[1] == ("e1", "d2")
    assert s.scoring_set.classes == tuple(frozen["scoring_set"]["classes"]) and s.tasks.n == 3
    assert list(s.variants) == ["base", "last"] and s.variants["last"].layers == "all"
    assert s.variants["last"].pooling == "last_token" and s.variants["base"].pooling == "mean"
    assert s.variants["last"].as_dict() == frozen["variants"]["last"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.seed = 6
    with pytest.raises(TypeError):
        s.variants["other"] = s.variants["base"]
    again = from_frozen(frozen)                       # read back: same JSON, same record
    assert again == ref.spec and again.frozen_json == ref.spec.frozen_json and again.config == s


def test_render_puts_the_task_text_into_the_slot_byte_for_byte(tmp_path):
    task = "  Tabs\tand \"quotes\", back\\slashes, $1 \\1 {not a slot}, ünïcödé ✓ 日本語 🙂, trailing  "
    framing = {("evaluation", "e1"): "EVAL ONE «{task}» end", ("evaluation", "e2"): "{task}",
               ("deployment", "d1"): "hey — {task}", ("deployment", "d2"): "prefix\n\n{task}\n\nsuffix"}
    folder = write_experiment(tmp_path, tasks=[("t0", task), ("t1", "second")],
                              framing_text=lambda arm, name: framing[(arm, name)],
                              scoring=[(f"s{i}", f"scoring «{i}» text", l) for i, l in enumerate(LABELS)])
    cells, rendered = cells_and_texts(load(folder))
    text = dict(zip(rendered.column("item_key").to_pylist(), rendered.column("text").to_pylist()))
    for (arm, name), f in framing.items():
        before, after = f.split("{task}")
        assert text[f"base/{name}|t0"].encode("utf-8") == (before + task + after).encode("utf-8")
        assert text[f"base/{name}|_empty"] == before + after              # the framing with an empty slot
    assert text["base/e2|t0"] == task
    assert text["base/score|s3"] == "scoring «3» text"                    # the scoring item alone
    assert rendered.column_names == cells.column_names + ["text"]


def test_crlf_turns_every_newline_into_crlf_and_lf_turns_crlf_framing_files_into_lf(tmp_path):
    framing = lambda arm, name: f"{name} line one\r\nline two\r\n{{task}}\r\nend"   # noqa: E731 — CRLF files
    folder = write_experiment(tmp_path, tasks=[("t0", "task\nwith two lines")], framing_text=framing,
                              scoring=[(f"s{i}", f"item {i}\nsecond line", l) for i, l in enumerate(LABELS)])
    assert (folder / "framings" / "evaluation" / "e1.txt").read_bytes().count(b"\r\n") == 3

    def texts(**overrides):
        _, rendered = cells_and_texts(load(folder, **overrides))
        assert set(rendered.column("newline").to_pylist()) == {overrides.get("extraction", {}).get("newline", "lf")}
        return dict(zip(rendered.column("item_key").to_pylist(), rendered.column("text").to_pylist()))

    lf, crlf, keep = texts(), texts(extraction={"newline": "crlf"}), texts(extraction={"newline": "keep"})
    assert lf["base/e1|t0"] == "e1 line one\nline two\ntask\nwith two lines\nend"
    assert crlf["base/e1|t0"] == "e1 line one\r\nline two\r\ntask\r\nwith two lines\r\nend"
    assert keep["base/e1|t0"] == "e1 line one\r\nline two\r\ntask\nwith two lines\r\nend"
    assert lf["base/score|s1"] == "item 1\nsecond line" and crlf["base/score|s1"] == "item 1\r\nsecond line"
    assert crlf["base/d1|_empty"] == "d1 line one\r\nline two\r\n\r\nend"
    for t in lf.values():
        assert "\r" not in t
    for t in crlf.values():
        assert "\n" not in t.replace("\r\n", "") and "\r" not in t.replace("\r\n", "")


def test_a_jsonl_task_text_holding_unicode_line_separators_loads_byte_for_byte(tmp_path):
    task = "first\u2028second\u0085third\x0cfourth"
    folder = write_experiment(tmp_path, framing_text=lambda arm, name: f"{name}: {{task}}")
    (folder / "tasks.jsonl").write_text(json.dumps({"id": "t0", "text": task}, ensure_ascii=False) + "\n"
                                        + json.dumps({"id": "t1", "text": "plain"}) + "\n", encoding="utf-8")
    _, rendered = cells_and_texts(load(folder, extraction={"newline": "keep"}))
    text = dict(zip(rendered.column("item_key").to_pylist(), rendered.column("text").to_pylist()))
    assert text["base/e1|t0"] == "e1: " + task


def test_a_framing_file_changed_after_freezing_is_refused(tmp_path):
    folder = write_experiment(tmp_path)
    ref = load(folder)
    (folder / "framings" / "deployment" / "d1.txt").write_text("edited: {task}", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        ref.spec.inputs()
    err = info.value
    assert "changed" in err.problem and err.field == "framings"
    assert err.file == str((folder / "framings").resolve()) and "new invocation" in err.fix
    with pytest.raises(ConfigError, match="changed"):
        ref.instrument.cells(ref.spec, ["m1"], 1)


def test_a_scoring_file_changed_after_freezing_is_refused_and_an_unchanged_one_is_not(tmp_path):
    folder = write_experiment(tmp_path)
    ref = load(folder)
    assert len(ref.spec.inputs()[2].items) == 8                                  # unchanged: loads
    other = write_experiment(tmp_path / "again")
    ref2 = load(other)
    with open(other / "scoring.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "s99", "text": "late addition", "label": "testing"}) + "\n")
    with pytest.raises(ConfigError) as info:
        ref2.spec.inputs()
    assert info.value.field == "scoring_set" and "changed" in info.value.problem


# --------------------------------------------------------------------------------------------------------------
# the rendering: explicit, frozen, on every cell

def test_the_rendering_is_frozen_with_no_system_block_and_a_fixed_date_by_default(tmp_path):
    ref = load(write_experiment(tmp_path))
    base = ref.frozen["variants"]["base"]
    assert (base["system"], base["system_prompt"], base["user_suffix"], base["assistant_prefix"],
            base["date_string"]) == ("none", None, "", "", "26 Jul 2024")
    cell = ref.instrument.cells(ref.spec, ["m"], 1).to_pylist()[0]
    assert (cell["system"], cell["date_string"], cell["user_suffix"]) == ("none", "26 Jul 2024", "")


def test_the_two_manek_presets_send_what_the_docs_say_and_other_keys_override_them(tmp_path):
    from mirrorscan.instruments.lens.extraction import MANEK_SYSTEM

    ref = load(write_experiment(tmp_path), variants={
        "reference": {"preset": "manek-reference"}, "plain": {"preset": "manek-plain"},
        "dated": {"preset": "manek-reference", "date_string": "01 Jan 2025", "system": "default"}})
    v = ref.frozen["variants"]
    assert (v["reference"]["system"], v["reference"]["system_prompt"], v["reference"]["user_suffix"],
            v["reference"]["layers"], v["reference"]["preset"]) == ("text", MANEK_SYSTEM, "\n\nAnswer:", "manek",
                                                                    "manek-reference")
    assert MANEK_SYSTEM.startswith("You must guess whether the following text comes from the testing or deployment")
    assert (v["plain"]["system"], v["plain"]["user_suffix"], v["plain"]["layers"]) == ("none", "", "manek")
    assert (v["dated"]["system"], v["dated"]["system_prompt"], v["dated"]["date_string"],
            v["dated"]["user_suffix"]) == ("default", None, "01 Jan 2025", "\n\nAnswer:")
    cells = {r["variant"]: r for r in ref.instrument.cells(ref.spec, ["m"], 1).to_pylist()}
    assert cells["reference"]["system_prompt"] == MANEK_SYSTEM and cells["plain"]["system"] == "none"


@pytest.mark.parametrize("extraction, field", [
    ({"system": "you are nice"}, "extraction.system"),
    ({"system": {"text": ""}}, "extraction.system"),
    ({"system_prompt": "x"}, "extraction.system_prompt"),
    ({"date_string": "2024-07-26"}, "extraction.date_string"),
    ({"preset": "manek"}, "extraction.preset"),
    ({"user_suffix": 3}, "extraction.user_suffix"),
    ({"rendering": "raw", "system": {"text": "Be brief."}}, "extraction"),
])
def test_a_rendering_that_cannot_be_sent_is_refused(tmp_path, extraction, field):
    err = refused(write_experiment(tmp_path), extraction=extraction)
    assert err.field.endswith(field)


# --------------------------------------------------------------------------------------------------------------
# a scoring set that may not be redistributed

def test_a_scoring_set_that_may_not_be_redistributed_leaves_its_texts_out_of_every_cell(tmp_path):
    folder = write_experiment(tmp_path)
    ref = load(folder, scoring_set={"path": "scoring.jsonl", "redistribute": False})
    assert ref.frozen["scoring_set"]["redistribute"] is False
    cells = ref.instrument.cells(ref.spec, ["m"], 1).to_pylist()
    scoring = [c for c in cells if c["arm"] == "scoring"]
    framed = [c for c in cells if c["arm"] != "scoring"]
    assert len(scoring) == 8 and all(c["framed_text"] is None and c["text_withheld"] is True for c in scoring)
    assert all(c["framed_text"] and c["text_withheld"] is False for c in framed)     # the task texts are ours
    stored = "\n".join(str(v) for c in cells for v in c.values())
    assert "scoring item 3" not in stored
    # the engine still reads the text: rendered from the set's own file at extraction time
    import pyarrow as pa

    rendered = ref.instrument.render(pa.Table.from_pylist(scoring), ref.spec)
    assert rendered.column("text").to_pylist()[3] == "scoring item 3"
    with pytest.raises(ConfigError, match="redistribute"):
        load(folder, scoring_set={"path": "scoring.jsonl", "redistribute": "no"})


def test_a_withheld_set_is_scored_by_the_surface_baseline_from_its_own_file_and_grouped(tmp_path):
    import pyarrow as pa

    from mirrorscan.instruments.lens.baseline import surface_numbers

    items = [(f"s{i}", f"zq{i // 2}x", label) for i, label in enumerate(["testing", "testing", "deployment",
                                                                         "deployment"] * 5)]
    folder = write_experiment(tmp_path, scoring=items)
    with open(folder / "scoring.jsonl", "w", encoding="utf-8") as out:      # each pair of identical texts a group
        for i, text, label in items:
            out.write(json.dumps({"id": i, "text": text, "label": label, "group": f"g{int(i[1:]) // 2}"}) + "\n")
    ref = load(folder, scoring_set={"path": "scoring.jsonl", "redistribute": False})
    rows = [{"label": "m", "variant": "base", "arm": "scoring", "error": None, "item_id": i, "item_label": label,
             "subset": None, "item_group": f"g{int(i[1:]) // 2}", "user_text": None} for i, _, label in items]
    surface = surface_numbers(pa.Table.from_pylist(rows), ref.spec)
    # twins kept in one fold (5 folds, each one pair of each class): a held-out word was never seen in training,
    # so every fold's items tie, and pairs across two balanced folds split evenly both ways: exactly 1/2
    assert surface["all"]["grouped"] and surface["all"]["n_groups"] == 10 and surface["all"]["n_features"] == 10
    assert surface["all"]["bag_of_words_auroc"] == 0.5
    (folder / "scoring.jsonl").unlink()
    missing = surface_numbers(pa.Table.from_pylist(rows), ref.spec)
    assert set(missing) == {"missing"} and "not redistributable" in missing["missing"]
