"""The lens instrument as the grid engine sees it: the config section, the cells to extract, the text of each
cell, and the numbers of an invocation.

Config section (all keys optional)::

    "lens": {"framings": "packaged:v1", "tasks": "packaged:tasks", "scoring_set": "packaged:synthetic",
             "positive": "deployment", "extraction": {"rendering": "chat_user", "pooling": "mean", …},
             "variants": {"last": {"pooling": "last_token"}}, "vector_dtype": "float32", "item_samples": 4}

A cell is (model, rendering, item): each framing wraps each task text once (and once around an empty task,
for the surface-only direction), the scoring items are rendered once in the variant's fixed rendering, and
wrappers are paired in the analysis. Its item_key is ``<variant>/<framing>|<item_id>`` (``score`` in place
of the framing for scoring items). Every extraction option is a coordinate, recorded on every row, and so is
the text itself (``framed_text``): a cell renders from its own coordinates, so a reproduction runs the stored
cells when an input file has changed or is gone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache

import pyarrow as pa

from mirrorscan.grid.engine_kinds import (ACTIVATION_COLUMNS, ACTIVATION_OPTIONS, DATE_FORMAT, DEFAULT_DATE, POOLINGS,
                                     RENDERINGS, VECTOR_DTYPES)
from mirrorscan.grid.errors import ConfigError
from mirrorscan.grid.files import packaged_path, stamp
from mirrorscan.grid.names import check_name
from mirrorscan.grid.instrument import Analysis, Instrument, SpecContext
from mirrorscan.grid.matrix import CellValue
from mirrorscan.grid.reader import Reader
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.trace_schema import doc_field
from mirrorscan.instruments.lens.items import (DATA, EMPTY_TASK, NEWLINES, PACKAGED, SCORING, FramingSet, ItemSet,
                                               apply_newline, load_framings, load_items)
from mirrorscan.instruments.lens.extraction import EXTRACTION_DEFAULTS, LAYER_SETS, PRESETS
from mirrorscan.instruments.lens.norms import DOC as NORM_DOC
from mirrorscan.instruments.lens.norms import pooled_norm
from mirrorscan.instruments.lens.settings import LensSettings

SECTION_KEYS = {"framings": "packaged:v1", "tasks": "packaged:tasks", "scoring_set": "packaged:synthetic",
                "positive": "deployment", "extraction": {}, "variants": None, "vector_dtype": "float32",
                "item_samples": 4, "wrapper_facets": "pair", "null_permutations": 1000, "seed": 0,
                "item_layer": None, "contrastive_permutations": 200, "bootstrap_draws": 200, "object_variance": None}
"""The section's keys and defaults (``variants`` None: one variant, ``base``, with the extraction as given;
``item_layer`` None: the per-item G-study reads each model's median best layer). Draw counts: the
scoring-label null (``null_permutations``), the contrastive null (``contrastive_permutations``, per wrapper)
and the bootstraps (``bootstrap_draws``: argmax layer, model comparisons, scaling slope); 0 skips one.
``object_variance``: a hypothesised variance of the models' headlines for the D-study — a number (squared
headline units), or a list of published per-model scores whose sample variance it is."""
WRAPPER_FACETS = ("pair", "crossed")
"""The G-study's wrapper facet: one facet of (evaluation, deployment) pairs, or the two arms crossed."""

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


@dataclass(frozen=True)
class LensSpec:
    """A validated lens section; equality and hash are those of its frozen settings."""

    frozen_json: str
    """Canonical JSON of the frozen section."""
    inputs_key: tuple = field(compare=False)
    """(framings, tasks, scoring set, their SHA-256s): what ``inputs`` loads and checks."""
    settings: LensSettings = field(compare=False)
    """The frozen section's fields, typed (read from ``frozen_json`` once)."""

    @property
    def frozen(self) -> dict:
        """The frozen section as plain JSON."""
        return json.loads(self.frozen_json)

    def inputs(self) -> tuple[FramingSet, ItemSet, ItemSet]:
        """(framings, task texts, scoring set), read once per process, and again after a file was written
        (``grid.files.stamp``); files changed since the run was frozen are refused."""
        sources = [json.loads(key) for key in self.inputs_key[:3]]
        written = tuple(stamp(packaged_path(s["path"] if isinstance(s, dict) else s, PACKAGED, DATA)) for s in sources)
        return _checked_inputs(*self.inputs_key, written)


def _key(source) -> str:
    return json.dumps(source, sort_keys=True)


@lru_cache(maxsize=8)
def _checked_inputs(framings: str, tasks: str, scoring: str, hashes: tuple[str, str, str], written: tuple
                    ) -> tuple[FramingSet, ItemSet, ItemSet]:
    loaded = (load_framings(json.loads(framings)), load_items(json.loads(tasks), "tasks", False),
              load_items(json.loads(scoring), "scoring_set", True))
    for name, got, want in zip(("framings", "tasks", "scoring_set"), loaded, hashes):
        if got.sha256 != want:
            raise ConfigError(got.path, name, f"changed since the invocation was frozen (SHA-256 {got.sha256[:12]}… "
                              f"≠ {want[:12]}…)", "restore it, or start a new invocation (scan without --resume)")
    return loaded


def from_frozen(frozen: dict) -> LensSpec:
    """The spec of a frozen section."""
    s = LensSettings.from_frozen(frozen)
    hashes = (s.framings.sha256, s.tasks.sha256, s.scoring_set.sha256)
    return LensSpec(json.dumps(frozen, sort_keys=True, ensure_ascii=False),
                    (_key(s.framings.path), _key(s.tasks.source), _key(s.scoring_set.source), hashes), s)


def _extraction(options: dict, base: dict, ctx: SpecContext, path: str) -> dict:
    """``base`` updated by ``options`` (an ``extraction`` mapping or a variant), each value checked."""
    if not isinstance(options, dict):
        raise ctx.error(path, "must be an object of extraction options", f"use keys of: {', '.join(EXTRACTION_DEFAULTS)}")
    ctx.refuse_unknown(options, EXTRACTION_DEFAULTS, path)
    out = dict(base)
    if "preset" in options:
        if options["preset"] not in PRESETS:
            raise ctx.error(f"{path}.preset", f"is {options['preset']!r}", f"use one of: {', '.join(PRESETS)}")
        options = {**PRESETS[options["preset"]], **options}
    for key, value in options.items():
        if key == "preset":
            out[key] = value
            continue
        if key == "system":
            if isinstance(value, dict) and set(value) == {"text"} and isinstance(value["text"], str) and value["text"]:
                out["system"], out["system_prompt"] = "text", value["text"]
            elif value in ("none", "default"):
                out["system"], out["system_prompt"] = value, None
            else:
                raise ctx.error(f"{path}.system", f"is {value!r}", 'use "none", "default" or {"text": "…"}')
            continue
        if key == "system_prompt":
            raise ctx.error(f"{path}.system_prompt", "is set directly", 'give the text as "system": {"text": "…"}')
        if key in ("user_suffix", "assistant_prefix") and not isinstance(value, str):
            raise ctx.error(f"{path}.{key}", f"is {value!r}", 'use a string ("" for none)')
        if key == "date_string":
            from datetime import datetime

            try:
                datetime.strptime(value, DATE_FORMAT)
            except (TypeError, ValueError):
                raise ctx.error(f"{path}.date_string", f"is {value!r}", f"use a date like {DEFAULT_DATE!r}") from None
        choices = {"rendering": RENDERINGS, "pooling": POOLINGS, "newline": NEWLINES, "layers": LAYER_SETS}.get(key)
        if choices is not None and value not in choices:
            raise ctx.error(f"{path}.{key}", f"is {value!r}", f"use one of: {', '.join(choices)}")
        if key in ("drop_bos", "drop_whitespace") and not isinstance(value, bool):
            raise ctx.error(f"{path}.{key}", f"is {value!r}", "use true or false")
        if key == "max_input_tokens" and value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                                                 or value < 1):
            raise ctx.error(f"{path}.{key}", f"is {value!r}", "use a positive number of tokens, or null for none")
        out[key] = value
    if out["rendering"] == "raw" and (out["system"] != "none" or out["assistant_prefix"]):
        raise ctx.error(path, "renders raw with a system turn or an assistant prefix, which only a chat template has",
                        'use rendering chat_user, or system "none" and assistant_prefix ""')
    return out


class Lens(Instrument):
    """The lens instrument (module docstring)."""

    name = "lens"
    engine_kind = "activations"
    columns = COLUMNS
    coordinates = tuple(f.name for f in COORDINATES)
    legacy_keys = ()
    cell_value = CellValue("pooled_norm", "score", reads=("layer_vectors",), derive=pooled_norm, doc=NORM_DOC)
    """The browser matrix's value of a cell: its pooled vectors' mean norm over the blocks (``norms``)."""

    def load_spec(self, section: dict, ctx: SpecContext) -> LensSpec:
        """Validate the ``lens`` section: unknown keys, the input files, the positive class, the extraction
        options of every variant, the storage type and the analysis sizes."""
        from pathlib import Path

        ctx.refuse_unknown(section, SECTION_KEYS)
        values = {k: section.get(k, default) for k, default in SECTION_KEYS.items()}

        def resolve(source, key):
            """An input named in the section with its file path made absolute (relative to config.json)."""
            if isinstance(source, dict):
                if not isinstance(source.get("path"), str):
                    raise ctx.error(f"{key}.path", "is missing", "name the file, and map its columns with id/text/label")
                known = {"path", "id", "text", "label", "subset"} | ({"group", "redistribute"} if key == "scoring_set"
                                                                    else set())
                extra = set(source) - known
                if extra:
                    raise ctx.error(key, f"has unknown key(s) {sorted(extra)}", f"use {', '.join(sorted(known))}")
                return {**source, "path": resolve(source["path"], key)}
            if not isinstance(source, str) or not source:
                raise ctx.error(key, "must be a file name", "give a path or a packaged: name")
            if source.startswith("packaged:") or Path(source).is_absolute():
                return source
            return str((Path(ctx.config_dir) / source).resolve())

        framings = load_framings(resolve(values["framings"], "framings"))
        tasks = load_items(resolve(values["tasks"], "tasks"), "tasks", False)
        scoring = load_items(resolve(values["scoring_set"], "scoring_set"), "scoring_set", True)
        if any(t.id == EMPTY_TASK for t in tasks.items):
            raise ctx.error("tasks", f"holds the reserved id {EMPTY_TASK!r}", "rename that task")
        if values["positive"] not in scoring.classes:
            raise ctx.error("positive", f"is {values['positive']!r}, not a label of the scoring set",
                            f"use one of: {', '.join(scoring.classes)}")
        base = _extraction(values["extraction"], EXTRACTION_DEFAULTS, ctx, "extraction")
        variants = values["variants"]
        if variants is None:
            variants = {"base": {}}
        if not isinstance(variants, dict) or not variants:
            raise ctx.error("variants", "must be a non-empty object: name → extraction options",
                            'e.g. {"base": {}, "last": {"pooling": "last_token"}}')
        resolved = {}
        for name, options in variants.items():
            check_name(name, ctx.file, f"{ctx.section}.variants.{ascii(name)[1:-1]}")   # escaped: one line
            if "/" in name:
                raise ctx.error(f"variants.{name}", "holds '/', the item_key's separator", "rename the variant")
            resolved[name] = _extraction(options, base, ctx, f"variants.{name}")
        if values["vector_dtype"] not in VECTOR_DTYPES:
            raise ctx.error("vector_dtype", f"is {values['vector_dtype']!r}", f"use one of: {', '.join(VECTOR_DTYPES)}")
        if values["wrapper_facets"] not in WRAPPER_FACETS:
            raise ctx.error("wrapper_facets", f"is {values['wrapper_facets']!r}", f"use one of: {', '.join(WRAPPER_FACETS)}")
        per_class = min(sum(i.label == c for i in scoring.items) for c in scoring.classes)
        for key, low in (("item_samples", 1), ("null_permutations", 0), ("seed", 0), ("contrastive_permutations", 0),
                         ("bootstrap_draws", 0)):
            v = values[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ctx.error(key, f"is {v!r}", f"use an integer ≥ {low}")
        if values["item_layer"] is not None and (not isinstance(values["item_layer"], int)
                                                 or isinstance(values["item_layer"], bool) or values["item_layer"] < 0):
            raise ctx.error("item_layer", f"is {values['item_layer']!r}", "use a layer number (0 = embedding output) or null")
        ov = values["object_variance"]
        numbers = ov if isinstance(ov, list) else [ov]
        if ov is not None and (not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
                                       for v in numbers) or (isinstance(ov, list) and len(ov) < 2)
                               or (not isinstance(ov, list) and ov < 0)):
            raise ctx.error("object_variance", f"is {ov!r}", "give a variance ≥ 0, or a list of at least 2 "
                            "published per-model scores (e.g. [0.61, 0.70, 0.66])")
        if values["item_samples"] > per_class:
            raise ctx.error("item_samples", f"is {values['item_samples']}, more than the {per_class} items of the "
                            "smaller class", "use fewer samples (each needs an item of each class)")
        per_variant = len(framings.framings) * (len(tasks.items) + 1) + len(scoring.items)
        return from_frozen({
            "framings": {"path": framings.path, "version": framings.version, "sha256": framings.sha256,
                         "evaluation": [f.id for f in framings.arm("evaluation")],
                         "deployment": [f.id for f in framings.arm("deployment")]},
            "tasks": {"source": resolve(values["tasks"], "tasks"), "sha256": tasks.sha256, "n": len(tasks.items)},
            "scoring_set": {"source": resolve(values["scoring_set"], "scoring_set"), "sha256": scoring.sha256,
                            "n": len(scoring.items), "classes": list(scoring.classes),
                            "redistribute": scoring.redistribute},
            "positive": values["positive"], "variants": resolved, "vector_dtype": values["vector_dtype"],
            "item_samples": values["item_samples"], "wrapper_facets": values["wrapper_facets"],
            "null_permutations": values["null_permutations"], "seed": values["seed"],
            "item_layer": values["item_layer"], "contrastive_permutations": values["contrastive_permutations"],
            "bootstrap_draws": values["bootstrap_draws"], "object_variance": values["object_variance"],
            "n_items": per_variant * len(resolved)})

    def frozen(self, spec: LensSpec) -> dict:
        """Input paths and hashes, framing ids, positive class, every variant's extraction, sizes and seed."""
        return spec.frozen

    def from_frozen(self, frozen: dict) -> LensSpec:
        """The spec of a frozen section (resume, workers, analysis)."""
        return from_frozen(frozen)

    def content_hashes(self, spec: LensSpec) -> dict:
        """SHA-256 of the framings, the task texts and the scoring set (catalog ``content_hashes``)."""
        s = spec.settings
        return {"framings": s.framings.sha256, "tasks": s.tasks.sha256, "scoring_set": s.scoring_set.sha256}

    def envelope_version(self, spec: LensSpec) -> str:
        """The framing set's version (stored on every row as ``envelope_version``)."""
        return spec.settings.framings.version

    def n_items(self, spec: LensSpec) -> int:
        """Cells per model and sample: per variant, framings × (task texts + the empty task) + scoring items."""
        return spec.settings.n_items

    def cells(self, spec: LensSpec, labels: list[str], samples: int) -> pa.Table:
        """label × variant × (framing × task, then scoring item) × sample, in input order."""
        framings, tasks, scoring = spec.inputs()
        settings = spec.settings
        tasks_plus = list(tasks.items) + [_empty()]
        per_variant = []
        for variant, options in settings.variants.items():
            for f in framings.framings:
                per_variant += [(variant, options, f.id, f.arm, t, f.wrap(t.text)) for t in tasks_plus]
            per_variant += [(variant, options, SCORING, "scoring", item, item.text) for item in scoring.items]
        withheld = not settings.scoring_set.redistribute   # its texts stay out of the store
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
                                 "max_input_tokens": options.max_input_tokens, "vector_dtype": settings.vector_dtype,
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

    def headline_sources(self, analysis: Analysis, settings: Settings, invocation_id: str) -> tuple:
        """Each headline number's definition and how to get it again (``sources``)."""
        from mirrorscan.instruments.lens.sources import headline_sources

        return headline_sources(analysis, settings, invocation_id)

    def suggested_query(self, invocation_id: str) -> str:
        """The scan summary's ``mirrorscan sql`` query: cells and layers per model, variant and rendering."""
        from mirrorscan.instruments.lens.sources import suggested_sql

        return suggested_sql(invocation_id)

    def matrix_coordinates(self) -> tuple[str, str]:
        """Models down, rendered items across."""
        return ("label", "item_key")

    tools = ("lens's own tools: `predict` projects new texts on an invocation's wrapper directions; `headline` "
             "computes the headline, its spread and the null's floor again from the report's query rows")
    """What ``cli`` offers, in one line (``jobs.cli``'s list of instrument tools is checked against it)."""

    def cli(self, argv: list[str], prog: str, reader: Reader) -> int:
        """``mirrorscan lens …``: the tools of ``tools`` (``instruments.lens.cli``)."""
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
