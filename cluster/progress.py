"""The scan's progress bar text: what each model's pool is doing while the cells land."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.records import ModelVariant


class ModelProgress:
    """What the progress bar says about each model: waiting, loading its engine, or its cells landed."""

    ENGINES = {"vllm": "vLLM engine start", "hf": "transformers"}

    def __init__(self, todo: pa.Table, title: str):
        """Cells to run per label in ``todo``; ``title`` starts every description."""
        counts = pc.value_counts(todo.column("label")).to_pylist() if todo.num_rows else []
        self.total = {c["values"]: c["counts"] for c in counts}
        self.done: dict[str, int] = {}
        self.state: dict[str, str] = {}
        self.title = title

    def loading(self, variant: ModelVariant) -> None:
        """``variant``'s pool started: its engines load until its first part lands."""
        self.state[variant.label] = f"loading {variant.label} ({self.ENGINES.get(variant.backend, variant.backend)})"

    def landed(self, label: str, rows: int) -> None:
        """A part of ``rows`` rows of ``label`` landed."""
        self.done[label] = self.done.get(label, 0) + rows
        self.state[label] = f"{label} {min(self.done[label], self.total.get(label, 0))}/{self.total.get(label, 0)}"

    def description(self) -> str:
        """The bar's text: the title, then each started model that is still running or loading (one model
        alone: only while it loads, since the bar's own count is then that model's)."""
        running = [text for label, text in self.state.items()
                   if self.done.get(label, 0) < self.total.get(label, 0)]
        if len(self.total) <= 1:
            running = [t for t in running if t.startswith("loading")]
        return " · ".join([self.title, *running])
