"""Every registered engine keeps the engine contract (``actors.engine.Engine``), and what it declares agrees with
the tables config validation reads (``grid.engine_kinds``), so neither can drift from the other.

The dependency check is run with vLLM really hidden (a fresh process whose import system does not find it,
``tests/hidden_packages.py``): every engine module still imports, and the vLLM engines name what is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hidden_packages import hiding
from mirrorscan.actors.engine import Engine, Requirement
from mirrorscan.actors.registry import ENGINES, engine_class
from mirrorscan.grid.engine_kinds import ENGINE_MODEL_KEYS, KINDS, SELECTIVE_KEYS
from mirrorscan.grid.instrument import ENGINE_KINDS
from mirrorscan.grid.records import ModelVariant


def test_the_registry_and_the_model_key_table_name_the_same_engines():
    assert set(ENGINES) == set(ENGINE_MODEL_KEYS)
    assert tuple(KINDS) == ENGINE_KINDS
    assert {kind for kind, _ in ENGINES} == set(KINDS)


@pytest.mark.parametrize("kind, backend", sorted(ENGINES))
def test_each_engine_declares_the_contract(kind, backend):
    cls = engine_class(backend, kind)
    assert issubclass(cls, Engine)
    assert (cls.kind, cls.backend) == (kind, backend)
    assert cls.model_keys == ENGINE_MODEL_KEYS[(kind, backend)]
    assert cls.model_keys <= set(SELECTIVE_KEYS)
    assert isinstance(cls.CONCURRENT_BATCHES, int) and cls.CONCURRENT_BATCHES >= 1
    assert all(isinstance(r, Requirement) for r in cls.requires)
    assert callable(cls.ray_resources) and callable(cls.shutdown)


def test_the_default_resources_are_one_cpu_and_the_variants_gpus():
    assert Engine.ray_resources(ModelVariant(model="m", label="m")) == {"num_cpus": 1}
    assert Engine.ray_resources(ModelVariant(model="m", label="m", num_gpus=2)) == {"num_cpus": 1, "num_gpus": 2}


def test_an_install_hint_names_the_extra_for_the_models_device():
    from mirrorscan.actors.engine import VLLM

    assert VLLM.install_hint(ModelVariant(model="m", label="m", device="cpu")) == "pip install 'mirrorscan[cpu]'"
    assert VLLM.install_hint(ModelVariant(model="m", label="m", device="cuda:0")) == "pip install 'mirrorscan[gpu]'"


def test_every_engine_module_imports_with_vllm_hidden_and_the_vllm_engines_say_it_is_missing():
    program = hiding(["vllm"]) + f'''
import importlib.util, json
from mirrorscan.actors.registry import ENGINES, engine_class
assert importlib.util.find_spec("vllm") is None
print(json.dumps({{f"{{k}}/{{b}}": [r.module for r in engine_class(b, k).missing()] for k, b in ENGINES}}))
'''
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    missing = json.loads(proc.stdout.strip().splitlines()[-1])
    assert missing == {f"{k}/{b}": ["vllm"] if "vllm" in [r.module for r in engine_class(b, k).requires] else []
                       for k, b in ENGINES}
    assert missing["generate/vllm"] == ["vllm"] and missing["generate/hf"] == []
