"""A test-only instrument, outside the package: ask a model to repeat each item, and count the echoes.

Named in a config as ``"instrument": "echo_instrument:ECHO"`` with this folder on ``PYTHONPATH``, it runs
through scan, resume, sql and analyze without any change to mirrorscan: the engine resolves it by import
in every Ray worker. Its section: ``"echo": {"items": ["…", …], "template": "Repeat: {item}"}``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from mirrorscan.grid.instrument import Analysis, Instrument, SpecContext, Stage
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.trace_schema import doc_field


@dataclass(frozen=True)
class EchoSpec:
    """The items to echo and the one template that wraps them."""

    items: tuple[str, ...]
    template: str


class Echo(Instrument):
    """Repeat-after-me: one cell per (model, item, sample) through the ``generate`` engine kind."""

    name = "echo"
    engine_kind = "generate"
    columns = (doc_field("echo_item", pa.string(), "the item the model was asked to repeat, verbatim"),
               doc_field("echoed", pa.bool_(), "whether the answer contains the item (set in the actor)"))
    coordinates = ("echo_item",)
    legacy_keys = ()

    def load_spec(self, section: dict, ctx: SpecContext) -> EchoSpec:
        """``items``: a non-empty list of distinct strings without '|'; ``template`` holds ``{item}`` once."""
        items = section.get("items")
        if not isinstance(items, list) or not items or len(set(items)) != len(items):
            raise ctx.error("items", f"is {items!r}", "write a non-empty list of distinct strings")
        for i, item in enumerate(items):
            if not isinstance(item, str) or not item or "|" in item:
                raise ctx.error(f"items[{i}]", f"is {item!r}", "write a non-empty string without '|'")
        template = section.get("template", "Repeat exactly: {item}")
        if not isinstance(template, str) or template.count("{item}") != 1:
            raise ctx.error("template", f"is {template!r}", "write a text holding {item} once")
        return EchoSpec(tuple(items), template)

    def frozen(self, spec: EchoSpec) -> dict:
        """Items, their hash and the template."""
        return {"items": list(spec.items), "template": spec.template,
                "items_sha256": hashlib.sha256(json.dumps(spec.items).encode()).hexdigest()}

    def from_frozen(self, frozen: dict) -> EchoSpec:
        """The spec again."""
        return EchoSpec(tuple(frozen["items"]), frozen["template"])

    def n_items(self, spec: EchoSpec) -> int:
        """One cell per item."""
        return len(spec.items)

    def cells(self, spec: EchoSpec, labels: list[str], samples: int) -> pa.Table:
        """label × item × sample; item_key = the item; no envelope, no ordering."""
        rows = [{"label": lab, "item_key": item, "echo_item": item, "envelope": "-", "ordering": "-", "sample": s}
                for lab in labels for item in spec.items for s in range(samples)]
        schema = pa.schema([("label", pa.string()), ("item_key", pa.string()), ("echo_item", pa.string()),
                            ("envelope", pa.string()), ("ordering", pa.string()), ("sample", pa.int32())])
        return pa.Table.from_pylist(rows, schema=schema)

    def render(self, block: pa.Table, spec: EchoSpec) -> pa.Table:
        """No system text; the user text is the template with the item."""
        user = [spec.template.replace("{item}", item) for item in block.column("echo_item").to_pylist()]
        return block.append_column("system_text", pa.array([""] * block.num_rows, pa.string())) \
                    .append_column("user_text", pa.array(user, pa.string()))

    def annotate(self, rows: pa.Table, spec: EchoSpec) -> pa.Table:
        """``echoed``: the response contains the item (null for an error row)."""
        echoed = [None if r is None else i in r for r, i in zip(rows.column("response").to_pylist(),
                                                                 rows.column("echo_item").to_pylist())]
        return rows.append_column("echoed", pa.array(echoed, pa.bool_()))

    def analyze(self, traces: pa.Table, settings: Settings, *, reannotate: bool = False) -> Analysis:
        """Cells answered and echo rate (successful rows only)."""
        ok = traces.filter(pc.is_null(traces.column("error")))
        echoed = sum(1 for e in ok.column("echoed").to_pylist() if e)
        numbers = {"answered": ok.num_rows, "echoed": echoed,
                   "echo_rate": echoed / ok.num_rows if ok.num_rows else None}
        return Analysis(text=f"echo: {echoed} of {ok.num_rows} answers repeat their item", numbers=numbers,
                        tables={"per_item": ok.select(["label", "echo_item", "echoed"])})


ECHO = Echo()


class EchoTwice(Echo):
    """Echo with a second stage (ask again, quoting the first answer) and cells held across invocations:
    a new invocation of the experiment runs only the items no earlier invocation answered."""

    name = "echo_twice"
    appends = True
    FAIL_ENV = "ECHO_TWICE_FAIL_STAGE"
    """When set, building the second stage fails (a driver that dies between stages)."""

    def __init__(self):
        self.stages = (Stage("again", self.again_cells),)

    def again_cells(self, spec: EchoSpec, previous: pa.Table) -> pa.Table:
        """One cell per answered first-stage cell, carrying its answer for ``render``."""
        if os.environ.get(self.FAIL_ENV):
            raise RuntimeError("second stage refused by " + self.FAIL_ENV)
        keep = ["label", "item_key", "echo_item", "envelope", "ordering", "sample"]
        return previous.select(keep).append_column("first_answer", previous.column("response"))

    def render(self, block: pa.Table, spec: EchoSpec) -> pa.Table:
        """First stage as Echo; the second quotes the first answer."""
        if "first_answer" not in block.column_names:
            return super().render(block, spec)
        user = [f"You were asked to repeat {i!r} and answered {a!r}. Repeat {i!r} once more."
                for i, a in zip(block.column("echo_item").to_pylist(), block.column("first_answer").to_pylist())]
        return block.append_column("system_text", pa.array([""] * block.num_rows, pa.string())) \
                    .append_column("user_text", pa.array(user, pa.string()))

    def held_cells(self, spec: EchoSpec, earlier: pa.Table) -> pa.Table:
        """Every cell an earlier invocation answered is held: never asked again in this experiment."""
        return earlier.select(["probe_id", "sample"])


ECHO_TWICE = EchoTwice()
