"""The frozen lens section as typed, immutable records: what ``Lens.load_spec`` validated and the catalog holds.

``LensSettings.from_frozen`` reads a frozen section (the JSON the catalog stores under ``instrument_settings``)
once; the analysis, the cells and the headline sources read its fields. The JSON itself stays the stored form
(``LensSpec.frozen_json``): these records are read from it and never written back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping

from mirrorscan.instruments.lens.extraction import RENDERING_OPTIONS


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


@dataclass(frozen=True)
class InputFile:
    """One input file of the section (task texts or scoring set), as frozen."""

    source: str | dict
    """The file: a path, a ``packaged:`` name, or a mapping {path, id, text, label, …} naming its columns."""
    sha256: str
    """SHA-256 of the items read from it, as loaded when the section was frozen."""
    n: int
    """Items it holds."""
    classes: tuple[str, ...] = ()
    """The scoring set's labels in their order (empty for the task texts)."""
    redistribute: bool = True
    """False: the scoring set's texts may not be redistributed, and are kept out of the store."""


@dataclass(frozen=True)
class Framings:
    """The framing set, as frozen."""

    path: str
    """Its file (absolute) or ``packaged:`` name."""
    version: str
    """Its version, stored on every row as ``envelope_version``."""
    sha256: str
    """SHA-256 of the framings read from it."""
    evaluation: tuple[str, ...]
    """Framing ids of the evaluation arm, in file order."""
    deployment: tuple[str, ...]
    """Framing ids of the deployment arm, in file order."""

    def wrappers(self) -> list[tuple[str, str]]:
        """Every (evaluation, deployment) pair: the wrappers, evaluation-major."""
        return [(e, d) for e in self.evaluation for d in self.deployment]


@dataclass(frozen=True)
class LensSettings:
    """A frozen lens section, typed. ``SECTION_KEYS`` (``instruments.lens.instrument``) gives each key's
    default in a config; the defaults here are those of sections frozen before the key was recorded."""

    framings: Framings
    """The framing set and its arms."""
    tasks: InputFile
    """The task texts each framing wraps."""
    scoring_set: InputFile
    """The labelled scoring items."""
    positive: str
    """The scoring-set class counted as positive in every AUROC."""
    variants: Mapping[str, Extraction]
    """Variant name → its extraction options, in config order."""
    vector_dtype: str
    """Storage type of the pooled vectors (``float32``, …)."""
    item_samples: int
    """Disjoint label-stratified item samples of the G-study."""
    null_permutations: int
    """Draws of the scoring-label permutation null (0 skips it)."""
    seed: int
    """Root seed of every draw."""
    n_items: int
    """Cells per model and sample: per variant, framings × (task texts + the empty task) + scoring items."""
    wrapper_facets: str = "pair"
    """The G-study's wrapper facet: ``pair`` or ``crossed`` (the two arms)."""
    item_layer: int | None = None
    """Layer of the per-item G-study (None: each model's median best layer)."""
    contrastive_permutations: int = 0
    """Draws of the contrastive null per wrapper (0 skips it)."""
    bootstrap_draws: int = 0
    """Draws of the bootstraps: argmax layer, model comparisons, scaling slope (0 skips them)."""
    object_variance: float | tuple[float, ...] | None = None
    """Hypothesised variance of the models' headlines for the D-study (squared headline units), or published
    per-model scores whose sample variance it is; None when not given."""

    @classmethod
    def from_frozen(cls, frozen: dict) -> LensSettings:
        """The record of a frozen section."""
        f, t, s = frozen["framings"], frozen["tasks"], frozen["scoring_set"]
        ov = frozen.get("object_variance")
        optional = {k: frozen[k] for k in ("wrapper_facets", "item_layer", "contrastive_permutations",
                                           "bootstrap_draws") if k in frozen}
        return cls(
            framings=Framings(f["path"], f["version"], f["sha256"], tuple(f["evaluation"]), tuple(f["deployment"])),
            tasks=InputFile(t["source"], t["sha256"], t["n"]),
            scoring_set=InputFile(s["source"], s["sha256"], s["n"], tuple(s.get("classes", ())),
                                  s.get("redistribute", True)),
            positive=frozen["positive"],
            variants=MappingProxyType({name: Extraction.from_frozen(o) for name, o in frozen["variants"].items()}),
            vector_dtype=frozen["vector_dtype"], item_samples=frozen["item_samples"],
            null_permutations=frozen["null_permutations"], seed=frozen["seed"], n_items=int(frozen["n_items"]),
            object_variance=tuple(ov) if isinstance(ov, list) else ov, **optional)
