"""Errors about an input file name the file and the problem and quote at most a short, escaped excerpt of the
offending field — never a line of the file, never anything shaped like a secret.

Each reader gets the same passwd-like file (as if a config pointed ``probe_set`` at /etc/passwd), once with a
fake key on its first line and once without.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.spec import load_spec

FAKE_KEY = "sk-" + "FAKEabcdefghijklmnop1234"
PLAIN = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
KEYED = f"root:x:0:0:{FAKE_KEY}:/root:/bin/bash\ndaemon,x,1,1:daemon:/usr/sbin:/usr/sbin/nologin\n"
NEVER = ("/bin/bash", "nologin", "daemon:x", "FAKEabcd", "root:x:0:0:root:/root:/bin/bash")


def experiment(tmp_path: Path, instrument: str, section: dict) -> Path:
    exp = tmp_path / "exp"
    exp.mkdir(exist_ok=True)
    (exp / "config.json").write_text(json.dumps({
        "instrument": instrument, "models": [{"model": "packaged:smollm2-135m-instruct", "label": "m"}],
        instrument: section}))
    return exp


def passwd(tmp_path: Path, content: str, name: str = "passwd") -> str:
    path = tmp_path / name
    path.write_text(content)
    return str(path)


def assert_quotes_no_content(message: str, file: str) -> None:
    assert file in message or Path(file).name in message
    assert "\n" not in message
    for text in NEVER:
        assert text not in message, text


CONFIGS = {
    "forced_choice probe_set": lambda f: ("forced_choice", {"probe_set": f}),
    "open_scan probes": lambda f: ("open_scan", {"probes": f}),
    "lens scoring_set": lambda f: ("lens", {"scoring_set": f}),
    "lens tasks": lambda f: ("lens", {"tasks": f}),
    "flinch corpus": lambda f: ("flinch", {"corpus": f}),
}


@pytest.mark.parametrize("content", [PLAIN, KEYED], ids=["plain", "keyed"])
@pytest.mark.parametrize("reader", sorted(CONFIGS))
def test_a_config_naming_a_passwd_file_gets_an_error_without_its_content(tmp_path, reader, content):
    file = passwd(tmp_path, content, "passwd.csv" if reader.startswith("lens") else "passwd")
    instrument, section = CONFIGS[reader](file)
    with pytest.raises(ConfigError) as info:
        load_spec(experiment(tmp_path, instrument, section))
    assert_quotes_no_content(str(info.value), file)


@pytest.mark.parametrize("content", [PLAIN, KEYED], ids=["plain", "keyed"])
def test_stats_on_a_passwd_csv_names_the_columns_only_as_excerpts(tmp_path, capsys, content):
    from mirrorscan.jobs.stats import main

    file = passwd(tmp_path, content, "passwd.csv")
    rc = main(["gstudy", "--input", file, "--score", "s", "--object", "m", "--facets", "w"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ")
    assert_quotes_no_content(err.strip(), file)


def test_stats_on_a_ragged_csv_does_not_echo_the_row(tmp_path, capsys):
    from mirrorscan.jobs.stats import main

    file = passwd(tmp_path, f"a,b\n1,2\nroot:x {FAKE_KEY},3,4,/bin/bash\n", "ragged.csv")
    rc = main(["gstudy", "--input", file, "--score", "a", "--object", "b", "--facets", "b"])
    err = capsys.readouterr().err
    assert rc == 2 and "got 4" in err
    assert_quotes_no_content(err.strip(), file)


def test_a_runtime_env_that_is_no_yaml_is_not_echoed(tmp_path):
    from mirrorscan.cluster.runtime.job_submission import load_runtime_env

    file = passwd(tmp_path, f"env_vars: [\n  root:x:0:0 {FAKE_KEY}: : /bin/bash\n", "runtime_env.yaml")
    with pytest.raises(ConfigError) as info:
        load_runtime_env(file)
    assert "line 2" in str(info.value)
    assert_quotes_no_content(str(info.value), file)


def test_lens_recompute_on_a_passwd_csv_lists_columns_as_excerpts(tmp_path):
    from mirrorscan.instruments.lens.recompute import read_rows

    for content in (PLAIN, KEYED, f"a,b\n1,2\n{FAKE_KEY},3,/bin/bash\n"):
        file = passwd(tmp_path, content, "rows.csv")
        with pytest.raises(ConfigError) as info:
            read_rows(file)
        assert_quotes_no_content(str(info.value), file)


def test_open_scan_import_of_a_passwd_file_is_not_echoed(tmp_path):
    from mirrorscan.instruments.open_scan.jsonl import read_records

    for content in (PLAIN, KEYED):
        with pytest.raises(ConfigError) as info:
            read_records(content.encode(), str(tmp_path / "passwd"))
        assert_quotes_no_content(str(info.value), str(tmp_path / "passwd"))


def test_lens_predict_texts_that_are_not_utf8_are_one_line_without_content(tmp_path):
    from mirrorscan.instruments.lens.cli import read_texts

    file = tmp_path / "texts.txt"
    file.write_bytes(b"fine\n\xff\xfe root:x:0:0 " + FAKE_KEY.encode() + b" /bin/bash\n")
    with pytest.raises(ConfigError) as info:
        read_texts(str(file))
    assert "byte 5" in str(info.value)
    assert_quotes_no_content(str(info.value), str(file))
