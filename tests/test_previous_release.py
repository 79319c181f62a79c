"""A store and catalog written by the previous release are read by this code, through the command line a user
types: each instrument's invocation analyzes to the numbers and text the previous release printed, reports to a
page, rebuilds for ``reproduce --dry-run`` as it did then, answers the same ``sql`` rows, and a ``scan
--resume`` of it finds nothing unfinished. The catalog is the old release's own dump (its migrations); this
code's migrations run over it on first connection.

The fixture (``tests/fixtures/previous_release``, made by its ``generate.py`` with the previous release's code)
holds the experiments, the store's Parquet parts and manifests, the catalog dump and what the old code printed;
``@ROOT@`` stands for the folder holding ``experiments/`` and ``store/``, ``@HOME@`` for its ``MIRRORSCAN_HOME``
(here the tests' home, where the packaged tiny models are prepared). No verb here starts Ray."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from conftest import new_database

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "previous_release"
FACTS = json.loads((FIXTURE / "facts.json").read_text())
INSTRUMENTS = sorted(FACTS["invocations"])
MODELS = ("packaged:tiny-random-llama", "packaged:tiny-random-llama-2x64-s1")
"""The packaged models the fixture's experiments name (resolved under ``@HOME@/models``)."""


def test_the_fixture_holds_one_invocation_of_each_instrument():
    assert INSTRUMENTS == ["flinch", "forced_choice", "lens", "open_scan"]
    for fact in FACTS["invocations"].values():
        assert list((FIXTURE / "store" / fact["experiment"] / fact["invocation_id"] / "traces").glob("*.parquet"))


@pytest.fixture(scope="module")
def previous(tmp_path_factory, pg_dsn, demo_dir):
    """(root, home, catalog DSN): the fixture's experiments and store copied under ``root``, its catalog dump
    loaded into a new database, ``@ROOT@`` and ``@HOME@`` replaced by this run's folders. ``MIRRORSCAN_HOME``
    is the scans' own home path (``FACTS["home"]``: the trace rows name their models' folders under it), set up
    again with links to the models prepared in the tests' home, for the module's duration."""
    home = with_models(Path(FACTS["home"]))
    root = tmp_path_factory.mktemp("previous") / "root"
    shutil.copytree(FIXTURE / "experiments", root / "experiments")
    shutil.copytree(FIXTURE / "store", root / "store")
    for manifest in (root / "store").rglob("invocation.json"):
        manifest.write_text(placed(manifest.read_text(), root, home))
    dsn = new_database(pg_dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(placed((FIXTURE / "catalog.sql").read_text(), root, home))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MIRRORSCAN_HOME", home)
        yield root, home, dsn


def with_models(home: Path) -> str:
    """``home`` holding ``models/<name>`` links to the packaged models (``MODELS``) prepared in the tests' home."""
    from mirrorscan.cluster.models.resolve import prepare_packaged

    (home / "models").mkdir(parents=True, exist_ok=True)
    for alias in MODELS:
        folder = prepare_packaged(alias)   # a no-op where prepared
        link = home / "models" / folder.name
        if not link.exists():
            link.unlink(missing_ok=True)   # a link left dangling by an earlier run
            try:
                link.symlink_to(folder)
            except FileExistsError:   # another test process made it a moment ago
                pass
    return str(home)


def placed(text: str, root: Path, home: str) -> str:
    """``text`` with the fixture's placeholders replaced by this run's folders."""
    return text.replace("@ROOT@", str(root)).replace("@HOME@", home)


FC_INTERVALS = """intervals (95 %) for a claim about the model on new prompts and items of the same kind; naive = cells as independent:
  commit/cell: no interval (every scored cell is 0.0%: nothing varies)
  position bias: no interval (every scored cell is +0.0 pp: nothing varies)
  sharpness: no interval (0 scored cell(s))
"""

FLINCH_INTERVALS = """intervals (95 %) for a claim about the model on new prompts and items of the same kind; naive = cells as independent:
  syn_a  (random: term, carrier; ANOVA)
    tiny                              63.9  [46.7, 81.0]             naive [61.2, 66.5]             × 6.5
  syn_b  (random: term, carrier; ANOVA)
    tiny                              65.9  [58.2, 73.6]             naive [64.4, 67.4]             × 5.2
  total  (random: term, carrier; ANOVA)
    tiny                             129.8  [119.7, 139.8]           naive [127.4, 132.1]           × 4.3
  warning: term has 2 level(s), under 6: the interval rests on few degrees of freedom and comes out wider than the truth needs (coverage study, docs/statistics.md)
  warning: carrier has 2 level(s), under 6: the interval rests on few degrees of freedom and comes out wider than the truth needs (coverage study, docs/statistics.md)
  total: the sum of the axis scores, its error variance the sum of theirs (axes fixed, each with its own terms and carriers); models with a whole total only
"""
NEW_JSON_SECTIONS = {"flinch": ("intervals",), "lens": ("intervals",)}
"""Sections ``analyze --json`` has gained since the previous release: they must be there, and are left out of the
byte-for-byte comparison of the rest (each instrument's own interval tests hold their numbers)."""

DRY_RUN_ENGINES = ("engines: each model starts its own engine actors (no Ray cluster named by RAY_ADDRESS: the scan "
                   "starts a local Ray of its own, where no warm engine runs)")
"""The dry run's line on warm engines (docs/engines.md), new since the previous release."""

PRESENTATION = {
    "analyze-flinch.txt": [(
        "carrier G-study, syn_b: none (needs at least 2 models as the object of measurement, has 1)\n",
        "carrier G-study, syn_b: none (needs at least 2 models as the object of measurement, has 1)\n"
        + FLINCH_INTERVALS)],
    "analyze-forced_choice.txt": [(
        "tiny-s1                        12      0        0.0%  0 / 0 / 3  (0)                                 "
        "0 / 0 / 3                         — (0)                    +0.0 pp      0\n",
        "tiny-s1                        12      0        0.0%  0 / 0 / 3  (0)                                 "
        "0 / 0 / 3                         — (0)                    +0.0 pp      0\n" + FC_INTERVALS)],
    "analyze-open_scan.txt": [("38      -    0/2           -    0/2", "38      —    0/2           —    0/2"),
                              ("across-sample agreement cannot be measured\n",
                               "across-sample agreement cannot be measured\nintervals (95 %) for a claim about the "
                               "model on new prompts and items of the same kind; naive = cells as independent:\n"
                               "  cold: no interval (0 scored cell(s))\n  posthoc: no interval (0 scored cell(s))\n")],
    "analyze-lens.txt": [("below 10 % of the stack", "below 10% of the stack"),
                         ("wrappers below 10 %;", "wrappers below 10%;"),
                         ("1 model × variant(s)", "1 (model, variant) pair"),
                         ("tiny/base                       0.9725  0.9452      2    0.9886\n",   # the headline intervals after lens's tables
                          "tiny/base                       0.9725  0.9452      2    0.9886\n"
                          'headline intervals: the estimate is the mean over wrappers of the headline (the table above gives '
                          "the median); each scoring item enters as its influence value on the wrapper's AUROC at the "
                          "wrapper's best layer, that layer taken as given; the floor (mean over wrappers of the label floor) "
                          'is subtracted as a constant\n'
                          'intervals (95 %) for a claim about the model on new prompts and items of the same kind; naive = '
                          'cells as independent:\n'
                          '  headline (base)  (random: evaluation, deployment, item; ANOVA)\n'
                          '    tiny                             0.463  [0.361, 0.564]           naive [0.405, 0.521]           '
                          '× 1.8\n'
                          '  headline − floor (base)  (random: evaluation, deployment, item; ANOVA)\n'
                          '    tiny                             0.423  [0.322, 0.525]           naive [0.366, 0.481]           '
                          '× 1.8\n'
                          '  warning: evaluation has 3 level(s), under 6: the interval rests on few degrees of freedom and '
                          'comes out wider than the truth needs (coverage study, docs/statistics.md)\n'
                          '  warning: deployment has 3 level(s), under 6: the interval rests on few degrees of freedom and '
                          'comes out wider than the truth needs (coverage study, docs/statistics.md)\n')],
    "scan-again-open_scan.txt": [("experiment prev_open_scan: nothing to do, no new invocation\n", "")],
    **{f"scan-dry-run-{instrument}.txt": [("\nstore: ", f"\n{DRY_RUN_ENGINES}\nstore: ")]
       for instrument in ("flinch", "forced_choice", "lens", "open_scan")},
}
"""Where this code prints a number, an absence or a sentence unlike the previous release, on purpose: the headline
numbers' intervals over envelopes and items after an instrument's table (``analysis.headline_intervals``); one
formatting across analyze, report and browse (``grid.formatting``: an absent value as —, a share as 10%), a count
in plain words, "nothing to do" said once (the summary's sentence, not a note and a summary), and the dry run's line on warm engines. Each (old, new) pair is
replaced once in the previous release's text and must be found there; every other byte is held as it was,
and the numbers themselves exactly by the ``--json`` comparison."""


def expected(name: str, previous) -> str:
    """What the previous release printed (``expected/<name>``), with this run's folders in it and the
    deliberate presentation changes (``PRESENTATION``) applied."""
    root, home, _ = previous
    text = placed((FIXTURE / "expected" / name).read_text(), root, home)
    for old, new in PRESENTATION.get(name, []):
        assert text.count(old) == 1, f"expected/{name} no longer holds {old!r} once: update PRESENTATION"
        text = text.replace(old, new)
    return text


def mirrorscan(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``mirrorscan argv…``, run in this process as the command runs it."""
    from mirrorscan.jobs import cli

    capsys.readouterr()
    ray_before = ray_running()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert ray_running() == ray_before, f"mirrorscan {argv[0]} started Ray"
    return code, out, err


def ray_running() -> bool:
    """Whether this process has started or joined a Ray (without importing Ray when nothing has)."""
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def where(previous) -> list[str]:
    """The store and catalog options every verb here is given."""
    root, _, dsn = previous
    return ["--store", str(root / "store"), "--catalog-dsn", dsn]


def canonical(text: str) -> str:
    """A JSON document written with sorted keys (floats in their repr, NaN as NaN)."""
    return json.dumps(json.loads(text), sort_keys=True, indent=1)


@pytest.mark.parametrize("instrument", INSTRUMENTS)
def test_analyze_gives_the_numbers_and_text_the_previous_release_printed(previous, instrument, capsys):
    inv = FACTS["invocations"][instrument]["invocation_id"]
    code, out, err = mirrorscan(capsys, "analyze", inv, "--no-write", "--json", *where(previous))
    assert code == 0, err
    new = json.loads(out)
    for key in NEW_JSON_SECTIONS.get(instrument, ()):
        assert new[key]["headlines"], f"analyze --json of {instrument} lacks its {key}"
        new.pop(key)
    assert canonical(json.dumps(new)) == canonical(expected(f"analyze-{instrument}.json", previous))
    code, out, err = mirrorscan(capsys, "analyze", inv, "--no-write", *where(previous))
    assert code == 0, err
    assert out == expected(f"analyze-{instrument}.txt", previous)


@pytest.mark.parametrize("instrument", INSTRUMENTS)
def test_report_writes_a_page_of_a_previous_release_invocation(previous, instrument, capsys):
    root, _, _ = previous
    inv = FACTS["invocations"][instrument]["invocation_id"]
    code, out, err = mirrorscan(capsys, "report", inv, *where(previous))
    assert code == 0, err
    pages = [Path(line.split()[-1]) for line in out.splitlines() if line.rstrip().endswith(".html")]
    assert len(pages) == 1 and pages[0].is_relative_to(root / "store" / FACTS["invocations"][instrument]["experiment"])
    page = pages[0].read_text(encoding="utf-8")
    assert page.lstrip().lower().startswith("<!doctype html") and inv in page


@pytest.mark.parametrize("instrument", INSTRUMENTS)
def test_reproduce_dry_run_rebuilds_the_frozen_settings_as_the_previous_release_did(previous, instrument, capsys):
    inv = FACTS["invocations"][instrument]["invocation_id"]
    code, out, err = mirrorscan(capsys, "reproduce", inv, "--dry-run", *where(previous))
    assert code == 0, err
    lines = out.splitlines()
    git = [line for line in lines if line.startswith("  warning: git: ")]
    assert git[0] == f"  warning: git: the original ran commit {FACTS['commit']}, this is {head_commit()}"
    then = expected(f"reproduce-dry-run-{instrument}.txt", previous).splitlines()
    assert then[-1] == "  nothing that cannot be restored"   # the old code ran in the tree it recorded
    assert [line for line in lines if line not in git] == then[:-1]   # no other warning: all else restored


def head_commit() -> str:
    """The commit this checkout is at."""
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=FIXTURE, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("query", sorted(FACTS["sql"]))
def test_sql_answers_the_rows_the_previous_release_answered(previous, query, capsys):
    code, out, err = mirrorscan(capsys, "sql", FACTS["sql"][query], "--format", "json", *where(previous))
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    old = [json.loads(line) for line in expected(f"sql-{query}.json", previous).splitlines() if line.strip()]
    assert rows == old and len(rows) >= 4


@pytest.mark.parametrize("instrument", INSTRUMENTS)
def test_scan_resume_of_a_finished_invocation_finds_nothing_to_finish(previous, instrument, capsys):
    root, _, _ = previous
    exp = root / "experiments" / FACTS["invocations"][instrument]["experiment"]
    code, out, err = mirrorscan(capsys, "scan", str(exp), "--resume", *where(previous))
    assert f"exit {code}\n{out}{err}" == expected(f"scan-resume-{instrument}.txt", previous)


@pytest.mark.parametrize("instrument", INSTRUMENTS)
def test_scan_dry_run_plans_against_the_previous_release_invocations_as_it_did(previous, instrument, capsys):
    root, _, _ = previous
    exp = root / "experiments" / FACTS["invocations"][instrument]["experiment"]
    code, out, err = mirrorscan(capsys, "scan", str(exp), "--dry-run", *where(previous))
    assert f"exit {code}\n{out}{err}" == expected(f"scan-dry-run-{instrument}.txt", previous)


def test_a_new_open_scan_scan_finds_every_cell_held_by_the_previous_release(previous):
    """Run as its own process, as a user runs it (and the summary goes to that process's stdout)."""
    root, _, dsn = previous
    exp = root / "experiments" / FACTS["invocations"]["open_scan"]["experiment"]
    with psycopg.connect(dsn) as conn:
        before = conn.execute("SELECT count(*) FROM scan_invocations").fetchone()[0]
    done = subprocess.run([sys.executable, "-m", "mirrorscan.jobs.cli", "scan", str(exp), "--quiet",
                           *where(previous)], capture_output=True, text=True, timeout=300)
    assert f"exit {done.returncode}\n{done.stdout}{done.stderr}" == expected("scan-again-open_scan.txt", previous)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM scan_invocations").fetchone()[0] == before


def test_the_catalog_is_brought_to_this_code_s_migrations(previous, capsys):
    from mirrorscan.cluster.catalog.client import Catalog

    _, _, dsn = previous
    old = {int(v) for v in re.findall(r"INSERT INTO public\.schema_migrations VALUES \((\d+),",
                                      (FIXTURE / "catalog.sql").read_text())}
    with Catalog(dsn) as catalog:
        invocations = {str(catalog.get_invocation(f["invocation_id"])["invocation_id"])
                       for f in FACTS["invocations"].values()}
    with psycopg.connect(dsn) as conn:
        now = {v for (v,) in conn.execute("SELECT version FROM schema_migrations")}
    shipped = {int(p.name[:4]) for p in migrations_folder().glob("[0-9][0-9][0-9][0-9]_*.sql")}
    assert old and old <= now == shipped
    assert invocations == {f["invocation_id"] for f in FACTS["invocations"].values()}


def migrations_folder() -> Path:
    """The folder of this code's catalog migrations."""
    import mirrorscan.cluster.catalog.client as catalog_module

    return Path(catalog_module.__file__).parent / "migrations"
