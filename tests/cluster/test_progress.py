"""The scan's progress bar text names each model that is loading or running (``cluster.scan.progress``)."""

from __future__ import annotations

import pyarrow as pa

from mirrorscan.grid.records import ModelVariant
from mirrorscan.cluster.scan.progress import ModelProgress


def test_each_running_model_is_named_with_its_own_count_and_finished_ones_leave():
    todo = pa.table({"label": ["a"] * 4 + ["b"] * 2})
    bar = ModelProgress(todo, "scan demo")
    bar.loading(ModelVariant(label="a", model="m"))
    bar.loading(ModelVariant(label="b", model="m", backend="vllm"))
    assert bar.description() == "scan demo · loading a (transformers) · loading b (vLLM engine start)"
    bar.landed("a", 2)
    assert bar.description() == "scan demo · a 2/4 · loading b (vLLM engine start)"
    bar.landed("b", 2)
    assert bar.description() == "scan demo · a 2/4"
    bar.landed("a", 3)   # a retried cell lands again: never more than the label's cells
    assert bar.description() == "scan demo"


def test_one_model_alone_is_named_only_while_it_loads():
    bar = ModelProgress(pa.table({"label": ["solo"] * 3}), "scan x")
    bar.loading(ModelVariant(label="solo", model="m"))
    assert bar.description() == "scan x · loading solo (transformers)"
    bar.landed("solo", 1)
    assert bar.description() == "scan x"


def test_a_model_a_warm_engine_answers_is_not_said_to_load():
    """Where a running warm engine answers a model's batches nothing loads: the text names the engine instead,
    alone until the first part lands and beside other models until the model's cells are done."""
    bar = ModelProgress(pa.table({"label": ["w"] * 2}), "scan x")
    bar.loading(ModelVariant(label="w", model="m"), warm="mirrorscan-engine-abc")
    assert bar.description() == "scan x · w on warm engine mirrorscan-engine-abc"
    bar.landed("w", 1)
    assert bar.description() == "scan x"
    two = ModelProgress(pa.table({"label": ["w", "w", "c"]}), "scan y")
    two.loading(ModelVariant(label="w", model="m"), warm="mirrorscan-engine-abc")
    two.loading(ModelVariant(label="c", model="m"))
    assert two.description() == "scan y · w on warm engine mirrorscan-engine-abc · loading c (transformers)"
    two.landed("w", 1)
    assert two.description() == "scan y · w 1/2 · loading c (transformers)"
