"""``mirrorscan lens predict --help``'s example works as written: parsed out of the epilog, its arguments parse,
its texts file is a packaged file that reads, its label and store folder are the lens demo's, and a folder above
an analysis resolves to the newest lens analysis beneath it. (The example's command runs on a real lens
invocation in tests/instruments/lens/test_lens_scan.py.)"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.instruments.lens.cli import EPILOG, analysis_folder, build_parser, read_texts

REPO = Path(__file__).resolve().parents[3]


def example_argv() -> list[str]:
    """The example's command line after ``mirrorscan``, as a shell splits it."""
    lines = EPILOG.split("example", 1)[1].splitlines()
    (command,) = [x.strip() for x in lines if x.strip().startswith("mirrorscan lens predict")]
    return shlex.split(command)[1:]


def test_the_example_parses_and_names_the_lens_demo_and_a_packaged_texts_file():
    argv = example_argv()
    assert argv[:2] == ["lens", "predict"]
    args = build_parser().parse_args(argv[1:])   # the real parser: an unknown or missing option fails here
    assert args.command == "predict" and args.variant == "base" and not args.model
    texts = read_texts(str(REPO / args.texts))
    assert len(texts) == len((REPO / args.texts).read_text().splitlines()) > 0
    store, experiment = Path(args.analysis).parent, Path(args.analysis).name
    assert store == Path(".mirrorscan/store") and (REPO / "experiments" / experiment / "config.json").is_file()
    labels = [m.get("label") for m in json.loads((REPO / "experiments" / experiment / "config.json").read_text())["models"]]
    assert args.label in labels


def test_a_folder_above_analyses_resolves_to_the_newest_lens_analysis(tmp_path, capsys):
    experiment = tmp_path / "store" / "lens-demo"
    older = experiment / "inv-a" / "analysis" / "lens" / "20260101T000000-aaaaaaaa"
    newer = experiment / "inv-b" / "analysis" / "lens" / "20260102T000000-bbbbbbbb"
    other = experiment / "inv-b" / "analysis" / "stats" / "20260103T000000-cccccccc"
    for folder in (older, newer, other):
        folder.mkdir(parents=True)
        (folder / "predict-smollm2-base.json").write_text("{}")
    assert analysis_folder(str(experiment)) == newer and str(newer) in capsys.readouterr().err
    assert analysis_folder(str(older)) == older
    assert analysis_folder(str(tmp_path)) == newer   # from any folder above
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no lens analysis"):
        analysis_folder(str(tmp_path / "empty"))
