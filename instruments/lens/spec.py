"""The ``lens`` section of config.json, validated (``load_section``) and frozen: the input files and their
hashes, the positive class, every variant's extraction options, the storage type and the analysis sizes.

Config section (all keys optional)::

    "lens": {"framings": "packaged:v1", "tasks": "packaged:tasks", "scoring_set": "packaged:synthetic",
             "positive": "deployment", "extraction": {"rendering": "chat_user", "pooling": "mean", …},
             "variants": {"last": {"pooling": "last_token"}}, "vector_dtype": "float32", "item_samples": 4}

``LensSpec`` (a ``grid.frozen_spec.FrozenSpec``) holds the frozen JSON as its identity and ``LensConfig``, the
same section as typed, immutable records read from it once (``Extraction`` per variant, ``Framings`` and
``InputFile`` per input), which the cells, the analysis and the headline sources read. The JSON stays the
stored form: these records are never written back. The input files are read again where cells are built, and
a file changed since the run was frozen is refused there (``LensSpec.inputs``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from mirrorscan.grid.engine_kinds import DATE_FORMAT, DEFAULT_DATE, POOLINGS, RENDERINGS, VECTOR_DTYPES
from mirrorscan.grid.files import packaged_path, stamp
from mirrorscan.grid.frozen_spec import FrozenInput, FrozenSpec, defaults, frozen_field, read_record
from mirrorscan.grid.instrument import SpecContext
from mirrorscan.grid.names import check_name
from mirrorscan.instruments.lens.extraction import EXTRACTION_DEFAULTS, LAYER_SETS, PRESETS, RENDERING_OPTIONS
from mirrorscan.instruments.lens.items import (DATA, EMPTY_TASK, NEWLINES, PACKAGED, FramingSet, ItemSet,
                                               load_framings, load_items)


@dataclass(frozen=True)
class Section:
    """The keys of a ``lens`` config section, each with its default. Draw counts: the scoring-label null
    (``null_permutations``), the contrastive null (``contrastive_permutations``, per wrapper) and the bootstraps
    (``bootstrap_draws``: argmax layer, model comparisons, scaling slope); 0 skips one."""

    framings: str | dict = "packaged:v1"
    """The framing set: ``packaged:v1`` or a folder of evaluation/ and deployment/ texts."""
    tasks: str | dict = "packaged:tasks"
    """The task texts each framing wraps (a file, or {path, id, text} naming its columns)."""
    scoring_set: str | dict = "packaged:synthetic"
    """The labelled scoring items (a file, or {path, id, text, label, …} naming its columns)."""
    positive: str = "deployment"
    """The scoring-set class counted as positive in every AUROC."""
    extraction: dict = field(default_factory=dict)
    """Extraction options every variant starts from (``extraction.EXTRACTION_DEFAULTS``)."""
    variants: dict | None = None
    """Variant name → extraction options; None: one variant, ``base``, with the extraction as given."""
    vector_dtype: str = "float32"
    """Storage type of the pooled vectors."""
    item_samples: int = 4
    """Disjoint label-stratified item samples of the G-study."""
    wrapper_facets: str = "pair"
    """The G-study's wrapper facet (``WRAPPER_FACETS``)."""
    null_permutations: int = 1000
    """Draws of the scoring-label permutation null."""
    seed: int = 0
    """Root seed of every draw."""
    item_layer: int | None = None
    """Layer of the per-item G-study; None: each model's median best layer."""
    contrastive_permutations: int = 200
    """Draws of the contrastive null, per wrapper."""
    bootstrap_draws: int = 200
    """Draws of the bootstraps."""
    object_variance: float | list | None = None
    """A hypothesised variance of the models' headlines for the D-study — a number (squared headline units), or
    a list of published per-model scores whose sample variance it is."""


SECTION_KEYS = defaults(Section)
"""The section's keys and their defaults."""
WRAPPER_FACETS = ("pair", "crossed")
"""The G-study's wrapper facet: one facet of (evaluation, deployment) pairs, or the two arms crossed."""


@dataclass(frozen=True)
class Extraction:
    """One variant's extraction options, as frozen (``extraction.EXTRACTION_DEFAULTS`` says what each means).
    The rendering options are None in sections frozen before they were recorded."""

    rendering: str
    """How the text is rendered: ``chat_user`` (the model's chat template, the text as the user turn) or ``raw``."""
    pooling: str
    """How a layer's token vectors become one vector (``mean``, ``last_token``, …)."""
    drop_bos: bool
    """Whether the beginning-of-sequence token is left out of the pooling."""
    drop_whitespace: bool
    """Whether whitespace-only tokens are left out of the pooling."""
    max_input_tokens: int | None
    """Longest input read, in tokens (None: no limit)."""
    newline: str
    """Newline convention the text is rendered in: ``lf``, ``crlf`` or ``keep``."""
    layers: str = "blocks"
    """Layer set entering the max over layers (``extraction.LAYER_SETS``)."""
    system: str | None = None
    """The system turn: ``none``, ``default`` or ``text`` (then ``system_prompt`` holds it)."""
    system_prompt: str | None = None
    """The system turn's text when ``system`` is ``text``, else None."""
    user_suffix: str | None = None
    """Text appended to the user turn ("" for none)."""
    assistant_prefix: str | None = None
    """Text the assistant turn starts with ("" for none)."""
    date_string: str | None = None
    """The date a chat template is rendered with."""
    preset: str | None = None
    """The ``extraction.PRESETS`` entry applied first, or None."""
    options: Mapping = field(default_factory=lambda: MappingProxyType({}))
    """The variant's options exactly as frozen (what a ``predict`` document records)."""

    @classmethod
    def from_frozen(cls, options: dict) -> Extraction:
        """The record of one frozen variant (its keys are those of ``extraction.EXTRACTION_DEFAULTS``)."""
        names = {f.name for f in fields(cls)} - {"options"}
        return cls(**{k: v for k, v in options.items() if k in names}, options=MappingProxyType(dict(options)))

    def rendering_options(self) -> dict:
        """The options that shape the chat rendering (``extraction.RENDERING_OPTIONS``), as stored on a cell."""
        return {k: self.options.get(k) for k in RENDERING_OPTIONS}

    def as_dict(self) -> dict:
        """The variant's options as plain JSON, as frozen."""
        return dict(self.options)


@dataclass(frozen=True, kw_only=True)
class InputFile:
    """One input file of the section (task texts or scoring set), as frozen."""

    source: str | dict
    """The file: a path, a ``packaged:`` name, or a mapping {path, id, text, label, …} naming its columns."""
    sha256: str
    """SHA-256 of the items read from it, as loaded when the section was frozen."""
    n: int
    """Items it holds."""
    classes: tuple[str, ...] = frozen_field(read=tuple, default=())
    """The scoring set's labels in their order (empty for the task texts)."""
    redistribute: bool = True
    """False: the scoring set's texts may not be redistributed, and are kept out of the store."""

    def frozen_input(self, field_name: str) -> FrozenInput:
        """The file as frozen, for the check that it has not changed (``field_name``: its config field)."""
        path = self.source["path"] if isinstance(self.source, dict) else self.source
        return FrozenInput(field_name, path, self.sha256)


@dataclass(frozen=True, kw_only=True)
class Framings:
    """The framing set, as frozen."""

    path: str
    """Its file (absolute) or ``packaged:`` name."""
    version: str
    """Its version, stored on every row as ``envelope_version``."""
    sha256: str
    """SHA-256 of the framings read from it."""
    evaluation: tuple[str, ...] = frozen_field(read=tuple)
    """Framing ids of the evaluation arm, in file order."""
    deployment: tuple[str, ...] = frozen_field(read=tuple)
    """Framing ids of the deployment arm, in file order."""

    def wrappers(self) -> list[tuple[str, str]]:
        """Every (evaluation, deployment) pair: the wrappers, evaluation-major."""
        return [(e, d) for e in self.evaluation for d in self.deployment]

    def frozen_input(self) -> FrozenInput:
        """The framing folder as frozen, for the check that it has not changed."""
        return FrozenInput("framings", self.path, self.sha256)


@dataclass(frozen=True, kw_only=True)
class LensConfig:
    """A frozen lens section, typed (read once by ``read_record``). ``Section`` gives each key's default in a
    config; the defaults here are those of sections frozen before the key was recorded."""

    framings: Framings = frozen_field(read=lambda entry: read_record(Framings, entry))
    """The framing set and its arms."""
    tasks: InputFile = frozen_field(read=lambda entry: read_record(InputFile, entry))
    """The task texts each framing wraps."""
    scoring_set: InputFile = frozen_field(read=lambda entry: read_record(InputFile, entry))
    """The labelled scoring items."""
    positive: str
    """The scoring-set class counted as positive in every AUROC."""
    variants: Mapping[str, Extraction] = frozen_field(
        read=lambda variants: MappingProxyType({name: Extraction.from_frozen(o) for name, o in variants.items()}))
    """Variant name → its extraction options, in config order."""
    vector_dtype: str
    """Storage type of the pooled vectors (``float32``, …)."""
    item_samples: int
    """Disjoint label-stratified item samples of the G-study."""
    null_permutations: int
    """Draws of the scoring-label permutation null (0 skips it)."""
    seed: int
    """Root seed of every draw."""
    n_items: int = frozen_field(read=int)
    """Cells per model and sample: per variant, framings × (task texts + the empty task) + scoring items."""
    wrapper_facets: str = "pair"
    """The G-study's wrapper facet: ``pair`` or ``crossed`` (the two arms)."""
    item_layer: int | None = None
    """Layer of the per-item G-study (None: each model's median best layer)."""
    contrastive_permutations: int = 0
    """Draws of the contrastive null per wrapper (0 skips it)."""
    bootstrap_draws: int = 0
    """Draws of the bootstraps: argmax layer, model comparisons, scaling slope (0 skips them)."""
    object_variance: float | tuple[float, ...] | None = frozen_field(
        read=lambda ov: tuple(ov) if isinstance(ov, list) else ov, default=None)
    """Hypothesised variance of the models' headlines for the D-study (squared headline units), or published
    per-model scores whose sample variance it is; None when not given."""

    @classmethod
    def from_frozen(cls, frozen: Mapping) -> LensConfig:
        """The record of a frozen section."""
        return read_record(cls, frozen)


@dataclass(frozen=True, kw_only=True)
class LensSpec(FrozenSpec):
    """A validated lens section; equality and hash are those of its frozen settings."""

    config: LensConfig = frozen_field(derived=True)
    """The frozen section's fields, typed (read from ``frozen_json`` once)."""

    @classmethod
    def derived_fields(cls, frozen: Mapping) -> dict:
        """``config``: the whole section, typed."""
        return {"config": LensConfig.from_frozen(frozen)}

    def inputs(self) -> tuple[FramingSet, ItemSet, ItemSet]:
        """(framings, task texts, scoring set), read once per process, and again after a file was written
        (``grid.files.stamp``); files changed since the run was frozen are refused."""
        c = self.config
        frozen = (c.framings.frozen_input(), c.tasks.frozen_input("tasks"), c.scoring_set.frozen_input("scoring_set"))
        written = tuple(stamp(packaged_path(f.path, PACKAGED, DATA)) for f in frozen)
        return _checked_inputs(_key(c.framings.path), _key(c.tasks.source), _key(c.scoring_set.source), frozen,
                               written)


def _key(source) -> str:
    return json.dumps(source, sort_keys=True)


@lru_cache(maxsize=8)
def _checked_inputs(framings: str, tasks: str, scoring: str, frozen: tuple[FrozenInput, ...], written: tuple
                    ) -> tuple[FramingSet, ItemSet, ItemSet]:
    loaded = (load_framings(json.loads(framings)), load_items(json.loads(tasks), "tasks", False),
              load_items(json.loads(scoring), "scoring_set", True))
    sets: tuple[FramingSet | ItemSet, ...] = loaded
    for want, got in zip(frozen, sets):
        want.check(got.sha256, got.path)
    return loaded


def from_frozen(frozen: dict) -> LensSpec:
    """The spec of a frozen section."""
    return LensSpec.from_frozen(frozen)


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


def load_section(section: dict, ctx: SpecContext) -> LensSpec:
    """Validate a ``lens`` section — unknown keys, the input files, the positive class, the extraction options
    of every variant, the storage type and the analysis sizes — and freeze it."""
    values = ctx.read(section, Section)

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

    framings = load_framings(resolve(values.framings, "framings"))
    tasks = load_items(resolve(values.tasks, "tasks"), "tasks", False)
    scoring = load_items(resolve(values.scoring_set, "scoring_set"), "scoring_set", True)
    if any(t.id == EMPTY_TASK for t in tasks.items):
        raise ctx.error("tasks", f"holds the reserved id {EMPTY_TASK!r}", "rename that task")
    if values.positive not in scoring.classes:
        raise ctx.error("positive", f"is {values.positive!r}, not a label of the scoring set",
                        f"use one of: {', '.join(scoring.classes)}")
    base = _extraction(values.extraction, EXTRACTION_DEFAULTS, ctx, "extraction")
    variants = values.variants
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
    if values.vector_dtype not in VECTOR_DTYPES:
        raise ctx.error("vector_dtype", f"is {values.vector_dtype!r}", f"use one of: {', '.join(VECTOR_DTYPES)}")
    if values.wrapper_facets not in WRAPPER_FACETS:
        raise ctx.error("wrapper_facets", f"is {values.wrapper_facets!r}", f"use one of: {', '.join(WRAPPER_FACETS)}")
    per_class = min(sum(i.label == c for i in scoring.items) for c in scoring.classes)
    for key, low in (("item_samples", 1), ("null_permutations", 0), ("seed", 0), ("contrastive_permutations", 0),
                     ("bootstrap_draws", 0)):
        v = getattr(values, key)
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ctx.error(key, f"is {v!r}", f"use an integer ≥ {low}")
    layer = values.item_layer
    if layer is not None and (not isinstance(layer, int) or isinstance(layer, bool) or layer < 0):
        raise ctx.error("item_layer", f"is {values.item_layer!r}", "use a layer number (0 = embedding output) or null")
    ov = values.object_variance
    numbers = ov if isinstance(ov, list) else [ov]
    if ov is not None and (not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
                                   for v in numbers) or (isinstance(ov, list) and len(ov) < 2)
                           or (not isinstance(ov, list) and ov < 0)):
        raise ctx.error("object_variance", f"is {ov!r}", "give a variance ≥ 0, or a list of at least 2 "
                        "published per-model scores (e.g. [0.61, 0.70, 0.66])")
    if values.item_samples > per_class:
        raise ctx.error("item_samples", f"is {values.item_samples}, more than the {per_class} items of the "
                        "smaller class", "use fewer samples (each needs an item of each class)")
    per_variant = len(framings.framings) * (len(tasks.items) + 1) + len(scoring.items)
    return LensSpec.from_frozen({
        "framings": {"path": framings.path, "version": framings.version, "sha256": framings.sha256,
                     "evaluation": [f.id for f in framings.arm("evaluation")],
                     "deployment": [f.id for f in framings.arm("deployment")]},
        "tasks": {"source": resolve(values.tasks, "tasks"), "sha256": tasks.sha256, "n": len(tasks.items)},
        "scoring_set": {"source": resolve(values.scoring_set, "scoring_set"), "sha256": scoring.sha256,
                        "n": len(scoring.items), "classes": list(scoring.classes),
                        "redistribute": scoring.redistribute},
        "positive": values.positive, "variants": resolved, "vector_dtype": values.vector_dtype,
        "item_samples": values.item_samples, "wrapper_facets": values.wrapper_facets,
        "null_permutations": values.null_permutations, "seed": values.seed,
        "item_layer": values.item_layer, "contrastive_permutations": values.contrastive_permutations,
        "bootstrap_draws": values.bootstrap_draws, "object_variance": values.object_variance,
        "n_items": per_variant * len(resolved)})

