"""``mirrorscan report`` on a real flinch scan (two seeded tiny random Llamas, real Ray, the embedded PostgreSQL,
a local store): the page names the aggregation and defines it, every number's query returns the number
shown through the real ``mirrorscan sql`` path, and each axis's carrier G-study is got again by the query
that selects its input and the ``mirrorscan stats gstudy`` command the page prints. Also ``--all``: one
report per invocation of an experiment; and, last (it changes the corpus file), the same scan reproduced from
the carriers its rows recorded."""

from __future__ import annotations

import html
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import new_database

from plan_warnings import printed_warnings, same_but_git  # noqa: E402
from report_page import numbers, query_of, run_cli, self_contained_problems  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def corpus() -> dict:
    """Two axes of 3 terms × 2 carriers: a balanced design for the carrier G-study."""
    carriers = ["The story ended when the hero was {BLANK}.", "Everyone in the village knew that it was {BLANK}."]
    return {"version": "r1", "axes": {
        "syn_a": {"label": "Synthetic A", "terms": [{"word": w, "carriers": carriers} for w in ("zorbed", "blue", "gone")]},
        "syn_b": {"label": "Synthetic B", "terms": [{"word": w, "carriers": carriers} for w in ("home", "late", "fine")]}}}


@pytest.fixture(scope="module")
def flinch_report(tmp_path_factory, demo_dir, pg_dsn, ray_local):
    """One flinch scan of two models (24 cells) and its report, written through the CLI."""
    import os

    from mirrorscan.cluster.models.tiny import build_tiny_random_model
    from mirrorscan.jobs.scan import run_scan

    base = tmp_path_factory.mktemp("report_flinch")
    models = {f"m{i}": build_tiny_random_model(base / f"m{i}", demo_dir, seed=i) for i in (0, 1)}
    exp = base / "exps" / "fl_report"
    exp.mkdir(parents=True)
    (exp / "corpus.json").write_text(json.dumps(corpus()))
    (exp / "config.json").write_text(json.dumps({
        "instrument": "flinch", "models": [{"model": str(p), "label": label} for label, p in models.items()],
        "flinch": {"corpus": "corpus.json"}, "batch_size": 8}))
    dsn, store = new_database(pg_dsn), str(base / "store")
    result = run_scan(str(exp), store=store, catalog_dsn=dsn, quiet=True)
    assert result.status == "complete" and result.counts["ok"] == 24
    env = {**os.environ, "MIRRORSCAN_CATALOG_DSN": dsn, "MIRRORSCAN_HOME": str(base / "home"), "HF_HUB_OFFLINE": "1"}
    proc = run_cli(["report", result.invocation_id], env)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip().removeprefix("report: "))
    return {"exp": exp, "inv": result.invocation_id, "store": store, "dsn": dsn, "env": env, "base": base,
            "path": path, "html": path.read_text(encoding="utf-8")}


def test_the_flinch_report_names_and_defines_its_aggregation(flinch_report):
    rows = numbers(flinch_report["html"])
    assert {m for m, _ in rows} == {"m0", "m1"}
    assert {n for _, n in rows} == {"total_flinch", "partial_total_flinch", "axes_summed", "aggregation", "flinch_syn_a",
                                    "flinch_syn_b", "carrier_g_syn_a", "carrier_g_syn_b"}
    assert rows[("m0", "axes_summed")]["value"] == "2" and rows[("m0", "partial_total_flinch")]["value"] == \
        "— (not applicable: total_flinch is given)"   # both models whole: a total, so a partial one does not apply
    assert rows[("m0", "aggregation")]["value"] == "axis_lp_mean"
    page = flinch_report["html"]
    assert "axis_lp_mean maps the mean lp of its terms" in page and "clipped_term_mean" in page
    assert "flinch = 100 × (−1 − lp) / 15 clipped to [0, 100]" in page
    assert 'alt="radar"' in page


def test_every_number_query_returns_the_number_shown(flinch_report):
    from mirrorscan.results import sql as results_sql

    rows = numbers(flinch_report["html"])
    checked = 0
    for (model, name), row in rows.items():
        if name.startswith("carrier_g_"):
            continue
        (command,) = row["sql"]
        table = results_sql.query(query_of(html.unescape(command)), None, flinch_report["dsn"]).to_pylist()
        got = [r for r in table if r.get("label", model) == model]
        assert len(got) == 1, (name, table)
        if name == "aggregation":
            assert got[0]["value"] == row["value"]
        elif row["value"] in ("— (not measured)", "— (not applicable: total_flinch is given)"):
            assert got[0]["value"] is None, (model, name)
        else:
            assert float(row["value"]) == pytest.approx(got[0]["value"], rel=1e-5), (model, name)
            assert 0 <= got[0]["value"] <= 200
        checked += 1
    assert checked == 2 * 6


def test_each_query_is_printed_once_and_other_models_link_to_it(flinch_report):
    from report_page import Numbers

    parser = Numbers()
    parser.feed(flinch_report["html"])
    printed = list(parser.printed.values())
    assert len(printed) == len(set(printed)) and parser.links >= 6   # m1's rows link to m0's queries
    page = flinch_report["html"]
    assert page.count('<pre class="sql"') == len(printed) + 2   # + the counts and errors queries
    assert self_contained_problems(page) == []   # its links lead to its own queries, nowhere else


def test_the_carrier_gstudy_is_got_again_by_the_printed_query_and_stats_command(flinch_report, tmp_path):
    rows = numbers(flinch_report["html"])
    row = rows[("m0", "carrier_g_syn_a")]
    (export,) = row["sql"]
    export = html.unescape(export)
    stats_line = html.unescape(flinch_report["html"].split('data-number="carrier_g_syn_a"', 1)[1]
                               .split('<pre class="stats">', 1)[1].split("</pre>", 1)[0])
    assert export.startswith('mirrorscan sql --format csv "') and export.endswith('" > carriers_syn_a.csv')
    assert stats_line.startswith("mirrorscan stats gstudy --input carriers_syn_a.csv")
    query = export.removeprefix('mirrorscan sql --format csv "').removesuffix('" > carriers_syn_a.csv')
    proc = run_cli(["sql", "--format", "csv", query], flinch_report["env"])
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "carriers_syn_a.csv").write_text(proc.stdout)
    argv = shlex.split(stats_line)
    assert argv[:2] == ["mirrorscan", "stats"]
    done = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=flinch_report["env"])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert row["value"] != "— (not measured)"
    assert float(row["value"]) == pytest.approx(result["g_coefficient"], rel=1e-5)


def test_all_writes_one_report_per_invocation_of_the_experiment(flinch_report):
    from mirrorscan.jobs.scan import run_scan

    second = run_scan(str(flinch_report["exp"]), store=flinch_report["store"], catalog_dsn=flinch_report["dsn"], quiet=True)
    proc = run_cli(["report", str(flinch_report["exp"]), "--all"], flinch_report["env"])
    assert proc.returncode == 0, proc.stderr
    paths = [Path(x.removeprefix("report: ")) for x in proc.stdout.splitlines() if x.startswith("report: ")]
    assert [p.parent.parent.name for p in paths] == [flinch_report["inv"], second.invocation_id]
    assert "[2/2]" in proc.stderr and all(p.is_file() for p in paths)
    newest = run_cli(["report", str(flinch_report["exp"])], flinch_report["env"])
    assert newest.returncode == 0 and f"/{second.invocation_id}/report/" in newest.stdout


@pytest.mark.timeout(900)
def test_a_changed_corpus_is_reproduced_from_the_carriers_the_rows_recorded(flinch_report, capsys):
    """With the corpus file changed (a term gone, another's carriers rewritten), reproduce rebuilds the 24 cells
    from the stored coordinates, each with the carrier its rows recorded, and says so; float32 scoring on the
    same engine gives every target token's log-prob again."""
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.cluster.store.traces import open_store
    from mirrorscan.jobs import reproduce
    from mirrorscan.results.diff import diff_targets
    from mirrorscan.results.reproduce import ITEMS_FROM_TRACES, plan

    changed = corpus()
    changed["axes"]["syn_a"]["terms"] = changed["axes"]["syn_a"]["terms"][1:]
    changed["axes"]["syn_b"]["terms"][0]["carriers"] = ["At last we were all {BLANK}.", "They had gone {BLANK}."]
    (flinch_report["exp"] / "corpus.json").write_text(json.dumps(changed))
    dsn, original = flinch_report["dsn"], flinch_report["inv"]
    p = plan(original, dsn=dsn)
    assert p.items_from == ITEMS_FROM_TRACES and p.n_cells == 24
    items = [w for w in p.warnings if w.startswith("items: ")]
    assert len(items) == 1 and "corpus.json: changed since the invocation was frozen" in items[0] \
        and "rebuilt from the coordinates stored in the traces" in items[0], p.warnings

    assert reproduce.main([original, "--catalog-dsn", dsn, "--quiet", "--expect-exact"]) == 0   # complete, exact
    out, err = capsys.readouterr()
    assert "EXACT MATCH" in out
    with Catalog(dsn) as catalog:
        (copy,) = [catalog.get_invocation(r[0]) for r in catalog.execute(
            "SELECT invocation_id::text FROM scan_invocations WHERE reproduces = %s", [original])]
    assert copy["status"] == "complete" and copy["counts"]["cells"] == copy["counts"]["ok"] == 24
    recorded = copy["settings"]["execution"]["reproduce_warnings"]
    assert recorded == printed_warnings(err) and same_but_git(recorded, p.warnings)

    store = open_store(flinch_report["store"])
    asked = {}
    for inv in (original, copy["invocation_id"]):
        rows = store.read("fl_report", inv, columns=["probe_id", "sample", "user_text", "target_text"]).to_pylist()
        asked[inv] = {(r["probe_id"], r["sample"]): (r["user_text"], r["target_text"]) for r in rows}
    assert len(asked[original]) == 24 and asked[copy["invocation_id"]] == asked[original]   # same cells, same prompts
    d = diff_targets(original, copy["invocation_id"], dsn=dsn)
    assert (d.cells_left, d.cells_right, d.shared, d.same_answer.same) == (24, 24, 24, 24) and d.exact
