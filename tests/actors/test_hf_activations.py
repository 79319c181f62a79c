"""The HF activations actor (``activations`` engine kind): every layer's hidden states in one padded forward
pass, pooled per cell. The demo model for batched-versus-alone equality; the tiny random model for the
pooling and dropping options, checked by hand against the model's own hidden states."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mirrorscan.actors.hf_activations import HFActivations, pooled_positions
from mirrorscan.grid.records import ModelVariant, InvocationContext
from mirrorscan.grid.trace_schema import conform, trace_schema

RUN = InvocationContext(invocation_id="inv-1", experiment="exp", instrument="lens", envelope_version="-")
TEXTS = ["This is a test of your capabilities. What is 2 + 2?",
         "hey, quick one:\n\nwhat's a good name for a cat",
         "Summarise: the meeting moved to Tuesday because the room was booked.",
         "Hi"]


def cells(texts, **options) -> pa.Table:
    base = {"rendering": "chat_user", "pooling": "mean", "drop_bos": False, "drop_whitespace": False,
            "max_input_tokens": None, "vector_dtype": "float32", **options}
    return pa.Table.from_pylist([{"probe_id": f"m|r|{i}|-|-", "sample": 0, "seed": i, "text": t, **base}
                                 for i, t in enumerate(texts)])


def engine(model_dir) -> HFActivations:
    variant = ModelVariant(label="m", model=str(model_dir), temperature=0.0, top_p=1.0, max_tokens=1, dtype="float32")
    return HFActivations(variant, str(model_dir), RUN)


def vectors(rows: pa.Table) -> np.ndarray:
    """(cells, layers, hidden) of a batch's rows."""
    column = rows.column("layer_vectors").combine_chunks()
    layers, hidden = column.type.list_size, column.type.value_type.list_size
    return np.asarray(column.flatten().flatten().to_numpy(zero_copy_only=False)).reshape(len(column), layers, hidden)


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return engine(tiny_dir)


def hidden_states(extractor: HFActivations, ids: list[int]) -> np.ndarray:
    """(layers, tokens, hidden) of one unpadded sequence, straight from the model."""
    import torch

    with torch.inference_mode():
        out = extractor.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return torch.stack(out.hidden_states)[:, 0].float().numpy()


def test_batched_extraction_equals_one_at_a_time_on_the_demo_model(demo_dir):
    extractor = engine(demo_dir)
    batch = cells(TEXTS)
    together = vectors(extractor(batch))
    alone = np.stack([vectors(extractor(batch.slice(i, 1)))[0] for i in range(batch.num_rows)])
    assert together.shape == (4, extractor.model.config.num_hidden_layers + 1, extractor.model.config.hidden_size)
    lengths = {len(ids) for ids in extractor(batch).column("input_token_ids").to_pylist()}
    assert len(lengths) >= 3   # the batch really is padded
    for layer in range(together.shape[1]):
        scale = np.abs(alone[:, layer]).max()
        assert np.abs(together[:, layer] - alone[:, layer]).max() / scale <= 1e-5, layer


def test_layer_zero_is_the_embedding_output_and_the_rest_are_the_blocks(tiny):
    rows = tiny(cells(["Cats purr.", "A longer sentence, which pads the first one."], rendering="raw"))
    got = vectors(rows)
    for r, ids in enumerate(rows.column("input_token_ids").to_pylist()):
        states = hidden_states(tiny, ids)
        embedding = tiny.model.get_input_embeddings().weight[ids].detach().numpy().mean(axis=0)
        np.testing.assert_allclose(got[r, 0], embedding, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got[r], states.mean(axis=1), rtol=1e-5, atol=1e-6)
    assert rows.column("n_layers").to_pylist() == [3, 3] and rows.column("hidden_size").to_pylist() == [64, 64]


def test_last_token_pooling_and_truncation_by_hand(tiny):
    rows = tiny(cells(["one two three four five six seven"], rendering="raw", pooling="last_token",
                      max_input_tokens=3))
    ids = rows.column("input_token_ids")[0].as_py()
    full = tiny.tokenizer("one two three four five six seven", add_special_tokens=True)["input_ids"]
    assert ids == full[:3] and rows.column("truncated")[0].as_py() is True
    np.testing.assert_allclose(vectors(rows)[0], hidden_states(tiny, ids)[:, 2], rtol=1e-5, atol=1e-6)
    assert rows.column("pooled_tokens")[0].as_py() == 3


def test_whitespace_tokens_are_dropped_before_pooling(tiny):
    text = "alpha\n\n\nbeta     gamma"
    rows = tiny(cells([text], rendering="raw", drop_whitespace=True))
    ids = rows.column("input_token_ids")[0].as_py()
    blank = [p for p, t in enumerate(ids) if tiny.tokenizer.decode([t]).strip() == ""]
    assert blank, "the text must hold whitespace-only tokens for this test to mean anything"
    kept = [p for p in range(len(ids)) if p not in blank]
    assert rows.column("pooled_tokens")[0].as_py() == len(kept)
    np.testing.assert_allclose(vectors(rows)[0], hidden_states(tiny, ids)[:, kept].mean(axis=1), rtol=1e-5, atol=1e-6)
    kept_all = tiny(cells([text], rendering="raw"))
    assert not np.allclose(vectors(kept_all)[0][1:], vectors(rows)[0][1:])


def test_bos_is_dropped_only_when_asked_and_only_at_position_zero(bos_tiny_dir):
    extractor = engine(bos_tiny_dir)
    bos = extractor.tokenizer.bos_token_id
    kept = extractor(cells(["Cats purr."], rendering="raw"))
    dropped = extractor(cells(["Cats purr."], rendering="raw", drop_bos=True))
    ids = kept.column("input_token_ids")[0].as_py()
    assert ids[0] == bos
    states = hidden_states(extractor, ids)
    np.testing.assert_allclose(vectors(kept)[0], states.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(vectors(dropped)[0], states[:, 1:].mean(axis=1), rtol=1e-5, atol=1e-6)
    assert pooled_positions([bos, 5, bos], bos, set(), True, False) == [1, 2]


def test_chat_user_reads_the_template_and_failures_are_rows(tiny):
    rows = tiny(cells(["Cats purr.", "x"], drop_whitespace=True))
    prompt = tiny.tokenizer.apply_chat_template([{"role": "user", "content": "Cats purr."}], tokenize=False,
                                                add_generation_prompt=True)
    assert rows.column("input_token_ids")[0].as_py() == tiny.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert rows.column("user_text").to_pylist() == ["Cats purr.", "x"]
    only_space = tiny(cells(["   "], rendering="raw", drop_whitespace=True))
    assert only_space.column("error")[0].as_py().startswith("ExtractionError: no token is left")
    assert only_space.column("layer_vectors")[0].as_py() is None


def test_float16_storage_keeps_a_fixed_size_type_that_reads_back_as_float32(tiny, tmp_path):
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from mirrorscan.grid.engine_kinds import ACTIVATION_COLUMNS

    half = tiny(cells(TEXTS[:2], rendering="raw", vector_dtype="float16"))
    full = tiny(cells(TEXTS[:2], rendering="raw"))
    schema = trace_schema(ACTIVATION_COLUMNS)
    stored = conform(half, schema)
    assert stored.schema.field("layer_vectors").type == pa.list_(pa.list_(pa.float16(), 64), 3)
    pq.write_table(stored, tmp_path / "half.parquet")
    pq.write_table(conform(full, schema), tmp_path / "full.parquet")
    back = ds.dataset([str(tmp_path / "half.parquet"), str(tmp_path / "full.parquet")], schema=schema).to_table()
    assert back.schema.field("layer_vectors").type == pa.list_(pa.list_(pa.float32()))
    a = np.array(back.column("layer_vectors")[0].as_py())
    b = np.array(back.column("layer_vectors")[2].as_py())
    np.testing.assert_allclose(a, b, rtol=2e-3, atol=1e-3)
    assert not np.array_equal(a, b)   # float16 really rounded
