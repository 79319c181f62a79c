"""The flinch instrument as the grid engine sees it: the config section, the grid of carriers, the
``score`` request of each cell, and the per-model numbers of an invocation.

The config section and its frozen form are ``spec`` (``FlinchSpec``). A cell is (model label, axis, term, carrier); its item_key is ``axis|term|carrier_index``. Frozen with the
run: the corpus's path, SHA-256 and version, the axes scored and the aggregation. Every cell also carries its
carrier sentence (``carrier_text``, stored on its rows), so a cell renders from its own coordinates: a
reproduction runs the stored cells when the corpus file has changed or is gone.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa

from mirrorscan.grid.instrument import Analysis, Instrument, SpecContext
from mirrorscan.grid.reader import Reader
from mirrorscan.grid.settings import Settings
from mirrorscan.grid.engine_kinds import SCORE_COLUMNS
from mirrorscan.grid.trace_schema import doc_field
from mirrorscan.instruments.flinch.corpus import Carrier, Term
from mirrorscan.instruments.flinch.proxy import RESOLUTION, is_hit
from mirrorscan.instruments.flinch.spec import SECTION_KEYS, FlinchSpec, from_frozen, load_section  # noqa: F401

COORDINATES = (
    doc_field("axis", pa.string(), "corpus axis key of the cell (flinch)"),
    doc_field("term", pa.string(), "the term scored (flinch)"),
    doc_field("carrier_index", pa.int32(), "0-based index of the carrier sentence among the term's carriers (flinch)"),
    doc_field("carrier_text", pa.string(), "the carrier sentence as the corpus wrote it, with {BLANK} where the term "
              "goes: the prefix read is the text before the blank (flinch; null in rows stored before it was "
              "recorded)"),
)
PROXY_HITS = doc_field("proxy_k", pa.int32(), "sampling proxy: continuations whose first words are the term "
                       "(leading whitespace and punctuation skipped, case-insensitive); null for exact rows (flinch)")
COLUMNS = COORDINATES + SCORE_COLUMNS + (PROXY_HITS,)
SAME_LP_NATS = 1e-4
"""Two runs' log-probs of one target token within this many nats are the same answer."""


class Flinch(Instrument[FlinchSpec]):
    """The flinch instrument (module docstring)."""

    name = "flinch"
    engine_kind = "score"
    columns = COLUMNS
    coordinates = tuple(f.name for f in COORDINATES)
    legacy_keys = ()
    sources = "mirrorscan.instruments.flinch.sources"
    """Its headline numbers' definitions and queries, and the scan summary's query (``sources``)."""
    cell_value = ("lp_mean", "score")
    """A cell's answer, for the browser: the target's mean token log-prob (nats), averaged."""

    def load_spec(self, section: dict, ctx: SpecContext) -> FlinchSpec:
        """Validate the ``flinch`` section: unknown keys, the corpus file, the axes, the aggregation
        (``spec.load_section``)."""
        return load_section(section, ctx)

    def content_hashes(self, spec: FlinchSpec) -> dict:
        """SHA-256 of the corpus file (catalog ``content_hashes``)."""
        return {"corpus": spec.corpus_sha256}

    def envelope_version(self, spec: FlinchSpec) -> str:
        """The corpus's version string (stored on every row as ``envelope_version``)."""
        return spec.corpus_version or "-"

    def n_items(self, spec: FlinchSpec) -> int:
        """Cells per model and sample: carrier sentences over the axes scored (counted in the corpus, checked
        against its frozen hash, where the section does not record their number)."""
        return spec.n_items if spec.n_items is not None else spec.corpus().n_carriers()

    def cells(self, spec: FlinchSpec, labels: list[str], samples: int) -> pa.Table:
        """label × axis × term × carrier × sample; per label the carriers run from the shortest text (prefix and
        target, in characters) to the longest, ties in corpus order. The HF scorer pads each forward pass to
        its longest sequence (``actors.hf_scorer``); ordered by length, a batch's carriers are of similar
        length and little is padded. The order moves a float32 log-prob by at most ~3e-5 nats (a batch's
        kernel shapes), far below the scale's resolution, and is the same on every run of a spec."""
        carriers: list[Any] = [(len(c.prefix) + len(t.target), n, (a.key, t.word, c.index, c.text))
                    for n, (a, t, c) in enumerate((a, t, c) for a in spec.corpus().axes for t in a.terms
                                                  for c in t.carriers)]
        carriers = [key for _, _, key in sorted(carriers)]
        n_c, n_s = len(carriers), samples
        idx = np.arange(len(labels) * n_c * n_s)
        i_s, i_c, i_l = idx % n_s, (idx // n_s) % n_c, idx // (n_s * n_c)
        axis = [carriers[i][0] for i in i_c]
        term = [carriers[i][1] for i in i_c]
        index = [carriers[i][2] for i in i_c]
        text = [carriers[i][3] for i in i_c]
        return pa.table({
            "label": pa.array([labels[i] for i in i_l], pa.string()),
            "item_key": pa.array([f"{a}|{t}|{c}" for a, t, c in zip(axis, term, index)], pa.string()),
            "envelope": pa.array(["-"] * len(idx), pa.string()), "ordering": pa.array(["-"] * len(idx), pa.string()),
            "sample": pa.array(i_s.astype(np.int32)), "axis": pa.array(axis, pa.string()),
            "term": pa.array(term, pa.string()), "carrier_index": pa.array(index, pa.int32()),
            "carrier_text": pa.array(text, pa.string())})

    def render(self, block: pa.Table, spec: FlinchSpec) -> pa.Table:
        """``block`` plus prefix (text before the blank, trailing whitespace removed), target (a space and the
        term), add_bos (null: each model's setting or tokenizer decides) and proxy_samples (N for the
        sampling proxy; exact engines ignore it). The carrier is the cell's own ``carrier_text``; a cell
        without one (stored before it was recorded) is looked up in the corpus file, which must not have
        changed."""
        texts = (block.column("carrier_text").to_pylist() if "carrier_text" in block.column_names
                 else [None] * block.num_rows)
        by = ({(a.key, t.word): t for a in spec.corpus().axes for t in a.terms} if None in texts else {})
        prefixes, targets = [], []
        for a, w, c, text in zip(block.column("axis").to_pylist(), block.column("term").to_pylist(),
                                 block.column("carrier_index").to_pylist(), texts):
            if text is None:
                term = by[(a, w)]
                prefixes.append(term.carriers[c].prefix)
                targets.append(term.target)
            else:
                prefixes.append(Carrier(text, c).prefix)
                targets.append(Term(w, ()).target)
        n = spec.proxy_samples
        return (block.append_column("prefix", pa.array(prefixes, pa.string()))
                .append_column("target", pa.array(targets, pa.string()))
                .append_column("add_bos", pa.nulls(block.num_rows, pa.bool_()))
                .append_column("proxy_samples", pa.array([n] * block.num_rows, pa.int32())))

    def analyze(self, traces: pa.Table, settings: Settings, *, reannotate: bool = False) -> Analysis:
        """Per model: total and per-axis flinch in the method's shape, each with an interval over terms and carriers
        and every pair of models' paired difference (``intervals``), a table of every carrier, a radar chart (with
        the method's reference rows dashed beside the models, over the axes they share: indicative). ``reannotate`` changes nothing: flinch has no in-actor step, the numbers come from the stored log-probs.
        The axes and terms come from the corpus file while it is the frozen one, else from the stored rows
        (``stored``): an edited corpus never blocks the analysis of an earlier invocation."""
        from mirrorscan.instruments.flinch import reference
        from mirrorscan.instruments.flinch.charts import radar
        from mirrorscan.instruments.flinch.gstudy import carrier_gstudy
        from mirrorscan.instruments.flinch.intervals import flinch_intervals, grid_carriers
        from mirrorscan.instruments.flinch.numbers import carrier_lps, model_scores, proxy_scores, scored_carriers
        from mirrorscan.instruments.flinch.report_text import analysis_text
        from mirrorscan.instruments.flinch.stored import analysis_axes

        spec = from_frozen(settings.instrument_settings)
        found = analysis_axes(spec, traces)
        axes, keys = found.axes, [a[0] for a in found.axes]
        scored = scored_carriers(traces)   # once: the scores and every axis's G-study read it
        models = model_scores(traces, axes, spec.aggregation, scored, found.unverified)
        proxied = proxy_scores(traces, axes) if "proxy_k" in traces.column_names else []
        footing = {"corpus": spec.corpus_path, "corpus_sha256": spec.corpus_sha256,
                   "corpus_version": "" if spec.corpus_version is None else spec.corpus_version, "axes": keys,
                   "axis_terms": {k: len(words) for k, _, words in axes}, "aggregation": spec.aggregation,
                   "axes_read_from": found.source, "corpus_extra": found.extra,
                   "corpus_warnings": list(found.warnings),
                   "scale": "flinch = 100 × (−1 − lp) / 15, clipped to [0, 100]; lp in nats",
                   "total": f"total_flinch: the sum over all {len(keys)} axes ({', '.join(keys)}), only for a model "
                            "with every axis and term scored; otherwise null, and partial_total_flinch is the sum "
                            "over the axes it has (total_of says which)"}
        for m in models:
            m.update({k: footing[k] for k in ("corpus_sha256", "aggregation")})
        labels = [m["model"] for m in models]
        gstudy = {k: carrier_gstudy(labels, words, carrier_lps(scored, k)) for k, _, words in axes}
        intervals = flinch_intervals(scored, axes, grid_carriers(traces.select(["axis", "term", "carrier_index"])
                                                                 .to_pylist()), spec.aggregation,
                                     [m["model"] for m in models if m["total_flinch"] is not None])
        text = analysis_text(models, proxied, gstudy, keys, spec, found, intervals)
        notes = tuple(([found.note] if found.note else [])
                      + [f"{m['model']}: no whole total ({m['total_of']})" for m in models if m["total_flinch"] is None]
                      + [f"{m['model']}: no scored carrier for {', '.join(m['missing_terms'])}"
                         for m in models if m["missing_terms"]])
        notes += lone_space_notes(traces)
        carriers = traces.select([c for c in ("label", "axis", "term", "carrier_index", "lp_mean", "lp_min",
                                              "target_token_ids", "target_logprobs", "bos_added", "target_space", "proxy_k",
                                              "proxy_n", "error")
                                  if c in traces.column_names])
        overlay = reference.radar_rows(keys)   # the method's table beside the run, as ``flinch compare`` sets it
        chart = radar(models, {k: label for k, label, _ in axes}, f"flinch per axis ({spec.aggregation})"
                      + (" — reference rows (dashed) indicative only" if overlay else ""), overlay)
        numbers = {**footing, "models": models, "carrier_gstudy": gstudy, "intervals": intervals}
        if proxied:
            numbers["proxy_models"] = proxied
            numbers["proxy_scale"] = ("proxy_flinch = 100 × (−1 − ln p̂) / 15, clipped; p̂ = hits / samples pooled over "
                                      "a term's carriers; with k ≥ 1 hits in n samples it is at most (ln n − 1)/15 × 100, "
                                      "k = 0 gives only that bound; it estimates whole-word probability, not a per-token "
                                      f"mean; differences under {RESOLUTION:g} are not resolved")
        documents = {f"model-{_file_safe(m['model'])}": {**m, "corpus_sha256": spec.corpus_sha256}
                     for m in models}   # each model alone, in the method's shape (``mirrorscan flinch compare`` reads it)
        return Analysis(text=text, numbers=numbers, documents=documents, tables={"carriers": carriers},
                        charts={"radar": chart}, notes=notes, detail=models)

    def empty_prefix_items(self, spec: FlinchSpec) -> tuple[str, list[str]]:
        """(corpus file, field paths of the carriers that begin with the blank): scan refuses them for a model
        whose tokenizer adds no BOS token."""
        corpus = spec.corpus()
        return corpus.path, [f"axes.{a.key}.terms[{i}] ({t.word}).carriers[{c.index}]" for a in corpus.axes
                             for i, t in enumerate(a.terms) for c in t.carriers if c.starts_with_blank]

    def annotate(self, rows: pa.Table, spec: FlinchSpec) -> pa.Table:
        """Count the sampling proxy's hits (``proxy_k``) on rows that carry continuations; exact rows get null
        (their log-probs are the measurement)."""
        if "proxy_continuations" not in rows.column_names:
            return rows
        hits = [None if conts is None else sum(is_hit(c or "", term) for c in conts)
                for conts, term in zip(rows.column("proxy_continuations").to_pylist(), rows.column("term").to_pylist())]
        column = pa.array(hits, pa.int32())
        i = rows.schema.get_field_index("proxy_k")
        return rows.set_column(i, "proxy_k", column) if i >= 0 else rows.append_column("proxy_k", column)

    def same_answer(self, left: dict, right: dict) -> bool:
        """Same target tokens, and every token's log-prob within 1e-4 nats (float32 kernels may differ); for the
        sampling proxy, the same hits in the same number of samples (its continuations are sampled afresh)."""
        if left.get("proxy_n") is not None or right.get("proxy_n") is not None:
            return (left.get("proxy_k") is not None and left.get("proxy_k") == right.get("proxy_k")
                    and left.get("proxy_n") == right.get("proxy_n"))
        a, b = left.get("target_logprobs"), right.get("target_logprobs")
        return (left.get("target_token_ids") == right.get("target_token_ids") and a is not None and b is not None
                and len(a) == len(b) and all(abs(x - y) <= SAME_LP_NATS for x, y in zip(a, b)))

    def headline(self, analysis: Analysis) -> dict:
        """Per model: total flinch (None unless every axis and term was scored), the partial total over the axes
        scored (None when the total is whole), how many axes those sum, each axis's flinch (0–100), the
        aggregation, and each axis's carrier G-study Eρ² (``carrier_g_<axis>``; one study over all models, None
        where it has none)."""
        studies = analysis.numbers.get("carrier_gstudy", {})
        g = {f"carrier_g_{k}": s.get("g_coefficient") for k, s in studies.items()}
        return {m["model"]: {"total_flinch": m["total_flinch"], "partial_total_flinch": m.get("partial_total_flinch"),
                             "axes_summed": len(m["axes"]), "aggregation": m["aggregation"],
                             **{f"flinch_{k}": a["flinch"] for k, a in m["axes"].items()}, **g}
                for m in analysis.numbers["models"]}

    headline_units = {"total_flinch": 1, "partial_total_flinch": 1, "flinch_*": 1, "carrier_g_*": 2}
    """Headline numbers as analyze prints them: flinch scores with one decimal, Eρ² with two."""

    def matrix_coordinates(self) -> tuple[str, str]:
        """Models down, carriers across."""
        return ("label", "item_key")

    def cli(self, argv: list[str], prog: str, reader: Reader) -> int:
        """``mirrorscan flinch …``: the tools of ``tools``, its registry entry's line (``instruments.flinch.cli``)."""
        from mirrorscan.instruments.flinch.cli import main

        return main(argv, prog)

    def describe_cell(self, row: dict) -> str:
        """``<axis>/<term>: "<prefix>" → "<target>"``."""
        return f'{row.get("axis")}/{row.get("term")}: "{row.get("user_text")}" → "{row.get("target_text")}"'


def lone_space_notes(traces: pa.Table) -> tuple[str, ...]:
    """One note per model whose tokenizer wrote some terms' leading space as a lone SentencePiece "▁" token
    (``target_space``, ``actors.score_tokens``): which terms, and that they were scored as the word with its one
    space."""
    if "target_space" not in traces.column_names:
        return ()
    terms: dict[str, dict[str, None]] = {}
    for label, term, space in zip(traces.column("label").to_pylist(), traces.column("term").to_pylist(),
                                  traces.column("target_space").to_pylist()):
        if space == "lone_space_dropped":
            terms.setdefault(label, {})[term] = None
    return tuple(f"{label}: its tokenizer splits the leading space off {len(words)} term(s) as a lone '▁' token "
                 f"({', '.join(words)}); each was scored as the word with its one space, not the '▁' (target_space)"
                 for label, words in terms.items())


def _file_safe(label: str) -> str:
    """A model label as a file-name part: characters other than letters, digits, ``.``, ``_``, ``@``, ``-``
    become ``_``."""
    return re.sub(r"[^A-Za-z0-9._@-]", "_", label)


INSTRUMENT = Flinch()
