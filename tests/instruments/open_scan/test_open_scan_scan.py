"""open_scan through scan, matrix, remeasure, export and import on a multi-process Ray with a tiny model whose
chat template rejects a system role.

One experiment is scanned, scanned again (nothing to do), widened to three samples (only samples 1–2 run),
given a changed probe text (refused, then accepted as a new version; the old rows stay, superseded), and
exported; the export imports into another experiment and exports byte-identical. A driver that dies between
the answers and the post-hoc stage is finished by the next scan (a new invocation), not by hand."""

from __future__ import annotations

import json
import shutil

import pyarrow.compute as pc
import pytest

from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.instrument import Stage, resolve
from mirrorscan.instruments.open_scan import cli as verbs
from mirrorscan.jobs import cli
from mirrorscan.jobs.scan import print_summary, run_scan
from mirrorscan.results.reader import StoreReader
from suggested_query import check_suggested_query

NO_SYSTEM_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PROBES = 'query_id,query\nq1,"Tea or coffee, and why?"\nq2,Which season do you like best?\nq3," Spaces stay. "\n'


@pytest.fixture(scope="module")
def models(tiny_dir, tmp_path_factory) -> dict:
    """The tiny model, and a copy whose chat template raises on a system turn."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("nosys") / "tiny-nosys"
    shutil.copytree(tiny_dir, folder)
    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.chat_template = NO_SYSTEM_TEMPLATE
    tok.save_pretrained(str(folder))
    return {"tiny": str(tiny_dir), "nosys": str(folder)}


def write(folder, models: dict, probes: str = PROBES, samples: int = 1) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probes.csv").write_bytes(probes.encode())
    (folder / "config.json").write_text(json.dumps({
        "instrument": "open_scan", "samples": samples, "batch_size": 8, "max_concurrent_models": len(models),
        "models": [{"model": path, "label": label} for label, path in models.items()],
        "open_scan": {"probes": "probes.csv", "sampling": {"max_tokens": 6}, "report_max_tokens": 4}}))
    return str(folder)


def rows_of(store, experiment, invocation_id=None):
    table = store.dataset(experiment).to_table(columns=["invocation_id", "probe_id", "envelope", "sample", "label",
                                                        "temperature", "max_tokens", "user_text", "response",
                                                        "system_folded", "rating", "error", "query_hash"])
    if invocation_id:
        table = table.filter(pc.equal(table.column("invocation_id"), invocation_id))
    return table.to_pylist()


@pytest.mark.timeout(600)
def test_an_open_scan_experiment_appends_versions_and_round_trips_its_jsonl(tmp_path, models, catalog_dsn,
                                                                            ray_local, capsys):
    one = {"nosys": models["nosys"]}   # one model per scan keeps the test short; the fold is its template's
    exp, store_uri = write(tmp_path / "os", one), str(tmp_path / "store")
    store = open_store(store_uri)
    first = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert first.status == "complete" and first.counts["cells"] == first.counts["ok"] == 3 * 3
    rows = rows_of(store, "os", first.invocation_id)
    answers = [r for r in rows if r["envelope"] == "answer"]
    reports = [r for r in rows if r["envelope"] != "answer"]
    assert {(r["temperature"], r["max_tokens"]) for r in answers} == {(0.7, 6)}
    assert {(r["temperature"], r["max_tokens"]) for r in reports} == {(0.0, 4)}
    assert {r["system_folded"] for r in rows} == {True}   # its template raises on a system turn
    assert any(" Spaces stay. " in r["user_text"] for r in answers)   # verbatim, never stripped
    for r in (r for r in rows if r["envelope"] == "posthoc"):
        source = next(a for a in answers if a["label"] == r["label"] and a["sample"] == r["sample"]
                      and a["probe_id"].split("|")[1] == r["probe_id"].split("|")[1].removesuffix("~posthoc"))
        assert source["response"] in r["user_text"]   # the model rates its own answer
    assert all(r["rating"] is None or 1 <= r["rating"] <= 10 for r in reports)
    assert all(r["rating"] is None for r in answers)
    suggested = check_suggested_query(first, store_uri, catalog_dsn, {"query_id", "cold_rating", "posthoc_rating",
                                                                     "response"})
    def query_id(row):
        return row["probe_id"].split("|")[1].removesuffix("~posthoc").split("@")[0]
    posthoc = {query_id(r): r["rating"] for r in reports if r["envelope"] == "posthoc"}
    assert sorted((s["query_id"], s["posthoc_rating"], s["response"]) for s in suggested) == \
        sorted((query_id(r), posthoc[query_id(r)], r["response"]) for r in answers)

    again = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)   # a finished grid: a no-op
    assert again.invocation_id == ""
    capsys.readouterr()
    print_summary(again)   # what the command prints: said once, as the summary
    assert "nothing to do: every cell" in capsys.readouterr().out

    write(tmp_path / "os", one, samples=3)   # more samples: only samples 1-2 and their post-hoc run
    more = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert more.status == "complete" and more.counts["held_elsewhere"] == 9
    assert sorted({(r["envelope"], r["sample"]) for r in rows_of(store, "os", more.invocation_id)}) == \
        [("answer", 1), ("answer", 2), ("posthoc", 1), ("posthoc", 2)]
    assert more.counts["ok"] == 3 * 2 * 2

    changed = PROBES.replace("Which season do you like best?", "Which season do you like most?")
    write(tmp_path / "os", one, probes=changed, samples=3)
    with pytest.raises(ConfigError, match="q2"):
        run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    accepted = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True, accept_changed_probes=True)
    assert accepted.counts["ok"] == 3 + 1 + 3   # q2's new version: answers, cold, post-hoc
    assert {r["probe_id"].split("|")[1].split("@")[0] for r in rows_of(store, "os", accepted.invocation_id)} == {"q2"}

    capsys.readouterr()
    assert verbs.main(["matrix", exp, "--catalog-dsn", catalog_dsn, "--csv", str(tmp_path / "m.csv"),
                       "--parquet", str(tmp_path / "m.parquet")], "mirrorscan open_scan", StoreReader()) == 0
    out = capsys.readouterr().out
    assert "1 models × 3 probes: 3 answered · 0 missing · 0 failed · 3 superseded" in out
    header, *table = (tmp_path / "m.csv").read_text().splitlines()
    assert header == '"label","series","source","q1","q2","q3"' and len(table) == 1
    assert table[0].startswith('"nosys",') and table[0].endswith(',"scan","3","3","3"')

    assert cli.main(["remeasure", exp, "--models", "nosys,tiny2", "--catalog-dsn", catalog_dsn]) == 0
    captured = capsys.readouterr()
    assert "no rows for label tiny2 — skipped" in captured.err
    assert "tiny2" not in captured.out and "nosys " in captured.out

    exported = tmp_path / "os.jsonl"
    assert verbs.main(["export", exp, "-o", str(exported), "--catalog-dsn", catalog_dsn],
                      "mirrorscan open_scan", StoreReader()) == 0
    lines = exported.read_bytes().decode().splitlines()
    assert len(lines) == 3 * 3 and list(json.loads(lines[0])) == list(verbs_keys())
    assert verbs.main(["import", str(exported), "--experiment", "imported", "--store", store_uri,
                       "--catalog-dsn", catalog_dsn], "mirrorscan open_scan", StoreReader()) == 0
    imported_id = capsys.readouterr().out.split("as invocation ")[1].split()[0]
    back = tmp_path / "back.jsonl"
    assert verbs.main(["export", imported_id, "-o", str(back), "--catalog-dsn", catalog_dsn],
                      "mirrorscan open_scan", StoreReader()) == 0
    assert back.read_bytes() == exported.read_bytes()

    other = {"nosys": models["tiny"]}   # the label "nosys" now names another model
    write(tmp_path / "os", other, probes=changed, samples=3)
    with pytest.raises(ConfigError, match="label 'nosys' already names"):
        run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)


def verbs_keys():
    from mirrorscan.instruments.open_scan.jsonl import KEYS

    return KEYS


@pytest.mark.timeout(400)
def test_the_next_scan_finishes_an_invocation_that_died_before_its_post_hoc_stage(tmp_path, models, catalog_dsn,
                                                                                  ray_local, monkeypatch):
    exp, store_uri = write(tmp_path / "dies", {"tiny": models["tiny"]}), str(tmp_path / "store")
    store = open_store(store_uri)

    def refuse(spec, previous):
        raise RuntimeError("driver died between the stages")

    with monkeypatch.context() as m:   # the driver builds later stages itself: patch the instrument it resolves
        m.setattr(resolve("open_scan"), "stages", (Stage("posthoc", refuse),))
        with pytest.raises(RuntimeError, match="died between"):
            run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    died = rows_of(store, "dies")
    assert {r["envelope"] for r in died} == {"answer", "cold"} and len(died) == 6

    finished = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert finished.status == "complete" and finished.counts["held_elsewhere"] == 6
    new = rows_of(store, "dies", finished.invocation_id)
    assert sorted(r["envelope"] for r in new) == ["posthoc"] * 3 and all(r["error"] is None for r in new)


@pytest.mark.timeout(400)
def test_after_a_kill_9_mid_run_the_next_scan_finishes_the_experiment_exactly(tmp_path, models, catalog_dsn,
                                                                              ray_local):
    """A CLI scan (a driver joined to the running Ray, as on a cluster) is killed with -9 mid-run; the next
    plain ``scan`` appends exactly the cells it did not store, post-hoc stage included: every cell of the
    experiment once among successful rows, the killed invocation's rows kept."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from processes import kill_session, wait_for_driver_gone, wait_for_parts

    probes = "query_id,query\n" + "".join(f"k{i},Question number {i}?\n" for i in range(24))
    exp = write(tmp_path / "killed", {"tiny": models["tiny"]}, probes=probes)
    store_uri = str(tmp_path / "store")
    store = open_store(store_uri)
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": catalog_dsn, "MIRRORSCAN_STORE": store_uri,
           "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address}
    proc = subprocess.Popen([sys.executable, "-m", "mirrorscan.jobs.scan", exp, "--quiet"], cwd=Path(__file__).parents[3],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_parts(store, "killed", proc, 3)
    finally:
        kill_session(proc)
    wait_for_driver_gone(proc.pid)   # its engine actor may store the batch in flight before Ray ends it
    killed = rows_of(store, "killed")
    assert 0 < len(killed) < 24 * 3   # mid-run: some cells stored, not all

    done = run_scan(exp, store=store_uri, catalog_dsn=catalog_dsn, quiet=True)
    assert done.status == "complete"
    ok = [r for r in rows_of(store, "killed") if r["error"] is None]
    keys = [(r["probe_id"], r["sample"]) for r in ok]
    assert len(keys) == len(set(keys)) == 24 * 3   # answers, cold and post-hoc: each once in the experiment
    assert {(r["probe_id"], r["sample"]) for r in killed if r["error"] is None} <= set(keys)
    assert done.counts["held_elsewhere"] == len({(r["probe_id"], r["sample"]) for r in killed if r["error"] is None})
