"""The trace store on a real S3 server (SeaweedFS ``weed mini`` on 127.0.0.1, real auth) and locally.

The store tests run twice, on a local folder and on ``s3://bucket/<prefix>``, through the same
TraceStore. S3 only: If-None-Match refusals, multipart uploads invisible until complete and aborted on
failure, a lost answer to a put that landed (detected, never a duplicate), a server restart in the
middle of a write (a lone write; a sweep whose actors are writing, restarted by a hook when its first part
lands; a multipart upload, restarted between its upload parts), settings only from the AWS environment
(never in the URI), refused credentials,
and ``mirrorscan sql`` over an S3 store.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import pickle
import secrets
import threading
import time
import uuid

import botocore.exceptions
import pyarrow.parquet as pq
import pytest

from mirrorscan.cluster.store import s3
from mirrorscan.cluster.store.traces import open_store
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.instrument import known_trace_schema
from mirrorscan.grid.trace_schema import to_trace_table

pytestmark = pytest.mark.own_ray   # the sweep-restart test starts a Ray whose workers carry its own S3 settings

BUCKET = "mirrorscan-test"


def rows(n: int, start: int = 0, invocation: str = "inv") -> list[dict]:
    now = dt.datetime.now(dt.timezone.utc)
    return [{"invocation_id": invocation, "probe_id": f"m|a|b|e|AB{i}", "sample": 0, "attempt": 1, "created_at": now}
            for i in range(start, start + n)]


def point_env_at(monkeypatch, server, **overrides) -> None:
    """The standard AWS environment for ``server`` (and nothing from the user's own AWS setup)."""
    for name in s3.ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in {**server.env(), **overrides}.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


@pytest.fixture
def s3_uri(s3_server, monkeypatch):
    """``s3://mirrorscan-test/<random prefix>`` with the environment pointing at the session's server."""
    point_env_at(monkeypatch, s3_server)
    s3_server.create_bucket(BUCKET)
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """One TraceStore per backend: a local folder, or a fresh prefix on the real S3 server."""
    if request.param == "local":
        return open_store(str(tmp_path / "store"))
    return open_store(request.getfixturevalue("s3_uri"))


def put_raw(store, path: str, data: bytes) -> None:
    """Put bytes beside the store's own writes, bypassing it (a crashed or foreign writer)."""
    if store.is_local:
        with open(path, "wb") as f:
            f.write(data)
    else:
        bucket, key = path.split("/", 1)
        store.objects.client.put_object(Bucket=bucket, Key=key, Body=data)


# ---- the same behaviour on both backends ------------------------------------------------------

def test_parts_are_unique_listed_and_readable(store):
    p1 = store.write_part(to_trace_table(rows(3)), "exp", "inv", "w1")
    p2 = store.write_part(to_trace_table(rows(2, 3)), "exp", "inv", "w1")
    store.write_part(to_trace_table(rows(4, invocation="inv2")), "exp", "inv2", "w2")
    assert p1 != p2 and store.list_parts("exp", "inv") == sorted([p1, p2])
    assert len(store.list_parts("exp")) == 3 and len(store.list_parts()) == 3
    table = store.read("exp", "inv")
    assert table.num_rows == 5 and table.schema.equals(known_trace_schema(), check_metadata=False)   # core + instruments' columns
    assert sorted(table.column("probe_id").to_pylist()) == sorted(f"m|a|b|e|AB{i}" for i in range(5))
    with store.fs.open_input_file(p1) as src:
        assert pq.read_schema(src).field("ttft_ms").metadata[b"doc"].startswith(b"ms, monotonic")
    assert store.dataset().count_rows() == 9
    assert store.dataset("exp", "inv2").to_table(columns=["invocation_id"]).column(0).to_pylist() == ["inv2"] * 4


def test_empty_store_reads_as_empty_table(store):
    assert store.read("exp", "nothing", columns=["probe_id", "sample", "error"]).num_rows == 0
    assert store.dataset().count_rows() == 0 and store.list_parts() == []


def test_manifest_is_written_once_and_kept(store):
    path = store.write_manifest("exp", "inv", {"settings": {"seed": 1}})
    assert store.write_manifest("exp", "inv", {"settings": {"seed": 2}}) == path
    assert json.loads(store.read_bytes(path)) == {"settings": {"seed": 1}}
    assert store.list_parts("exp", "inv") == []     # a manifest is not a part


def test_analysis_outputs_are_never_overwritten(store):
    shown = store.write_analysis("exp", "inv", "20260101T000000/summary.json", b'{"n": 1}')
    assert shown.startswith("s3://") != store.is_local
    with pytest.raises(FileExistsError, match="never overwritten"):
        store.write_analysis("exp", "inv", "20260101T000000/summary.json", b'{"n": 2}')
    path = f"{store.invocation_dir('exp', 'inv')}/analysis/20260101T000000/summary.json"
    assert store.read_bytes(path) == b'{"n": 1}'


def test_cleanup_removes_unfinished_writes_and_quarantines_unreadable_parts(store):
    good = store.write_part(to_trace_table(rows(2)), "exp", "inv", "w1")
    folder = store.traces_dir("exp", "inv")
    put_raw(store, f"{folder}/part-broken.parquet", b"PAR1 not really")
    if store.is_local:
        put_raw(store, f"{folder}/.part-x.parquet.tmp", b"half a part")
        unfinished = [f"{folder}/.part-x.parquet.tmp"]
    else:   # on S3 the only unfinished writes are multipart uploads: started, one part sent, never completed
        bucket, key = f"{folder}/part-unfinished.parquet".split("/", 1)
        client = store.objects.client
        upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"x" * 1000)
        unfinished = [f"{bucket}/{key}"]
    assert set(store.list_parts("exp", "inv")) == {good, f"{folder}/part-broken.parquet"}
    removed, quarantined = store.cleanup("exp", "inv")
    assert removed == unfinished
    assert [q.rsplit("/", 2)[-2:] for q in quarantined] == [["quarantine", "part-broken.parquet"]]
    assert store.read_bytes(quarantined[0]) == b"PAR1 not really"
    assert store.list_parts("exp", "inv") == [good]
    assert store.read("exp", "inv").num_rows == 2
    assert store.cleanup("exp", "inv") == ([], [])
    if not store.is_local:
        assert store.objects.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_store_pickles_as_its_uri_without_secrets(store):
    store.write_part(to_trace_table(rows(1)), "exp", "inv", "w1")
    blob = pickle.dumps(store)
    again = pickle.loads(blob)
    assert again.uri == store.uri and again.list_parts() == store.list_parts()
    if not store.is_local:
        import os

        assert os.environ["AWS_SECRET_ACCESS_KEY"].encode() not in blob


# ---- S3 only ------------------------------------------------------------------------------------

def test_if_none_match_refuses_an_existing_key(s3_uri, s3_server):
    store = open_store(s3_uri)
    path = store.write_part(to_trace_table(rows(2)), "exp", "inv", "w1")
    before = store.read_bytes(path)
    with pytest.raises(FileExistsError, match="never overwritten"):
        store.objects.put(path, b"something else")
    assert store.read_bytes(path) == before
    bucket, key = path.split("/", 1)   # the server itself answers 412 to a conditional put on an existing key
    with pytest.raises(botocore.exceptions.ClientError) as err:
        s3_server.client().put_object(Bucket=bucket, Key=key, Body=b"x", IfNoneMatch="*")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412


def test_multipart_part_is_invisible_until_complete_and_aborted_on_failure(s3_uri):
    store = open_store(s3_uri)
    store.objects.multipart_threshold = store.objects.part_size = 5 << 20
    table = to_trace_table([{**r, "response": secrets.token_hex(2000)} for r in rows(4000)])   # ~8 MB zstd
    client = store.objects.client
    bucket, prefix = store.root.split("/", 1)
    seen_during_upload: list[int] = []

    def snapshot(**_):
        seen_during_upload.append(client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("KeyCount", 0))

    client.meta.events.register("after-call.s3.UploadPart", snapshot)
    path = store.write_part(table, "exp", "inv", "big")
    client.meta.events.unregister("after-call.s3.UploadPart", snapshot)
    size = client.head_object(Bucket=bucket, Key=path.split("/", 1)[1])["ContentLength"]
    assert size > 5 << 20 and len(seen_during_upload) >= 2 and set(seen_during_upload) == {0}
    assert store.read("exp", "inv", columns=["response"]).column(0).to_pylist() == table.column("response").to_pylist()

    calls = {"n": 0}

    def fail_second_part(**_):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ValueError("writer died mid-upload")

    client.meta.events.register("before-call.s3.UploadPart", fail_second_part)
    with pytest.raises(ValueError, match="mid-upload"):
        store.write_part(table, "exp", "inv", "dies")
    client.meta.events.unregister("before-call.s3.UploadPart", fail_second_part)
    assert store.list_parts("exp", "inv") == [path]
    assert client.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []) == []


def test_a_put_that_landed_but_lost_its_answer_is_not_duplicated(s3_uri, caplog):
    store = open_store(s3_uri)
    client = store.objects.client
    answers = {"n": 0}

    def lose_first_answer(**_):   # the object is stored, then the connection drops before the answer
        answers["n"] += 1
        if answers["n"] == 1:
            raise botocore.exceptions.ConnectionClosedError(endpoint_url="simulated lost answer")

    client.meta.events.register("after-call.s3.PutObject", lose_first_answer)
    with caplog.at_level(logging.INFO, logger="mirrorscan.cluster.store.s3"):
        path = store.write_part(to_trace_table(rows(3)), "exp", "inv", "w1")
    client.meta.events.unregister("after-call.s3.PutObject", lose_first_answer)
    assert answers["n"] == 2 and store.list_parts("exp", "inv") == [path]
    assert store.read("exp", "inv").num_rows == 3
    assert any("landed on an earlier try" in r.getMessage() for r in caplog.records)


def test_a_retry_that_meets_someone_elses_object_fails(s3_uri, s3_server):
    store = open_store(s3_uri)
    path = f"{store.traces_dir('exp', 'inv')}/part-raced.parquet"
    bucket, key = path.split("/", 1)
    tries = {"n": 0}

    def other_writer_then_drop(**_):   # another object lands at the key, and our first try is cut off
        tries["n"] += 1
        if tries["n"] == 1:
            s3_server.client().put_object(Bucket=bucket, Key=key, Body=b"not ours")
            raise botocore.exceptions.ConnectionClosedError(endpoint_url="simulated")

    store.objects.client.meta.events.register("before-call.s3.PutObject", other_writer_then_drop)
    with pytest.raises(FileExistsError):
        store.objects.put(path, b"ours, same length")
    assert tries["n"] == 2 and store.read_bytes(path) == b"not ours"


def test_write_survives_a_server_restart(tmp_path, monkeypatch, caplog):
    from tests.s3_server import WeedMini

    server = WeedMini(tmp_path / "weed").start()
    try:
        point_env_at(monkeypatch, server)
        server.create_bucket("restart")
        store = open_store("s3://restart/run")
        first = store.write_part(to_trace_table(rows(2)), "exp", "inv", "w1")
        server.stop()
        result: dict = {}

        def write():
            try:
                result["path"] = store.write_part(to_trace_table(rows(3, 2)), "exp", "inv", "w1")
            except BaseException as exc:  # noqa: BLE001 - reported by the assertions below
                result["error"] = exc

        with caplog.at_level(logging.WARNING, logger="mirrorscan.cluster.store.s3"):
            thread = threading.Thread(target=write)
            thread.start()
            time.sleep(1.5)
            assert thread.is_alive(), result   # the server is down: the write is waiting, not failed
            server.start()                      # same data dir and ports
            thread.join(timeout=150)
        assert not thread.is_alive() and "error" not in result, result
        retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
        assert retries, "the write never retried"
        assert store.list_parts("exp", "inv") == sorted([first, result["path"]])
        table = store.read("exp", "inv")
        assert sorted(table.column("probe_id").to_pylist()) == sorted(f"m|a|b|e|AB{i}" for i in range(5))
        assert server.client().list_multipart_uploads(Bucket="restart").get("Uploads", []) == []
    finally:
        server.stop()


@pytest.mark.parametrize("uri, field_text", [
    ("s3://AKIAEXAMPLE:s3cr3t@bucket/prefix", "credentials"),
    ("s3://AKIAEXAMPLE@bucket/prefix", "credentials"),
    ("s3://bucket/prefix?endpoint_override=127.0.0.1:9000&scheme=http", "endpoint_override, scheme"),
    ("s3://bucket/prefix?access_key=AKIAEXAMPLE&secret_key=s3cr3t", "access_key, secret_key"),
    ("s3://bucket/prefix?region=eu-west-1", "region"),
    ("s3://127.0.0.1:9000/bucket", "endpoint"),
    ("s3:///prefix", "no valid bucket"),
])
def test_settings_never_come_from_the_uri(uri, field_text):
    with pytest.raises(ConfigError) as err:
        open_store(uri)
    assert err.value.field == "store" and field_text in err.value.problem
    assert "AWS_" in err.value.fix and "s3cr3t" not in str(err.value)


def test_unsupported_scheme_is_a_config_error():
    with pytest.raises(ConfigError, match="unsupported store URI scheme"):
        open_store("gs://bucket/prefix")


def test_wrong_secret_is_refused(s3_server, monkeypatch):
    s3_server.create_bucket(BUCKET)
    with pytest.raises(botocore.exceptions.ClientError) as err:
        s3_server.client(secret_key="wrong-secret").list_objects_v2(Bucket=BUCKET)
    assert err.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    point_env_at(monkeypatch, s3_server, AWS_SECRET_ACCESS_KEY="wrong-secret-value")
    with pytest.raises(ConfigError) as err:
        open_store(f"s3://{BUCKET}/x")
    assert err.value.field == "AWS_SECRET_ACCESS_KEY" and "wrong-secret-value" not in str(err.value)
    fs = s3.s3_filesystem(s3.resolve_settings())   # pyarrow reads the same (wrong) credentials
    with pytest.raises(OSError):
        fs.get_file_info(f"{BUCKET}/x/anything")
    point_env_at(monkeypatch, s3_server, AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None)
    with pytest.raises(ConfigError) as err:
        open_store(f"s3://{BUCKET}/x")
    assert err.value.field == "AWS_ACCESS_KEY_ID"


def test_missing_bucket_is_a_config_error(s3_server, monkeypatch):
    point_env_at(monkeypatch, s3_server)
    with pytest.raises(ConfigError, match="does not exist") as err:
        open_store("s3://no-such-bucket-here/x")
    assert err.value.field == "store"


def test_endpoint_region_and_keys_from_env_names_and_profiles(s3_server, monkeypatch, tmp_path):
    s3_server.create_bucket(BUCKET)
    dead = "http://127.0.0.1:9"   # AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL
    point_env_at(monkeypatch, s3_server, AWS_ENDPOINT_URL=dead, AWS_ENDPOINT_URL_S3=s3_server.endpoint)
    settings = s3.resolve_settings()
    assert settings.endpoint_url == s3_server.endpoint and settings.custom_endpoint
    open_store(f"s3://{BUCKET}/env-s3").write_part(to_trace_table(rows(1)), "exp", "inv", "w")

    config, credentials = tmp_path / "config", tmp_path / "credentials"   # a profile instead of variables
    config.write_text(f"[profile lab]\nregion = eu-west-3\nendpoint_url = {s3_server.endpoint}\n")
    credentials.write_text(f"[lab]\naws_access_key_id = {s3_server.access_key}\n"
                           f"aws_secret_access_key = {s3_server.secret_key}\n")
    point_env_at(monkeypatch, s3_server, AWS_ENDPOINT_URL=None, AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None,
                 AWS_REGION=None, AWS_DEFAULT_REGION=None, AWS_PROFILE="lab", AWS_CONFIG_FILE=str(config),
                 AWS_SHARED_CREDENTIALS_FILE=str(credentials))
    assert s3.resolve_settings() == s3.S3Settings(s3_server.endpoint, "eu-west-3", True)
    store = open_store(f"s3://{BUCKET}/profile")
    store.write_part(to_trace_table(rows(2)), "exp", "inv", "w")
    assert store.read("exp", "inv").num_rows == 2   # pyarrow read it with the profile's keys


def test_forwarded_env_holds_the_set_aws_settings_and_no_secret():
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t",
           "AWS_ENDPOINT_URL": "http://h:1", "AWS_PROFILE": "lab", "AWS_REGION": "", "HOME": "/root"}
    assert s3.forwarded_env(env) == {"AWS_ENDPOINT_URL": "http://h:1", "AWS_PROFILE": "lab"}


def test_multipart_etag_matches_the_servers(s3_uri):
    store = open_store(s3_uri)
    store.objects.multipart_threshold = store.objects.part_size = 5 << 20
    data = hashlib.sha256(b"seed").digest() * ((11 << 20) // 32)
    path = f"{store.root}/blob.bin"
    store.objects.put(path, data)
    bucket, key = path.split("/", 1)
    etag = store.objects.client.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
    assert etag == s3._md5_etag(data, 5 << 20) and etag.endswith("-3")


def test_sql_reads_traces_from_s3(s3_uri, catalog_dsn):
    from mirrorscan.cluster.catalog.client import Catalog
    from mirrorscan.results import sql as results_sql

    store = open_store(s3_uri)
    inv = str(uuid.uuid4())
    store.write_part(to_trace_table(rows(3, invocation=inv)), "exp", inv, "w1")
    store.write_part(to_trace_table(rows(2, 3, invocation=inv)), "exp", inv, "w2")
    with Catalog(catalog_dsn) as catalog:
        catalog.create_invocation({"invocation_id": inv, "experiment": "exp", "instrument": "forced_choice",
                                   "settings": {"max_tokens": 6}, "settings_hash": "h", "status": "complete",
                                   "store_uri": s3_uri})
    table = results_sql.query("SELECT t.experiment_version, count(*) AS n, any_value(si.settings->>'max_tokens') AS mt "
                      "FROM traces t JOIN scan_invocations si ON si.invocation_id::text = t.experiment_version "
                      "GROUP BY 1", store_uri=s3_uri, catalog_dsn=catalog_dsn)
    assert table.to_pylist() == [{"experiment_version": inv, "n": 5, "mt": "6"}]


def test_a_sweep_writing_to_s3_survives_a_restart_after_its_first_part(tmp_path, monkeypatch):
    """Engine actors write parts (and spill their log rows) to S3; when the first part lands, the driver's
    hook restarts the server, while the actors go on answering and writing. Every cell ends stored once."""
    import ray
    import standin_engine as standin

    from mirrorscan.actors import registry
    from mirrorscan.cluster.runtime.ray_session import ensure_ray
    from mirrorscan.cluster.scan.sweep import Sweep, run_grid
    from conftest import own_ray
    from tests.s3_server import WeedMini

    server = WeedMini(tmp_path / "weed").start()
    own_ray()   # a Ray whose workers carry this server's AWS settings (ensure_ray forwards them)
    try:
        point_env_at(monkeypatch, server)
        server.create_bucket("sweep")
        ensure_ray(num_cpus=2)
        monkeypatch.setitem(registry.ENGINES, ("generate", "standin"), ("standin_engine", "SleepEngine"))
        variant = standin.standin_variant("s3", engine_args={"sleep_s": 0.05})
        cells, instrument = standin.grid_cells(["s3"], n_pairs=24)
        invocation_id, store_uri = str(uuid.uuid4()), "s3://sweep/run"
        landed = {"before": 0, "after": 0, "restarted": False}

        def restart_after_first_part(rows: int, errors: int, label: str) -> None:
            if not landed["restarted"]:
                landed["before"] += rows
                server.stop()
                server.start()   # same data folder and ports
                landed["restarted"] = True
            else:
                landed["after"] += rows

        run_grid(cells, [variant], {"s3": "standin"},
                 Sweep(standin.run_identity(invocation_id, "s3sweep"), instrument, store_uri, batch_size=4, pool_size=1),
                 restart_after_first_part)
    finally:
        ray.shutdown()
    try:
        assert landed["restarted"] and landed["after"] > 0, landed
        stored = open_store(store_uri).read("s3sweep", invocation_id)
        keys = list(zip(stored.column("probe_id").to_pylist(), stored.column("sample").to_pylist()))
        assert stored.column("error").null_count == stored.num_rows   # no error rows
        assert sorted(keys) == sorted(zip(cells.column("probe_id").to_pylist(), cells.column("sample").to_pylist()))
    finally:
        server.stop()


def test_a_multipart_write_survives_a_restart_between_its_parts(tmp_path, monkeypatch):
    """A part written as a multipart upload (threshold lowered so it takes several upload parts); the
    server restarts right after the first upload part (a hook on that call). The part is stored whole,
    once, and no unfinished upload is left."""
    from tests.s3_server import WeedMini

    server = WeedMini(tmp_path / "weed").start()
    try:
        point_env_at(monkeypatch, server)
        server.create_bucket("multipart")
        store = open_store("s3://multipart/run")
        store.objects.multipart_threshold = store.objects.part_size = 5 << 20
        table = to_trace_table([{**r, "response": secrets.token_hex(2000)} for r in rows(4000)])   # ~8 MB zstd
        client = store.objects.client
        calls = {"upload_parts": 0}

        def restart_after_first_upload_part(**_):
            calls["upload_parts"] += 1
            if calls["upload_parts"] == 1:
                server.stop()
                server.start()

        client.meta.events.register("after-call.s3.UploadPart", restart_after_first_upload_part)
        path = store.write_part(table, "exp", "inv", "big")
        client.meta.events.unregister("after-call.s3.UploadPart", restart_after_first_upload_part)
        assert calls["upload_parts"] >= 2
        assert store.list_parts("exp", "inv") == [path]
        stored = store.read("exp", "inv", columns=["probe_id", "response"])
        assert stored.column("probe_id").to_pylist() == table.column("probe_id").to_pylist()
        assert stored.column("response").to_pylist() == table.column("response").to_pylist()
        assert server.client().list_multipart_uploads(Bucket="multipart").get("Uploads", []) == []
    finally:
        server.stop()
