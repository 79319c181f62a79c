"""The lens instrument as the grid engine sees it: the config section, the cells to extract, the text of each
cell, and the numbers of an invocation.

The config section and its frozen form are ``spec`` (``LensSpec``, its typed fields ``LensConfig``). A cell is (model, rendering, item): each framing wraps each task text once (and once around an empty task,
for the surface-only direction), the scoring items are rendered once in the variant's fixed rendering, and
wrappers are paired in the analysis. Its item_key is ``<variant>/<framing>|<item_id>`` (``score`` in place
of the framing for scoring items). Every extraction option is a coordinate, recorded on every row, and so is
the text itself (``framed_text``): a cell renders from its own coordinates, so a reproduction runs the stored
cells when an input file has changed or is gone.
"""

from __future__ import annotations

import pyarrow as pa

from mirrorscan.grid.engine_kinds import ACTIVATION_COLUMNS, ACTIVATION_OPTIONS
from mirrorscan.grid.instrument import Analysis, Instrument, SpecContext
from mirrorscan.grid.matrix import CellValue
from mirrorscan.grid.reader import Reader
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.trace_schema import doc_field
from mirrorscan.instruments.lens.items import EMPTY_TASK, SCORING, apply_newline
from mirrorscan.instruments.lens.norms import DOC as NORM_DOC
from mirrorscan.instruments.lens.norms import pooled_norm
from mirrorscan.instruments.lens.spec import SECTION_KEYS, LensSpec, from_frozen, load_section  # noqa: F401

COORDINATES = (
    doc_field("variant", pa.string(), "implementation variant (a set of extraction options) the row belongs to (lens)"),
    doc_field("framing", pa.string(), "framing id that wraps the text, or 'score' for a scoring item (lens)"),
    doc_field("arm", pa.string(), "evaluation or deployment for framed task texts, scoring for scoring items (lens)"),
    doc_field("item_id", pa.string(), "task text id or scoring item id ('_empty': the framing around no task) (lens)"),
    doc_field("item_sha256", pa.string(), "SHA-256 of the task text's or scoring item's UTF-8 bytes (lens)"),
    doc_field("item_label", pa.string(), "the scoring item's class (null for task texts) (lens)"),
    doc_field("subset", pa.string(), "the scoring item's subset, when its set names one (lens)"),
    doc_field("item_group", pa.string(), "the scoring item's group, when its set names one: items of a group (a pair "
              "of reworded twins) stay in one fold of the surface baseline (lens)"),
    doc_field("newline", pa.string(), "newline convention the text was rendered in: lf, crlf or keep (lens)"),
    doc_field("framed_text", pa.string(), "the text extracted, verbatim: the framing with the task text in its slot, "
              "or the scoring item alone, in the cell's newline convention (lens; null in rows stored before it "
              "was recorded, and for items of a scoring set that may not be redistributed)"),
) + ACTIVATION_OPTIONS
COLUMNS = COORDINATES[:-len(ACTIVATION_OPTIONS)] + ACTIVATION_COLUMNS


class Lens(Instrument[LensSpec]):
    """The lens instrument (module docstring)."""

    name = "lens"
    engine_kind = "activations"
    columns = COLUMNS
    coordinates = tuple(f.name for f in COORDINATES)
    legacy_keys = ()
    sources = "mirrorscan.instruments.lens.sources"
    """Its headline numbers' definitions and queries, and the scan summary's query (``sources``)."""
    cell_value = CellValue("pooled_norm", "score", reads=("layer_vectors",), derive=pooled_norm, doc=NORM_DOC)
    """The browser matrix's value of a cell: its pooled vectors' mean norm over the blocks (``norms``)."""

    def load_spec(self, section: dict, ctx: SpecContext) -> LensSpec:
        """Validate the ``lens`` section: unknown keys, the input files, the positive class, the extraction
        options of every variant, the storage type and the analysis sizes (``spec.load_section``)."""
        return load_section(section, ctx)

    def content_hashes(self, spec: LensSpec) -> dict:
        """SHA-256 of the framings, the task texts and the scoring set (catalog ``content_hashes``)."""
        s = spec.config
        return {"framings": s.framings.sha256, "tasks": s.tasks.sha256, "scoring_set": s.scoring_set.sha256}

    def envelope_version(self, spec: LensSpec) -> str:
        """The framing set's version (stored on every row as ``envelope_version``)."""
        return spec.config.framings.version

    def n_items(self, spec: LensSpec) -> int:
        """Cells per model and sample: per variant, framings × (task texts + the empty task) + scoring items."""
        return spec.config.n_items

    def cells(self, spec: LensSpec, labels: list[str], samples: int) -> pa.Table:
        """label × variant × (framing × task, then scoring item) × sample, in input order."""
        framings, tasks, scoring = spec.inputs()
        config = spec.config
        tasks_plus = list(tasks.items) + [_empty()]
        per_variant = []
        for variant, options in config.variants.items():
            for f in framings.framings:
                per_variant += [(variant, options, f.id, f.arm, t, f.wrap(t.text)) for t in tasks_plus]
            per_variant += [(variant, options, SCORING, "scoring", item, item.text) for item in scoring.items]
        withheld = not config.scoring_set.redistribute   # its texts stay out of the store
        rows = []
        for label in labels:
            for variant, options, framing, arm, item, text in per_variant:
                for s in range(samples):
                    rows.append({"label": label, "item_key": f"{variant}/{framing}|{item.id}", "envelope": "-",
                                 "ordering": "-", "sample": s, "variant": variant, "framing": framing, "arm": arm,
                                 "item_id": item.id, "item_sha256": item.sha256, "item_label": item.label,
                                 "subset": item.subset, "item_group": item.group, "newline": options.newline,
                                 "framed_text": (None if withheld and arm == "scoring"
                                                 else apply_newline(text, options.newline)),
                                 "text_withheld": withheld and arm == "scoring",
                                 "rendering": options.rendering, "pooling": options.pooling,
                                 "drop_bos": options.drop_bos, "drop_whitespace": options.drop_whitespace,
                                 "max_input_tokens": options.max_input_tokens, "vector_dtype": config.vector_dtype,
                                 **options.rendering_options()})
        schema = pa.schema([pa.field("label", pa.string()), pa.field("item_key", pa.string()),
                            pa.field("envelope", pa.string()), pa.field("ordering", pa.string()),
                            pa.field("sample", pa.int32())] + [pa.field(f.name, f.type) for f in COORDINATES])
        return pa.Table.from_pylist(rows, schema=schema)

    def render(self, block: pa.Table, spec: LensSpec) -> pa.Table:
        """``block`` plus ``text``: the cell's own ``framed_text`` — the framing with the task text in its slot
        (or the scoring item alone), in the cell's newline convention. A cell without one (stored before it
        was recorded) is rendered from the input files, which must not have changed."""
        out = (block.column("framed_text").to_pylist() if "framed_text" in block.column_names
               else [None] * block.num_rows)
        if None in out:
            framings, tasks, scoring = spec.inputs()
            by_framing = {f.id: f for f in framings.framings}
            texts = {t.id: t.text for t in tasks.items} | {EMPTY_TASK: ""}
            scored = {i.id: i.text for i in scoring.items}
            for n, (framing, item, newline) in enumerate(zip(block.column("framing").to_pylist(),
                                                             block.column("item_id").to_pylist(),
                                                             block.column("newline").to_pylist())):
                if out[n] is None:
                    text = scored[item] if framing == SCORING else by_framing[framing].wrap(texts[item])
                    out[n] = apply_newline(text, newline)
        return block.append_column("text", pa.array(out, pa.string()))

    def annotate(self, rows: pa.Table, spec: LensSpec) -> pa.Table:
        """Nothing runs after the engine: the stored vectors are the measurement."""
        return rows

    def analyze(self, traces: pa.Table, settings: Settings, *, reannotate: bool = False) -> Analysis:
        """Per model and variant: every wrapper's AUROC curve and headline, their spread, the G-study over
        models × wrappers × item samples, concordance, nulls and the surface baseline (``numbers``).
        ``reannotate`` changes nothing: lens has no in-actor step."""
        from mirrorscan.instruments.lens.numbers import analyze

        return analyze(traces, from_frozen(settings.instrument_settings))

    def same_answer(self, left: dict, right: dict) -> bool:
        """Same tokens read and every pooled value within 1e-5 of the layer's largest magnitude (float32
        kernels may differ in the last bits)."""
        import numpy as np

        a, b = left.get("layer_vectors"), right.get("layer_vectors")
        if a is None or b is None or left.get("input_token_ids") != right.get("input_token_ids"):
            return False
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            return False
        scale = np.maximum(np.abs(a).max(axis=1), 1e-12)
        return bool((np.abs(a - b).max(axis=1) / scale <= 1e-5).all())

    def headline(self, analysis: Analysis) -> dict:
        """Per model and variant: the median over wrappers of max over layers of AUROC − 0.5, its spread, the
        positive class, the median scoring-label floor (None without permutations) and Kendall's W of the
        variant's model ranking across wrappers (None with fewer than 2 models)."""
        concordance = analysis.numbers.get("concordance", {})
        return {key: {"median_max_auroc_minus_half": m["headline"]["median"], "sd_over_wrappers": m["headline"]["sd"],
                      "positive_class": analysis.numbers["positive_class"],
                      "label_floor_median": (m.get("label_floor") or {}).get("median"),
                      "kendall_w": concordance.get(m["variant"], {}).get("w")}
                for key, m in analysis.numbers["models"].items()}

    def matrix_coordinates(self) -> tuple[str, str]:
        """Models down, rendered items across."""
        return ("label", "item_key")

    def cli(self, argv: list[str], prog: str, reader: Reader) -> int:
        """``mirrorscan lens …``: the tools of ``tools``, its registry entry's line (``instruments.lens.cli``)."""
        from mirrorscan.instruments.lens.cli import main

        return main(argv, prog, reader)

    def describe_cell(self, row: dict) -> str:
        """``<variant>/<framing> <item>: "<text…>"``."""
        text = (row.get("user_text") or "").replace("\n", " ")
        return f'{row.get("variant")}/{row.get("framing")} {row.get("item_id")}: "{text[:80]}"'


def _empty():
    from mirrorscan.instruments.lens.items import Item

    return Item(EMPTY_TASK, "")


INSTRUMENT = Lens()
