"""vLLM's process environment: caches and temporary files under the folder the run names (no vLLM is started)."""

from __future__ import annotations

from mirrorscan.actors.vllm_env import CPU_SETTINGS, vllm_env


def test_caches_and_temporary_files_go_under_the_folder_given(tmp_path):
    env = vllm_env("cpu", tmp_path)
    assert {env[k] for k in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "TMPDIR")} == \
        {str(tmp_path / name) for name in ("vllm", "inductor", "xdg", "tmp")}
    assert (tmp_path / "tmp").is_dir() and CPU_SETTINGS.items() <= env.items()


def test_a_gpu_gets_the_cache_folders_but_neither_cpu_settings_nor_a_temp_folder(tmp_path):
    env = vllm_env("cuda:0", tmp_path)
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "vllm")
    assert "TMPDIR" not in env and not set(CPU_SETTINGS) & set(env) and not (tmp_path / "tmp").exists()


def test_without_a_folder_vllm_keeps_its_own_cache_defaults():
    env = vllm_env("cpu")
    assert not {"VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "TMPDIR"} & set(env)
    assert CPU_SETTINGS.items() <= env.items() and env["VLLM_NO_USAGE_STATS"] == "1"
