"""Invocation ids are read one way by every verb (``cluster.catalog.client.match_invocation_id``): a whole id or its
unique start works, an ambiguous start is refused naming the candidates, an unknown one is refused; and the
browser's comparison refuses a model label its invocation does not hold instead of comparing a model with
itself. A real store and catalog written as scans write them (``browse_world``), verbs run in-process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from mirrorscan.cluster.catalog.client import Catalog
from mirrorscan.cluster.store.traces import open_store
from conftest import new_database
from mirrorscan.results.browse import Browser, build_app

import browse_world as world  # noqa: E402


@pytest.fixture(scope="module")
def made(tmp_path_factory, pg_dsn):
    """The browse world plus two invocation rows whose ids share their first 8 hex digits (an ambiguous start),
    chosen to differ from the world's id at the first digit, an experiment named as the first 7 hex digits of
    the world's id, and a scan.log beside the world's traces."""
    base = tmp_path_factory.mktemp("ids")
    dsn = new_database(pg_dsn)
    built = world.build(base, dsn)
    real = built["invocation_id"]
    lead = "a" if real[0] != "a" else "b"
    twins = [f"{lead * 8}-0000-4000-8000-00000000000{k}" for k in (1, 2)]
    with Catalog(dsn) as catalog:
        for twin in twins:
            catalog.create_invocation({
                "invocation_id": twin, "experiment": "twins", "instrument": "forced_choice",
                "settings": {"format": 2, "experiment": "twins", "instrument": "forced_choice"},
                "settings_hash": "test", "status": "complete", "store_uri": built["store"]})
        shadow = next(d * 8 for d in "0123456789" if d not in (real[0], lead)) + "-0000-4000-8000-000000000003"
        catalog.create_invocation({   # an experiment named as the start of the world's id (a valid name)
            "invocation_id": shadow, "experiment": real[:7], "instrument": "forced_choice",
            "settings": {"format": 2, "experiment": real[:7], "instrument": "forced_choice"},
            "settings_hash": "test", "status": "complete", "store_uri": built["store"]})
    store = open_store(built["store"])
    log = Path(store.invocation_dir(world.EXPERIMENT, real)) / "scan.log"
    log.write_text("engine output\n", encoding="utf-8")
    store.write_analysis(world.EXPERIMENT, real, "forced_choice/run1/table.parquet", b"PAR1")
    browser = Browser(dsn, base / "index")
    yield {**built, "dsn": dsn, "real": real, "unique": real[:8], "ambiguous": lead * 8, "twins": twins,
           "both": real[:7],
           "unknown": ("c" if lead != "c" and real[0] != "c" else "d") * 8, "browser": browser,
           "client": TestClient(build_app(browser))}
    browser.close()


def run_verb(module: str, argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stderr) of a verb's ``main`` run in-process."""
    import importlib

    code = importlib.import_module(module).main(argv)
    return code, capsys.readouterr().err


def verbs(made, target: str) -> dict[str, tuple[str, list[str]]]:
    """Every verb that takes an invocation, called on ``target`` without writing anything when it resolves."""
    dsn = made["dsn"]
    return {
        "diff": ("mirrorscan.jobs.diff", [target, target, "--catalog-dsn", dsn]),
        "compare": ("mirrorscan.jobs.compare", [target, target, "--catalog-dsn", dsn, "--label-a", "alpha", "--label-b", "beta"]),
        "analyze": ("mirrorscan.jobs.analyze", [target, "--no-write", "--catalog-dsn", dsn]),
        "report": ("mirrorscan.jobs.report", [target, "--catalog-dsn", dsn]),
        "reproduce": ("mirrorscan.jobs.reproduce", [target, "--dry-run", "--catalog-dsn", dsn]),
        "stats": ("mirrorscan.jobs.stats", ["kendall", "--input", target, "--score", "x", "--object", "label", "--rater", "envelope"]),
        "matrix": ("mirrorscan.instruments.open_scan.cli", ["matrix", target, "--catalog-dsn", dsn]),
    }


@pytest.mark.parametrize("case", ["ambiguous", "unknown"])
def test_every_verb_refuses_an_ambiguous_or_unknown_start_with_one_line(made, case, capsys, monkeypatch):
    monkeypatch.setenv("MIRRORSCAN_CATALOG_DSN", made["dsn"])   # stats reads the environment's catalog
    target = made[case]
    for name, (module, argv) in verbs(made, target).items():
        if module == "mirrorscan.instruments.open_scan.cli":
            from mirrorscan.grid.instrument import resolve
            from mirrorscan.results.reader import StoreReader

            code, err = resolve("open_scan").cli(argv, "mirrorscan open_scan", StoreReader()), capsys.readouterr().err
        else:
            code, err = run_verb(module, argv, capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (name, err)
        if case == "ambiguous":
            assert all(t in lines[0] for t in made["twins"]) and "give more of the id" in lines[0], (name, err)
        else:
            assert target in lines[0], (name, err)
    client = made["client"]
    page = client.get(f"/invocations/{target}")
    assert page.status_code == 404
    if case == "ambiguous":
        assert all(t in page.text for t in made["twins"])
    for path in (f"/invocations/{target}/matrix", f"/compare?a={target}&b={made['real']}"):
        assert client.get(path).status_code == 404, path


def test_every_verb_refuses_a_text_that_is_both_an_experiment_and_an_id_start_naming_both(made, capsys, monkeypatch):
    """An experiment may be named like the start of another experiment's invocation id: no verb, and no browser
    page, picks one of the two without a word (``cluster.catalog.client.TARGET_RULE``)."""
    monkeypatch.setenv("MIRRORSCAN_CATALOG_DSN", made["dsn"])
    target = made["both"]
    for name, (module, argv) in verbs(made, target).items():
        if module == "mirrorscan.instruments.open_scan.cli":
            from mirrorscan.grid.instrument import resolve
            from mirrorscan.results.reader import StoreReader

            code, err = resolve("open_scan").cli(argv, "mirrorscan open_scan", StoreReader()), capsys.readouterr().err
        else:
            code, err = run_verb(module, argv, capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (name, err)
        assert f"experiment '{target}'" in lines[0] and made["real"] in lines[0], (name, err)
    page = made["client"].get(f"/invocations/{target}")
    assert page.status_code == 404 and f"experiment &#x27;{target}&#x27;" in page.text and made["real"] in page.text
    assert made["client"].get(f"/experiments/{target}").status_code == 200   # the experiment's own page still opens


def test_a_unique_start_names_the_same_invocation_in_every_verb(made, capsys):
    code, err = run_verb("mirrorscan.jobs.diff", [made["unique"], made["real"], "--catalog-dsn", made["dsn"], "--expect-exact"],
                         capsys)
    assert code == 0, err
    code, err = run_verb("mirrorscan.jobs.compare", [made["unique"], made["real"], "--catalog-dsn", made["dsn"],
                                          "--label-a", "alpha", "--label-b", "beta"], capsys)
    assert code == 0, err
    client = made["client"]
    page = client.get(f"/invocations/{made['unique']}")
    assert page.status_code == 200 and made["real"] in page.text
    assert client.get(f"/invocations/{made['unique'].upper()}/matrix").status_code == 200
    assert made["browser"].resolve_id(made["unique"]) == made["real"]


def test_compare_refuses_an_unknown_label_listing_the_known_ones(made):
    client, real = made["client"], made["real"]
    ok = client.get("/compare", params={"a": real, "label_a": "alpha", "b": real, "label_b": "beta"})
    assert ok.status_code == 200
    for params in ({"label_a": "alpha", "label_b": "gamma"}, {"label_a": "gamma", "label_b": "beta"}):
        page = client.get("/compare", params={"a": real, "b": real, **params})
        assert page.status_code == 404, params
        assert "gamma" in page.text and "alpha, beta" in page.text


def test_the_scan_log_link_is_served_and_unserved_files_are_listed_without_a_link(made):
    client, real = made["client"], made["real"]
    page = client.get(f"/invocations/{real}")
    assert f'href="/invocations/{real}/files/scan.log"' in page.text
    log = client.get(f"/invocations/{real}/files/scan.log")
    assert log.status_code == 200 and log.text == "engine output\n"
    assert log.headers["content-type"].startswith("text/plain")
    assert "analysis/forced_choice/run1/table.parquet" in page.text
    assert "files/analysis/forced_choice/run1/table.parquet" not in page.text
    for href in page.text.split('href="')[1:]:   # every file link the page shows answers
        target = href.split('"', 1)[0]
        if "/files/" in target:
            assert client.get(target).status_code == 200, target
